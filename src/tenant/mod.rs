//! A tenant as the gateway serves it: the upstreams it sees, the tools its
//! policy (and a token's scopes) let it see and run, and its limits. Who is
//! which tenant is `keys` (API keys, JWTs) and `credential` (a session's,
//! looked at again at each message); what it holds open is `places`.

mod credential;
mod curated;
mod keys;
mod places;
pub mod reports;
pub mod subscriptions;

pub use credential::{Credential, Standing};
pub use curated::Curated;
pub use keys::{Denied, KeyStore, bearer_token};
pub use places::{Place, Places};

use std::sync::Arc;

use std::num::NonZeroU32;
use std::time::Duration;

use governor::DefaultDirectRateLimiter;
use governor::clock::{Clock, DefaultClock};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::ToolGlobs;

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
    /// `requests{tenant, method="tools/call", outcome="ok"}`, the same for
    /// the Model Context Protocol's face.
    pub called: Arc<std::sync::OnceLock<prometheus::IntCounter>>,
    /// `tools.scopes`: globs of tools, and the scope each needs in a token.
    scoped: Vec<(globset::GlobMatcher, String)>,
    /// The subject (`sub`) of the token this view of the tenant is for;
    /// `None` for an API key.
    pub subject: Option<Arc<str>>,
    /// The user a JWT with a subject names (upstreams that act for the
    /// user need it); `None` for an API key.
    pub user: Option<Arc<User>>,
    /// What its calls hold of reports for clients that have not read them.
    pub reports: Arc<reports::ReportBudget>,
    /// How many audit lines of its refused calls it may still have written.
    pub refusals: Arc<RefusalAudits>,
    /// What its agents see of its tools; `None`: the upstreams' own.
    pub curation: Option<Arc<Curated>>,
    /// A digest of its settings (see `TenantSpec::digest`).
    pub digest: u64,
    /// Its requests admitted and not finished yet, every view's together.
    pub in_flight: Arc<std::sync::atomic::AtomicUsize>,
}

/// A user: the issuer and subject of the JWT a caller bore, with the
/// token itself (what a token exchange exchanges) and its scopes. Never
/// printed: the token is a credential.
pub struct User {
    pub issuer: Arc<str>,
    pub subject: Arc<str>,
    pub token: Box<str>,
    /// Its scopes, space-separated, sorted.
    pub scope: Box<str>,
    /// Names the user apart from every other, of any tenant (see [`User::new`]).
    pub key: Arc<str>,
}

impl User {
    /// The user `subject` of `issuer` in `tenant`, calling with `token`.
    pub fn new(tenant: &str, issuer: &str, subject: &str, token: &str, scope: &str) -> Self {
        // The issuer's length first: no two (issuer, subject) pairs meet.
        let key = format!("{tenant}\u{0}{}:{issuer}\u{0}{subject}", issuer.len());
        User {
            issuer: issuer.into(),
            subject: subject.into(),
            token: token.into(),
            scope: scope.into(),
            key: key.into(),
        }
    }
}

impl std::fmt::Debug for User {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("User")
            .field("issuer", &self.issuer)
            .field("subject", &self.subject)
            .finish_non_exhaustive()
    }
}

/// The audit lines of a tenant's refused calls: 10 a second, bursts of 20.
/// A tenant flooding past its limits costs the log no more than that; the
/// rest are counted (`mcp_gateway_audit_lines_dropped_total`).
pub struct RefusalAudits(DefaultDirectRateLimiter);

impl Default for RefusalAudits {
    fn default() -> Self {
        let quota = governor::Quota::per_second(std::num::NonZeroU32::MIN.saturating_add(9))
            .allow_burst(std::num::NonZeroU32::MIN.saturating_add(19));
        RefusalAudits(governor::RateLimiter::direct(quota))
    }
}

impl RefusalAudits {
    /// Whether one more line may be written now.
    pub fn may_write(&self) -> bool {
        self.0.check().is_ok()
    }
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
    /// Its place in the tenant's count of requests in flight.
    _counted: Option<InFlight>,
}

/// `n` of a tenant's requests in flight, until dropped.
struct InFlight(Arc<std::sync::atomic::AtomicUsize>, usize);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0
            .fetch_sub(self.1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Admission {
    /// An admission that holds `held` (a shared count's slots) until dropped.
    pub fn holding(held: Option<Box<dyn Send + Sync>>) -> Self {
        Admission {
            _slots: None,
            _shared: held,
            _counted: None,
        }
    }

    /// The admission, counted in `tenant`'s requests in flight (`n` of
    /// them) until dropped.
    pub fn counted(mut self, tenant: &Tenant, n: u32) -> Self {
        let n = n as usize;
        tenant
            .in_flight
            .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        self._counted = Some(InFlight(tenant.in_flight.clone(), n));
        self
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
            _counted: None,
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

    /// Whether curation hides this tool from the tenant: out of its
    /// listings, and called as a tool that does not exist.
    pub fn hides(&self, tool: &str) -> bool {
        self.curation.as_ref().is_some_and(|c| c.hides(tool))
    }

    /// Whether the tenant's own policy and curation (not a token's scopes)
    /// show it this tool: what the names a face gives depend on, so that
    /// every caller of a tenant sees the same names.
    pub fn lists(&self, tool: &str) -> bool {
        !self.hides(tool) && self.policy.as_ref().is_none_or(|p| p.policy_allows(tool))
    }

    /// Where the tool with this namespaced id stands in the tenant's own
    /// policy and curation (a token's scopes aside): `listed`, `denied`,
    /// `not_allowed` or `hidden`, and the rule that decided it.
    pub fn tool_standing(&self, tool: &str) -> (&'static str, Option<String>) {
        if let Some(p) = &self.policy {
            if let Some(&i) = p.globs.deny.matches(tool).first() {
                let glob = p.globs.deny_globs.get(i).map_or("?", String::as_str);
                return ("denied", Some(format!("deny: {glob}")));
            }
            if p.globs.allow.as_ref().is_some_and(|a| !a.is_match(tool)) {
                return ("not_allowed", Some("allow: no rule matches".into()));
            }
        }
        if let Some(c) = &self.curation
            && let Some(i) = c
                .hide
                .as_ref()
                .and_then(|h| h.matches(tool).first().copied())
        {
            let glob = c.hide_globs.get(i).map_or("?", String::as_str);
            return ("hidden", Some(format!("hide: {glob}")));
        }
        ("listed", None)
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
        user: Option<Arc<User>>,
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
                hide: p.hide.clone(),
                hidden,
            }),
            (None, false) => Some(ToolPolicy {
                globs: ToolGlobs::default(),
                hide: None,
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
            called: self.called.clone(),
            scoped: Vec::new(),
            subject: user.as_ref().map(|u| u.subject.clone()),
            user,
            reports: self.reports.clone(),
            refusals: self.refusals.clone(),
            curation: self.curation.clone(),
            digest: self.digest,
            in_flight: self.in_flight.clone(),
        }
    }
}

/// Allow and deny globs on namespaced tool ids (`*` matches any characters, `/` included).
#[derive(Debug, Clone)]
pub struct ToolPolicy {
    globs: ToolGlobs,
    /// Tools curation hides (`tools.hide`).
    hide: Option<globset::GlobSet>,
    /// Tools a token's missing scopes hide, with the scope each needs.
    hidden: Vec<(globset::GlobMatcher, Arc<str>)>,
}

impl ToolPolicy {
    /// `None` when there is nothing to enforce. The globs were compiled with the config.
    pub fn new(globs: &ToolGlobs, hide: Option<&globset::GlobSet>) -> Option<ToolPolicy> {
        (!globs.is_empty() || hide.is_some()).then(|| ToolPolicy {
            globs: globs.clone(),
            hide: hide.cloned(),
            hidden: Vec::new(),
        })
    }

    /// Whether the tool is listed and may run: allowed, not denied, not
    /// hidden by curation, and no scope missing.
    pub fn allows(&self, tool: &str) -> bool {
        self.policy_allows(tool)
            && !self.hide.as_ref().is_some_and(|h| h.is_match(tool))
            && !self.hidden.iter().any(|(g, _)| g.is_match(tool))
    }

    /// Allow and deny alone, scopes aside.
    pub(crate) fn policy_allows(&self, tool: &str) -> bool {
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

#[cfg(test)]
mod tests;
