//! Pinned tool definitions (see `crate::upstream::pins`) that every replica
//! holds to the same record: per upstream, one JSON document of its pins
//! (what the pins file holds for it), replaced whole by compare-and-set.
//! The first replica to see a tool pins it for all, so a replica that
//! starts after a definition changed quarantines it as the others do,
//! rather than pinning the changed definition as new. A review decision is
//! made in the store and announced on the change channel: every replica
//! relists the upstream at once.

use std::collections::HashMap;

use super::{Store, StoreError};

/// Sets KEYS[1] to ARGV[2] when it holds ARGV[1] (`""`: when it is
/// missing); 1 when it did.
const SWAP: &str = r"
local now = redis.call('GET', KEYS[1])
if (now == false and ARGV[1] == '') or now == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2])
  return 1
end
return 0
";

static SWAP_SCRIPT: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(SWAP));

/// An upstream's record as the store holds it.
pub struct PinRecord {
    /// The document's text; `None` when there is none yet.
    pub text: Option<String>,
    /// With none yet, the fingerprints an older gateway kept in the store
    /// (tool id → fingerprint), which seed it.
    pub legacy: HashMap<String, String>,
}

impl Store {
    /// The upstream's pins record.
    pub async fn pin_record(&self, upstream: &str) -> Result<PinRecord, StoreError> {
        let text: Option<String> = self
            .query(redis::cmd("GET").arg(self.key(&["pin-record", upstream])))
            .await?;
        let legacy = match text {
            Some(_) => HashMap::new(),
            None => {
                self.query(redis::cmd("HGETALL").arg(self.key(&["pins", upstream])))
                    .await?
            }
        };
        Ok(PinRecord { text, legacy })
    }

    /// Replaces the upstream's record with `new` if it is still `old`
    /// (`None`: if there is none); whether it was.
    pub async fn swap_pin_record(
        &self,
        upstream: &str,
        old: Option<&str>,
        new: &str,
    ) -> Result<bool, StoreError> {
        let key = self.key(&["pin-record", upstream]);
        let swapped: i64 = self
            .script(
                &SWAP_SCRIPT,
                &[&key],
                &[old.unwrap_or("").to_owned(), new.to_owned()],
            )
            .await?;
        Ok(swapped == 1)
    }
}
