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

mod ids;
mod records;

use ids::Verified;
use records::Records;

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
}

#[cfg(test)]
mod tests;
