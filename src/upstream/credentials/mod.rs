//! The credential an upstream's requests carry (`auth`): obtained from its
//! authorization server, reused until shortly before it expires, one
//! request for it at a time (concurrent calls wait for that one), and
//! dropped when the upstream refuses it (401), so the call is retried once
//! with a new one. The agent's own token never reaches an upstream, and no
//! failure falls back to sending it or nothing: a call that cannot have a
//! credential fails with the reason (-32009).

mod assertion;
pub mod budget;
pub mod consent;
mod token;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use reqwest::header::{HeaderName, HeaderValue};

use crate::config::upstream_auth::{AuthMode, UpstreamAuth};
use crate::metrics::Metrics;
use crate::tenant::User;

pub use budget::TokenBudget;
pub use consent::Consents;
pub use token::{ConsentAsk, Refusal};

/// A credential in force: the header's value, and until when it is used.
struct Fresh {
    value: HeaderValue,
    until: Instant,
}

/// How a request came by its credential (the audit line's `credential`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Got {
    Cached,
    Fetched,
}

impl Got {
    pub fn as_str(self) -> &'static str {
        match self {
            Got::Cached => "cached",
            Got::Fetched => "fetched",
        }
    }
}

/// A user, of a tenant.
struct Acting {
    tenant: Arc<str>,
    user: Arc<User>,
}

/// What every credential of one upstream shares: its mode, the client its
/// requests go by, where its token endpoint is, its series.
struct Grant {
    upstream: Arc<str>,
    auth: UpstreamAuth,
    header: HeaderName,
    client: reqwest::Client,
    /// The token endpoint, once found from the issuer's metadata.
    endpoint: tokio::sync::OnceCell<String>,
    metrics: Metrics,
    /// Its series of `upstream_token_cache_total`, looked up once: a hit
    /// is counted on every request.
    hits: prometheus::IntCounter,
    misses: prometheus::IntCounter,
    /// `upstream_tokens_cached`: credentials of this upstream held now.
    cached: prometheus::IntGauge,
    /// The bound on tokens obtained and kept, every upstream's together;
    /// none for a mode that signs its own.
    budget: Option<Arc<TokenBudget>>,
    /// The clock's origin for credentials' last use (whole seconds).
    born: Instant,
    /// Users' consents (`user_consent`).
    consents: Option<Arc<Consents>>,
}

/// One credential of an upstream: the one every caller's requests carry,
/// or one user's (per-user modes, see [`Credentials::for_user`]).
pub struct Credentials {
    grant: Arc<Grant>,
    /// The user it acts for, as of their latest request (their newest
    /// token): `None` for a credential of every caller.
    acting: ArcSwapOption<Acting>,
    /// Shared with the budget, which may empty it.
    fresh: Arc<ArcSwapOption<Fresh>>,
    /// Its id in the budget, and the second of its last use noted there.
    id: u64,
    touched: AtomicU64,
    /// Held while a credential is being obtained: one request at a time.
    fetching: tokio::sync::Mutex<()>,
    /// Credentials obtained so far: a call that sees it move obtained one
    /// (or waited for the one obtained), see [`Self::fetches`].
    fetched: AtomicU64,
    /// The count of `fetched` at the latest one that was a refresh of a
    /// user's consent (see [`Self::refreshed_at`]).
    refreshed: AtomicU64,
}

impl Credentials {
    pub fn new(
        upstream: &str,
        auth: UpstreamAuth,
        client: reqwest::Client,
        metrics: Metrics,
        budget: Arc<TokenBudget>,
        consents: Option<Arc<Consents>>,
    ) -> Result<Self, String> {
        let header = HeaderName::from_bytes(auth.header.as_bytes()).map_err(|e| e.to_string())?;
        let grant = auth.mode.as_str();
        for outcome in [
            "ok",
            "timeout",
            "unreachable",
            "refused",
            "invalid_response",
        ] {
            metrics
                .upstream_token_requests
                .with_label_values(&[upstream, grant, outcome]);
        }
        let cache = |result: &str| {
            metrics
                .upstream_token_cache
                .with_label_values(&[upstream, result])
        };
        let (hits, misses) = (cache("hit"), cache("miss"));
        metrics
            .upstream_token_seconds
            .with_label_values(&[upstream, grant]);
        let cached = metrics
            .upstream_tokens_cached
            .with_label_values(&[upstream]);
        cached.set(0);
        let budget = (!matches!(auth.mode, AuthMode::Assertion(_))).then_some(budget);
        Ok(Self::of(Arc::new(Grant {
            upstream: upstream.into(),
            auth,
            header,
            client,
            endpoint: tokio::sync::OnceCell::new(),
            metrics,
            hits,
            misses,
            cached,
            budget,
            born: Instant::now(),
            consents,
        })))
    }

    fn of(grant: Arc<Grant>) -> Self {
        let id = grant.budget.as_ref().map_or(0, |b| b.id());
        Credentials {
            grant,
            acting: ArcSwapOption::empty(),
            fresh: Arc::new(ArcSwapOption::empty()),
            id,
            touched: AtomicU64::new(u64::MAX),
            fetching: tokio::sync::Mutex::new(()),
            fetched: AtomicU64::new(0),
            refreshed: AtomicU64::new(0),
        }
    }

    /// A credential of the same upstream for `user` (of `tenant`) alone,
    /// with a cache of its own.
    pub fn for_user(&self, tenant: &Arc<str>, user: &Arc<User>) -> Arc<Credentials> {
        let credentials = Self::of(self.grant.clone());
        credentials.offer(tenant, user);
        Arc::new(credentials)
    }

    /// Whether each user needs a credential of their own.
    pub fn per_user(&self) -> bool {
        self.grant.auth.mode.per_user()
    }

    /// Acts for `user` (of `tenant`) from now on: their newest token, for
    /// what is obtained from now on. A user's credential is only ever
    /// offered its own user (see `Children::pick`); the upstream's own (its
    /// listings') the latest caller's who needed a listing.
    pub fn offer(&self, tenant: &Arc<str>, user: &Arc<User>) {
        let held = self.acting.load();
        if !held.as_ref().is_some_and(|h| Arc::ptr_eq(&h.user, user)) {
            self.acting.store(Some(Arc::new(Acting {
                tenant: tenant.clone(),
                user: user.clone(),
            })));
        }
    }

    /// The header the credential goes in.
    pub fn header(&self) -> &HeaderName {
        &self.grant.header
    }

    /// The mode, as audit lines and metrics name it.
    pub fn mode(&self) -> &'static str {
        self.grant.auth.mode.as_str()
    }

    /// How many credentials have been obtained: a call that reads it
    /// before and after sees whether one was obtained for it.
    pub fn fetches(&self) -> u64 {
        self.fetched.load(Ordering::Acquire)
    }

    /// The count of [`Self::fetches`] at the latest credential obtained by
    /// refreshing a consent (0: none): equal to it, the latest was one.
    pub fn refreshed_at(&self) -> u64 {
        self.refreshed.load(Ordering::Acquire)
    }

    /// Until when the credential held now is used, when one is held.
    pub fn reused_until(&self) -> Option<Instant> {
        self.fresh.load().as_ref().map(|f| f.until)
    }

    /// The credential in force at `now` when there is one that is still good.
    fn in_force(&self, now: Instant) -> Option<HeaderValue> {
        let fresh = self.fresh.load();
        let fresh = fresh.as_deref()?;
        (fresh.until > now).then(|| fresh.value.clone())
    }

    /// The header's value for the next request, and how it was come by.
    pub async fn current(&self) -> Result<(HeaderValue, Got), Refusal> {
        self.current_at(Instant::now()).await
    }

    /// [`Self::current`] for a request made at `now` (a caller that has
    /// read the clock already).
    pub async fn current_at(&self, now: Instant) -> Result<(HeaderValue, Got), Refusal> {
        if let Some(value) = self.in_force(now) {
            self.grant.hits.inc();
            self.used(now);
            return Ok((value, Got::Cached));
        }
        let _one = self.fetching.lock().await;
        // Another call may have obtained one while this one waited.
        if let Some(value) = self.in_force(Instant::now()) {
            self.grant.hits.inc();
            return Ok((value, Got::Cached));
        }
        self.grant.misses.inc();
        let fetched = self.fetch().await?;
        let value = if self.grant.header == reqwest::header::AUTHORIZATION {
            HeaderValue::from_str(&format!("Bearer {}", fetched.token))
        } else {
            HeaderValue::from_str(&fetched.token)
        }
        .map_err(|_| Refusal::invalid("the access token is not a valid header value"))?;
        let mut value = value;
        value.set_sensitive(true);
        let held = self.fresh.swap(Some(Arc::new(Fresh {
            value: value.clone(),
            until: Instant::now() + reuse_for(fetched.lifetime),
        })));
        if held.is_none() {
            self.grant.cached.inc();
        }
        if let Some(budget) = &self.grant.budget {
            let held = budget::Held {
                slot: Arc::downgrade(&self.fresh),
                cached: self.grant.cached.clone(),
            };
            budget.admit(self.id, held);
        }
        let count = self.fetched.fetch_add(1, Ordering::AcqRel) + 1;
        if fetched.refreshed {
            self.refreshed.store(count, Ordering::Release);
        }
        Ok((value, Got::Fetched))
    }

    /// The upstream refused `sent` (401): it is not sent again.
    pub fn refused(&self, sent: &HeaderValue) {
        let held = self.fresh.load_full();
        if held.as_deref().is_some_and(|f| f.value == *sent) {
            // Only if it is still the one held (the budget may have let it go).
            let was = self.fresh.compare_and_swap(&held, None);
            if was
                .as_ref()
                .zip(held.as_ref())
                .is_some_and(|(a, b)| Arc::ptr_eq(a, b))
            {
                self.grant.cached.dec();
                if let Some(budget) = &self.grant.budget {
                    budget.forget(self.id);
                }
            }
        }
    }

    /// Notes a use of its token in the budget, at most once a second.
    fn used(&self, now: Instant) {
        let Some(budget) = &self.grant.budget else {
            return;
        };
        let second = now.saturating_duration_since(self.grant.born).as_secs();
        if self.touched.swap(second, Ordering::Relaxed) != second {
            budget.touch(self.id);
        }
    }

    async fn fetch(&self) -> Result<token::Token, Refusal> {
        let grant = &self.grant;
        let acting = self.acting.load_full();
        if grant.auth.mode.per_user() && acting.is_none() {
            return Err(Refusal::no_user());
        }
        if let AuthMode::Assertion(a) = &grant.auth.mode {
            let signer = grant.auth.signer.as_ref().ok_or_else(no_signer)?;
            let acting = acting.as_deref().ok_or_else(Refusal::no_user)?;
            return assertion::signed(signer, &acting.tenant, &acting.user, a);
        }
        if let AuthMode::UserConsent(_) = &grant.auth.mode {
            let acting = acting.as_deref().ok_or_else(Refusal::no_user)?;
            let consents = grant.consents.as_ref().ok_or_else(|| {
                Refusal::invalid("user_consent needs gateway.upstream_auth's public_url and keys")
            })?;
            return consents
                .token(&acting.tenant, &acting.user, &grant.upstream)
                .await;
        }
        let started = Instant::now();
        let result = self.request(acting.as_deref().map(|a| &*a.user)).await;
        let outcome = result.as_ref().map_or_else(|r| r.reason, |_| "ok");
        let mode = grant.auth.mode.as_str();
        grant
            .metrics
            .upstream_token_requests
            .with_label_values(&[&grant.upstream, mode, outcome])
            .inc();
        grant
            .metrics
            .upstream_token_seconds
            .with_label_values(&[&grant.upstream, mode])
            .observe(started.elapsed().as_secs_f64());
        tracing::info!(
            target: crate::telemetry::AUDIT,
            upstream = &*grant.upstream,
            tenant = acting.as_ref().map(|a| &*a.tenant),
            subject = acting.as_ref().map(|a| &*a.user.subject),
            mode,
            event = "token_request",
            outcome,
            "upstream credential"
        );
        result
    }

    /// The request of the authorization server the mode makes.
    async fn request(&self, user: Option<&User>) -> Result<token::Token, Refusal> {
        let grant = &self.grant;
        let timeout = grant.auth.timeout;
        match &grant.auth.mode {
            AuthMode::ClientCredentials(client) => {
                let endpoint = self.token_endpoint(client).await?;
                token::client_credentials(&grant.client, &endpoint, client, timeout).await
            }
            AuthMode::TokenExchange(exchange) => {
                let user = user.ok_or_else(Refusal::no_user)?;
                let client = &exchange.client;
                let endpoint = self.token_endpoint(client).await?;
                let actor = match exchange.actor_token {
                    false => None,
                    true => {
                        let signer = grant.auth.signer.as_ref().ok_or_else(no_signer)?;
                        Some(assertion::actor(signer, &client.client_id, &endpoint)?)
                    }
                };
                let subject = (&*user.token, exchange.subject_token_type);
                token::exchange(
                    &grant.client,
                    &endpoint,
                    client,
                    subject,
                    actor.as_deref(),
                    timeout,
                )
                .await
            }
            AuthMode::Assertion(_) => Err(no_signer()),
            AuthMode::UserConsent(_) => {
                Err(Refusal::invalid("a consent's token is the user's own"))
            }
        }
    }

    /// The token endpoint: as configured, or from the issuer's metadata
    /// (found once; a failure is tried again by the next call).
    async fn token_endpoint(
        &self,
        client: &crate::config::upstream_auth::OAuthClient,
    ) -> Result<String, Refusal> {
        use crate::config::upstream_auth::TokenEndpoint;
        let grant = &self.grant;
        match &client.endpoint {
            TokenEndpoint::Url(url) => Ok(url.clone()),
            TokenEndpoint::Issuer(issuer) => grant
                .endpoint
                .get_or_try_init(|| token::discover(&grant.client, issuer, grant.auth.timeout))
                .await
                .cloned(),
        }
    }
}

impl Drop for Credentials {
    fn drop(&mut self) {
        if self.fresh.swap(None).is_some() {
            self.grant.cached.dec();
        }
        if let Some(budget) = &self.grant.budget {
            budget.forget(self.id);
        }
    }
}

/// A mode that signs was configured without keys: `check` refuses that,
/// so this is never told unless the configuration was built elsewhere.
fn no_signer() -> Refusal {
    Refusal::invalid("no signing key is configured")
}

/// Runs `request` with the credential in force at `now`; when the
/// upstream refuses it (401) it is let go and `request` runs once more
/// with a new one.
pub async fn retried<T, F>(
    credentials: &Credentials,
    now: Instant,
    mut request: impl FnMut(HeaderValue) -> F,
) -> Result<T, crate::upstream::CallError>
where
    F: std::future::Future<Output = Result<T, crate::upstream::CallError>>,
{
    let mut tries = 2;
    loop {
        let (value, _) = credentials
            .current_at(now)
            .await
            .map_err(|r| crate::upstream::CallError::Credential(Box::new(r)))?;
        match request(value.clone()).await {
            Err(e) if refused(&e) => {
                credentials.refused(&value);
                tries -= 1;
                if tries == 0 {
                    return Err(e);
                }
            }
            other => return other,
        }
    }
}

/// The error of a request the upstream answered 401 to, with a credential.
pub fn rejected() -> crate::upstream::CallError {
    crate::upstream::CallError::Credential(Box::new(Refusal::rejected()))
}

/// Whether `e` says the upstream refused the credential sent.
pub fn refused(e: &crate::upstream::CallError) -> bool {
    matches!(e, crate::upstream::CallError::Credential(r) if r.reason == "rejected")
}

/// How long a token of this lifetime is used: until `min(30 s, lifetime /
/// 2)` before it expires.
fn reuse_for(lifetime: Duration) -> Duration {
    lifetime.saturating_sub((lifetime / 2).min(Duration::from_secs(30)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_let_go_before_it_expires() {
        assert_eq!(
            reuse_for(Duration::from_secs(300)),
            Duration::from_secs(270)
        );
        assert_eq!(reuse_for(Duration::from_secs(40)), Duration::from_secs(20));
        assert_eq!(reuse_for(Duration::ZERO), Duration::ZERO);
    }
}
