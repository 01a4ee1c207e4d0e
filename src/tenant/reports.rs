//! What a call holds of its reports (progress, log lines, requests for its
//! client) while its client has not taken them: a queue bounded in bytes per
//! call and, across all of a tenant's calls, per tenant, so that a client that
//! stops reading costs its tenant a few mebibytes, not the frame limit times a
//! count. Past either bound the oldest report that may be lost (progress, a
//! log line) is dropped to make room, and counted; one that may not (a request
//! the client must answer) is handed back when nothing else can make room,
//! for its sender to refuse. A call's result never passes through here.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

/// Bytes one call's reports may hold while its client has not taken them.
pub const PER_CALL: usize = 1 << 20;
/// Bytes all of one tenant's calls' reports may hold at once.
pub const PER_TENANT: usize = 16 << 20;

/// What one tenant's calls hold of reports, in bytes (see the module).
#[derive(Debug, Default)]
pub struct ReportBudget {
    held: AtomicUsize,
}

impl ReportBudget {
    /// Bytes held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    fn take(&self, bytes: usize) -> bool {
        let mut now = self.held.load(Ordering::Acquire);
        loop {
            if now + bytes > PER_TENANT {
                return false;
            }
            match self.held.compare_exchange_weak(
                now,
                now + bytes,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(seen) => now = seen,
            }
        }
    }

    fn give_back(&self, bytes: usize) {
        self.held.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// One queued report: the item, its bytes, whether it may be lost.
struct Queued<T> {
    item: T,
    bytes: usize,
    droppable: bool,
}

struct State<T> {
    items: VecDeque<Queued<T>>,
    bytes: usize,
    senders: usize,
    /// The receiver is gone: nothing more is taken.
    gone: bool,
}

struct Shared<T> {
    state: Mutex<State<T>>,
    ready: Notify,
    /// The tenant's budget; `None` bounds the queue per call only.
    tenant: Option<Arc<ReportBudget>>,
    dropped: Option<prometheus::IntCounter>,
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn release(&self, bytes: usize) {
        if let Some(tenant) = &self.tenant {
            tenant.give_back(bytes);
        }
    }

    fn count_dropped(&self) {
        if let Some(dropped) = &self.dropped {
            dropped.inc();
        }
    }
}

/// Where a call's reports are put (a cheap clone).
pub struct ReportSender<T> {
    shared: Arc<Shared<T>>,
}

/// Where they are taken, in order.
pub struct ReportReceiver<T> {
    shared: Arc<Shared<T>>,
}

/// A new queue, bounded per call and (with `tenant`) per tenant; what it
/// drops is counted in `dropped`.
pub fn report_queue<T>(
    tenant: Option<Arc<ReportBudget>>,
    dropped: Option<prometheus::IntCounter>,
) -> (ReportSender<T>, ReportReceiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            items: VecDeque::new(),
            bytes: 0,
            senders: 1,
            gone: false,
        }),
        ready: Notify::new(),
        tenant,
        dropped,
    });
    (
        ReportSender {
            shared: shared.clone(),
        },
        ReportReceiver { shared },
    )
}

impl<T> ReportSender<T> {
    /// Queues `item` of `bytes`: `Ok` once queued, or dropped when it may
    /// be lost and nothing older could make room; `Err` with the item when
    /// it may not be lost and no room could be made, or the receiver is gone.
    pub fn push(&self, item: T, bytes: usize, droppable: bool) -> Result<(), T> {
        let shared = &*self.shared;
        let mut state = shared.lock();
        if state.gone {
            return Err(item);
        }
        loop {
            let fits_call = state.bytes + bytes <= PER_CALL;
            if fits_call && shared.tenant.as_ref().is_none_or(|t| t.take(bytes)) {
                break;
            }
            // The oldest report that may be lost makes room.
            let Some(at) = state.items.iter().position(|q| q.droppable) else {
                if droppable {
                    shared.count_dropped();
                    return Ok(());
                }
                return Err(item);
            };
            if let Some(old) = state.items.remove(at) {
                state.bytes -= old.bytes;
                shared.release(old.bytes);
                shared.count_dropped();
            }
        }
        state.bytes += bytes;
        state.items.push_back(Queued {
            item,
            bytes,
            droppable,
        });
        drop(state);
        shared.ready.notify_one();
        Ok(())
    }

    /// Whether the receiver is gone (the call's client left).
    pub fn is_closed(&self) -> bool {
        self.shared.lock().gone
    }
}

impl<T> Clone for ReportSender<T> {
    fn clone(&self) -> Self {
        self.shared.lock().senders += 1;
        ReportSender {
            shared: self.shared.clone(),
        }
    }
}

impl<T> Drop for ReportSender<T> {
    fn drop(&mut self) {
        let last = {
            let mut state = self.shared.lock();
            state.senders -= 1;
            state.senders == 0
        };
        if last {
            self.shared.ready.notify_one();
        }
    }
}

impl<T> ReportReceiver<T> {
    /// The next report, waiting for one; `None` once every sender is gone
    /// and the queue is empty.
    pub async fn recv(&mut self) -> Option<T> {
        loop {
            let notified = self.shared.ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut state = self.shared.lock();
                if let Some(q) = state.items.pop_front() {
                    state.bytes -= q.bytes;
                    self.shared.release(q.bytes);
                    return Some(q.item);
                }
                if state.senders == 0 {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// The next report if one is queued now.
    pub fn try_recv(&mut self) -> Option<T> {
        let mut state = self.shared.lock();
        let q = state.items.pop_front()?;
        state.bytes -= q.bytes;
        self.shared.release(q.bytes);
        Some(q.item)
    }
}

impl<T> Drop for ReportReceiver<T> {
    /// What was never taken is given back (and dropped with the queue).
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.gone = true;
        let held = std::mem::take(&mut state.bytes);
        self.shared.release(held);
        state.items.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_progress_makes_room_and_a_request_is_never_dropped() {
        let tenant = Arc::new(ReportBudget::default());
        let dropped = prometheus::IntCounter::new("d", "d").unwrap();
        let (tx, mut rx) = report_queue::<usize>(Some(tenant.clone()), Some(dropped.clone()));
        let mb = 1 << 20;
        // A mebibyte of progress fits; the next one drops it.
        tx.push(1, mb / 2, true).unwrap();
        tx.push(2, mb / 2, true).unwrap();
        tx.push(3, mb / 2, true).unwrap();
        assert_eq!(dropped.get(), 1);
        assert_eq!(tenant.held(), mb);
        // A request the client must answer makes room from progress, and
        // is handed back when only requests are left.
        tx.push(4, mb / 2, false).unwrap();
        tx.push(5, mb / 2, false).unwrap();
        assert_eq!(tx.push(6, 10, false), Err(6));
        // Progress that finds no room is lost, never a request.
        assert_eq!(tx.push(7, 10, true), Ok(()));
        assert_eq!(dropped.get(), 4);
        assert_eq!(rx.try_recv(), Some(4));
        assert_eq!(rx.try_recv(), Some(5));
        assert_eq!(rx.try_recv(), None);
        assert_eq!(tenant.held(), 0);
    }

    #[test]
    fn a_tenants_calls_share_its_bytes() {
        let tenant = Arc::new(ReportBudget::default());
        let mut queues = Vec::new();
        for _ in 0..PER_TENANT / PER_CALL {
            let (tx, rx) = report_queue::<()>(Some(tenant.clone()), None);
            tx.push((), PER_CALL, true).unwrap();
            queues.push((tx, rx));
        }
        assert_eq!(tenant.held(), PER_TENANT);
        let (tx, mut rx) = report_queue::<u8>(Some(tenant.clone()), None);
        tx.push(1, 100, true).unwrap();
        assert_eq!(rx.try_recv(), None, "past the tenant's bytes");
        assert_eq!(tx.push(2, 100, false), Err(2));
        // A call that ends gives its bytes back.
        queues.pop();
        tx.push(3, 100, true).unwrap();
        assert_eq!(rx.try_recv(), Some(3));
        drop(queues);
        assert_eq!(tenant.held(), 0);
    }

    #[tokio::test]
    async fn the_receiver_hears_every_report_then_the_end() {
        let (tx, mut rx) = report_queue::<u8>(None, None);
        let other = tx.clone();
        let task = tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(n) = rx.recv().await {
                got.push(n);
            }
            got
        });
        tx.push(1, 1, true).unwrap();
        other.push(2, 1, false).unwrap();
        drop((tx, other));
        assert_eq!(task.await.unwrap(), vec![1, 2]);
    }
}
