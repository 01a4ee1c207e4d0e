//! Where consent records live: in this process, or in the shared store
//! (`gateway.store`) so that any replica serves any step of a flow and any
//! call. Records are sealed before they come here (see `seal`); keys name
//! no user in the clear (a digest of issuer and subject stands for them).

use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;

use crate::store::Store;

/// Records with a life (flows and their states) this process keeps at
/// most without a store: past it, expired ones are let go, and a new one
/// is refused while none has expired (a consent is asked again later).
const MAX_MEMORY_FLOWS: usize = 100_000;

/// The store is down or failed: the step fails with a clear error, and
/// nothing is half-written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unavailable;

#[derive(Clone)]
pub enum Keep {
    /// Value and, for a flow's records, when it expires.
    Memory(Arc<DashMap<String, (String, Option<Instant>)>>),
    Store(Store),
}

impl Keep {
    pub fn memory() -> Keep {
        Keep::Memory(Arc::default())
    }

    fn key(&self, key: &str) -> String {
        match self {
            Keep::Memory(_) => key.to_owned(),
            Keep::Store(store) => store.key(&["consent", key]),
        }
    }

    pub async fn get(&self, key: &str) -> Result<Option<String>, Unavailable> {
        match self {
            Keep::Memory(map) => Ok(map
                .get(key)
                .filter(|e| e.1.is_none_or(|at| at > Instant::now()))
                .map(|e| e.0.clone())),
            Keep::Store(store) => store
                .query(redis::cmd("GET").arg(self.key(key)))
                .await
                .map_err(|_| Unavailable),
        }
    }

    /// Writes `value`, for `ttl` when given.
    pub async fn put(
        &self,
        key: &str,
        value: &str,
        ttl: Option<Duration>,
    ) -> Result<(), Unavailable> {
        match self {
            Keep::Memory(map) => {
                let now = Instant::now();
                if ttl.is_some() && map.len() >= MAX_MEMORY_FLOWS && !map.contains_key(key) {
                    map.retain(|_, (_, at)| at.is_none_or(|at| at > now));
                    if map.len() >= MAX_MEMORY_FLOWS {
                        return Err(Unavailable);
                    }
                }
                map.insert(key.to_owned(), (value.to_owned(), ttl.map(|t| now + t)));
                Ok(())
            }
            Keep::Store(store) => {
                let mut cmd = redis::cmd("SET");
                cmd.arg(self.key(key)).arg(value);
                if let Some(ttl) = ttl {
                    cmd.arg("PX").arg(ttl.as_millis() as u64);
                }
                store.query::<()>(&cmd).await.map_err(|_| Unavailable)
            }
        }
    }

    /// Reads and removes at once: only one reader ever has it (a state,
    /// used once however many replicas see it come back).
    pub async fn take(&self, key: &str) -> Result<Option<String>, Unavailable> {
        match self {
            Keep::Memory(map) => Ok(map
                .remove(key)
                .filter(|(_, e)| e.1.is_none_or(|at| at > Instant::now()))
                .map(|(_, e)| e.0)),
            Keep::Store(store) => store
                .query(redis::cmd("GETDEL").arg(self.key(key)))
                .await
                .map_err(|_| Unavailable),
        }
    }

    /// Whether it was there.
    pub async fn remove(&self, key: &str) -> Result<bool, Unavailable> {
        match self {
            Keep::Memory(map) => Ok(map.remove(key).is_some()),
            Keep::Store(store) => store
                .query::<i64>(redis::cmd("DEL").arg(self.key(key)))
                .await
                .map(|n| n > 0)
                .map_err(|_| Unavailable),
        }
    }

    /// The keys that start with `prefix` and end with `suffix` (names of
    /// tenants and upstreams, and hex digests: no glob character in them).
    pub async fn keys_like(&self, prefix: &str, suffix: &str) -> Result<Vec<String>, Unavailable> {
        let matches = |k: &str| k.starts_with(prefix) && k.ends_with(suffix);
        match self {
            Keep::Memory(map) => Ok(map
                .iter()
                .filter(|e| matches(e.key()))
                .map(|e| e.key().clone())
                .collect()),
            Keep::Store(store) => {
                let full = self.key("");
                let pattern = format!("{}{prefix}*{suffix}", self.key(""));
                let mut found = Vec::new();
                let mut cursor = 0u64;
                loop {
                    let (next, keys): (u64, Vec<String>) = store
                        .query(
                            redis::cmd("SCAN")
                                .arg(cursor)
                                .arg("MATCH")
                                .arg(&pattern)
                                .arg("COUNT")
                                .arg(1000),
                        )
                        .await
                        .map_err(|_| Unavailable)?;
                    found.extend(keys.into_iter().filter_map(|k| {
                        k.strip_prefix(&full)
                            .filter(|k| matches(k))
                            .map(str::to_owned)
                    }));
                    if next == 0 {
                        return Ok(found);
                    }
                    cursor = next;
                }
            }
        }
    }
}
