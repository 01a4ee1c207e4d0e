//! Cached tool results in the store (see `crate::cache`), shared by every
//! replica: an entry `cache:{tenant}:{upstream}:{generation}:{key}` that
//! expires with its TTL, a per-tenant index of entries by last use that
//! holds the tenant to its `max_entries`, and per upstream a generation
//! that a restart moves on, so every replica stops finding what the old
//! process answered.

use super::{Store, StoreError};

/// KEYS: the upstream's generation, the tenant's index. ARGV: the entry
/// key's prefix (up to the generation), the slot's key, now (ms). The
/// entry, its use noted.
const GET: &str = r"
local generation = redis.call('GET', KEYS[1]) or '0'
local key = ARGV[1] .. generation .. ':' .. ARGV[2]
local found = redis.call('GET', key)
if found then
  redis.call('ZADD', KEYS[2], ARGV[3], key)
end
return found
";

/// KEYS: as GET's. ARGV: the prefix, the key, now (ms), TTL (ms), the
/// tenant's most entries, the entry. The entries the tenant holds after.
const PUT: &str = r"
local generation = redis.call('GET', KEYS[1]) or '0'
local key = ARGV[1] .. generation .. ':' .. ARGV[2]
redis.call('SET', key, ARGV[6], 'PX', ARGV[4])
redis.call('ZADD', KEYS[2], ARGV[3], key)
-- Entries gone by themselves (expired) leave the index first.
local most = tonumber(ARGV[5])
while redis.call('ZCARD', KEYS[2]) > most do
  local oldest = redis.call('ZPOPMIN', KEYS[2])
  redis.call('DEL', oldest[1])
end
local members = redis.call('ZRANGE', KEYS[2], 0, 63)
for _, m in ipairs(members) do
  if redis.call('EXISTS', m) == 0 then redis.call('ZREM', KEYS[2], m) end
end
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[4]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
end
return redis.call('ZCARD', KEYS[2])
";

static GET_SCRIPT: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(GET));
static PUT_SCRIPT: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(PUT));

fn now_ms() -> String {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
        .to_string()
}

/// Where one call's result is kept in the store: its tenant, its
/// upstream, its key (hex), how long it lives and its tenant's most entries.
pub struct CacheSlot<'a> {
    pub tenant: &'a str,
    pub upstream: &'a str,
    pub key: &'a str,
    pub ttl: std::time::Duration,
    pub max_entries: usize,
}

impl Store {
    fn cache_keys(&self, slot: &CacheSlot<'_>) -> ([String; 2], String) {
        (
            [
                self.key(&["cache-generation", slot.upstream]),
                self.key(&["cache-index", slot.tenant]),
            ],
            self.key(&["cache", slot.tenant, slot.upstream, ""]),
        )
    }

    /// The entry kept in `slot`, if any.
    pub async fn cached(&self, slot: &CacheSlot<'_>) -> Result<Option<String>, StoreError> {
        let (keys, prefix) = self.cache_keys(slot);
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let args = [prefix, slot.key.to_owned(), now_ms()];
        self.script(&GET_SCRIPT, &keys, &args).await
    }

    /// Keeps `entry` in `slot`: the entries its tenant holds after.
    pub async fn keep_cached(
        &self,
        slot: &CacheSlot<'_>,
        entry: &str,
    ) -> Result<usize, StoreError> {
        let (keys, prefix) = self.cache_keys(slot);
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let ttl = slot.ttl.as_millis().max(1).to_string();
        let args = [
            prefix,
            slot.key.to_owned(),
            now_ms(),
            ttl,
            slot.max_entries.to_string(),
            entry.to_owned(),
        ];
        self.script(&PUT_SCRIPT, &keys, &args).await
    }

    /// Moves the upstream's generation on: no replica finds what was
    /// cached before (it expires by itself).
    pub async fn forget_cached(&self, upstream: &str) -> Result<(), StoreError> {
        let _: i64 = self
            .query(redis::cmd("INCR").arg(self.key(&["cache-generation", upstream])))
            .await?;
        Ok(())
    }
}
