//! A tenant's pooled bounds (calls in flight, sessions, connections) held
//! for every replica: each replica's own share first, then slots borrowed
//! from the pool in the store, counted per replica and written as counts
//! (see `limits` for why they cannot drift).

use super::*;

/// Borrows `n` slots of a tenant's pool for a replica when the replicas
/// alive hold fewer than `max` together: 1 if borrowed, 0 if not.
pub(super) const BORROW: &str = r"
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

/// Slots a call holds, given back when it ends.
pub(super) struct Held {
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
) -> Result<(), crate::store::StoreError> {
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
    pub(super) async fn slots(
        &self,
        tenant: &Tenant,
        max: usize,
        n: usize,
    ) -> Result<Held, Refusal> {
        self.held(Pool::Calls, &tenant.name, max, n).await
    }

    /// `n` of a tenant's `max` in `pool`: the replica's own share first,
    /// then borrowed from the store's pool.
    pub(super) async fn held(
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
            (crate::store::ALIVE_FOR.as_millis() as u64).to_string(),
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
                () = tokio::time::sleep(crate::store::BEAT) => {}
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
}
