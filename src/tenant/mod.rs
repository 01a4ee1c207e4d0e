//! Credentials → tenant. A tenant sees only its own upstreams.

pub mod subscriptions;

use std::collections::HashMap;
use std::sync::Arc;

use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::auth::Issuers;
use crate::config::{KeyDigest, TenantSpec, ToolGlobs};

/// A tenant as dispatch sees it.
pub struct Tenant {
    pub name: Arc<str>,
    /// The upstreams this tenant sees, in listing order.
    pub upstreams: Vec<Arc<str>>,
    /// Which of their tools it may see and run; `None`: all of them.
    pub policy: Option<ToolPolicy>,
    /// Sessions it may have open at once (`None`: the gateway's default).
    pub max_sessions: Option<usize>,
    rate: Option<Arc<DefaultDirectRateLimiter>>,
    concurrency: Option<Arc<Semaphore>>,
    /// The limits as configured, for a store that shares them across replicas.
    pub limits: ConfiguredLimits,
    /// `requests{tenant, method="mcp/executeTool", outcome="ok"}`, the series
    /// every forwarded call counts in, resolved on first use.
    pub executed: Arc<std::sync::OnceLock<prometheus::IntCounter>>,
    /// `tools.scopes`: globs of tools, and the scope each needs in a token.
    scoped: Vec<(globset::GlobMatcher, String)>,
    /// The subject (`sub`) of the token this view of the tenant is for;
    /// `None` for an API key.
    pub subject: Option<Arc<str>>,
}

/// A tenant's `rate_limit` and `max_concurrency`, as configured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConfiguredLimits {
    /// Requests a second, and the burst.
    pub rate: Option<(u32, u32)>,
    pub concurrency: Option<usize>,
}

impl ConfiguredLimits {
    pub fn any(&self) -> bool {
        self.rate.is_some() || self.concurrency.is_some()
    }
}

/// Why a tenant's request is refused before any work is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Over the rate limit: try again after this long.
    Rate { retry_after: Duration },
    /// Too many requests in flight.
    Concurrency,
    /// The shared store is down and `when_down: refuse` says so.
    StoreDown,
}

impl Refusal {
    /// A closed-set label for metrics.
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::Rate { .. } => "rate_limited",
            Refusal::Concurrency => "concurrency_limited",
            Refusal::StoreDown => "store_down",
        }
    }

    /// Whole seconds for `Retry-After`, at least 1.
    pub fn retry_after_secs(self) -> u64 {
        match self {
            Refusal::Rate { retry_after } => {
                retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0)
            }
            Refusal::Concurrency | Refusal::StoreDown => 1,
        }
        .max(1)
    }
}

/// Holds a tenant's concurrency slots for as long as its requests run.
pub struct Admission {
    _slots: Option<OwnedSemaphorePermit>,
    /// Slots held in a shared count (see `store::limits`), given back on drop.
    _shared: Option<Box<dyn Send + Sync>>,
}

impl Admission {
    /// An admission that holds `held` (a shared count's slots) until dropped.
    pub fn holding(held: Option<Box<dyn Send + Sync>>) -> Self {
        Admission {
            _slots: None,
            _shared: held,
        }
    }
}

impl Tenant {
    pub fn sees(&self, upstream: &str) -> bool {
        self.upstreams.iter().any(|u| &**u == upstream)
    }

    /// Admits `n` requests against the tenant's rate and concurrency limits.
    pub fn admit(&self, n: u32) -> Result<Admission, Refusal> {
        let Some(n) = NonZeroU32::new(n) else {
            return Ok(Admission::holding(None));
        };
        // The slot first: a request refused for concurrency must not spend a rate token.
        let slots = match &self.concurrency {
            Some(sem) => Some(
                sem.clone()
                    .try_acquire_many_owned(n.get())
                    .map_err(|_| Refusal::Concurrency)?,
            ),
            None => None,
        };
        if let Some(rate) = &self.rate {
            match rate.check_n(n) {
                Ok(Ok(())) => {}
                Ok(Err(not_until)) => {
                    let retry_after = not_until.wait_time_from(DefaultClock::default().now());
                    return Err(Refusal::Rate { retry_after });
                }
                // More at once than the burst: this batch can never pass.
                Err(_) => {
                    return Err(Refusal::Rate {
                        retry_after: Duration::from_secs(1),
                    });
                }
            }
        }
        Ok(Admission {
            _slots: slots,
            _shared: None,
        })
    }

    /// Admits one request against the tenant's rate limit only: one that
    /// holds no call open (a DELETE, or a stream's opening) spends a rate
    /// token but no concurrency slot.
    pub fn admit_rate(&self) -> Result<(), Refusal> {
        let Some(rate) = &self.rate else {
            return Ok(());
        };
        rate.check().map_err(|not_until| Refusal::Rate {
            retry_after: not_until.wait_time_from(DefaultClock::default().now()),
        })
    }

    /// Whether the policy lets this tenant see and run the tool with this namespaced id.
    pub fn may_use(&self, tool: &str) -> bool {
        self.policy.as_ref().is_none_or(|p| p.allows(tool))
    }

    /// The scope a token would need for this tool, when that is all that
    /// keeps it from the caller (the policy itself allows it).
    pub fn missing_scope(&self, tool: &str) -> Option<Arc<str>> {
        let policy = self.policy.as_ref()?;
        if !policy.policy_allows(tool) {
            return None;
        }
        policy
            .hidden
            .iter()
            .find(|(g, _)| g.is_match(tool))
            .map(|(_, scope)| scope.clone())
    }

    /// The tenant as a token with these scopes sees it: the tools whose
    /// scope it lacks are hidden (absent from listings, refused as denied).
    /// Limits, counters and everything else are the tenant's own, shared.
    pub fn for_token(
        &self,
        subject: Option<&str>,
        scopes: &std::collections::HashSet<String>,
    ) -> Tenant {
        let hidden: Vec<(globset::GlobMatcher, Arc<str>)> = self
            .scoped
            .iter()
            .filter(|(_, scope)| !scopes.contains(scope))
            .map(|(glob, scope)| (glob.clone(), Arc::from(scope.as_str())))
            .collect();
        let policy = match (&self.policy, hidden.is_empty()) {
            (policy, true) => policy.clone(),
            (Some(p), false) => Some(ToolPolicy {
                globs: p.globs.clone(),
                hidden,
            }),
            (None, false) => Some(ToolPolicy {
                globs: ToolGlobs::default(),
                hidden,
            }),
        };
        Tenant {
            name: self.name.clone(),
            upstreams: self.upstreams.clone(),
            policy,
            max_sessions: self.max_sessions,
            rate: self.rate.clone(),
            concurrency: self.concurrency.clone(),
            limits: self.limits,
            executed: self.executed.clone(),
            scoped: Vec::new(),
            subject: subject.map(Arc::from),
        }
    }
}

/// Allow and deny globs on namespaced tool ids (`*` matches any characters, `/` included).
#[derive(Debug, Clone)]
pub struct ToolPolicy {
    globs: ToolGlobs,
    /// Tools a token's missing scopes hide, with the scope each needs.
    hidden: Vec<(globset::GlobMatcher, Arc<str>)>,
}

impl ToolPolicy {
    /// `None` when there is nothing to enforce. The globs were compiled with the config.
    pub fn new(globs: &ToolGlobs) -> Option<ToolPolicy> {
        (!globs.is_empty()).then(|| ToolPolicy {
            globs: globs.clone(),
            hidden: Vec::new(),
        })
    }

    pub fn allows(&self, tool: &str) -> bool {
        self.policy_allows(tool) && !self.hidden.iter().any(|(g, _)| g.is_match(tool))
    }

    /// Allow and deny alone, scopes aside.
    fn policy_allows(&self, tool: &str) -> bool {
        self.globs.allow.as_ref().is_none_or(|a| a.is_match(tool))
            && !self.globs.deny.is_match(tool)
    }
}

impl std::fmt::Debug for Tenant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tenant")
            .field("name", &self.name)
            .field("upstreams", &self.upstreams)
            .finish_non_exhaustive()
    }
}

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
                policy: ToolPolicy::new(&spec.tools),
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
                scoped: spec.tools.scoped.clone(),
                subject: None,
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
        self.admit_verified(digest, verified)
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
        self.admit_verified(digest, verified)
    }

    fn admit_verified(
        &self,
        digest: KeyDigest,
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
        let tenant = Arc::new(tenant.for_token(verified.subject.as_deref(), &verified.scopes));
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
    fn still_trusted(&self, digest: &KeyDigest) -> bool {
        self.verified.get(digest).is_some_and(|kept| kept.trusted())
    }

    pub fn tenants(&self) -> &[Arc<Tenant>] {
        &self.tenants
    }
}

/// The key a session was opened with, held so that each of its messages is
/// admitted by the keys in force when it arrives: a reload that removes the
/// key (or its tenant) ends the session at its next message, and one that
/// changes the tenant's policy or limits applies from that message on.
pub struct Credential {
    keys: Arc<arc_swap::ArcSwap<KeyStore>>,
    digest: KeyDigest,
    /// The key set the tenant was last looked up in.
    seen: Arc<KeyStore>,
    /// A JWT, kept to be verified again after a reload, and its expiry.
    token: Option<(Box<str>, u64)>,
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
        let token = seen
            .verified
            .get(&digest)
            .map(|kept| (token.into(), kept.expires));
        Ok((
            Credential {
                keys,
                digest,
                seen,
                token,
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

/// What each tenant holds open (sessions, connections, bytes of
/// subscriptions), counted by tenant name, so that the counts outlive
/// reloads (tenants are rebuilt by one). A cheap clone.
#[derive(Clone, Default)]
pub struct Places(Arc<dashmap::DashMap<Arc<str>, usize>>);

impl Places {
    /// One more place for `tenant`, or `Err(limit)` when it holds `limit` already.
    pub fn enter(&self, tenant: &Arc<str>, limit: usize) -> Result<Place, usize> {
        self.enter_n(tenant, 1, limit)
    }

    /// `n` more units for `tenant`, or `Err(limit)` when they would take it past `limit`.
    pub fn enter_n(&self, tenant: &Arc<str>, n: usize, limit: usize) -> Result<Place, usize> {
        let mut held = self.0.entry(tenant.clone()).or_insert(0);
        if held.saturating_add(n) > limit {
            return Err(limit);
        }
        *held += n;
        Ok(Place {
            places: self.clone(),
            tenant: tenant.clone(),
            n,
            also: None,
        })
    }

    /// What `tenant` holds now.
    pub fn held(&self, tenant: &str) -> usize {
        self.0.get(tenant).map_or(0, |h| *h)
    }
}

/// Units in a tenant's count (one place, or some bytes), given back when dropped.
pub struct Place {
    places: Places,
    tenant: Arc<str>,
    n: usize,
    /// Held with it and given back with it (a place in the shared store's pool).
    also: Option<Box<dyn Send + Sync>>,
}

impl Place {
    /// The place, holding `also` too until it is dropped.
    pub fn holding(mut self, also: Box<dyn Send + Sync>) -> Place {
        self.also = Some(also);
        self
    }

    /// The tenant that holds it.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// Takes `n` more units, or `Err(limit)` when they would take the tenant past `limit`.
    pub fn grow(&mut self, n: usize, limit: usize) -> Result<(), usize> {
        let mut held = self.places.0.entry(self.tenant.clone()).or_insert(0);
        if held.saturating_add(n) > limit {
            return Err(limit);
        }
        *held += n;
        self.n += n;
        Ok(())
    }

    /// Gives `n` of its units back (at most what it holds).
    pub fn shrink(&mut self, n: usize) {
        let n = n.min(self.n);
        if let Some(mut held) = self.places.0.get_mut(&self.tenant) {
            *held = held.saturating_sub(n);
        }
        self.n -= n;
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some(mut held) = self.places.0.get_mut(&self.tenant) {
            *held = held.saturating_sub(self.n);
        }
    }
}

/// The token of an `Authorization: Bearer <token>` header value (scheme case-insensitive).
pub fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_sees_the_tools_its_scopes_allow_and_shares_the_limits() {
        let mut tools = ToolGlobs::compile(&[] as &[&str], &["*/delete*"]).unwrap();
        for (glob, scope) in [("*/files/*", "files"), ("*/search/*", "search")] {
            tools.scoped.push((
                globset::Glob::new(glob).unwrap().compile_matcher(),
                scope.into(),
            ));
        }
        let store = KeyStore::new(&[TenantSpec {
            name: "a".into(),
            keys: vec![KeyDigest::of(b"ka")],
            upstreams: vec![],
            tools,
            rate_limit: None,
            max_concurrency: Some(1),
            max_sessions: None,
        }]);
        let base = store.authenticate("ka").unwrap();
        assert!(
            base.may_use("mcp://g/files/f/tools/read"),
            "an API key holds every scope"
        );
        assert!(base.subject.is_none());
        let granted: std::collections::HashSet<String> = ["files".to_owned()].into();
        let token = base.for_token(Some("agent-7"), &granted);
        assert_eq!(token.subject.as_deref(), Some("agent-7"));
        assert!(token.may_use("mcp://g/files/f/tools/read"));
        assert!(
            !token.may_use("mcp://g/search/s/tools/find"),
            "its scope is missing"
        );
        assert!(
            !token.may_use("mcp://g/files/f/tools/delete"),
            "the policy still holds"
        );
        // One tenant: the concurrency slot the token's view takes is the tenant's.
        let held = token.admit(1).unwrap();
        assert_eq!(base.admit(1).err(), Some(Refusal::Concurrency));
        drop(held);
        assert!(base.admit(1).is_ok());
    }

    #[test]
    fn authenticates_by_key() {
        let specs = vec![
            TenantSpec {
                name: "a".into(),
                keys: vec![KeyDigest::of(b"ka"), KeyDigest::of(b"ka2")],
                upstreams: vec!["x".into()],
                tools: ToolGlobs::default(),
                rate_limit: None,
                max_concurrency: None,
                max_sessions: None,
            },
            TenantSpec {
                name: "b".into(),
                keys: vec![KeyDigest::of(b"kb")],
                upstreams: vec![],
                tools: ToolGlobs::compile(&["mcp://g/x/*"], &["*/delete*"]).unwrap(),
                rate_limit: Some((1, 2)),
                max_concurrency: Some(1),
                max_sessions: None,
            },
        ];
        let store = KeyStore::new(&specs);
        assert_eq!(&*store.authenticate("ka2").unwrap().name, "a");
        assert_eq!(&*store.authenticate("kb").unwrap().name, "b");
        assert!(store.authenticate("kc").is_none());
        assert!(store.authenticate("").is_none());
        assert!(store.authenticate("ka").unwrap().sees("x"));
        let b = store.authenticate("kb").unwrap();
        assert!(b.may_use("mcp://g/x/a/tools/read"));
        assert!(!b.may_use("mcp://g/x/a/tools/delete-all"));
        assert!(!b.may_use("mcp://g/y/a/tools/read"));
        assert!(store.authenticate("ka").unwrap().may_use("anything"));
        // b: 1 request/s, burst 2, one at a time.
        let held = b.admit(1).unwrap();
        assert_eq!(b.admit(1).err(), Some(Refusal::Concurrency));
        drop(held);
        assert!(b.admit(1).is_ok());
        let Err(Refusal::Rate { retry_after }) = b.admit(1) else {
            panic!("over the rate")
        };
        assert!(retry_after <= Duration::from_secs(1));
        assert_eq!(
            b.admit(5).err(),
            Some(Refusal::Concurrency),
            "more than the slots at once"
        );
        assert!(store.authenticate("ka").unwrap().admit(1000).is_ok());
    }

    #[test]
    fn parses_bearer() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer   abc "), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer"), None);
        assert_eq!(bearer_token("Bearer "), None);
    }
}
