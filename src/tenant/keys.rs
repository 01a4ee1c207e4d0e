//! Credentials → tenant: API keys by their digest and JWTs of the
//! configured issuers, verified once and kept while trusted.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Arc;

use governor::{Quota, RateLimiter};
use tokio::sync::Semaphore;

use super::{ConfiguredLimits, Curated, Tenant, ToolPolicy};
use crate::auth::Issuers;
use crate::config::{KeyDigest, TenantSpec};

/// Every API key's digest, mapped to its tenant. Lookup hashes the presented
/// token once (SHA-256) and compares digests in constant time, so neither the
/// number of tenants nor the key's bytes shape the time an attempt takes.
///
/// Beside keys, JWTs of the configured issuers ([`crate::auth`]): a token
/// verified once is kept, by its digest, until it expires, in this key set
/// only (a reload verifies it again against the issuers then in force).
#[derive(Default)]
pub struct KeyStore {
    by_digest: HashMap<KeyDigest, Arc<Tenant>>,
    tenants: Vec<Arc<Tenant>>,
    issuers: Arc<Issuers>,
    resource: Option<Arc<crate::auth::ProtectedResource>>,
    /// The gateway's own public keys, as `/.well-known/jwks.json` serves them.
    jwks: Option<bytes::Bytes>,
    verified: dashmap::DashMap<KeyDigest, Kept>,
    /// Tenants an issuer is bound to (named as its fixed `tenant` or in its
    /// `tenants`), with those issuers: another issuer's token cannot name them.
    bound: HashMap<String, Vec<String>>,
}

/// A JWT verified once: its tenant, its expiry, and the key that verified
/// it, which must still be published for the token to be trusted.
struct Kept {
    tenant: Arc<Tenant>,
    expires: u64,
    issuer: Arc<crate::auth::Issuer>,
    key: u64,
}

impl Kept {
    fn trusted(&self) -> bool {
        crate::auth::now() < self.expires && self.issuer.publishes(self.key)
    }
}

/// Tokens kept verified at most; past it the cache starts again.
const MAX_VERIFIED: usize = 10_000;

/// Why a request's credentials were refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    /// None sent, or not a key this gateway knows.
    Unknown,
    /// A JWT that does not verify, has expired, is not for this gateway, or
    /// names no configured tenant (`error="invalid_token"`).
    InvalidToken,
}

impl std::fmt::Debug for KeyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyStore")
            .field("tenants", &self.tenants)
            .field("issuers", &self.issuers.list.len())
            .finish_non_exhaustive()
    }
}

impl KeyStore {
    pub fn new(specs: &[TenantSpec]) -> Self {
        let mut store = KeyStore::default();
        for spec in specs {
            let tenant = Arc::new(Tenant {
                name: spec.name.as_str().into(),
                upstreams: spec.upstreams.iter().map(|u| u.as_str().into()).collect(),
                policy: ToolPolicy::new(
                    &spec.tools,
                    spec.curation.as_ref().and_then(|c| c.hide.as_ref()),
                ),
                max_sessions: spec.max_sessions,
                rate: spec.rate_limit.and_then(|(per_second, burst)| {
                    let quota = Quota::per_second(NonZeroU32::new(per_second)?)
                        .allow_burst(NonZeroU32::new(burst)?);
                    Some(Arc::new(RateLimiter::direct(quota)))
                }),
                concurrency: spec
                    .max_concurrency
                    .map(|n| Arc::new(Semaphore::new(n.min(Semaphore::MAX_PERMITS)))),
                limits: ConfiguredLimits {
                    rate: spec.rate_limit,
                    concurrency: spec.max_concurrency,
                },
                executed: Arc::default(),
                called: Arc::default(),
                scoped: spec.tools.scoped.clone(),
                subject: None,
                user: None,
                reports: Arc::default(),
                refusals: Arc::default(),
                curation: spec.curation.clone().map(|c| Arc::new(Curated::new(c))),
                digest: spec.digest,
                in_flight: Arc::default(),
            });
            for key in &spec.keys {
                store.by_digest.insert(*key, tenant.clone());
            }
            store.tenants.push(tenant);
        }
        store
    }

    /// The same, with JWTs of these issuers accepted too, and this
    /// gateway's identity as a protected resource.
    pub fn with_issuers(
        mut self,
        issuers: Arc<Issuers>,
        resource: Option<Arc<crate::auth::ProtectedResource>>,
    ) -> Self {
        self.bound.clear();
        for i in &issuers.list {
            let names = match &i.spec.tenant {
                crate::auth::TenantFrom::Fixed(t) => std::slice::from_ref(t),
                crate::auth::TenantFrom::Claim(_) => i.spec.tenants.as_slice(),
            };
            for t in names {
                self.bound
                    .entry(t.clone())
                    .or_default()
                    .push(i.spec.issuer.clone());
            }
        }
        self.issuers = issuers;
        self.resource = resource;
        self
    }

    /// Whether a token of `issuer` may name `tenant`: when the issuer lists
    /// the tenants it may name, one of them; otherwise any tenant that is
    /// not bound to another issuer.
    fn may_name(&self, issuer: &crate::auth::IssuerSpec, tenant: &str) -> bool {
        if matches!(issuer.tenant, crate::auth::TenantFrom::Claim(_)) && !issuer.tenants.is_empty()
        {
            return issuer.tenants.iter().any(|t| t == tenant);
        }
        self.bound
            .get(tenant)
            .is_none_or(|issuers| issuers.contains(&issuer.issuer))
    }

    /// The same, publishing the gateway's signing keys' public halves.
    pub fn with_jwks(mut self, keys: Option<&crate::config::signing::SigningKeys>) -> Self {
        self.jwks = keys.map(|k| k.jwks().to_string().into());
        self
    }

    /// The JWKS document of the gateway's signing keys, when it has any.
    pub fn jwks(&self) -> Option<&bytes::Bytes> {
        self.jwks.as_ref()
    }

    /// This gateway as an OAuth protected resource, when `gateway.auth.resource` is set.
    pub fn resource(&self) -> Option<&crate::auth::ProtectedResource> {
        self.resource.as_deref()
    }

    /// When a JWT verified in this key set expires (seconds since the epoch).
    pub fn expiry_of(&self, token: &str) -> Option<u64> {
        self.verified
            .get(&KeyDigest::of(token.as_bytes()))
            .map(|kept| kept.expires)
    }

    pub fn issuers(&self) -> &Issuers {
        &self.issuers
    }

    /// The tenant a bearer token (an API key) belongs to.
    pub fn authenticate(&self, token: &str) -> Option<&Arc<Tenant>> {
        self.by_digest.get(&KeyDigest::of(token.as_bytes()))
    }

    /// The tenant a bearer token names: an API key, or a JWT of a
    /// configured issuer (its keys fetched again when it names a key id
    /// they do not hold).
    pub async fn authenticate_token(&self, token: &str) -> Result<Arc<Tenant>, Denied> {
        let digest = KeyDigest::of(token.as_bytes());
        if let Some(tenant) = self.by_digest(&digest) {
            return Ok(tenant);
        }
        if self.issuers.is_empty() || !crate::auth::looks_like_jwt(token) {
            return Err(Denied::Unknown);
        }
        let verified = self.issuers.verify(token).await;
        self.admit_verified(digest, token, verified)
    }

    /// [`Self::authenticate_token`] with the keys already fetched (a
    /// session's token, looked at again after a reload).
    pub fn authenticate_cached(&self, token: &str) -> Result<Arc<Tenant>, Denied> {
        let digest = KeyDigest::of(token.as_bytes());
        if let Some(tenant) = self.by_digest(&digest) {
            return Ok(tenant);
        }
        if self.issuers.is_empty() || !crate::auth::looks_like_jwt(token) {
            return Err(Denied::Unknown);
        }
        let verified = self.issuers.verify_cached(token);
        self.admit_verified(digest, token, verified)
    }

    fn admit_verified(
        &self,
        digest: KeyDigest,
        token: &str,
        verified: Result<crate::auth::Verified, crate::auth::Refused>,
    ) -> Result<Arc<Tenant>, Denied> {
        let verified = verified.map_err(|why| {
            tracing::debug!(why, "bearer token refused");
            Denied::InvalidToken
        })?;
        let Some(tenant) = self.tenants.iter().find(|t| *t.name == *verified.tenant) else {
            tracing::debug!(tenant = %verified.tenant, "bearer token refused: it names no tenant");
            return Err(Denied::InvalidToken);
        };
        if !self.may_name(&verified.issuer.spec, &verified.tenant) {
            tracing::debug!(tenant = %verified.tenant, issuer = %verified.issuer.spec.issuer, "bearer token refused: its issuer may not name that tenant");
            return Err(Denied::InvalidToken);
        }
        let user = verified.subject.as_ref().map(|subject| {
            let issuer = &verified.issuer.spec.issuer;
            let user = super::User::new(&tenant.name, issuer, subject, token, &verified.scope);
            Arc::new(user)
        });
        let tenant = Arc::new(tenant.for_token(user, &verified.scopes));
        if self.verified.len() >= MAX_VERIFIED {
            self.verified.clear();
        }
        self.verified.insert(
            digest,
            Kept {
                tenant: tenant.clone(),
                expires: verified.expires,
                issuer: verified.issuer,
                key: verified.key,
            },
        );
        Ok(tenant)
    }

    /// The tenant of a key, or of a JWT verified already and not expired, by its digest.
    pub fn by_digest(&self, digest: &KeyDigest) -> Option<Arc<Tenant>> {
        if let Some(tenant) = self.by_digest.get(digest) {
            return Some(tenant.clone());
        }
        let kept = self.verified.get(digest)?;
        if kept.trusted() {
            return Some(kept.tenant.clone());
        }
        drop(kept);
        self.verified.remove(digest);
        None
    }

    /// Whether a JWT verified in this key set is still trusted: not
    /// expired, and its key still published by its issuer.
    pub(super) fn still_trusted(&self, digest: &KeyDigest) -> bool {
        self.verified.get(digest).is_some_and(|kept| kept.trusted())
    }

    pub fn tenants(&self) -> &[Arc<Tenant>] {
        &self.tenants
    }
}

/// The token of an `Authorization: Bearer <token>` header value (scheme case-insensitive).
pub fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}
