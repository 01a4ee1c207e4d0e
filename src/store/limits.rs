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
//! Longer than most files: both limits held through the store, rate and
//! concurrency, with the scripts the store runs for them; each is a few
//! functions over the same leases.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use dashmap::DashMap;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

use super::Store;
use crate::config::WhenDown;
use crate::tenant::{Admission, Refusal, Tenant};

/// Takes up to `want` tokens from a bucket: `{granted, ms until the tokens
/// still wanted (at least one) are there}`; `want` 0 only asks when.
const TAKE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local b = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(b[1])
local at = tonumber(b[2])
if tokens == nil or at == nil then tokens = burst; at = now end
tokens = math.min(burst, tokens + math.max(0, now - at) * rate / 1000)
local granted = math.min(want, math.floor(tokens))
tokens = tokens - granted
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst * 1000 / rate) + 60000)
local need = math.max(want - granted, 1)
local wait = 0
if tokens < need then wait = math.ceil((need - tokens) * 1000 / rate) end
return {granted, wait}
";

/// Borrows `n` slots of a tenant's pool for a replica when the replicas
/// alive hold fewer than `max` together: 1 if borrowed, 0 if not.
const BORROW: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local alive_since = now - tonumber(ARGV[4])
local held = redis.call('HGETALL', KEYS[1])
local total = 0
for i = 1, #held, 2 do
  local score = redis.call('ZSCORE', KEYS[2], held[i])
  if score and tonumber(score) >= alive_since then
    total = total + tonumber(held[i + 1])
  else
    redis.call('HDEL', KEYS[1], held[i])
  end
end
if total + tonumber(ARGV[3]) > tonumber(ARGV[2]) then return 0 end
redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[3])
redis.call('PEXPIRE', KEYS[1], 600000)
return 1
";

/// A replica's lease of a tenant's tokens.
struct Lease {
    tokens: AtomicI64,
    /// `store_leased_tokens` of the tenant, resolved once.
    shown: prometheus::IntGauge,
    /// A lease is being taken.
    taking: AtomicBool,
    taken: tokio::sync::Notify,
}

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

/// A lease being taken now: the tokens it granted (0: none left), or the store failed.
type Taking = futures_util::future::BoxFuture<'static, Result<i64, ()>>;

/// Slots a call holds, given back when it ends.
struct Held {
    in_flight: Arc<InFlight>,
    local: usize,
    /// Borrowed from the pool: (store, pool key, n), shown in `store_borrowed`.
    borrowed: Option<(Store, String, usize)>,
    shown: Option<prometheus::IntGauge>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.in_flight.local.fetch_sub(self.local, Ordering::AcqRel);
        if let (Some(shown), Some((_, _, n))) = (&self.shown, &self.borrowed) {
            shown.sub(*n as i64);
        }
        let Some((store, key, n)) = self.borrowed.take() else {
            return;
        };
        self.in_flight.borrowed.fetch_sub(n, Ordering::AcqRel);
        self.in_flight.dirty.store(true, Ordering::Release);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            // What the replica holds now, written as a count: a write lost
            // (the store away) is made again within a second (`keep_counts`).
            let in_flight = self.in_flight.clone();
            runtime.spawn(async move {
                let _ = write_count(&store, &key, &in_flight).await;
            });
        }
    }
}

/// Writes what this replica borrowed of one tenant's pool, as a count.
async fn write_count(
    store: &Store,
    key: &str,
    in_flight: &InFlight,
) -> Result<(), super::StoreError> {
    in_flight.dirty.store(false, Ordering::Release);
    let held = in_flight.borrowed.load(Ordering::Acquire);
    let id = store.replica_id();
    let mut pipe = redis::pipe();
    match held {
        0 => pipe.cmd("HDEL").arg(key).arg(id).ignore(),
        n => pipe.cmd("HSET").arg(key).arg(id).arg(n).ignore(),
    };
    pipe.cmd("PEXPIRE").arg(key).arg(600_000).ignore();
    store.query_pipe::<()>(&pipe).await.inspect_err(|_| {
        in_flight.dirty.store(true, Ordering::Release);
    })
}

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

    async fn slots(&self, tenant: &Tenant, max: usize, n: usize) -> Result<Held, Refusal> {
        self.held(Pool::Calls, &tenant.name, max, n).await
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

    /// `n` of a tenant's `max` in `pool`: the replica's own share first,
    /// then borrowed from the store's pool.
    async fn held(
        &self,
        pool: Pool,
        tenant: &Arc<str>,
        max: usize,
        n: usize,
    ) -> Result<Held, Refusal> {
        let in_flight = self.in_flight[pool as usize]
            .entry(tenant.clone())
            .or_default()
            .clone();
        let replicas = self.store.replicas();
        let up = self.store.is_up();
        // Down: this replica's share of the whole, rounded up. Up: its
        // floor share, once it knows every peer (before, it borrows all).
        let floor_share = max / (2 * replicas);
        let own = match (up, self.store.settled()) {
            (true, true) => floor_share,
            (true, false) => 0,
            (false, _) => max.div_ceil(replicas),
        };
        let now = in_flight.local.fetch_add(n, Ordering::AcqRel);
        let mut held = Held {
            in_flight,
            local: n,
            borrowed: None,
            shown: None,
        };
        let fell_back = || {
            self.store
                .metrics()
                .store_fallbacks
                .with_label_values(&[pool.limit()])
                .inc();
        };
        if now + n <= own {
            if !up {
                fell_back();
            }
            return Ok(held);
        }
        if !up {
            fell_back();
            return Err(Refusal::Concurrency);
        }
        // Past its own share: borrowed from the pool, which holds the rest
        // (what the replicas' floor shares leave, whether taken or not).
        let key = self.store.key(&[pool.key(), tenant]);
        let replicas_key = self.store.key(&["replicas"]);
        let shared = max - floor_share * replicas;
        held.in_flight.borrowed.fetch_add(n, Ordering::AcqRel);
        let args = [
            self.store.replica_id().to_owned(),
            shared.to_string(),
            n.to_string(),
            (super::ALIVE_FOR.as_millis() as u64).to_string(),
        ];
        match self
            .store
            .script::<i64>(&self.borrow, &[&key, &replicas_key], &args)
            .await
        {
            Ok(1) => {
                let shown = self
                    .store
                    .metrics()
                    .store_borrowed
                    .with_label_values(&[tenant, pool.key_label()]);
                shown.add(n as i64);
                held.shown = Some(shown);
                held.borrowed = Some((self.store.clone(), key, n));
                Ok(held)
            }
            Ok(_) => {
                held.in_flight.borrowed.fetch_sub(n, Ordering::AcqRel);
                Err(Refusal::Concurrency)
            }
            // The store went away meanwhile: as when it is down.
            Err(_) => {
                held.in_flight.borrowed.fetch_sub(n, Ordering::AcqRel);
                fell_back();
                let share = max.div_ceil(self.store.replicas());
                match (self.store.when_down(), now + n <= share) {
                    (WhenDown::Refuse, _) if pool == Pool::Calls => Err(Refusal::StoreDown),
                    (_, true) => Ok(held),
                    (_, false) => Err(Refusal::Concurrency),
                }
            }
        }
    }

    /// Writes, every second the store answers, what this replica borrowed
    /// of every tenant's pools, as counts: a give-back the store missed,
    /// or a pool the store lost, is set right (see the module), until `stop`.
    pub async fn keep_counts(self, stop: tokio_util::sync::CancellationToken) {
        loop {
            tokio::select! {
                () = tokio::time::sleep(super::BEAT) => {}
                () = stop.cancelled() => return,
            }
            if !self.store.is_up() {
                continue;
            }
            for pool in [Pool::Calls, Pool::Sessions, Pool::Connections] {
                let held: Vec<(Arc<str>, Arc<InFlight>)> = self.in_flight[pool as usize]
                    .iter()
                    .filter(|e| {
                        e.borrowed.load(Ordering::Acquire) > 0 || e.dirty.load(Ordering::Acquire)
                    })
                    .map(|e| (e.key().clone(), e.value().clone()))
                    .collect();
                for (tenant, in_flight) in held {
                    let key = self.store.key(&[pool.key(), &tenant]);
                    if write_count(&self.store, &key, &in_flight).await.is_err() {
                        break;
                    }
                }
            }
        }
    }

    async fn tokens(&self, tenant: &Tenant, rate: u32, burst: u32, n: u32) -> Result<(), Refusal> {
        if n > burst {
            // More at once than the burst: this batch can never pass.
            return Err(Refusal::Rate {
                retry_after: Duration::from_secs(1),
            });
        }
        if !self.store.is_up() {
            return self.local_share(tenant, rate, burst, n);
        }
        let lease = self
            .leases
            .entry(tenant.name.clone())
            .or_insert_with(|| {
                Arc::new(Lease {
                    tokens: AtomicI64::new(0),
                    shown: self
                        .store
                        .metrics()
                        .store_leased_tokens
                        .with_label_values(&[&tenant.name]),
                    taking: AtomicBool::new(false),
                    taken: tokio::sync::Notify::new(),
                })
            })
            .clone();
        let size = lease_size(rate, burst, self.store.replicas());
        loop {
            let left = lease.tokens.fetch_sub(i64::from(n), Ordering::AcqRel);
            if left >= i64::from(n) {
                lease.shown.set(left - i64::from(n));
                // Taken; the next lease is asked for ahead of need.
                if left - i64::from(n) < i64::from(size) / 2 {
                    self.take_lease(tenant, &lease, rate, burst, size, false);
                }
                return Ok(());
            }
            lease.tokens.fetch_add(i64::from(n), Ordering::AcqRel);
            // Empty: wait for a lease (this call's, or one under way).
            let taken = lease.taken.notified();
            let mine = self.take_lease(tenant, &lease, rate, burst, size.max(n), true);
            let answer = match mine {
                Some(take) => take.await,
                None => {
                    let _ = tokio::time::timeout(self.store.settings().timeout, taken).await;
                    Ok(0)
                }
            };
            match answer {
                Ok(0) if lease.tokens.load(Ordering::Acquire) < i64::from(n) => {
                    return Err(self.refused(tenant, rate, n).await);
                }
                Ok(_) => continue,
                Err(_) => return self.local_share(tenant, rate, burst, n),
            }
        }
    }

    /// Takes a lease of `size` tokens, unless one is being taken: now (its
    /// future, to await) or in the background. Resolves to the tokens
    /// granted (0: the bucket is empty).
    fn take_lease(
        &self,
        tenant: &Tenant,
        lease: &Arc<Lease>,
        rate: u32,
        burst: u32,
        size: u32,
        now: bool,
    ) -> Option<Taking> {
        if lease.taking.swap(true, Ordering::AcqRel) {
            return None;
        }
        let (this, leased) = (self.clone(), lease.clone());
        let key = self.store.key(&["rate", &tenant.name]);
        let take = async move {
            let lease = leased;
            let args = [rate.to_string(), burst.to_string(), size.to_string()];
            let answer = this
                .store
                .script::<(i64, i64)>(&this.take, &[&key], &args)
                .await;
            let granted = match answer {
                Ok((granted, _)) => {
                    let now = lease.tokens.fetch_add(granted, Ordering::AcqRel) + granted;
                    lease.shown.set(now);
                    Ok(granted)
                }
                Err(_) => Err(()),
            };
            lease.taking.store(false, Ordering::Release);
            lease.taken.notify_waiters();
            granted
        };
        if now {
            return Some(Box::pin(take));
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(take);
        } else {
            lease.taking.store(false, Ordering::Release);
        }
        None
    }

    /// The refusal of a call the bucket has no token for: when the next one
    /// is due for the whole deployment, as the store's bucket says (the
    /// time one token takes when it cannot say).
    async fn refused(&self, tenant: &Tenant, rate: u32, n: u32) -> Refusal {
        let key = self.store.key(&["rate", &tenant.name]);
        let burst = tenant.limits.rate.map_or(rate, |(_, b)| b);
        let args = [rate.to_string(), burst.to_string(), "0".to_string()];
        let asked: Result<(i64, i64), _> = self.store.script(&self.take, &[&key], &args).await;
        let retry_after = match asked {
            Ok((_, wait)) => Duration::from_millis(u64::try_from(wait).unwrap_or(0)),
            Err(_) => Duration::from_secs_f64(f64::from(n) / f64::from(rate.max(1))),
        };
        Refusal::Rate {
            retry_after: retry_after.max(Duration::from_millis(1)),
        }
    }

    /// While the store is down (`local`): this replica's share of the rate.
    fn local_share(&self, tenant: &Tenant, rate: u32, burst: u32, n: u32) -> Result<(), Refusal> {
        if self.store.when_down() == WhenDown::Refuse {
            return Err(Refusal::StoreDown);
        }
        self.store
            .metrics()
            .store_fallbacks
            .with_label_values(&["rate"])
            .inc();
        let replicas = self.store.replicas();
        let limiter = {
            let mut entry = self
                .shares
                .entry(tenant.name.clone())
                .or_insert_with(|| (0, Arc::new(share_limiter(rate, burst, 1))));
            if entry.0 != replicas {
                *entry = (replicas, Arc::new(share_limiter(rate, burst, replicas)));
            }
            entry.1.clone()
        };
        let Some(n) = std::num::NonZeroU32::new(n) else {
            return Ok(());
        };
        match limiter.check_n(n) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(not_until)) => Err(Refusal::Rate {
                retry_after: not_until.wait_time_from(DefaultClock::default().now()),
            }),
            Err(_) => Err(Refusal::Rate {
                retry_after: Duration::from_secs(1),
            }),
        }
    }
}

/// Tokens a replica takes at once: an eighth of the burst per replica, at
/// least one; what the deployment may under-admit per replica gone quiet.
fn lease_size(_rate: u32, burst: u32, replicas: usize) -> u32 {
    let replicas = u32::try_from(replicas).unwrap_or(u32::MAX).max(1);
    (burst / (8 * replicas)).max(1)
}

/// A replica's share of a rate: rate and burst divided by the replicas, rounded up.
fn share_limiter(rate: u32, burst: u32, replicas: usize) -> DefaultDirectRateLimiter {
    let replicas = u32::try_from(replicas).unwrap_or(u32::MAX).max(1);
    let nz = |v: u32| {
        std::num::NonZeroU32::new(v.div_ceil(replicas).max(1)).unwrap_or(std::num::NonZeroU32::MIN)
    };
    RateLimiter::direct(Quota::per_second(nz(rate)).allow_burst(nz(burst)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_are_small_beside_the_burst_and_shares_round_up() {
        assert_eq!(lease_size(100, 100, 3), 4);
        assert_eq!(lease_size(10, 10, 3), 1);
        assert_eq!(lease_size(1000, 2000, 1), 250);
        let l = share_limiter(10, 10, 3);
        let n = std::num::NonZeroU32::new(4).unwrap();
        assert!(l.check_n(n).unwrap().is_ok(), "ceil(10 / 3) = 4 at once");
        assert!(l.check().is_err());
    }
}
