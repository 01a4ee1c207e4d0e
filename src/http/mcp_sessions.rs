//! Sessions of the Model Context Protocol's handshake era over HTTP, when
//! `gateway.session_secret` is set. An `Mcp-Session-Id` carries what it needs
//! (its tenant, revision, expiry and a random nonce) and an HMAC-SHA256 over
//! them with the secret's key, so every replica with the same secret accepts
//! it and none keeps a table of sessions to serve one. An id that was
//! tampered with, has expired, was ended by DELETE (on this replica) or is
//! presented with another tenant's key is answered 404: the client starts a
//! new session, as that revision says.
//!
//! What a replica keeps is a record per session it has seen ended,
//! subscribed on, or given a log level, gone when the id expires, kept per tenant and bounded per
//! tenant (in records, and in bytes of subscribed uris, which count against
//! the tenant's subscription budget that listens share): one tenant filling
//! its records is refused, and never touches another tenant's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use dashmap::DashMap;
use hmac::{KeyInit, Mac};
use serde::{Deserialize, Serialize};

use crate::config::KeyDigest;
use crate::dispatch::mcp::LogLevel;
use crate::tenant::subscriptions::{self, Subscribed, SubscriptionBudget};

/// How long an id is accepted after it was issued.
pub const LIFETIME: Duration = Duration::from_secs(24 * 3600);

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

#[derive(Serialize, Deserialize)]
struct Claims {
    /// What the client declared it answers (`mcp::ClientCan`'s bits), when
    /// anything: first, so that [`McpSessions::may_ask`] reads it unsealed.
    #[serde(default, skip_serializing_if = "is_zero")]
    c: u8,
    /// Tenant.
    t: String,
    /// Revision negotiated.
    v: String,
    /// Expiry, seconds since the epoch.
    e: u64,
    /// Nonce: tells sessions apart.
    n: String,
}

fn is_zero(bits: &u8) -> bool {
    *bits == 0
}

/// How the payload of an id whose client can be asked starts: `{"c":`
/// base64url-encoded, up to where the next byte (a digit) begins.
const ASKABLE: &str = "eyJjIjo";

/// A session id that passed its checks: cloned from the checked ids for
/// every request of the session, so a clone is one count taken.
#[derive(Debug, Clone)]
pub struct Opened(Arc<Sealed>);

/// What a checked session id opens.
#[derive(Debug)]
pub struct Sealed {
    pub nonce: Arc<str>,
    pub(super) expires: u64,
    pub(super) tenant: Arc<str>,
    pub revision: Arc<str>,
    /// What its client declared it answers (`mcp::ClientCan`'s bits).
    pub can: u8,
}

impl std::ops::Deref for Opened {
    type Target = Sealed;

    fn deref(&self) -> &Sealed {
        &self.0
    }
}

/// Why a record could not be kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The tenant keeps as many records as it may; the oldest expires in this many seconds.
    Full { retry_after_secs: u64 },
    /// Past the bounds of subscriptions.
    Subscriptions(subscriptions::Refused),
    /// The shared store could not record it.
    StoreDown,
}

pub(super) struct Record {
    expires: u64,
    ended: bool,
    subscribed: Subscribed,
    /// The level its client set with `logging/setLevel`.
    level: Option<LogLevel>,
    /// The ids of the tools it loaded (`load_tools`), oldest first.
    pub(super) loaded: Vec<String>,
}

/// One tenant's records, by nonce.
#[derive(Default)]
pub(super) struct Records(pub(super) HashMap<String, Record>);

/// Session ids of one tenant whose tag was checked, with what they open:
/// a request in a session finds its id here instead of computing an HMAC
/// (SHA-256 in software is some 20,000 instructions). Only ids the gateway
/// issued get in, and each tenant's are bounded apart: when full they are
/// forgotten, to be checked again on their next use.
type Verified = HashMap<Box<[u8]>, Opened, TagHash>;

/// Hashes a session id by its last [`TAG_HASHED`] bytes, which are of its
/// tag: an HMAC's output, as good as random, so ids spread as well by them
/// as by all of their 150 bytes. Only ids whose tag was checked are ever
/// entered, so no client can choose ids that collide.
#[derive(Clone, Default)]
struct TagHash(foldhash::fast::RandomState);

const TAG_HASHED: usize = 16;

impl std::hash::BuildHasher for TagHash {
    type Hasher = TagHasher;

    fn build_hasher(&self) -> TagHasher {
        TagHasher(self.0.build_hasher())
    }
}

struct TagHasher(foldhash::fast::FoldHasher<'static>);

impl std::hash::Hasher for TagHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0
            .write(&bytes[bytes.len().saturating_sub(TAG_HASHED)..]);
    }

    // The length a slice's hash starts with: the tail hashed says enough.
    fn write_usize(&mut self, _: usize) {}

    fn finish(&self) -> u64 {
        self.0.finish()
    }
}

/// Checked ids a tenant keeps at most.
const VERIFIED_PER_TENANT: usize = 4096;

/// Issues and checks session ids; a cheap clone.
#[derive(Clone)]
pub struct McpSessions {
    /// The HMAC keyed and fed the ids' domain, cloned for each id.
    keyed: HmacSha256,
    /// By tenant (foldhash: every request of a session looks here).
    verified: Arc<DashMap<Arc<str>, Arc<Mutex<Verified>>, foldhash::fast::RandomState>>,
    max_records: usize,
    budget: SubscriptionBudget,
    tenants: Arc<DashMap<Arc<str>, Arc<Mutex<Records>>, foldhash::fast::RandomState>>,
    /// The replicas' shared store: ends and subscriptions every replica sees.
    store: Option<crate::store::Store>,
}

fn keyed(key: &[u8; 32]) -> HmacSha256 {
    let mut mac =
        HmacSha256::new_from_slice(key).unwrap_or_else(|_| unreachable!("any key length"));
    mac.update(b"mcp-gateway session id\n");
    mac
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl McpSessions {
    /// Sessions sealed with `key`; each tenant keeps at most `max_records`
    /// records and subscribes within `budget`.
    pub fn new(key: &KeyDigest, max_records: usize, budget: SubscriptionBudget) -> Self {
        Self {
            max_records,
            budget,
            keyed: keyed(&key.0),
            verified: Default::default(),
            tenants: Default::default(),
            store: None,
        }
    }

    /// The same, sharing ends and subscriptions through `store` when there is one.
    pub fn shared(mut self, store: Option<crate::store::Store>) -> Self {
        self.store = store;
        self
    }

    fn mac(&self) -> HmacSha256 {
        self.keyed.clone()
    }

    /// The store the replicas share, when there is one.
    pub fn store(&self) -> Option<&crate::store::Store> {
        self.store.as_ref()
    }

    /// A new session's id.
    pub fn issue(&self, tenant: &str, revision: &str) -> String {
        self.issue_for(tenant, revision, 0)
    }

    /// A new session's id, whose client declared it answers `can` (bits).
    pub fn issue_for(&self, tenant: &str, revision: &str, can: u8) -> String {
        let mut nonce = [0u8; 16];
        // No randomness: the id still seals its tenant and expiry.
        let _ = getrandom::fill(&mut nonce);
        let claims = Claims {
            c: can,
            t: tenant.to_owned(),
            v: revision.to_owned(),
            e: now() + LIFETIME.as_secs(),
            n: B64.encode(nonce),
        };
        let payload = B64.encode(serde_json::to_vec(&claims).unwrap_or_default());
        let mut mac = self.mac();
        mac.update(payload.as_bytes());
        let tag = B64.encode(mac.finalize().into_bytes());
        format!("{payload}.{tag}")
    }

    /// Whether an id says, unchecked, that its client can be asked by
    /// upstreams: only a hint of how to carry a call's answer (which then
    /// opens the session, checked, as any other).
    pub fn may_ask(id: &[u8]) -> bool {
        id.starts_with(ASKABLE.as_bytes())
    }

    /// `tenant`'s records, if it has any.
    pub(super) fn records(&self, tenant: &str) -> Option<Arc<Mutex<Records>>> {
        self.tenants.get(tenant).map(|r| r.clone())
    }

    /// The session an id names, when it is sound, current, `tenant`'s, and
    /// ended neither here nor (with a store) on another replica. While the
    /// store is down, what this replica knows decides.
    pub async fn open(&self, id: &[u8], tenant: &str) -> Option<Opened> {
        let opened = self.open_here(id, tenant)?;
        if let Some(store) = &self.store
            && let Ok(true) = store.session_ended(&opened.nonce).await
        {
            return None;
        }
        Some(opened)
    }

    /// Ends a session (DELETE), here and (with a store) for every replica.
    /// With a store that cannot record it, refused: it would go on elsewhere.
    pub async fn end(&self, s: &Opened) -> Result<(), Refused> {
        self.end_here(s)?;
        if let Some(store) = &self.store {
            store
                .end_session(&s.nonce, s.expires)
                .await
                .map_err(|_| Refused::StoreDown)?;
        }
        Ok(())
    }

    /// `resources/subscribe` (`on`) or `unsubscribe`, here (within the
    /// bounds) and (with a store) for the replica that holds the stream.
    pub async fn subscribe(&self, s: &Opened, uri: &str, on: bool) -> Result<(), Refused> {
        self.subscribe_here(s, uri, on)?;
        if let Some(store) = &self.store {
            // A store that is down leaves the subscription to this replica.
            let _ = store.subscribe(&s.nonce, uri, on, s.expires).await;
        }
        Ok(())
    }

    /// Whether the session subscribed to `uri`, here or on another replica.
    pub async fn subscribed(&self, s: &Opened, uri: &str) -> bool {
        if self.subscribed_here(s, uri) {
            return true;
        }
        match &self.store {
            Some(store) => store.subscribed(&s.nonce, uri).await.unwrap_or(false),
            None => false,
        }
    }

    /// `logging/setLevel`: kept here (within the bounds) and (with a store)
    /// for every replica, until the session would have expired. A store
    /// that is down leaves the level to this replica.
    pub async fn set_level(&self, s: &Opened, level: LogLevel) -> Result<(), Refused> {
        self.set_level_here(s, level)?;
        if let Some(store) = &self.store
            && let Err(e) = store.set_level(&s.nonce, level.name(), s.expires).await
        {
            tracing::debug!(error = %e, "a session's log level kept on this replica only");
        }
        Ok(())
    }

    /// The level the session's client set, on whichever replica it set it
    /// (the store's word first, this replica's while the store is down);
    /// `None`: it set none.
    pub async fn level(&self, s: &Opened) -> Option<LogLevel> {
        if let Some(store) = &self.store
            && let Ok(shared) = store.level(&s.nonce).await
        {
            return shared.as_deref().and_then(LogLevel::parse);
        }
        self.level_here(s)
    }

    /// [`Self::set_level`] on this replica.
    pub fn set_level_here(&self, s: &Opened, level: LogLevel) -> Result<(), Refused> {
        self.keep(s, |r| {
            r.level = Some(level);
            Ok(())
        })
    }

    /// The level the session's client set (on this replica).
    pub fn level_here(&self, s: &Opened) -> Option<LogLevel> {
        self.records(&s.tenant).and_then(|records| {
            let records = records.lock().unwrap_or_else(PoisonError::into_inner);
            records.0.get(&*s.nonce).and_then(|r| r.level)
        })
    }

    /// Whether the session was ended since it was opened, here or elsewhere.
    pub async fn ended(&self, s: &Opened) -> bool {
        if self.ended_here(s) {
            return true;
        }
        match &self.store {
            Some(store) => store.session_ended(&s.nonce).await.unwrap_or(false),
            None => false,
        }
    }

    /// [`Self::open`] with what this replica knows only.
    pub fn open_here(&self, id: &[u8], tenant: &str) -> Option<Opened> {
        let verified = self
            .verified
            .get(tenant)
            .map(|v| v.clone())
            .unwrap_or_else(|| self.verified.entry(tenant.into()).or_default().clone());
        let known = verified
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned();
        let opened = match known {
            Some(opened) => opened,
            None => {
                let opened = self.verify(id, tenant)?;
                let mut verified = verified.lock().unwrap_or_else(PoisonError::into_inner);
                if verified.len() >= VERIFIED_PER_TENANT {
                    verified.clear();
                }
                verified.insert(id.into(), opened.clone());
                opened
            }
        };
        if opened.expires <= now() {
            return None;
        }
        (!self.ended_here(&opened)).then_some(opened)
    }

    /// What a session id opens, once its tag is checked and it is found
    /// to be `tenant`'s (its expiry is the caller's to check).
    fn verify(&self, id: &[u8], tenant: &str) -> Option<Opened> {
        let id = std::str::from_utf8(id).ok()?;
        let (payload, tag) = id.split_once('.')?;
        let tag = B64.decode(tag).ok()?;
        let mut mac = self.mac();
        mac.update(payload.as_bytes());
        mac.verify_slice(&tag).ok()?;
        let claims: Claims = serde_json::from_slice(&B64.decode(payload).ok()?).ok()?;
        if claims.t != tenant {
            return None;
        }
        Some(Opened(Arc::new(Sealed {
            nonce: claims.n.into(),
            expires: claims.e,
            tenant: tenant.into(),
            revision: claims.v.into(),
            can: claims.c,
        })))
    }

    /// Changes the session's record (made first, with room made for it in
    /// its tenant's records); `f` says whether the change was kept.
    pub(super) fn keep<T>(
        &self,
        s: &Opened,
        f: impl FnOnce(&mut Record) -> Result<T, Refused>,
    ) -> Result<T, Refused> {
        let records = self.tenants.entry(s.tenant.clone()).or_default().clone();
        let mut records = records.lock().unwrap_or_else(PoisonError::into_inner);
        if !records.0.contains_key(&*s.nonce) && records.0.len() >= self.max_records {
            let t = now();
            records.0.retain(|_, r| r.expires > t);
            if records.0.len() >= self.max_records {
                let oldest = records.0.values().map(|r| r.expires).min().unwrap_or(t);
                return Err(Refused::Full {
                    retry_after_secs: oldest.saturating_sub(t).max(1),
                });
            }
        }
        let record = records
            .0
            .entry(s.nonce.to_string())
            .or_insert_with(|| Record {
                expires: s.expires,
                ended: false,
                subscribed: Subscribed::default(),
                level: None,
                loaded: Vec::new(),
            });
        let kept = f(record);
        // A record that keeps nothing is not kept.
        if !record.ended
            && record.subscribed.is_empty()
            && record.level.is_none()
            && record.loaded.is_empty()
        {
            records.0.remove(&*s.nonce);
        }
        kept
    }

    /// Ends a session (DELETE): its id is refused here from now on. Refused
    /// (the session goes on) when the tenant keeps as many records as it may.
    pub fn end_here(&self, s: &Opened) -> Result<(), Refused> {
        self.keep(s, |r| {
            r.ended = true;
            r.subscribed.clear();
            r.level = None;
            r.loaded.clear();
            Ok(())
        })
    }

    /// `resources/subscribe` of a uri the tenant can read (`on`), or
    /// `resources/unsubscribe`.
    pub fn subscribe_here(&self, s: &Opened, uri: &str, on: bool) -> Result<(), Refused> {
        self.keep(s, |r| {
            if on {
                r.subscribed
                    .add(&self.budget, &s.tenant, uri)
                    .map_err(Refused::Subscriptions)
            } else {
                r.subscribed.remove(uri);
                Ok(())
            }
        })
    }

    /// Whether the session subscribed to `uri` (on this replica).
    pub fn subscribed_here(&self, s: &Opened, uri: &str) -> bool {
        self.records(&s.tenant).is_some_and(|records| {
            let records = records.lock().unwrap_or_else(PoisonError::into_inner);
            records
                .0
                .get(&*s.nonce)
                .is_some_and(|r| r.subscribed.contains(uri))
        })
    }

    /// Whether the session was ended since it was opened (on this replica).
    pub fn ended_here(&self, s: &Opened) -> bool {
        self.records(&s.tenant).is_some_and(|records| {
            let records = records.lock().unwrap_or_else(PoisonError::into_inner);
            records.0.get(&*s.nonce).is_some_and(|r| r.ended)
        })
    }

    /// Records `tenant` keeps now (for tests and the admin view).
    pub fn records_of(&self, tenant: &str) -> usize {
        self.records(tenant).map_or(0, |records| {
            records
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .0
                .len()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"a secret of at least thirty-two characters";

    #[test]
    fn checked_ids_are_remembered_within_a_bound_per_tenant() {
        let s = sessions(8, 8, 8);
        let ids: Vec<String> = (0..VERIFIED_PER_TENANT + 10)
            .map(|_| s.issue("a", "2025-11-25"))
            .collect();
        for id in &ids {
            assert!(s.open_here(id.as_bytes(), "a").is_some());
        }
        let kept = |tenant: &str| {
            s.verified
                .get(tenant)
                .map_or(0, |v| v.lock().unwrap().len())
        };
        assert!(kept("a") <= VERIFIED_PER_TENANT, "{}", kept("a"));
        // Forgotten ones are checked again, and open as before.
        assert!(
            ids.iter()
                .all(|id| s.open_here(id.as_bytes(), "a").is_some())
        );
        // Another tenant's are its own.
        let b = s.issue("b", "2025-11-25");
        assert!(s.open_here(b.as_bytes(), "b").is_some());
        assert_eq!(kept("b"), 1);
    }

    #[test]
    fn an_id_says_unsealed_whether_its_client_can_be_asked() {
        let s = sessions(8, 8, 8);
        for can in [1u8, 5, 15] {
            let id = s.issue_for("a", "2025-11-25", can);
            assert!(McpSessions::may_ask(id.as_bytes()), "{id}");
            assert_eq!(s.open_here(id.as_bytes(), "a").map(|o| o.can), Some(can));
        }
        let plain = s.issue("a", "2025-11-25");
        assert!(!McpSessions::may_ask(plain.as_bytes()));
        assert_eq!(s.open_here(plain.as_bytes(), "a").map(|o| o.can), Some(0));
    }

    fn sessions(max_records: usize, per_session: usize, per_tenant: usize) -> McpSessions {
        McpSessions::new(
            &KeyDigest::of(SECRET),
            max_records,
            SubscriptionBudget::new(per_session, per_tenant),
        )
    }

    #[test]
    fn an_id_opens_on_any_replica_with_the_secret_and_nowhere_else() {
        let (one, two) = (sessions(16, 1024, 4096), sessions(16, 1024, 4096));
        let a = "a";
        let id = one.issue(a, "2025-11-25");
        assert!(id.bytes().all(|b| b.is_ascii_graphic()), "{id}");
        let opened = two
            .open_here(id.as_bytes(), a)
            .expect("another replica opens it");
        assert_eq!(&*opened.revision, "2025-11-25");
        // Another tenant's key, another secret, a changed byte: not a session.
        assert!(two.open_here(id.as_bytes(), "b").is_none());
        let other = McpSessions::new(
            &KeyDigest::of(b"another secret, also thirty-two chars"),
            16,
            SubscriptionBudget::new(1024, 4096),
        );
        assert!(other.open_here(id.as_bytes(), a).is_none());
        // Checked once and remembered, it still opens for its tenant alone,
        // and a changed id is checked as any other.
        assert!(one.open_here(id.as_bytes(), a).is_some());
        assert!(one.open_here(id.as_bytes(), a).is_some());
        assert!(one.open_here(id.as_bytes(), "b").is_none());
        for i in 0..id.len() {
            let mut bytes = id.clone().into_bytes();
            bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            assert!(one.open_here(&bytes, a).is_none(), "byte {i} changed");
        }
        // Ended: refused where it was ended.
        assert!(one.end_here(&opened).is_ok());
        assert!(one.open_here(id.as_bytes(), a).is_none());
        // Two ids differ.
        assert_ne!(one.issue(a, "2025-11-25"), one.issue(a, "2025-11-25"));
    }

    #[test]
    fn subscriptions_are_kept_within_the_budget_and_given_back_at_the_end() {
        let s = sessions(16, 100, 150);
        let a = "a";
        let open = |s: &McpSessions| s.open_here(s.issue(a, "2025-11-25").as_bytes(), a).unwrap();
        let (one, two) = (open(&s), open(&s));
        let uri = |i: usize| format!("mcp://gw/x/resource/{i:020}"); // 40 bytes
        assert!(s.subscribe_here(&one, &uri(1), true).is_ok());
        assert!(s.subscribe_here(&one, &uri(2), true).is_ok());
        assert_eq!(
            s.subscribe_here(&one, &uri(3), true),
            Err(Refused::Subscriptions(subscriptions::Refused::Session(100)))
        );
        assert!(s.subscribe_here(&two, &uri(4), true).is_ok());
        assert_eq!(
            s.subscribe_here(&two, &uri(5), true),
            Err(Refused::Subscriptions(subscriptions::Refused::Tenant(150)))
        );
        assert!(s.subscribed_here(&one, &uri(1)));
        assert!(s.subscribe_here(&one, &uri(1), false).is_ok());
        assert!(!s.subscribed_here(&one, &uri(1)));
        assert_eq!(s.budget.held(a), 80);
        assert!(s.end_here(&one).is_ok());
        assert_eq!(s.budget.held(a), 40);
        // A record that keeps nothing is not kept.
        assert!(s.subscribe_here(&two, &uri(4), false).is_ok());
        assert_eq!((s.budget.held(a), s.records_of(a)), (0, 1));
    }

    #[test]
    fn a_tenant_that_fills_its_records_is_refused_and_others_are_not() {
        let s = sessions(3, 1024, 4096);
        let opened: Vec<Opened> = (0..4)
            .map(|_| {
                s.open_here(s.issue("a", "2025-11-25").as_bytes(), "a")
                    .unwrap()
            })
            .collect();
        for o in &opened[..3] {
            assert!(s.end_here(o).is_ok());
        }
        let Err(Refused::Full { retry_after_secs }) = s.end_here(&opened[3]) else {
            panic!("a fourth record is past the bound");
        };
        assert!(retry_after_secs > LIFETIME.as_secs() - 60);
        // Not ended: the session goes on.
        assert!(s.open_here(s.issue("a", "x").as_bytes(), "a").is_some());
        assert!(!s.ended_here(&opened[3]));
        // Another tenant's DELETE is kept.
        let b = s
            .open_here(s.issue("b", "2025-11-25").as_bytes(), "b")
            .unwrap();
        assert!(s.end_here(&b).is_ok());
        assert!(s.ended_here(&b));
        assert_eq!(s.records_of("a"), 3);
        // Ending an ended session again needs no new record.
        assert!(s.end_here(&opened[0]).is_ok());
    }
}
