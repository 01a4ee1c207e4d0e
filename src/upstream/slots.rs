//! An upstream's concurrency limit with a bounded queue in front of it.

use std::sync::Arc;

use super::{CallError, scopeguard};

/// A concurrency limit with a bounded queue in front of it.
pub(super) struct Slots {
    pub(super) running: Arc<tokio::sync::Semaphore>,
    pub(super) waiting: std::sync::atomic::AtomicUsize,
    pub(super) max_waiting: usize,
}

impl Slots {
    /// A slot now, or a place in the queue until `deadline`, or -32004 at once.
    pub(super) async fn enter(
        &self,
        deadline: tokio::time::Instant,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, CallError> {
        use std::sync::atomic::Ordering::Relaxed;
        if let Ok(slot) = self.running.clone().try_acquire_owned() {
            return Ok(slot);
        }
        if self.waiting.fetch_add(1, Relaxed) >= self.max_waiting {
            self.waiting.fetch_sub(1, Relaxed);
            return Err(CallError::OverCapacity);
        }
        let _waiting = scopeguard(|| {
            self.waiting.fetch_sub(1, Relaxed);
        });
        match tokio::time::timeout_at(deadline, self.running.clone().acquire_owned()).await {
            Ok(Ok(slot)) => Ok(slot),
            Ok(Err(_)) => Err(CallError::unavailable("shutting down")),
            Err(_) => Err(CallError::Timeout),
        }
    }
}
