//! The table of requests in flight on one connection, keyed by the id the
//! gateway gave them. Every entry leaves the table exactly once: answered,
//! abandoned by its caller (timeout, cancelled), or failed when the connection closes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

use super::CallError;
use crate::jsonrpc::JsonBuf;

pub type Outcome = Result<JsonBuf, CallError>;

#[derive(Default)]
struct Inner {
    waiters: HashMap<u64, oneshot::Sender<Outcome>>,
    /// Set once the connection is gone: later registrations fail at once.
    closed: Option<CallError>,
}

#[derive(Default)]
pub struct Pending {
    inner: Mutex<Inner>,
}

impl Pending {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding this lock cannot leave the map inconsistent (single operations).
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers `id`; the guard removes the entry if the caller gives up first.
    pub fn register(
        self: &Arc<Self>,
        id: u64,
    ) -> Result<(oneshot::Receiver<Outcome>, Registration), CallError> {
        let (tx, rx) = oneshot::channel();
        let mut inner = self.lock();
        if let Some(err) = &inner.closed {
            return Err(err.clone());
        }
        inner.waiters.insert(id, tx);
        Ok((
            rx,
            Registration {
                pending: self.clone(),
                id,
            },
        ))
    }

    /// Delivers an answer; false when nobody waits for `id` (late or unknown).
    pub fn complete(&self, id: u64, outcome: Outcome) -> bool {
        let waiter = self.lock().waiters.remove(&id);
        match waiter {
            Some(tx) => {
                let _ = tx.send(outcome);
                true
            }
            None => false,
        }
    }

    /// Fails every waiter with `err` and refuses new ones.
    pub fn close(&self, err: CallError) {
        let waiters = {
            let mut inner = self.lock();
            if inner.closed.is_none() {
                inner.closed = Some(err.clone());
            }
            std::mem::take(&mut inner.waiters)
        };
        for (_, tx) in waiters {
            let _ = tx.send(Err(err.clone()));
        }
    }

    pub fn len(&self) -> usize {
        self.lock().waiters.len()
    }
}

/// Removes its entry when dropped, so a timed-out or cancelled call leaves nothing behind.
pub struct Registration {
    pending: Arc<Pending>,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.pending.lock().waiters.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn entries_leave_exactly_once() {
        let p = Arc::new(Pending::default());
        let (rx, reg) = p.register(1).unwrap();
        assert!(p.complete(1, Err(CallError::Timeout)));
        assert!(matches!(rx.await.unwrap(), Err(CallError::Timeout)));
        drop(reg);
        assert!(!p.complete(1, Err(CallError::Timeout)));

        let (_rx, reg) = p.register(2).unwrap();
        assert_eq!(p.len(), 1);
        drop(reg);
        assert_eq!(p.len(), 0);

        let (rx, _reg) = p.register(3).unwrap();
        p.close(CallError::unavailable("gone"));
        assert!(matches!(rx.await.unwrap(), Err(CallError::Unavailable(_))));
        assert!(p.register(4).is_err());
        assert_eq!(p.len(), 0);
    }
}
