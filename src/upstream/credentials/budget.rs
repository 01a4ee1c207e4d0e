//! How many obtained tokens the gateway keeps
//! (`gateway.upstream_auth.max_cached_tokens`), every upstream's and every
//! user's together: past the bound the least recently used is let go, and
//! its next call obtains another. A credential's use is noted at most once
//! a second, so a call pays one lock a second per credential, not one a
//! call. Tokens the gateway signs itself (assertions) are not counted:
//! they cost no request to make again.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use arc_swap::ArcSwapOption;

use super::Fresh;

/// A credential's cache slot, as the budget holds it: let go by emptying it.
pub(super) struct Held {
    pub(super) slot: Weak<ArcSwapOption<Fresh>>,
    pub(super) cached: prometheus::IntGauge,
}

#[derive(Default)]
struct Order {
    tick: u64,
    /// Each credential's last use and its slot.
    by_id: HashMap<u64, (u64, Held)>,
    /// Credentials by last use, oldest first.
    by_use: BTreeMap<u64, u64>,
}

/// Shared by every credential of a gateway; a reload changes its bound.
pub struct TokenBudget {
    max: AtomicUsize,
    next_id: AtomicU64,
    order: Mutex<Order>,
}

impl TokenBudget {
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(TokenBudget {
            max: AtomicUsize::new(max.max(1)),
            next_id: AtomicU64::new(1),
            order: Mutex::default(),
        })
    }

    pub fn set_max(&self, max: usize) {
        self.max.store(max.max(1), Ordering::Relaxed);
    }

    /// An id for a new credential.
    pub(super) fn id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Tokens held now.
    pub fn held(&self) -> usize {
        self.lock().by_id.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Order> {
        self.order.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts `id`'s new token as used now, letting go of the least
    /// recently used others past the bound.
    pub(super) fn admit(&self, id: u64, held: Held) {
        let mut evicted = Vec::new();
        {
            let mut o = self.lock();
            o.tick += 1;
            let tick = o.tick;
            if let Some((old, _)) = o.by_id.insert(id, (tick, held)) {
                o.by_use.remove(&old);
            }
            o.by_use.insert(tick, id);
            let max = self.max.load(Ordering::Relaxed);
            while o.by_id.len() > max {
                let Some((_, oldest)) = o.by_use.pop_first() else {
                    break;
                };
                if let Some((_, held)) = o.by_id.remove(&oldest) {
                    evicted.push(held);
                }
            }
        }
        // Emptied outside the lock: a slot's owner may be dropping it.
        for held in evicted {
            if let Some(slot) = held.slot.upgrade()
                && slot.swap(None).is_some()
            {
                held.cached.dec();
            }
        }
    }

    /// Notes a use of `id`'s token.
    pub(super) fn touch(&self, id: u64) {
        let mut o = self.lock();
        o.tick += 1;
        let tick = o.tick;
        if let Some(entry) = o.by_id.get_mut(&id) {
            let old = std::mem::replace(&mut entry.0, tick);
            o.by_use.remove(&old);
            o.by_use.insert(tick, id);
        }
    }

    /// `id` holds no token any more.
    pub(super) fn forget(&self, id: u64) {
        let mut o = self.lock();
        if let Some((old, _)) = o.by_id.remove(&id) {
            o.by_use.remove(&old);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn slot() -> Arc<ArcSwapOption<Fresh>> {
        Arc::new(ArcSwapOption::from_pointee(Fresh {
            value: reqwest::header::HeaderValue::from_static("Bearer t"),
            until: Instant::now(),
        }))
    }

    #[test]
    fn past_the_bound_the_least_recently_used_token_goes() {
        let budget = TokenBudget::new(2);
        let gauge = prometheus::IntGauge::new("held", "held").unwrap();
        let slots: Vec<_> = (0..3).map(|_| slot()).collect();
        let held = |i: usize| Held {
            slot: Arc::downgrade(&slots[i]),
            cached: gauge.clone(),
        };
        gauge.set(3);
        budget.admit(1, held(0));
        budget.admit(2, held(1));
        budget.touch(1);
        budget.admit(3, held(2));
        assert_eq!(budget.held(), 2);
        assert!(slots[0].load().is_some(), "used last but one: kept");
        assert!(slots[1].load().is_none(), "the least recently used goes");
        assert!(slots[2].load().is_some());
        assert_eq!(gauge.get(), 2);
        budget.forget(3);
        assert_eq!(budget.held(), 1);
        budget.set_max(1);
        budget.admit(2, held(1));
        assert_eq!(budget.held(), 1);
        assert!(slots[0].load().is_none());
    }
}
