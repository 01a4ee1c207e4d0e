//! Where cut results' pages are kept: in the shared store when there is
//! one (any replica reads them; its TTL and the tenant's quota held there),
//! else in this replica's memory. Per tenant: at most its quota, the oldest
//! dropped first; per replica: at most `gateway.limits.max_spill_bytes`,
//! the oldest of the tenant holding most dropped first. A page is the
//! tenant's alone: another tenant's read of it finds nothing. A store that
//! cannot be reached costs nothing but the sharing: the pages are kept
//! here, and read from here.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use super::Kept;
use crate::metrics::Metrics;
use crate::store::Store;

/// A page as read: its text and media type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    pub text: String,
    pub mime: String,
}

/// Every tenant's spilled pages on this replica (and in the store).
pub struct Spills {
    local: Mutex<Local>,
    store: OnceLock<Store>,
    max_bytes: std::sync::atomic::AtomicUsize,
    metrics: Metrics,
}

#[derive(Default)]
struct Local {
    tenants: HashMap<Arc<str>, Held>,
    bytes: usize,
}

/// One tenant's spills, oldest first.
#[derive(Default)]
struct Held {
    order: VecDeque<String>,
    spills: HashMap<String, Spill>,
    bytes: usize,
}

struct Spill {
    pages: Vec<String>,
    mime: &'static str,
    expires: Instant,
    bytes: usize,
}

impl Held {
    fn drop_oldest(&mut self) -> usize {
        let Some(hex) = self.order.pop_front() else {
            return 0;
        };
        let freed = self.spills.remove(&hex).map_or(0, |s| s.bytes);
        self.bytes -= freed;
        freed
    }

    fn drop_expired(&mut self, now: Instant) -> usize {
        let mut freed = 0;
        while let Some(hex) = self.order.front() {
            if self.spills.get(hex).is_some_and(|s| s.expires > now) {
                break;
            }
            freed += self.drop_oldest();
        }
        freed
    }
}

impl Spills {
    pub fn new(metrics: Metrics) -> Self {
        Spills {
            local: Mutex::default(),
            store: OnceLock::new(),
            max_bytes: (256 << 20).into(),
            metrics,
        }
    }

    /// Keeps pages in the shared store from now on (set once, at start).
    pub fn share(&self, store: Store) {
        let _ = self.store.set(store);
    }

    /// `gateway.limits.max_spill_bytes`.
    pub fn set_max_bytes(&self, max: usize) {
        self.max_bytes
            .store(max, std::sync::atomic::Ordering::Relaxed);
    }

    /// Keeps `pages` for `tenant` for `ttl`; `None` when all of them are
    /// more than its quota (or than this replica keeps).
    pub async fn keep(
        &self,
        gateway: &str,
        tenant: &Arc<str>,
        pages: Vec<&str>,
        mime: &'static str,
        ttl: Duration,
        quota: u64,
    ) -> Option<Kept> {
        let bytes: usize = pages.iter().map(|p| p.len()).sum();
        if bytes as u64 > quota {
            return None;
        }
        let hex = random_hex();
        let sizes = pages.iter().map(|p| p.len()).collect();
        let expires_at = SystemTime::now() + ttl;
        let kept = Kept {
            uri: super::spill_uri(gateway, &hex),
            expires_at: humantime::format_rfc3339_millis(expires_at).to_string(),
            sizes,
            mime,
        };
        if let Some(store) = self.store.get()
            && store.is_up()
        {
            match store
                .keep_spill(tenant, &hex, &pages, mime, ttl, quota)
                .await
            {
                Ok(held) => {
                    self.gauge(tenant, held);
                    return Some(kept);
                }
                Err(e) => {
                    tracing::warn!(tenant = &**tenant, error = %e, "a cut result's pages are kept on this replica alone: the store did not take them");
                }
            }
        }
        let pages = pages.into_iter().map(str::to_owned).collect();
        self.keep_here(tenant, hex, pages, mime, ttl, quota as usize, bytes)
            .then_some(kept)
    }

    #[allow(clippy::too_many_arguments)]
    fn keep_here(
        &self,
        tenant: &Arc<str>,
        hex: String,
        pages: Vec<String>,
        mime: &'static str,
        ttl: Duration,
        quota: usize,
        bytes: usize,
    ) -> bool {
        let max = self.max_bytes.load(std::sync::atomic::Ordering::Relaxed);
        if bytes > max {
            return false;
        }
        let now = Instant::now();
        let mut local = self.local.lock().unwrap_or_else(|e| e.into_inner());
        let local = &mut *local;
        let mut freed = 0;
        for held in local.tenants.values_mut() {
            freed += held.drop_expired(now);
        }
        let held = local.tenants.entry(tenant.clone()).or_default();
        while held.bytes + bytes > quota && !held.order.is_empty() {
            freed += held.drop_oldest();
        }
        local.bytes -= freed;
        // Past what the replica keeps: the oldest of whoever holds most.
        while local.bytes + bytes > max {
            let Some(most) = local.tenants.values_mut().max_by_key(|h| h.bytes) else {
                break;
            };
            let dropped = most.drop_oldest();
            if dropped == 0 {
                break;
            }
            local.bytes -= dropped;
        }
        let spill = Spill {
            pages,
            mime,
            expires: now + ttl,
            bytes,
        };
        let held = local.tenants.entry(tenant.clone()).or_default();
        held.order.push_back(hex.clone());
        held.spills.insert(hex, spill);
        held.bytes += bytes;
        local.bytes += bytes;
        local.tenants.retain(|_, h| !h.order.is_empty());
        for (name, held) in &local.tenants {
            self.gauge(name, held.bytes as u64);
        }
        true
    }

    fn gauge(&self, tenant: &str, bytes: u64) {
        let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
        self.metrics
            .spill_bytes
            .with_label_values(&[tenant])
            .set(bytes);
    }

    /// Page `k` (from 1) of the spill `hex`, if `tenant` has it and it has
    /// not expired.
    pub async fn page(&self, tenant: &str, hex: &str, k: usize) -> Option<Page> {
        if let Some(store) = self.store.get()
            && store.is_up()
            && let Ok(Some((mime, text))) = store.spill_page(tenant, hex, k).await
        {
            return Some(Page { text, mime });
        }
        let local = self.local.lock().unwrap_or_else(|e| e.into_inner());
        let spill = local.tenants.get(tenant)?.spills.get(hex)?;
        if spill.expires <= Instant::now() {
            return None;
        }
        Some(Page {
            text: spill.pages.get(k.checked_sub(1)?)?.clone(),
            mime: spill.mime.to_owned(),
        })
    }
}

/// 16 random bytes in hex: a spill's id, which nobody can guess.
fn random_hex() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // Without the OS's randomness, still unique within the process.
        use sha2::Digest;
        static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let seed = format!("{:?}{}{n}", SystemTime::now(), std::process::id());
        bytes.copy_from_slice(&sha2::Sha256::digest(seed.as_bytes())[..16]);
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spills(max: usize) -> Spills {
        let s = Spills::new(Metrics::new());
        s.set_max_bytes(max);
        s
    }

    fn hex_of(kept: &Kept) -> String {
        kept.uri.rsplit('/').next().unwrap().to_owned()
    }

    #[tokio::test]
    async fn a_tenants_pages_are_its_own_within_its_quota_oldest_dropped_first() {
        let s = spills(1 << 20);
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let ttl = Duration::from_secs(60);
        let first = s
            .keep("gw", &a, vec!["aaaa", "bb"], "text/plain", ttl, 10)
            .await
            .unwrap();
        assert_eq!(first.sizes, [4, 2]);
        let page = s.page("a", &hex_of(&first), 2).await.unwrap();
        assert_eq!(
            (page.text.as_str(), page.mime.as_str()),
            ("bb", "text/plain")
        );
        assert_eq!(
            s.page("b", &hex_of(&first), 1).await,
            None,
            "another tenant's"
        );
        assert_eq!(s.page("a", &hex_of(&first), 3).await, None);
        // Within the quota of 10, a second spill of 6 drops the first.
        let second = s
            .keep("gw", &a, vec!["cccccc"], "text/plain", ttl, 10)
            .await
            .unwrap();
        assert_eq!(s.page("a", &hex_of(&first), 1).await, None);
        assert!(s.page("a", &hex_of(&second), 1).await.is_some());
        // Over the whole quota: nothing kept.
        assert_eq!(
            s.keep("gw", &b, vec!["x"; 11], "text/plain", ttl, 10).await,
            None
        );
    }

    #[tokio::test]
    async fn past_the_replicas_bound_the_tenant_holding_most_loses_its_oldest() {
        let s = spills(10);
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let ttl = Duration::from_secs(60);
        let a1 = s
            .keep("gw", &a, vec!["aaaa"], "text/plain", ttl, 100)
            .await
            .unwrap();
        let a2 = s
            .keep("gw", &a, vec!["aaaa"], "text/plain", ttl, 100)
            .await
            .unwrap();
        let b1 = s
            .keep("gw", &b, vec!["bb"], "text/plain", ttl, 100)
            .await
            .unwrap();
        let b2 = s
            .keep("gw", &b, vec!["bb"], "text/plain", ttl, 100)
            .await
            .unwrap();
        assert_eq!(s.page("a", &hex_of(&a1), 1).await, None, "a held most");
        assert!(s.page("a", &hex_of(&a2), 1).await.is_some());
        assert!(s.page("b", &hex_of(&b1), 1).await.is_some());
        assert!(s.page("b", &hex_of(&b2), 1).await.is_some());
    }

    #[tokio::test]
    async fn expired_pages_are_unknown() {
        let s = spills(1 << 20);
        let a: Arc<str> = "a".into();
        let kept = s
            .keep(
                "gw",
                &a,
                vec!["x"],
                "text/plain",
                Duration::from_millis(1),
                10,
            )
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(s.page("a", &hex_of(&kept), 1).await, None);
    }
}
