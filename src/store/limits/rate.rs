//! A tenant's rate held for every replica: tokens leased from the one
//! bucket in the store, spent locally, the next lease taken ahead of need;
//! while the store is down, this replica's share of the rate.

use super::*;

/// Takes up to `want` tokens from a bucket: `{granted, ms until the tokens
/// still wanted (at least one) are there}`; `want` 0 only asks when.
pub(super) const TAKE: &str = r"
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

/// A replica's lease of a tenant's tokens.
pub(super) struct Lease {
    tokens: AtomicI64,
    /// `store_leased_tokens` of the tenant, resolved once.
    shown: prometheus::IntGauge,
    /// A lease is being taken.
    taking: AtomicBool,
    taken: tokio::sync::Notify,
}

/// A lease being taken now: the tokens it granted (0: none left), or the store failed.
pub(super) type Taking = futures_util::future::BoxFuture<'static, Result<i64, ()>>;

impl SharedLimits {
    pub(super) async fn tokens(
        &self,
        tenant: &Tenant,
        rate: u32,
        burst: u32,
        n: u32,
    ) -> Result<(), Refusal> {
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
