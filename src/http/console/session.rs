//! The console's login sessions. A session is 128 random bits, its expiry,
//! and an HMAC of both under a key derived from the admin token: any
//! replica with the same token accepts it, a changed token ends every
//! session, and the cookie carries neither the token nor its hash. Its CSRF
//! token is another HMAC of its id. Logging out refuses the session on this
//! replica until it would have expired.
//!
//! Refused logins are answered one at a time, at least a second apart, with
//! at most 16 waiting (then 429): guessing costs a second a guess, and the
//! right token never waits.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use dashmap::DashMap;
use tokio::sync::{Mutex, Semaphore};

use crate::config::KeyDigest;
use crate::seal::Sealer;

/// The cookie's name.
pub const COOKIE: &str = "mcp_gateway_admin";
/// Refused logins that may wait for their answer at once.
const MAX_WAITING: usize = 16;
/// The least time between two refusals.
const REFUSAL_GAP: Duration = Duration::from_secs(1);

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// A session that checked out.
pub struct Session {
    pub id: String,
    pub csrf: String,
}

impl Session {
    /// 8 hex digits that name the session in audit lines (of its id's
    /// hash: the id itself is a credential).
    pub fn short(&self) -> String {
        short(&self.id)
    }
}

fn short(id: &str) -> String {
    use sha2::Digest as _;
    let sum = sha2::Sha256::digest(id.as_bytes());
    sum[..4].iter().map(|b| format!("{b:02x}")).collect()
}

/// Sessions and refused logins of this replica; a cheap clone.
#[derive(Clone)]
pub struct Sessions {
    /// Ended sessions, until they would have expired (unix seconds).
    ended: Arc<DashMap<String, u64>>,
    waiting: Arc<Semaphore>,
    last_refusal: Arc<Mutex<Option<Instant>>>,
}

fn sealer(token: &KeyDigest) -> Sealer {
    let mut derived = b"mcp-gateway console session\n".to_vec();
    derived.extend_from_slice(&token.0);
    Sealer::new(&KeyDigest::of(&derived))
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

impl Default for Sessions {
    fn default() -> Self {
        Self::new()
    }
}

impl Sessions {
    pub fn new() -> Self {
        Sessions {
            ended: Arc::default(),
            waiting: Arc::new(Semaphore::new(MAX_WAITING)),
            last_refusal: Arc::default(),
        }
    }

    /// A new session for `ttl`: the cookie's value, and the session.
    pub fn open(&self, token: &KeyDigest, ttl: Duration) -> (String, Session) {
        let mut bits = [0u8; 16];
        if getrandom::fill(&mut bits).is_err() {
            // Never a guessable id: no session without randomness.
            bits = rand_fallback();
        }
        let id = B64.encode(bits);
        let expires = unix(SystemTime::now() + ttl).to_string();
        let s = sealer(token);
        let tag = s.tag("console session", &[&id, &expires]);
        let csrf = s.tag("console csrf", &[&id]);
        (format!("{id}.{expires}.{tag}"), Session { id, csrf })
    }

    /// The session `cookie` names, if it is sealed under `token`, has not
    /// expired and has not been ended.
    pub fn check(&self, token: &KeyDigest, cookie: &str) -> Option<Session> {
        let mut parts = cookie.split('.');
        let (id, expires, tag) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        let s = sealer(token);
        if !s.verify("console session", &[id, expires], tag) {
            return None;
        }
        if expires.parse::<u64>().ok()? <= unix(SystemTime::now()) {
            return None;
        }
        if self.ended.contains_key(id) {
            return None;
        }
        Some(Session {
            id: id.to_owned(),
            csrf: s.tag("console csrf", &[id]),
        })
    }

    /// Ends a session: refused from now on, here.
    pub fn end(&self, cookie: &str) {
        let now = unix(SystemTime::now());
        self.ended.retain(|_, until| *until > now);
        let mut parts = cookie.split('.');
        if let (Some(id), Some(expires)) = (parts.next(), parts.next()) {
            let until = expires.parse().unwrap_or(now + 86_400);
            self.ended.insert(id.to_owned(), until);
        }
    }

    /// Waits for a refusal's turn: `false` when too many wait already.
    pub async fn refusal_turn(&self) -> bool {
        let Ok(_waiting) = self.waiting.try_acquire() else {
            return false;
        };
        let mut last = self.last_refusal.lock().await;
        if let Some(at) = *last {
            tokio::time::sleep_until((at + REFUSAL_GAP).into()).await;
        }
        *last = Some(Instant::now());
        true
    }
}

/// 128 bits from the clock and the process, where the system has no
/// randomness to give (never expected on Linux).
fn rand_fallback() -> [u8; 16] {
    use sha2::Digest as _;
    let seed = format!("{:?}{}", SystemTime::now(), std::process::id());
    let sum = sha2::Sha256::digest(seed.as_bytes());
    let mut out = [0u8; 16];
    out.copy_from_slice(&sum[..16]);
    out
}

#[cfg(test)]
mod tests;
