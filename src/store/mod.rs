//! The store replicas share limits and state through (`gateway.store`): a
//! server of the Redis protocol (Redis 6+, Valkey), through redis-rs's
//! connection manager (one multiplexed connection, reconnected with backoff).
//!
//! Every call waits at most `timeout_ms`, and none is made while the store
//! is known to be down: a call that fails or times out marks it down at
//! once, and a probe every second marks it up again. Each replica says it is
//! alive every second (a sorted set of replica ids by time), so every
//! replica knows how many share the store: what `when_down: local` divides
//! each limit by. The state changes are logged once each way and shown in
//! `mcp_gateway_store_up` and `/readyz`.

pub mod bus;
pub mod cache;
pub mod limits;
pub mod pins;
pub mod spill;
pub mod state;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use redis::aio::ConnectionManager;
use tokio_util::sync::CancellationToken;

use crate::config::{StoreSettings, WhenDown};
use crate::metrics::Metrics;

/// How often the store is probed, and each replica says it is alive.
pub(crate) const BEAT: Duration = Duration::from_secs(1);
/// A replica not heard from for this long is not counted as alive.
const ALIVE_FOR: Duration = Duration::from_secs(5);

/// Why a store call produced nothing.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("the store is down")]
    Down,
    #[error("the store did not answer in time")]
    Timeout,
    #[error("the store answered an error: {0}")]
    Failed(String),
}

/// A handle on the store; a cheap clone.
#[derive(Clone)]
pub struct Store(Arc<Inner>);

/// The beats that answered, and whether they make the count of replicas
/// whole. A beat that answers counts every peer heard from in the last
/// [`ALIVE_FOR`], and [`Inner::counts`] keeps the most of that window; so
/// the count is whole once beats have answered for `ALIVE_FOR` with no gap
/// of `ALIVE_FOR` between two of them. A shorter gap (a slow answer, a
/// store away for a moment) keeps the count of before it in the window,
/// and the peers that started meanwhile are in the beat after it: the
/// replica stays settled. A longer one empties the window: the replica
/// takes no share until it has counted for `ALIVE_FOR` again.
#[derive(Debug, Default)]
struct Beats {
    /// The first beat after the last gap of `ALIVE_FOR`.
    since: Option<std::time::Instant>,
    last: Option<std::time::Instant>,
}

impl Beats {
    /// A beat answered at `now`: whether the count is whole.
    fn answered(&mut self, now: std::time::Instant) -> bool {
        let gap = self
            .last
            .is_none_or(|last| now.duration_since(last) >= ALIVE_FOR);
        if gap {
            self.since = Some(now);
        }
        self.last = Some(now);
        self.since
            .is_some_and(|since| now.duration_since(since) >= ALIVE_FOR)
    }
}

struct Inner {
    settings: StoreSettings,
    client: redis::Client,
    conn: ArcSwapOption<ConnectionManager>,
    up: AtomicBool,
    /// Replicas seen alive (this one included), at least 1: the most seen
    /// at any beat of the last [`ALIVE_FOR`], so that a count that drops
    /// (a peer gone, or a store that lost its data) is believed only once
    /// the store would stop counting the peer's slots too.
    replicas: AtomicUsize,
    /// The counts of the beats of the last [`ALIVE_FOR`].
    counts: std::sync::Mutex<std::collections::VecDeque<(std::time::Instant, usize)>>,
    /// This replica's id among them.
    id: String,
    metrics: Metrics,
    up_changed: tokio::sync::watch::Sender<bool>,
    /// Since when the beats have answered without a gap of [`ALIVE_FOR`].
    beats: std::sync::Mutex<Beats>,
    /// Whether the count of replicas is whole (see [`Beats`] and
    /// [`Store::settled`]).
    settled: AtomicBool,
    /// Whether it has ever answered (its first answer is not "again").
    ever_up: AtomicBool,
}

impl Store {
    /// A store for these settings; nothing is connected until [`Self::run`].
    pub fn new(settings: StoreSettings, metrics: Metrics) -> Result<Store, String> {
        let mut info: redis::ConnectionInfo = settings
            .url
            .as_str()
            .parse()
            .map_err(|e: redis::RedisError| format!("gateway.store.url: {e}"))?;
        let mut redis = info.redis_settings().clone();
        if let Some(user) = &settings.username {
            redis = redis.set_username(user);
        }
        if let Some(password) = &settings.password {
            redis = redis.set_password(password);
        }
        info = info.set_redis_settings(redis);
        let client = redis::Client::open(info).map_err(|e| format!("gateway.store: {e}"))?;
        let mut id = [0u8; 8];
        let _ = getrandom::fill(&mut id);
        let id = id.iter().map(|b| format!("{b:02x}")).collect();
        metrics.store_up.set(0);
        metrics.store_configured.set(1);
        Ok(Store(Arc::new(Inner {
            settings,
            client,
            conn: ArcSwapOption::empty(),
            up: AtomicBool::new(false),
            replicas: AtomicUsize::new(1),
            counts: std::sync::Mutex::default(),
            id,
            metrics,
            up_changed: tokio::sync::watch::Sender::new(false),
            beats: std::sync::Mutex::default(),
            settled: AtomicBool::new(false),
            ever_up: AtomicBool::new(false),
        })))
    }

    pub(crate) fn metrics(&self) -> &Metrics {
        &self.0.metrics
    }

    pub fn settings(&self) -> &StoreSettings {
        &self.0.settings
    }

    /// Every key the gateway writes: the configured prefix, then `parts` joined by `:`.
    pub fn key(&self, parts: &[&str]) -> String {
        let mut key = self.0.settings.key_prefix.clone();
        key.push_str(&parts.join(":"));
        key
    }

    pub fn is_up(&self) -> bool {
        self.0.up.load(Ordering::Acquire)
    }

    /// Changes whenever the store goes up or down.
    pub fn watch_up(&self) -> tokio::sync::watch::Receiver<bool> {
        self.0.up_changed.subscribe()
    }

    pub fn when_down(&self) -> WhenDown {
        self.0.settings.when_down
    }

    /// Replicas that shared the store at the last beat (at least 1): while the
    /// store is down, the last count seen before it went away.
    pub fn replicas(&self) -> usize {
        self.0.replicas.load(Ordering::Relaxed).max(1)
    }

    /// Whether the count of replicas is known to be whole: the store has
    /// answered for as long as a replica counts as alive, so every peer
    /// alive has been seen. Before that, a replica takes no share of a
    /// pooled limit as its own (it borrows everything from the pool).
    pub fn settled(&self) -> bool {
        self.0.settled.load(Ordering::Acquire)
    }

    /// Before the store has first answered (the replica just started), waits
    /// for that within the store's deadline: until then the replica knows no
    /// peer, and the share it would take alone is not known to be safe.
    pub async fn first_answer(&self) {
        if self.0.ever_up.load(Ordering::Acquire) {
            return;
        }
        let mut up = self.0.up_changed.subscribe();
        let _ = tokio::time::timeout(self.0.settings.timeout, up.wait_for(|u| *u)).await;
    }

    /// This replica's id in the store.
    pub fn replica_id(&self) -> &str {
        &self.0.id
    }

    fn set_up(&self, up: bool) {
        if up {
            let settled = self
                .0
                .beats
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .answered(std::time::Instant::now());
            self.0.settled.store(settled, Ordering::Release);
        }
        if self.0.up.swap(up, Ordering::AcqRel) == up {
            return;
        }
        self.0.metrics.store_up.set(i64::from(up));
        self.0.up_changed.send_replace(up);
        let url = &self.0.settings.url;
        let when_down = self.0.settings.when_down.as_str();
        if up && !self.0.ever_up.swap(true, Ordering::AcqRel) {
            tracing::info!(store = %url, replicas = self.replicas(), "the store is reachable: limits and state are shared");
        } else if up {
            tracing::info!(store = %url, "the store is reachable again: limits and state are shared");
        } else {
            tracing::warn!(store = %url, when_down, replicas = self.replicas(), "the store is unreachable: limits apply as when_down says, state that needs it is refused");
        }
    }

    /// Sends `cmd`, within the timeout, counting how long it took and
    /// whether it failed; `Down` at once while the store is known to be down.
    pub async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, StoreError> {
        let Some(conn) = self.0.conn.load_full().filter(|_| self.is_up()) else {
            return Err(StoreError::Down);
        };
        let mut conn = (*conn).clone();
        self.timed(async move { cmd.query_async(&mut conn).await })
            .await
    }

    /// Sends a pipeline, as [`Self::query`] sends a command.
    pub async fn query_pipe<T: redis::FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
    ) -> Result<T, StoreError> {
        let Some(conn) = self.0.conn.load_full().filter(|_| self.is_up()) else {
            return Err(StoreError::Down);
        };
        let mut conn = (*conn).clone();
        self.timed(async move { pipe.query_async(&mut conn).await })
            .await
    }

    /// Runs a script, as [`Self::query`] sends a command.
    pub async fn script<T: redis::FromRedisValue>(
        &self,
        script: &redis::Script,
        keys: &[&str],
        args: &[String],
    ) -> Result<T, StoreError> {
        let Some(conn) = self.0.conn.load_full().filter(|_| self.is_up()) else {
            return Err(StoreError::Down);
        };
        let mut conn = (*conn).clone();
        let mut invocation = script.prepare_invoke();
        for k in keys {
            invocation.key(*k);
        }
        for a in args {
            invocation.arg(a);
        }
        self.timed(async move { invocation.invoke_async(&mut conn).await })
            .await
    }

    async fn timed<T>(
        &self,
        call: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        let started = std::time::Instant::now();
        let answer = tokio::time::timeout(self.0.settings.timeout, call).await;
        self.0
            .metrics
            .store_seconds
            .observe(started.elapsed().as_secs_f64());
        let failed = match answer {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) if !e.is_io_error() && !e.is_connection_dropped() && !e.is_timeout() => {
                // The store answered: it is up, the command is wrong.
                self.0
                    .metrics
                    .store_errors
                    .with_label_values(&["error"])
                    .inc();
                return Err(StoreError::Failed(e.to_string()));
            }
            Ok(Err(_)) => {
                self.0
                    .metrics
                    .store_errors
                    .with_label_values(&["connection"])
                    .inc();
                StoreError::Down
            }
            Err(_) => {
                self.0
                    .metrics
                    .store_errors
                    .with_label_values(&["timeout"])
                    .inc();
                StoreError::Timeout
            }
        };
        // Known down until the next probe succeeds: no call waits on it meanwhile.
        self.set_up(false);
        Err(failed)
    }

    /// Connects once, for a command (`mcp-gateway pins approve`) rather than
    /// a replica: no beat, and an error when the store does not answer.
    pub async fn open(&self) -> Result<(), String> {
        self.connect().await?;
        let Some(conn) = self.0.conn.load_full() else {
            return Err("not connected".to_owned());
        };
        let mut conn = (*conn).clone();
        let cmd = redis::cmd("PING");
        let ping = cmd.query_async::<redis::Value>(&mut conn);
        match tokio::time::timeout(
            self.0.settings.timeout.max(Duration::from_millis(500)),
            ping,
        )
        .await
        {
            Ok(Ok(_)) => {
                self.0.up.store(true, Ordering::Release);
                Ok(())
            }
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("no answer in time".to_owned()),
        }
    }

    /// Makes the connection (redis-rs's manager reconnects it thereafter).
    async fn connect(&self) -> Result<(), String> {
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_number_of_retries(1)
            .set_connection_timeout(Some(
                self.0.settings.timeout.max(Duration::from_millis(500)),
            ))
            .set_response_timeout(Some(self.0.settings.timeout));
        let connect = redis::aio::ConnectionManager::new_with_config(self.0.client.clone(), config);
        match tokio::time::timeout(Duration::from_secs(5), connect).await {
            Ok(Ok(conn)) => {
                self.0.conn.store(Some(Arc::new(conn)));
                Ok(())
            }
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("no answer within 5 s".to_owned()),
        }
    }

    /// Connects, then probes the store and says this replica is alive every
    /// second, until `stop`. A store that cannot be reached at start is
    /// retried here, with backoff; `serve` goes on meanwhile.
    pub async fn run(self, stop: CancellationToken) {
        let mut wait = Duration::from_millis(100);
        loop {
            if self.0.conn.load().is_none() {
                // Said once, at the first failure: the retries go on quietly.
                if let Err(error) = self.connect().await
                    && wait == Duration::from_millis(100)
                {
                    tracing::warn!(store = %self.0.settings.url, error, when_down = self.0.settings.when_down.as_str(), "cannot connect to the store; retrying with backoff");
                }
            }
            if self.0.conn.load().is_some() {
                let up = self.beat().await;
                self.set_up(up);
                wait = if up {
                    BEAT
                } else {
                    (wait * 2).min(Duration::from_secs(5))
                };
            } else {
                wait = (wait * 2).min(Duration::from_secs(5));
            }
            tokio::select! {
                () = tokio::time::sleep(wait.min(BEAT)) => {}
                () = stop.cancelled() => break,
            }
        }
        // Gone: the other replicas stop counting this one at once.
        if self.is_up() {
            let _: Result<i64, _> = self
                .query(
                    redis::cmd("ZREM")
                        .arg(self.key(&["replicas"]))
                        .arg(&self.0.id),
                )
                .await;
        }
    }

    /// One probe: this replica alive now, the ones not heard from for a
    /// while dropped, and how many are left.
    async fn beat(&self) -> bool {
        let Some(conn) = self.0.conn.load_full() else {
            return false;
        };
        let mut conn = (*conn).clone();
        let key = self.key(&["replicas"]);
        let id = self.0.id.clone();
        let alive_ms = ALIVE_FOR.as_millis() as u64;
        let beat = async move {
            let (now,): (Vec<u64>,) = redis::pipe().cmd("TIME").query_async(&mut conn).await?;
            let now_ms =
                now.first().copied().unwrap_or(0) * 1000 + now.get(1).copied().unwrap_or(0) / 1000;
            let (_, _, count, _): (i64, i64, usize, i64) = redis::pipe()
                .cmd("ZADD")
                .arg(&key)
                .arg(now_ms)
                .arg(&id)
                .cmd("ZREMRANGEBYSCORE")
                .arg(&key)
                .arg("-inf")
                .arg(now_ms.saturating_sub(alive_ms))
                .cmd("ZCARD")
                .arg(&key)
                .cmd("PEXPIRE")
                .arg(&key)
                .arg(alive_ms * 2)
                .query_async(&mut conn)
                .await?;
            redis::RedisResult::Ok(count)
        };
        match tokio::time::timeout(
            self.0.settings.timeout.max(Duration::from_millis(200)),
            beat,
        )
        .await
        {
            Ok(Ok(count)) => {
                let most = {
                    let mut counts = self
                        .0
                        .counts
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    let now = std::time::Instant::now();
                    counts.retain(|(at, _)| now.duration_since(*at) < ALIVE_FOR);
                    counts.push_back((now, count));
                    counts.iter().map(|(_, n)| *n).max().unwrap_or(count)
                };
                self.0.replicas.store(most.max(1), Ordering::Relaxed);
                self.0.metrics.store_replicas.set(count as i64);
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn beats_at(beats: &mut Beats, start: Instant, secs: &[f64]) -> Vec<bool> {
        secs.iter()
            .map(|s| beats.answered(start + Duration::from_secs_f64(*s)))
            .collect()
    }

    #[test]
    fn the_count_is_whole_after_answering_for_as_long_as_a_peer_counts() {
        let mut beats = Beats::default();
        let settled = beats_at(&mut beats, Instant::now(), &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(settled, [false, false, false, false, false, true]);
    }

    #[test]
    fn a_short_gap_keeps_the_count_and_a_long_one_starts_it_again() {
        let mut beats = Beats::default();
        let start = Instant::now();
        // Settled at 5 s; a beat lost at 6 s (a slow answer) changes nothing.
        let settled = beats_at(
            &mut beats,
            start,
            &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 7.0, 11.9],
        );
        assert_eq!(settled.last(), Some(&true));
        // 5 s without an answer: the window is empty, counted again.
        let settled = beats_at(&mut beats, start, &[16.9, 17.9, 21.8, 21.9]);
        assert_eq!(settled, [false, false, false, true]);
    }
}
