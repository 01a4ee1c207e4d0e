//! Tool results kept for equal calls (`tools.cache`): per tenant, by the
//! tool's id, its definition's fingerprint, the tenant's settings and the
//! arguments' canonical JSON, for the tool's TTL. In the shared store when
//! there is one (every replica answers from it), else in this replica's
//! memory: at most `max_entries` per tenant and `max_cache_bytes` in all,
//! the least recently used dropped first. An upstream that restarts takes
//! its entries with it (in the store, through a generation every replica
//! reads); a changed definition or tenant is looked up under another key.

mod local;

use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::jsonrpc::JsonBuf;
use crate::metrics::Metrics;
use crate::protocol::tool_result::Output;
use crate::store::Store;

/// A kept result: what [`crate::protocol::tool_result::ToolResult`] holds,
/// and when it was kept.
#[derive(Debug, Clone)]
pub struct Entry {
    pub answer: JsonBuf,
    pub at: Range<usize>,
    pub output: Output,
    pub object: bool,
    pub stored: SystemTime,
}

impl Entry {
    /// The text the store keeps: the call's identity, a header line, then
    /// the answer.
    fn encode(&self, identity: &str) -> String {
        let kind = match self.output {
            Output::Value => 'v',
            Output::Blocks => 'b',
        };
        format!(
            "{}\n{} {kind} {} {} {}\n{}",
            identity.replace('\n', "\\n"),
            millis(self.stored),
            u8::from(self.object),
            self.at.start,
            self.at.end,
            self.answer.get()
        )
    }

    /// The entry `text` holds, if it was kept for `identity`.
    fn decode(text: &str, identity: &str) -> Option<Entry> {
        let (kept_for, rest) = text.split_once('\n')?;
        if kept_for != identity.replace('\n', "\\n") {
            return None;
        }
        let (head, answer) = rest.split_once('\n')?;
        let mut parts = head.split(' ');
        let stored: u64 = parts.next()?.parse().ok()?;
        let output = match parts.next()? {
            "v" => Output::Value,
            "b" => Output::Blocks,
            _ => return None,
        };
        let object = parts.next()? == "1";
        let start: usize = parts.next()?.parse().ok()?;
        let end: usize = parts.next()?.parse().ok()?;
        let raw: Box<serde_json::value::RawValue> = serde_json::from_str(answer).ok()?;
        let answer = JsonBuf::from(raw);
        answer.get().get(start..end)?;
        Some(Entry {
            answer,
            at: start..end,
            output,
            object,
            stored: UNIX_EPOCH + Duration::from_millis(stored),
        })
    }

    /// How long ago it was kept, in milliseconds.
    pub fn age_ms(&self) -> u64 {
        let age = SystemTime::now()
            .duration_since(self.stored)
            .unwrap_or_default();
        u64::try_from(age.as_millis()).unwrap_or(u64::MAX)
    }
}

fn millis(t: SystemTime) -> u64 {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

/// Where one call's result is kept.
#[derive(Debug, Clone)]
pub struct Slot {
    pub tenant: Arc<str>,
    pub upstream: Arc<str>,
    /// The call's identity: the tenant, the tool's id and fingerprint, the
    /// tenant's settings' digest and the arguments' canonical JSON. An
    /// entry answers a call only if it was kept for this very identity.
    pub identity: String,
    /// A hash of `identity`, which entries are found by.
    pub key: [u8; 16],
    pub ttl: Duration,
    pub max_entries: usize,
}

impl Slot {
    pub fn new(
        tenant: &crate::tenant::Tenant,
        upstream: &Arc<str>,
        id: &str,
        fingerprint: &str,
        arguments: &str,
        ttl: Duration,
        max_entries: usize,
    ) -> Option<Slot> {
        use siphasher::sip128::{Hasher128, SipHasher13};
        use std::hash::Hasher;
        // Canonical: keys sorted (serde_json's map is ordered), no white space.
        let canonical = serde_json::from_str::<serde_json::Value>(arguments).ok()?;
        let mut identity = String::with_capacity(arguments.len() + id.len() + 128);
        for part in [&*tenant.name, id, fingerprint, &tenant.digest.to_string()] {
            identity.push_str(part);
            identity.push('\0');
        }
        identity.push_str(&canonical.to_string());
        // A fixed key: every replica finds the same entries. Which entry a
        // hash finds is checked against its identity, so a collision can
        // cost a miss, never another call's result.
        let mut h = SipHasher13::new_with_keys(0x6d63_702d_6761_7465, 0x7761_792d_6361_6368);
        h.write(identity.as_bytes());
        let key = h.finish128().as_bytes();
        Some(Slot {
            tenant: tenant.name.clone(),
            upstream: upstream.clone(),
            identity,
            key,
            ttl,
            max_entries,
        })
    }
}

impl Slot {
    /// The slot as the store takes it, under `key` (its key in hex).
    fn in_store<'a>(&'a self, key: &'a str) -> crate::store::cache::CacheSlot<'a> {
        crate::store::cache::CacheSlot {
            tenant: &self.tenant,
            upstream: &self.upstream,
            key,
            ttl: self.ttl,
            max_entries: self.max_entries,
        }
    }

    /// The key in hex, as the store names it.
    pub fn key_hex(&self) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = String::with_capacity(32);
        for b in self.key {
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 15)]));
        }
        out
    }
}

/// Every tenant's cached results.
pub struct ResultCache {
    local: Mutex<local::Local>,
    store: OnceLock<Store>,
    /// Per upstream, the incarnation its entries were kept under.
    seen: Mutex<std::collections::HashMap<Arc<str>, Arc<str>>>,
    metrics: Metrics,
}

impl ResultCache {
    pub fn new(metrics: Metrics) -> Self {
        ResultCache {
            local: Mutex::new(local::Local::new(64 << 20)),
            store: OnceLock::new(),
            seen: Mutex::default(),
            metrics,
        }
    }

    /// Keeps results in the shared store from now on (set once, at start).
    pub fn share(&self, store: Store) {
        let _ = self.store.set(store);
    }

    /// `gateway.limits.max_cache_bytes`.
    pub fn set_max_bytes(&self, max: usize) {
        self.lock().max_bytes = max;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, local::Local> {
        self.local.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes the upstream's incarnation; when it is another than its
    /// entries were kept under (it restarted), they go.
    pub async fn check_incarnation(&self, upstream: &Arc<str>, incarnation: Arc<str>) {
        let restarted = {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            match seen.insert(upstream.clone(), incarnation.clone()) {
                Some(before) => before != incarnation,
                None => false,
            }
        };
        if !restarted {
            return;
        }
        let tenants = self.lock().forget_upstream(upstream);
        for (tenant, n) in tenants {
            self.gauge(&tenant, n);
        }
        if let Some(store) = self.store.get()
            && let Err(e) = store.forget_cached(upstream).await
        {
            tracing::warn!(upstream = &**upstream, error = %e, "cached results of a restarted upstream stay in the store until they expire: the store did not take the new generation");
        }
    }

    /// The result kept in `slot`, if any: counted as a hit or a miss.
    pub async fn get(&self, slot: &Slot) -> Option<Entry> {
        let found = match self.store.get().filter(|s| s.is_up()) {
            Some(store) => match store.cached(&slot.in_store(&slot.key_hex())).await {
                Ok(found) => found.and_then(|text| Entry::decode(&text, &slot.identity)),
                Err(_) => self.lock().get(slot),
            },
            None => self.lock().get(slot),
        };
        let outcome = if found.is_some() { "hit" } else { "miss" };
        self.metrics
            .result_cache
            .with_label_values(&[&slot.tenant, outcome])
            .inc();
        found
    }

    /// Keeps `entry` in `slot`.
    pub async fn put(&self, slot: &Slot, entry: Entry) {
        if let Some(store) = self.store.get().filter(|s| s.is_up()) {
            let key = slot.key_hex();
            match store
                .keep_cached(&slot.in_store(&key), &entry.encode(&slot.identity))
                .await
            {
                Ok(held) => {
                    self.gauge(&slot.tenant, held);
                    return;
                }
                Err(e) => {
                    tracing::debug!(tenant = &*slot.tenant, error = %e, "a result is cached on this replica alone: the store did not take it");
                }
            }
        }
        let held = self.lock().put(slot, entry);
        self.gauge(&slot.tenant, held);
    }

    fn gauge(&self, tenant: &str, entries: usize) {
        self.metrics
            .result_cache_entries
            .with_label_values(&[tenant])
            .set(i64::try_from(entries).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_reads_back_as_it_was_kept() {
        let raw: Box<serde_json::value::RawValue> =
            serde_json::from_str(r#"{"output":{"t":"a\nb"}}"#).unwrap();
        let entry = Entry {
            answer: JsonBuf::from(raw),
            at: 10..22,
            output: Output::Value,
            object: true,
            stored: UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
        };
        let back = Entry::decode(&entry.encode("a\0id\n"), "a\0id\n").unwrap();
        assert!(
            Entry::decode(&entry.encode("a"), "b").is_none(),
            "kept for another call"
        );
        assert_eq!(back.answer.get(), entry.answer.get());
        assert_eq!(
            (back.at, back.output, back.object),
            (10..22, Output::Value, true)
        );
        assert_eq!(back.stored, entry.stored);
        assert!(
            Entry::decode("i\n1 v 0 0 99\n{}", "i").is_none(),
            "a range outside the answer"
        );
    }
}
