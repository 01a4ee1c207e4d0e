//! A tenant's `rate_limit` and `max_concurrency` held for every replica
//! together, with no store round trip on a call's usual path.
//!
//! **Rate.** One token bucket per tenant lives in the store (`rate` tokens
//! a second, up to `burst`), kept by a script on the store's clock. A
//! replica takes tokens from it in leases of a few at a time and spends
//! them locally; when its lease runs low it takes the next one ahead of
//! need, and a call finds it empty only at the start of a burst (it then
//! waits for the lease, at most the store's timeout). Every token admitted
//! anywhere came out of the one bucket, so the deployment never admits
//! more than `burst + rate × t` in any `t`; tokens leased and not spent
//! (a replica that went quiet) are lost, so it may admit up to one lease
//! per replica less. `Retry-After` is the bucket's own: when the next token
//! is due for the whole deployment.
//!
//! **Concurrency.** Each replica may run `floor(max / (2 × replicas))` calls
//! of a tenant on its own; past that, it borrows slots from the tenant's
//! pool in the store, counted per replica and summed over the replicas
//! alive (so a dead replica's slots come back by themselves). The sum of
//! the local shares and the pool is `max`: in flight deployment-wide never
//! exceeds it, and only calls past a replica's own share pay a round trip.
//! A replica takes no share of its own until its count of replicas is whole
//! (`Store::settled`): one that started beside others does not take the
//! share of a replica alone.
//!
//! The pool's counts cannot drift: each replica writes what it holds as a
//! count, never a difference, when a call gives slots back and again every
//! second (`keep_counts`), so a give-back lost to an outage, or a store that
//! lost its data, is set right within a second of the store answering.
//!
//! **Sessions and connections.** A tenant's bounds on open sessions and
//! connections are pooled as its concurrency is.
//!
//! **Store down.** `when_down: local`: each replica enforces its share of
//! each limit, the limit divided by the replicas it last saw alive, rounded
//! up; `refuse`: a tenant with either limit is refused (503).
//!
//! Here the front door (a call, a request, a session or connection
//! admitted); the pooled bounds in `slots`, the rate's leases in `rate`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use dashmap::DashMap;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

use super::Store;
use crate::config::WhenDown;
use crate::tenant::{Admission, Refusal, Tenant};

mod rate;
mod slots;

use rate::{Lease, TAKE};
use slots::BORROW;

/// What the store pools for a tenant, each held as `max_concurrency` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pool {
    /// Calls in flight (`max_concurrency`).
    Calls,
    /// Open sessions and streams (`max_sessions`).
    Sessions,
    /// Open connections (`limits.max_connections_per_tenant`).
    Connections,
}

impl Pool {
    fn limit(self) -> &'static str {
        match self {
            Pool::Calls => "concurrency",
            Pool::Sessions => "sessions",
            Pool::Connections => "connections",
        }
    }

    /// As `store_borrowed` labels it.
    fn key_label(self) -> &'static str {
        match self {
            Pool::Calls => "calls",
            Pool::Sessions => "sessions",
            Pool::Connections => "connections",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Pool::Calls => "slots",
            Pool::Sessions => "sessions",
            Pool::Connections => "connections",
        }
    }
}

/// What a tenant holds of one pool on this replica.
#[derive(Default)]
struct InFlight {
    local: AtomicUsize,
    /// Of which borrowed from the store's pool (counted before the store is
    /// asked, so that what is written is never less than what is held).
    borrowed: AtomicUsize,
    /// The store may hold another count for this replica than it holds
    /// (a borrow or a give-back since the last count written).
    dirty: AtomicBool,
}

/// The shared limits of every tenant; a cheap clone.
#[derive(Clone)]
pub struct SharedLimits {
    store: Store,
    take: Arc<redis::Script>,
    borrow: Arc<redis::Script>,
    leases: Arc<DashMap<Arc<str>, Arc<Lease>>>,
    /// Per pool: what each tenant holds on this replica.
    in_flight: Arc<[DashMap<Arc<str>, Arc<InFlight>>; 3]>,
    /// While the store is down (`local`): each tenant's share of its rate,
    /// for the replica count it was made for.
    shares: Arc<DashMap<Arc<str>, Share>>,
}

/// A tenant's share of its rate while the store is down: the replica count
/// it was made for, and its limiter.
type Share = (usize, Arc<DefaultDirectRateLimiter>);

impl SharedLimits {
    pub fn new(store: Store) -> Self {
        SharedLimits {
            store,
            take: Arc::new(redis::Script::new(TAKE)),
            borrow: Arc::new(redis::Script::new(BORROW)),
            leases: Arc::default(),
            in_flight: Arc::default(),
            shares: Arc::default(),
        }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Admits `n` requests of `tenant` against its limits, held for every
    /// replica together (or as `when_down` says while the store is down).
    pub async fn admit(&self, tenant: &Tenant, n: u32) -> Result<Admission, Refusal> {
        let limits = tenant.limits;
        if n == 0 || !limits.any() {
            return Ok(Admission::holding(None));
        }
        if !self.store.is_up() {
            self.store.first_answer().await;
        }
        if !self.store.is_up() && self.store.when_down() == WhenDown::Refuse {
            return Err(Refusal::StoreDown);
        }
        // Slots first: a call refused for concurrency spends no token.
        let held = match limits.concurrency {
            Some(max) => Some(self.slots(tenant, max, n as usize).await?),
            None => None,
        };
        if let Some((rate, burst)) = limits.rate {
            self.tokens(tenant, rate, burst, n).await?;
        }
        Ok(Admission::holding(
            held.map(|h| Box::new(h) as Box<dyn Send + Sync>),
        ))
    }

    /// Admits one request of `tenant` against its rate limit only (a
    /// DELETE, a stream's opening), held for every replica together.
    pub async fn admit_rate(&self, tenant: &Tenant) -> Result<(), Refusal> {
        let Some((rate, burst)) = tenant.limits.rate else {
            return Ok(());
        };
        if !self.store.is_up() {
            self.store.first_answer().await;
        }
        if !self.store.is_up() && self.store.when_down() == WhenDown::Refuse {
            return Err(Refusal::StoreDown);
        }
        self.tokens(tenant, rate, burst, 1).await
    }

    /// A place among the tenant's open sessions or connections (as `pool`
    /// says), held for every replica together; `Err` when the tenant holds
    /// `max` already. While the store is down each replica holds its share,
    /// under either `when_down`: a bound is not a rate, and refusing every
    /// tenant's connections would take the gateway down with the store.
    pub async fn enter(
        &self,
        pool: Pool,
        tenant: &Arc<str>,
        max: usize,
    ) -> Result<Box<dyn Send + Sync>, Refusal> {
        if !self.store.is_up() {
            self.store.first_answer().await;
        }
        match self.held(pool, tenant, max, 1).await {
            Ok(held) => Ok(Box::new(held)),
            Err(Refusal::StoreDown) => Err(Refusal::Concurrency),
            Err(refused) => Err(refused),
        }
    }
}
