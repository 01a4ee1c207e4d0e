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
        crate::telemetry::traces::event("queued for the upstream's concurrency limit");
        match tokio::time::timeout_at(deadline, self.running.clone().acquire_owned()).await {
            Ok(Ok(slot)) => {
                crate::telemetry::traces::event("out of the upstream's queue");
                Ok(slot)
            }
            Ok(Err(_)) => Err(CallError::unavailable("shutting down")),
            Err(_) => Err(CallError::Timeout),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures_util::FutureExt;

    use super::*;

    fn slots(running: usize, max_waiting: usize) -> Slots {
        Slots {
            running: Arc::new(tokio::sync::Semaphore::new(running)),
            waiting: Default::default(),
            max_waiting,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_queue_refuses_at_once_and_a_waiter_leaves_at_its_deadline() {
        let slots = slots(1, 1);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let held = slots.enter(deadline).await.unwrap();
        let waiter = slots.enter(deadline);
        tokio::pin!(waiter);
        // The waiter takes the queue's one place...
        assert!(waiter.as_mut().now_or_never().is_none());
        assert_eq!(slots.waiting.load(std::sync::atomic::Ordering::Relaxed), 1);
        // ...so the next caller is refused without waiting.
        assert!(matches!(
            slots.enter(deadline).await,
            Err(CallError::OverCapacity)
        ));
        // The waiter times out at its deadline, not before, and gives its place back.
        let started = tokio::time::Instant::now();
        assert!(matches!(waiter.await, Err(CallError::Timeout)));
        assert_eq!(started.elapsed(), Duration::from_secs(30));
        assert_eq!(slots.waiting.load(std::sync::atomic::Ordering::Relaxed), 0);
        drop(held);
        assert!(slots.enter(deadline + Duration::from_secs(1)).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_gets_the_slot_given_back() {
        let slots = slots(1, 4);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let held = slots.enter(deadline).await.unwrap();
        let waiter = slots.enter(deadline);
        tokio::pin!(waiter);
        assert!(waiter.as_mut().now_or_never().is_none());
        tokio::time::sleep(Duration::from_secs(5)).await;
        drop(held);
        assert!(waiter.await.is_ok());
        assert_eq!(
            tokio::time::Instant::now() - (deadline - Duration::from_secs(30)),
            Duration::from_secs(5)
        );
    }
}
