//! Sessions of the Model Context Protocol's handshake era over HTTP, when
//! `gateway.session_secret` is set. An `Mcp-Session-Id` carries what it needs
//! (its tenant, revision, expiry and a random nonce) and an HMAC-SHA256 over
//! them with the secret's key, so every replica with the same secret accepts
//! it and none keeps a table of sessions to serve one. An id that was
//! tampered with, has expired, was ended by DELETE (on this replica) or is
//! presented with another tenant's key is answered 404: the client starts a
//! new session, as that revision says. What a replica keeps is per session it
//! has seen ended or subscribed on, bounded, and gone when the id expires.

use std::collections::HashSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use dashmap::DashMap;
use hmac::{KeyInit, Mac};
use serde::{Deserialize, Serialize};

use crate::config::KeyDigest;

/// How long an id is accepted after it was issued.
pub const LIFETIME: Duration = Duration::from_secs(24 * 3600);
/// Resources one session may subscribe to.
pub const MAX_SUBSCRIPTIONS: usize = 1024;
/// Sessions a replica keeps anything for (ended ones, and those subscribed to resources).
const MAX_KEPT: usize = 65_536;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

#[derive(Serialize, Deserialize)]
struct Claims {
    /// Tenant.
    t: String,
    /// Revision negotiated.
    v: String,
    /// Expiry, seconds since the epoch.
    e: u64,
    /// Nonce: tells sessions apart.
    n: String,
}

/// A session id that passed its checks.
#[derive(Debug, Clone)]
pub struct Opened {
    nonce: String,
    expires: u64,
    pub revision: String,
}

#[derive(Default)]
struct Kept {
    expires: u64,
    ended: bool,
    subscribed: HashSet<String>,
}

/// Issues and checks session ids; a cheap clone.
#[derive(Clone)]
pub struct McpSessions {
    key: [u8; 32],
    kept: std::sync::Arc<DashMap<String, Kept>>,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl McpSessions {
    pub fn new(key: &KeyDigest) -> Self {
        Self {
            key: key.0,
            kept: Default::default(),
        }
    }

    fn mac(&self) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("any key length"));
        mac.update(b"mcp-gateway session id\n");
        mac
    }

    /// A new session's id.
    pub fn issue(&self, tenant: &str, revision: &str) -> String {
        let mut nonce = [0u8; 16];
        // No randomness: the id still seals its tenant and expiry.
        let _ = getrandom::fill(&mut nonce);
        let claims = Claims {
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

    /// The session an id names, when it is sound, current, not ended and `tenant`'s.
    pub fn open(&self, id: &[u8], tenant: &str) -> Option<Opened> {
        let id = std::str::from_utf8(id).ok()?;
        let (payload, tag) = id.split_once('.')?;
        let tag = B64.decode(tag).ok()?;
        let mut mac = self.mac();
        mac.update(payload.as_bytes());
        mac.verify_slice(&tag).ok()?;
        let claims: Claims = serde_json::from_slice(&B64.decode(payload).ok()?).ok()?;
        if claims.e <= now() || claims.t != tenant {
            return None;
        }
        if self.kept.get(&claims.n).is_some_and(|k| k.ended) {
            return None;
        }
        Some(Opened {
            nonce: claims.n,
            expires: claims.e,
            revision: claims.v,
        })
    }

    /// Keeps something for a session, making room first; false when there is none.
    fn keep(&self, s: &Opened, f: impl FnOnce(&mut Kept) -> bool) -> bool {
        if self.kept.len() >= MAX_KEPT {
            let t = now();
            self.kept.retain(|_, k| k.expires > t);
            if self.kept.len() >= MAX_KEPT && !self.kept.contains_key(&s.nonce) {
                return false;
            }
        }
        let mut kept = self.kept.entry(s.nonce.clone()).or_insert_with(|| Kept {
            expires: s.expires,
            ..Kept::default()
        });
        f(&mut kept)
    }

    /// Ends a session (DELETE): its id is refused here from now on.
    pub fn end(&self, s: &Opened) -> bool {
        self.keep(s, |k| {
            k.ended = true;
            k.subscribed.clear();
            true
        })
    }

    /// `resources/subscribe` (`on`) or `resources/unsubscribe`; false when
    /// the session holds as many subscriptions as it may.
    pub fn subscribe(&self, s: &Opened, uri: &str, on: bool) -> bool {
        self.keep(s, |k| {
            if !on {
                k.subscribed.remove(uri);
                return true;
            }
            if k.subscribed.len() >= MAX_SUBSCRIPTIONS && !k.subscribed.contains(uri) {
                return false;
            }
            k.subscribed.insert(uri.to_owned());
            true
        })
    }

    /// Whether the session subscribed to `uri` (on this replica).
    pub fn subscribed(&self, s: &Opened, uri: &str) -> bool {
        self.kept
            .get(&s.nonce)
            .is_some_and(|k| k.subscribed.contains(uri))
    }

    /// Whether the session was ended since it was opened.
    pub fn ended(&self, s: &Opened) -> bool {
        self.kept.get(&s.nonce).is_some_and(|k| k.ended)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_opens_on_any_replica_with_the_secret_and_nowhere_else() {
        let key = KeyDigest::of(b"a secret of at least thirty-two characters");
        let (one, two) = (McpSessions::new(&key), McpSessions::new(&key));
        let a = "a";
        let id = one.issue(a, "2025-11-25");
        assert!(id.bytes().all(|b| b.is_ascii_graphic()), "{id}");
        let opened = two
            .open(id.as_bytes(), a)
            .expect("another replica opens it");
        assert_eq!(opened.revision, "2025-11-25");
        // Another tenant's key, another secret, a changed byte: not a session.
        assert!(two.open(id.as_bytes(), "b").is_none());
        let other = McpSessions::new(&KeyDigest::of(b"another secret, also thirty-two chars"));
        assert!(other.open(id.as_bytes(), a).is_none());
        for i in 0..id.len() {
            let mut bytes = id.clone().into_bytes();
            bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            assert!(one.open(&bytes, a).is_none(), "byte {i} changed");
        }
        // Ended: refused where it was ended.
        assert!(one.end(&opened));
        assert!(one.open(id.as_bytes(), a).is_none());
        // Two ids differ.
        assert_ne!(one.issue(a, "2025-11-25"), one.issue(a, "2025-11-25"));
    }

    #[test]
    fn subscriptions_are_bounded_per_session() {
        let s = McpSessions::new(&KeyDigest::of(
            b"a secret of at least thirty-two characters",
        ));
        let a = "a";
        let opened = s.open(s.issue(a, "2025-11-25").as_bytes(), a).unwrap();
        for i in 0..MAX_SUBSCRIPTIONS {
            assert!(s.subscribe(&opened, &format!("mcp://gw/x/r/{i}"), true));
        }
        assert!(!s.subscribe(&opened, "one more", true));
        assert!(s.subscribed(&opened, "mcp://gw/x/r/7"));
        assert!(s.subscribe(&opened, "mcp://gw/x/r/7", false));
        assert!(!s.subscribed(&opened, "mcp://gw/x/r/7"));
    }
}
