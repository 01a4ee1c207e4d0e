//! Cut results' pages in the store (see the `output` module's spills), so that
//! any replica serves them: per spill a hash `spill:{tenant}:{id}` of its
//! media type and pages, expiring with them; per tenant an index of its
//! spills by age and their sizes, which its quota is held to in one script
//! (the oldest dropped until the new one fits).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{Store, StoreError};

/// KEYS: the tenant's index (sorted set of ids by when kept), its sizes
/// (hash: id → "bytes expires-ms", and `_total`), the new spill's hash.
/// ARGV: now (ms), expires (ms), quota, bytes, id, the spills' key prefix,
/// media type, pages... The tenant's bytes held after.
const KEEP: &str = r"
local now, expires, quota, bytes = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local function drop_oldest()
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0)
  if #oldest == 0 then return false end
  local id = oldest[1]
  local entry = redis.call('HGET', KEYS[2], id)
  if entry then
    redis.call('HINCRBY', KEYS[2], '_total', -tonumber(string.match(entry, '^(%d+)')))
  end
  redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', KEYS[2], id)
  redis.call('DEL', ARGV[6] .. id)
  return true
end
-- The expired, oldest first.
while true do
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0)
  if #oldest == 0 then break end
  local entry = redis.call('HGET', KEYS[2], oldest[1])
  local until_ms = entry and tonumber(string.match(entry, ' (%d+)$')) or 0
  if until_ms > now then break end
  drop_oldest()
end
local total = tonumber(redis.call('HGET', KEYS[2], '_total') or '0')
while total + bytes > quota do
  if not drop_oldest() then break end
  total = tonumber(redis.call('HGET', KEYS[2], '_total') or '0')
end
redis.call('HSET', KEYS[3], 'mime', ARGV[7])
for i = 8, #ARGV do
  redis.call('HSET', KEYS[3], tostring(i - 7), ARGV[i])
end
redis.call('PEXPIREAT', KEYS[3], expires)
redis.call('ZADD', KEYS[1], now, ARGV[5])
redis.call('HSET', KEYS[2], ARGV[5], ARGV[4] .. ' ' .. expires)
total = redis.call('HINCRBY', KEYS[2], '_total', bytes)
for _, key in ipairs({KEYS[1], KEYS[2]}) do
  if redis.call('PTTL', key) < tonumber(expires) - now then
    redis.call('PEXPIREAT', key, expires)
  end
end
return total
";

static KEEP_SCRIPT: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(KEEP));

fn millis(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis()
}

impl Store {
    /// Keeps a cut result's pages for `tenant` under `id` for `ttl`, the
    /// tenant's oldest dropped to keep within `quota`: the bytes it holds.
    pub async fn keep_spill(
        &self,
        tenant: &str,
        id: &str,
        pages: &[&str],
        mime: &str,
        ttl: Duration,
        quota: u64,
    ) -> Result<u64, StoreError> {
        let now = SystemTime::now();
        let bytes: usize = pages.iter().map(|p| p.len()).sum();
        let mut args = vec![
            millis(now).to_string(),
            millis(now + ttl).to_string(),
            quota.to_string(),
            bytes.to_string(),
            id.to_owned(),
            self.key(&["spill", tenant, ""]),
            mime.to_owned(),
        ];
        args.extend(pages.iter().map(|p| (*p).to_owned()));
        let keys = [
            self.key(&["spills", tenant]),
            self.key(&["spill-sizes", tenant]),
            self.key(&["spill", tenant, id]),
        ];
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        self.script(&KEEP_SCRIPT, &keys, &args).await
    }

    /// Page `k` of the tenant's spill `id`, if it is there: its media
    /// type and text.
    pub async fn spill_page(
        &self,
        tenant: &str,
        id: &str,
        k: usize,
    ) -> Result<Option<(String, String)>, StoreError> {
        let (mime, text): (Option<String>, Option<String>) = self
            .query(
                redis::cmd("HMGET")
                    .arg(self.key(&["spill", tenant, id]))
                    .arg("mime")
                    .arg(k.to_string()),
            )
            .await?;
        Ok(mime.zip(text))
    }
}
