//! This replica's cached results: least recently used first out, per
//! tenant (its `max_entries`) and in all (`max_cache_bytes`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use super::{Entry, Slot};

/// A slot's key: a hash of its identity, which names the tenant too.
type Key = [u8; 16];

pub(super) struct Local {
    pub(super) max_bytes: usize,
    /// A use's order: higher is more recent.
    tick: u64,
    held: HashMap<Key, Held>,
    /// Every entry by its last use.
    by_use: BTreeMap<u64, Key>,
    /// Each tenant's entries by their last use.
    tenants: HashMap<Arc<str>, BTreeMap<u64, Key>>,
    bytes: usize,
}

struct Held {
    entry: Entry,
    identity: String,
    tenant: Arc<str>,
    upstream: Arc<str>,
    expires: Instant,
    used: u64,
    bytes: usize,
}

impl Local {
    pub(super) fn new(max_bytes: usize) -> Self {
        Local {
            max_bytes,
            tick: 0,
            held: HashMap::new(),
            by_use: BTreeMap::new(),
            tenants: HashMap::new(),
            bytes: 0,
        }
    }

    pub(super) fn get(&mut self, slot: &Slot) -> Option<Entry> {
        let key = slot.key;
        let held = self.held.get_mut(&key)?;
        if held.identity != slot.identity {
            return None;
        }
        if held.expires <= Instant::now() {
            self.remove(&key);
            return None;
        }
        let before = held.used;
        self.tick += 1;
        held.used = self.tick;
        let entry = held.entry.clone();
        self.by_use.remove(&before);
        self.by_use.insert(self.tick, key);
        if let Some(uses) = self.tenants.get_mut(&slot.tenant) {
            uses.remove(&before);
            uses.insert(self.tick, key);
        }
        Some(entry)
    }

    /// Keeps `entry`; the tenant's entries after.
    pub(super) fn put(&mut self, slot: &Slot, entry: Entry) -> usize {
        let key = slot.key;
        self.remove(&key);
        let bytes = entry.answer.get().len() + slot.identity.len() + 128;
        if bytes > self.max_bytes {
            return self.count(&slot.tenant);
        }
        while self.count(&slot.tenant) >= slot.max_entries {
            let Some(oldest) = self
                .tenants
                .get(&slot.tenant)
                .and_then(|u| u.values().next())
            else {
                break;
            };
            let oldest = *oldest;
            self.remove(&oldest);
        }
        while self.bytes + bytes > self.max_bytes {
            let Some(oldest) = self.by_use.values().next().cloned() else {
                break;
            };
            self.remove(&oldest);
        }
        self.tick += 1;
        let used = self.tick;
        self.by_use.insert(used, key);
        self.tenants
            .entry(slot.tenant.clone())
            .or_default()
            .insert(used, key);
        self.bytes += bytes;
        let held = Held {
            entry,
            identity: slot.identity.clone(),
            tenant: slot.tenant.clone(),
            upstream: slot.upstream.clone(),
            expires: Instant::now() + slot.ttl,
            used,
            bytes,
        };
        self.held.insert(key, held);
        self.count(&slot.tenant)
    }

    fn count(&self, tenant: &str) -> usize {
        self.tenants.get(tenant).map_or(0, BTreeMap::len)
    }

    fn remove(&mut self, key: &Key) {
        let Some(held) = self.held.remove(key) else {
            return;
        };
        self.bytes -= held.bytes;
        self.by_use.remove(&held.used);
        if let Some(uses) = self.tenants.get_mut(&held.tenant) {
            uses.remove(&held.used);
            if uses.is_empty() {
                self.tenants.remove(&held.tenant);
            }
        }
    }

    /// Drops every entry of `upstream`: each tenant that held some, with
    /// what it holds after.
    pub(super) fn forget_upstream(&mut self, upstream: &str) -> Vec<(Arc<str>, usize)> {
        let gone: Vec<(Key, Arc<str>)> = self
            .held
            .iter()
            .filter(|(_, h)| &*h.upstream == upstream)
            .map(|(k, h)| (*k, h.tenant.clone()))
            .collect();
        let mut tenants: Vec<Arc<str>> = gone.iter().map(|(_, t)| t.clone()).collect();
        tenants.sort();
        tenants.dedup();
        for (key, _) in &gone {
            self.remove(key);
        }
        tenants
            .into_iter()
            .map(|t| {
                let n = self.count(&t);
                (t, n)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
