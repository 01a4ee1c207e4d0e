//! Pinned tool definitions (see `crate::upstream::pins`) that every replica
//! holds to the same record: per upstream, a hash of each tool's pinned
//! fingerprint and one of the fingerprints pending approval. The first
//! replica to see a tool pins it for all (an atomic script), so a replica
//! that starts after a definition changed quarantines it as the others do,
//! rather than pinning the changed definition as new. An approval
//! (`mcp-gateway pins approve`) is made in the store and announced on the
//! change channel: every replica relists the upstream at once.

use std::collections::HashSet;

use super::{Store, StoreError};

/// For each (id, seed, fingerprint) of ARGV: pins the seed when the tool is
/// not pinned yet, then clears its pending fingerprint if the pin matches or
/// records it if not; returns the ids that do not match.
const CHECK: &str = r"
local quarantined = {}
for i = 1, #ARGV, 3 do
  local id, seed, print = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local pinned = redis.call('HGET', KEYS[1], id)
  if not pinned then
    redis.call('HSET', KEYS[1], id, seed)
    pinned = seed
  end
  if pinned == print then
    redis.call('HDEL', KEYS[2], id)
  else
    redis.call('HSET', KEYS[2], id, print)
    quarantined[#quarantined + 1] = id
  end
end
return quarantined
";

/// Makes the pending fingerprints of ARGV[1] (a tool's id, or every tool
/// when empty) the pinned ones; returns the ids approved.
const APPROVE: &str = r"
local approved = {}
local pending = redis.call('HGETALL', KEYS[2])
for i = 1, #pending, 2 do
  if ARGV[1] == '' or ARGV[1] == pending[i] then
    redis.call('HSET', KEYS[1], pending[i], pending[i + 1])
    redis.call('HDEL', KEYS[2], pending[i])
    approved[#approved + 1] = pending[i]
  end
end
return approved
";

static CHECK_SCRIPT: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(CHECK));
static APPROVE_SCRIPT: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(APPROVE));

impl Store {
    fn pin_keys(&self, upstream: &str) -> [String; 2] {
        [
            self.key(&["pins", upstream]),
            self.key(&["pins-pending", upstream]),
        ]
    }

    /// Checks an upstream's tools, each `(id, seed, fingerprint)`: the seed
    /// is what a tool not pinned yet is pinned to. The ids quarantined.
    pub async fn check_pins(
        &self,
        upstream: &str,
        tools: &[(String, String, String)],
    ) -> Result<HashSet<String>, StoreError> {
        let [pinned, pending] = self.pin_keys(upstream);
        let args: Vec<String> = tools
            .iter()
            .flat_map(|(id, seed, print)| [id.clone(), seed.clone(), print.clone()])
            .collect();
        let quarantined: Vec<String> = self
            .script(&CHECK_SCRIPT, &[&pinned, &pending], &args)
            .await?;
        Ok(quarantined.into_iter().collect())
    }

    /// Approves an upstream's pending fingerprints (of one tool, or all);
    /// the ids approved. The replicas hear of it and relist the upstream.
    pub async fn approve_pins(
        &self,
        upstream: &str,
        tool: Option<&str>,
    ) -> Result<Vec<String>, StoreError> {
        let [pinned, pending] = self.pin_keys(upstream);
        let approved: Vec<String> = self
            .script(
                &APPROVE_SCRIPT,
                &[&pinned, &pending],
                &[tool.unwrap_or("").to_owned()],
            )
            .await?;
        if !approved.is_empty() {
            self.announce_relisting(upstream).await?;
        }
        Ok(approved)
    }
}
