//! Session ids: issued sealed (claims and an HMAC-SHA256 tag over them),
//! opened by checking the tag, and remembered once checked, per tenant and
//! within a bound, so that a session's next request skips the HMAC.

use super::*;

#[derive(Serialize, Deserialize)]
pub(super) struct Claims {
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

/// Session ids of one tenant whose tag was checked, with what they open:
/// a request in a session finds its id here instead of computing an HMAC
/// (SHA-256 in software is some 20,000 instructions). Only ids the gateway
/// issued get in, and each tenant's are bounded apart: when full they are
/// forgotten, to be checked again on their next use.
pub(super) type Verified = HashMap<Box<[u8]>, Opened, TagHash>;

/// Hashes a session id by its last [`TAG_HASHED`] bytes, which are of its
/// tag: an HMAC's output, as good as random, so ids spread as well by them
/// as by all of their 150 bytes. Only ids whose tag was checked are ever
/// entered, so no client can choose ids that collide.
#[derive(Clone, Default)]
pub(super) struct TagHash(foldhash::fast::RandomState);

const TAG_HASHED: usize = 16;

impl std::hash::BuildHasher for TagHash {
    type Hasher = TagHasher;

    fn build_hasher(&self) -> TagHasher {
        TagHasher(self.0.build_hasher())
    }
}

pub(super) struct TagHasher(foldhash::fast::FoldHasher<'static>);

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
pub(super) const VERIFIED_PER_TENANT: usize = 4096;

impl McpSessions {
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
}
