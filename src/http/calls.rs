//! Calls in flight of the handshake era's sessions over HTTP, by session
//! (its nonce) and request id: a client's `notifications/cancelled` comes in a POST of
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
use tokio::sync::oneshot;

/// A session's nonce (shared with the checked session, so entering copies
/// nothing of it) and a request id, with their hash: made once with the
/// table's random seed, and all that its map hashes when a call enters and
/// when it leaves.
#[derive(Clone)]
struct Key {
    hash: u64,
    session: Arc<str>,
    id: CallId,
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.id == other.id && self.session == other.session
    }
}

impl Eq for Key {}

impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// A request id's JSON text, held in place when it is short (as the ids
/// clients send are: a number, a short string), so most calls enter the
/// table without allocating.
#[derive(Clone)]
enum CallId {
    Inline { len: u8, text: [u8; INLINE] },
    Shared(Arc<str>),
}

const INLINE: usize = 30;

impl CallId {
    fn of(id: &str) -> Self {
        match id.len() {
            len @ 0..=INLINE => {
                let mut text = [0; INLINE];
                text[..len].copy_from_slice(id.as_bytes());
                CallId::Inline {
                    len: len as u8,
                    text,
                }
            }
            _ => CallId::Shared(id.into()),
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            CallId::Inline { len, text } => &text[..usize::from(*len)],
            CallId::Shared(id) => id.as_bytes(),
        }
    }
}

impl PartialEq for CallId {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for CallId {}

/// A cheap clone.
#[derive(Clone, Default)]
pub struct Calls(Arc<Table>);

#[derive(Default)]
struct Table {
    /// Each entry's serial, so a call leaves only its own entry.
    next: AtomicU64,
    /// Seeds the keys' hashes: a client chooses its request ids, not where they land.
    seed: foldhash::fast::RandomState,
    /// Keyed by a session's nonce and a request id, hashed with foldhash:
    /// every request of a session enters and leaves.
    /// A cancellation takes the entry out and says so through its sender.
    calls: DashMap<Key, (u64, oneshot::Sender<()>), foldhash::fast::RandomState>,
}

impl Table {
    fn key(&self, session: Arc<str>, id: &str) -> Key {
        use std::hash::BuildHasher as _;
        Key {
            hash: self.seed.hash_one((&*session, id)),
            session,
            id: CallId::of(id),
        }
    }
}

/// A call's place in the table, left when dropped.
pub struct InFlight<'a> {
    calls: &'a Calls,
    key: Key,
    serial: u64,
    /// Answered `Ok` when the call is cancelled. An error only says the
    /// entry went otherwise (a later request that reused the id took its
    /// place), which is no cancellation.
    pub cancelled: oneshot::Receiver<()>,
}

impl Calls {
    /// Enters the call `id` (JSON text) of the session with this nonce.
    pub fn begin(&self, session: &Arc<str>, id: &str) -> InFlight<'_> {
        let key = self.0.key(session.clone(), id);
        let (cancel, cancelled) = oneshot::channel();
        let serial = self.0.next.fetch_add(1, Ordering::Relaxed);
        self.0.calls.insert(key.clone(), (serial, cancel));
        InFlight {
            calls: self,
            key,
            serial,
            cancelled,
        }
    }

    /// Cancels the call `id` (JSON text) of the session with this nonce,
    /// if it runs here.
    pub fn cancel(&self, session: &str, id: &str) -> bool {
        let key = self.0.key(session.into(), id);
        match self.0.calls.remove(&key) {
            Some((_, (_, cancel))) => {
                let _ = cancel.send(());
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

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        // Closed first, so that the sender leaving the table does not wake
        // the call's task to say so.
        self.cancelled.close();
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
        let (a, s): (Arc<str>, Arc<str>) = ("session-a".into(), "s".into());
        let call = calls.begin(&a, "7");
        assert!(!calls.cancel("session-b", "7"));
        assert!(!calls.cancel("session-a", "8"));
        assert!(call.cancelled.is_empty());
        assert!(calls.cancel("session-a", "7"));
        assert!(!call.cancelled.is_empty());
        drop(call);
        assert_eq!(calls.len(), 0);
        assert!(!calls.cancel("session-a", "7"));
        // An id used again while the first is in flight: each leaves its own.
        let first = calls.begin(&s, "1");
        let second = calls.begin(&s, "1");
        drop(first);
        assert!(calls.cancel("s", "1"));
        assert!(!second.cancelled.is_empty());
        drop(second);
        assert_eq!(calls.len(), 0);
        // Ids past the inline length, and ids that differ only there.
        let long = format!("\"{}\"", "x".repeat(40));
        let longer = format!("\"{}y\"", "x".repeat(40));
        let call = calls.begin(&a, &long);
        assert!(!calls.cancel("session-a", &longer));
        assert!(calls.cancel("session-a", &long));
        assert!(!call.cancelled.is_empty());
        let edge = "1".repeat(INLINE);
        let call = calls.begin(&a, &edge);
        assert!(!calls.cancel("session-a", &"1".repeat(INLINE - 1)));
        assert!(calls.cancel("session-a", &edge));
        assert!(!call.cancelled.is_empty());
    }
}
