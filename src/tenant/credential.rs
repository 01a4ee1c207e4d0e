//! A session's credential, looked at again at each of its messages.

use std::sync::Arc;

use super::{Denied, KeyStore, Tenant};
use crate::config::KeyDigest;

/// The key a session was opened with, held so that each of its messages is
/// admitted by the keys in force when it arrives: a reload that removes the
/// key (or its tenant) ends the session at its next message, and one that
/// changes the tenant's policy or limits applies from that message on.
/// A clone is looked at on its own: what pushes messages to the session's
/// client (its listens, its notifications) holds one.
#[derive(Clone)]
pub struct Credential {
    keys: Arc<arc_swap::ArcSwap<KeyStore>>,
    digest: KeyDigest,
    /// The key set the tenant was last looked up in.
    seen: Arc<KeyStore>,
    /// A JWT, kept to be verified again after a reload, and its expiry.
    token: Option<(Box<str>, u64)>,
    /// Once revoked, revoked for good: a later key set that names the key
    /// again does not bring back what was ended.
    revoked: bool,
}

/// What a [`Credential`] names now.
pub enum Standing {
    /// The same tenant as at the last look (the key set is unchanged).
    Unchanged,
    /// A reload replaced the key set: the key's tenant as it is now.
    Reloaded(Arc<Tenant>),
    /// The key is no longer valid.
    Revoked,
}

impl Credential {
    /// The credential of a bearer token, and its tenant now.
    pub async fn new(
        keys: Arc<arc_swap::ArcSwap<KeyStore>>,
        token: &str,
    ) -> Result<(Self, Arc<Tenant>), Denied> {
        let digest = KeyDigest::of(token.as_bytes());
        let seen = keys.load_full();
        let tenant = seen.authenticate_token(token).await?;
        let token = seen.expiry_of(token).map(|expires| (token.into(), expires));
        Ok((
            Credential {
                keys,
                digest,
                seen,
                token,
                revoked: false,
            },
            tenant,
        ))
    }

    /// When the JWT this credential is expires (seconds since the epoch);
    /// `None` for an API key.
    pub fn expires(&self) -> Option<u64> {
        self.token.as_ref().map(|(_, expires)| *expires)
    }

    /// Looks the key up again when the key set has changed since the last
    /// look; otherwise costs one pointer comparison (and, for a JWT, a
    /// look at the clock: an expired token ends the session).
    pub fn standing(&mut self) -> Standing {
        let standing = self.look();
        self.revoked |= matches!(standing, Standing::Revoked);
        standing
    }

    /// Whether the key still names the tenant `tenant`: what was opened
    /// with it may go on carrying that tenant's messages.
    pub fn still_names(&mut self, tenant: &str) -> bool {
        match self.standing() {
            Standing::Unchanged => true,
            Standing::Reloaded(now) => *now.name == *tenant,
            Standing::Revoked => false,
        }
    }

    fn look(&mut self) -> Standing {
        if self.revoked {
            return Standing::Revoked;
        }
        if let Some((token, expires)) = &self.token {
            // Expired, or its key withdrawn (looked at again, with the
            // cached keys, when the verified-token cache let it go).
            let withdrawn = || {
                !self.seen.still_trusted(&self.digest)
                    && self.seen.authenticate_cached(token).is_err()
            };
            if crate::auth::now() >= *expires || withdrawn() {
                return Standing::Revoked;
            }
        }
        let current = self.keys.load();
        if Arc::ptr_eq(&current, &self.seen) {
            return Standing::Unchanged;
        }
        let tenant = match &self.token {
            Some((token, _)) => current.authenticate_cached(token).ok(),
            None => current.by_digest(&self.digest),
        };
        self.seen = arc_swap::Guard::into_inner(current);
        match tenant {
            Some(tenant) => Standing::Reloaded(tenant),
            None => Standing::Revoked,
        }
    }
}
