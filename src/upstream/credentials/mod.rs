//! The credential an upstream's requests carry (`auth`): obtained from its
//! authorization server, reused until shortly before it expires, one
//! request for it at a time (concurrent calls wait for that one), and
//! dropped when the upstream refuses it (401), so the call is retried once
//! with a new one. The agent's own token never reaches an upstream, and no
//! failure falls back to sending it or nothing: a call that cannot have a
//! credential fails with the reason (-32009).

mod token;

use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use reqwest::header::{HeaderName, HeaderValue};

use crate::config::upstream_auth::{AuthMode, UpstreamAuth};
use crate::metrics::Metrics;

pub use token::Refusal;

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

/// One upstream's credential.
pub struct Credentials {
    upstream: Arc<str>,
    auth: UpstreamAuth,
    header: HeaderName,
    client: reqwest::Client,
    fresh: ArcSwapOption<Fresh>,
    /// Held while a credential is being obtained: one request at a time.
    fetching: tokio::sync::Mutex<()>,
    /// The token endpoint, once found from the issuer's metadata.
    endpoint: tokio::sync::OnceCell<String>,
    metrics: Metrics,
    /// Its series of `upstream_token_cache_total`, looked up once: a hit
    /// is counted on every request.
    hits: prometheus::IntCounter,
    misses: prometheus::IntCounter,
    /// Credentials obtained so far: a call that sees it move obtained one
    /// (or waited for the one obtained), see [`Self::fetches`].
    fetched: std::sync::atomic::AtomicU64,
}

impl Credentials {
    pub fn new(
        upstream: &str,
        auth: UpstreamAuth,
        client: reqwest::Client,
        metrics: Metrics,
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
        metrics
            .upstream_tokens_cached
            .with_label_values(&[upstream])
            .set(0);
        Ok(Credentials {
            upstream: upstream.into(),
            auth,
            header,
            client,
            fresh: ArcSwapOption::empty(),
            fetching: tokio::sync::Mutex::new(()),
            endpoint: tokio::sync::OnceCell::new(),
            metrics,
            hits,
            misses,
            fetched: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The header the credential goes in.
    pub fn header(&self) -> &HeaderName {
        &self.header
    }

    /// The mode, as audit lines and metrics name it.
    pub fn mode(&self) -> &'static str {
        self.auth.mode.as_str()
    }

    /// How many credentials have been obtained: a call that reads it
    /// before and after sees whether one was obtained for it.
    pub fn fetches(&self) -> u64 {
        self.fetched.load(std::sync::atomic::Ordering::Acquire)
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
            self.hits.inc();
            return Ok((value, Got::Cached));
        }
        let _one = self.fetching.lock().await;
        // Another call may have obtained one while this one waited.
        if let Some(value) = self.in_force(Instant::now()) {
            self.hits.inc();
            return Ok((value, Got::Cached));
        }
        self.misses.inc();
        let fetched = self.fetch().await?;
        let value = if self.header == reqwest::header::AUTHORIZATION {
            HeaderValue::from_str(&format!("Bearer {}", fetched.token))
        } else {
            HeaderValue::from_str(&fetched.token)
        }
        .map_err(|_| Refusal::invalid("the access token is not a valid header value"))?;
        let mut value = value;
        value.set_sensitive(true);
        self.fresh.store(Some(Arc::new(Fresh {
            value: value.clone(),
            until: Instant::now() + reuse_for(fetched.lifetime),
        })));
        self.metrics
            .upstream_tokens_cached
            .with_label_values(&[&self.upstream])
            .set(1);
        self.fetched
            .fetch_add(1, std::sync::atomic::Ordering::Release);
        Ok((value, Got::Fetched))
    }

    /// The upstream refused `sent` (401): it is not sent again.
    pub fn refused(&self, sent: &HeaderValue) {
        let held = self.fresh.load();
        if held.as_deref().is_some_and(|f| f.value == *sent) {
            self.fresh.store(None);
            self.metrics
                .upstream_tokens_cached
                .with_label_values(&[&self.upstream])
                .set(0);
        }
    }

    async fn fetch(&self) -> Result<token::Token, Refusal> {
        let AuthMode::ClientCredentials(client) = &self.auth.mode;
        let started = Instant::now();
        let result = async {
            let endpoint = self.token_endpoint(client).await?;
            token::client_credentials(&self.client, &endpoint, client, self.auth.timeout).await
        }
        .await;
        let outcome = result.as_ref().map_or_else(|r| r.reason, |_| "ok");
        let grant = self.auth.mode.as_str();
        self.metrics
            .upstream_token_requests
            .with_label_values(&[&self.upstream, grant, outcome])
            .inc();
        self.metrics
            .upstream_token_seconds
            .with_label_values(&[&self.upstream, grant])
            .observe(started.elapsed().as_secs_f64());
        tracing::info!(
            target: crate::telemetry::AUDIT,
            upstream = &*self.upstream,
            mode = grant,
            event = "token_request",
            outcome,
            "upstream credential"
        );
        result
    }

    /// The token endpoint: as configured, or from the issuer's metadata
    /// (found once; a failure is tried again by the next call).
    async fn token_endpoint(
        &self,
        client: &crate::config::upstream_auth::OAuthClient,
    ) -> Result<String, Refusal> {
        use crate::config::upstream_auth::TokenEndpoint;
        match &client.endpoint {
            TokenEndpoint::Url(url) => Ok(url.clone()),
            TokenEndpoint::Issuer(issuer) => self
                .endpoint
                .get_or_try_init(|| token::discover(&self.client, issuer, self.auth.timeout))
                .await
                .cloned(),
        }
    }
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
