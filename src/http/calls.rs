//! Calls in flight of the handshake era's sessions over HTTP, by session
//! and request id: a client's `notifications/cancelled` comes in a POST of
//! its own, and ends the call it names when that call runs on this replica
//! (the call is dropped, and with it the upstream call, which is cancelled
//! there); with a shared store, a cancellation of a call not running here
//! is published, and the replica running it ends it (`store::bus`). The session id is checked (sealed, the tenant's) before either
//! side looks here, so a client can name only its own session's calls.
//! An entry lives as long as its request: the table is bounded by the
//! requests the edge admits.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use dashmap::DashMap;
use tokio_util::sync::CancellationToken;

/// Shared between the table and the call's [`InFlight`]: entering copies
/// each id once.
type Key = (Arc<[u8]>, Arc<str>);

/// A cheap clone.
#[derive(Clone, Default)]
pub struct Calls(Arc<Table>);

#[derive(Default)]
struct Table {
    /// Each entry's serial, so a call leaves only its own entry.
    next: AtomicU64,
    /// Keyed by a session id (some 150 bytes) and a request id, hashed
    /// with foldhash: every request of a session enters and leaves.
    calls: DashMap<Key, (u64, CancellationToken), foldhash::fast::RandomState>,
}

/// A call's place in the table, left when dropped.
pub struct InFlight {
    calls: Calls,
    key: Key,
    serial: u64,
    pub cancelled: CancellationToken,
}

impl Calls {
    /// Enters the call `id` (JSON text) of `session`.
    pub fn begin(&self, session: &[u8], id: &str) -> InFlight {
        let key: Key = (session.into(), id.into());
        let cancelled = CancellationToken::new();
        let serial = self.0.next.fetch_add(1, Ordering::Relaxed);
        self.0
            .calls
            .insert(key.clone(), (serial, cancelled.clone()));
        InFlight {
            calls: self.clone(),
            key,
            serial,
            cancelled,
        }
    }

    /// Cancels the call `id` (JSON text) of `session`, if it runs here.
    pub fn cancel(&self, session: &[u8], id: &str) -> bool {
        let key: Key = (session.into(), id.into());
        match self.0.calls.get(&key) {
            Some(call) => {
                call.1.cancel();
                true
            }
            None => false,
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.calls.len()
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        // A later request that reused the id holds its own entry.
        self.calls
            .0
            .calls
            .remove_if(&self.key, |_, (serial, _)| *serial == self.serial);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_is_cancelled_by_its_session_and_id_only() {
        let calls = Calls::default();
        let call = calls.begin(b"session-a", "7");
        assert!(!calls.cancel(b"session-b", "7"));
        assert!(!calls.cancel(b"session-a", "8"));
        assert!(!call.cancelled.is_cancelled());
        assert!(calls.cancel(b"session-a", "7"));
        assert!(call.cancelled.is_cancelled());
        drop(call);
        assert_eq!(calls.len(), 0);
        assert!(!calls.cancel(b"session-a", "7"));
        // An id used again while the first is in flight: each leaves its own.
        let first = calls.begin(b"s", "1");
        let second = calls.begin(b"s", "1");
        drop(first);
        assert!(calls.cancel(b"s", "1"));
        assert!(second.cancelled.is_cancelled());
        drop(second);
        assert_eq!(calls.len(), 0);
    }
}
