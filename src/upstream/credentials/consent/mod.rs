//! Per-user consent (`auth.user_consent`): each user connects their own
//! account at the upstream's authorization server once, in a browser, and
//! the gateway keeps the tokens that came of it, sealed (see `seal`), in
//! memory or in the shared store (see `keep`), refreshing them as they
//! expire. A call of a user who has not connected is answered with the
//! gateway's consent URL instead of reaching the upstream; `flow` serves
//! the browser's steps behind that URL.
//!
//! What a call uses is read from where records are kept at most a second
//! before (see `Credentials`), so that a revocation holds on every replica
//! within two seconds.

mod flow;
mod keep;
pub mod seal;
mod server;
mod steps;

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::token::{ClientAuth, ConsentAsk, Refusal, Token, TokenAnswer, post_form};
use crate::config::consent::{ConsentServer, ConsentSettings, UserConsent};
use crate::metrics::Metrics;
use crate::tenant::User;

pub use flow::{Answer, COOKIE, Page, Returned};
use keep::Keep;
pub use keep::Unavailable;
use server::{AuthServer, Client};

/// How long a credential read from a consent is used before it is read
/// again: the bound on how long a revocation takes to hold.
pub const REREAD: Duration = Duration::from_millis(1500);

/// The tokens a user's consent to one upstream gave.
#[derive(Serialize, Deserialize)]
struct Connection {
    access_token: String,
    refresh_token: Option<String>,
    /// Seconds since the epoch.
    expires_at: Option<u64>,
    scope: Option<String>,
    server: AuthServer,
    client: Client,
    resource: Option<String>,
}

/// Every upstream's consents, and the browser flows that give them.
pub struct Consents {
    settings: ConsentSettings,
    http: reqwest::Client,
    timeout: Duration,
    keep: Keep,
    metrics: Metrics,
    /// Each upstream's `user_consent`, as launched.
    upstreams: DashMap<Arc<str>, UserConsent>,
    /// Each upstream's authorization server, once found.
    servers: DashMap<Arc<str>, AuthServer>,
    /// One refresh at a time per connection on this replica.
    refreshing: DashMap<String, Arc<tokio::sync::Mutex<()>>>,
}

/// A user, as records name them: never in the clear.
fn user_digest(issuer: &str, subject: &str) -> String {
    let digest = Sha256::digest(format!("{}:{issuer}\u{0}{subject}", issuer.len()));
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

fn connection_key(tenant: &str, issuer: &str, subject: &str, upstream: &str) -> String {
    format!("conn:{tenant}:{}:{upstream}", user_digest(issuer, subject))
}

/// What a connection's record is sealed for: it opens for no other user
/// or upstream.
fn connection_aad(tenant: &str, issuer: &str, subject: &str, upstream: &str) -> String {
    format!("conn\n{tenant}\n{issuer}\n{subject}\n{upstream}")
}

pub fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Consents {
    pub fn new(
        settings: ConsentSettings,
        http: reqwest::Client,
        timeout: Duration,
        store: Option<crate::store::Store>,
        metrics: Metrics,
    ) -> Arc<Consents> {
        Arc::new(Consents {
            settings,
            http,
            timeout,
            keep: store.map_or_else(Keep::memory, Keep::Store),
            metrics,
            upstreams: DashMap::new(),
            servers: DashMap::new(),
            refreshing: DashMap::new(),
        })
    }

    /// The settings it was made with (a reload that changes them makes another).
    pub fn settings(&self) -> &ConsentSettings {
        &self.settings
    }

    /// `upstream` asks its users for consent as `consent` says.
    pub fn register(&self, upstream: &str, consent: &UserConsent) {
        for outcome in ["started", "connected", "refused", "revoked"] {
            self.metrics
                .upstream_consents
                .with_label_values(&[upstream, outcome]);
        }
        let held = self.upstreams.insert(upstream.into(), consent.clone());
        if held.is_some_and(|h| h != *consent) {
            self.servers.remove(upstream);
        }
    }

    fn counted(&self, upstream: &str, outcome: &str) {
        self.metrics
            .upstream_consents
            .with_label_values(&[upstream, outcome])
            .inc();
    }

    fn audit(&self, tenant: &str, subject: &str, upstream: &str, event: &str, outcome: &str) {
        tracing::info!(
            target: crate::telemetry::AUDIT,
            tenant,
            subject,
            upstream,
            mode = "user_consent",
            event,
            outcome,
            "upstream credential"
        );
    }

    /// The token `user` (of `tenant`) gave for `upstream`, refreshed when it
    /// is about to expire; without one, the consent to ask for.
    pub(super) async fn token(
        &self,
        tenant: &str,
        user: &User,
        upstream: &str,
    ) -> Result<Token, Refusal> {
        let key = connection_key(tenant, &user.issuer, &user.subject, upstream);
        let aad = connection_aad(tenant, &user.issuer, &user.subject, upstream);
        let Some(connection) = self.read_connection(&key, &aad).await? else {
            return Err(Refusal::consent(self.ask(tenant, user, upstream).await?));
        };
        let now = now_s();
        let left = connection.expires_at.map(|at| at.saturating_sub(now));
        if left.is_none_or(|left| left > 30) {
            return Ok(Token {
                token: connection.access_token,
                lifetime: REREAD * 2,
                refreshed: false,
            });
        }
        match self
            .refresh(&key, &aad, connection, tenant, user, upstream)
            .await?
        {
            Some(token) => Ok(token),
            None => Err(Refusal::consent(self.ask(tenant, user, upstream).await?)),
        }
    }

    async fn read_connection(&self, key: &str, aad: &str) -> Result<Option<Connection>, Refusal> {
        let sealed = self.keep.get(key).await.map_err(|_| store_down())?;
        let Some(sealed) = sealed else {
            return Ok(None);
        };
        let opened = seal::open(&self.settings.keys, aad, &sealed)
            .and_then(|plain| serde_json::from_slice(&plain).ok());
        if opened.is_none() {
            // Absent: the user consents again (a key withdrawn, a record moved).
            tracing::warn!("a consent record cannot be opened; its user will be asked again");
        }
        Ok(opened)
    }

    async fn write_connection(&self, key: &str, aad: &str, c: &Connection) -> Result<(), Refusal> {
        let sealed = serde_json::to_vec(c)
            .ok()
            .and_then(|plain| seal::seal(&self.settings.keys, aad, &plain))
            .ok_or_else(|| Refusal::invalid("a consent record cannot be sealed"))?;
        self.keep
            .put(key, &sealed, None)
            .await
            .map_err(|_| store_down())
    }

    /// A refreshed token, once per connection at a time; `None` when the
    /// server refused the refresh token (`invalid_grant`): consent again.
    async fn refresh(
        &self,
        key: &str,
        aad: &str,
        held: Connection,
        tenant: &str,
        user: &User,
        upstream: &str,
    ) -> Result<Option<Token>, Refusal> {
        let lock = self.refreshing.entry(key.to_owned()).or_default().clone();
        let _one = lock.lock().await;
        // Another call (or replica) may have refreshed it meanwhile.
        let held = match self.read_connection(key, aad).await? {
            Some(c) if c.access_token != held.access_token => {
                return Ok(Some(Token {
                    token: c.access_token,
                    lifetime: REREAD * 2,
                    refreshed: true,
                }));
            }
            Some(c) => c,
            None => return Ok(None),
        };
        let Some(refresh_token) = held.refresh_token.clone() else {
            let _ = self.keep.remove(key).await;
            return Ok(None);
        };
        let mut form = vec![
            ("grant_type", "refresh_token"),
            ("refresh_token", &*refresh_token),
        ];
        if let Some(resource) = &held.resource {
            form.push(("resource", resource));
        }
        let answer = self
            .token_request(upstream, "refresh_token", &held.server, &held.client, &form)
            .await;
        self.audit(
            tenant,
            &user.subject,
            upstream,
            "refresh",
            answer.as_ref().map_or_else(|r| r.reason, |_| "ok"),
        );
        let answer = match answer {
            Ok(answer) => answer,
            Err(r) if r.error.as_deref() == Some("invalid_grant") => {
                let _ = self.keep.remove(key).await;
                return Ok(None);
            }
            Err(r) => return Err(r),
        };
        let connection = Connection {
            refresh_token: answer.refresh_token.or(held.refresh_token),
            ..connection_of(
                answer.access_token.unwrap_or_default(),
                answer.expires_in,
                held.server,
                held.client,
                held.resource,
                answer.scope.or(held.scope),
            )
        };
        self.write_connection(key, aad, &connection).await?;
        Ok(Some(Token {
            token: connection.access_token,
            lifetime: REREAD * 2,
            refreshed: true,
        }))
    }

    /// A request of `server`'s token endpoint as `client`, counted and
    /// timed as `grant`: its answer, which holds an access token.
    async fn token_request(
        &self,
        upstream: &str,
        grant: &str,
        server: &AuthServer,
        client: &Client,
        form: &[(&str, &str)],
    ) -> Result<TokenAnswer, Refusal> {
        let started = std::time::Instant::now();
        let auth = ClientAuth {
            id: &client.client_id,
            secret: client.client_secret.as_deref(),
            basic: client.basic,
        };
        let result = post_form(
            &self.http,
            &server.token_endpoint,
            form,
            Some(auth),
            self.timeout,
        )
        .await
        .and_then(|body| {
            serde_json::from_slice::<TokenAnswer>(&body)
                .ok()
                .filter(|a| a.access_token.as_deref().is_some_and(|t| !t.is_empty()))
                .ok_or_else(|| Refusal::invalid("the token answer has no access_token"))
        });
        self.count_request(upstream, grant, result.as_ref().err(), started);
        result
    }

    fn count_request(
        &self,
        upstream: &str,
        grant: &str,
        failed: Option<&Refusal>,
        started: std::time::Instant,
    ) {
        let outcome = failed.map_or("ok", |r| r.reason);
        self.metrics
            .upstream_token_requests
            .with_label_values(&[upstream, grant, outcome])
            .inc();
        self.metrics
            .upstream_token_seconds
            .with_label_values(&[upstream, grant])
            .observe(started.elapsed().as_secs_f64());
    }

    /// The authorization server of `upstream`, found once.
    async fn server_of(&self, upstream: &str) -> Result<AuthServer, Refusal> {
        if let Some(found) = self.servers.get(upstream) {
            return Ok(found.clone());
        }
        let consent = self
            .upstreams
            .get(upstream)
            .map(|c| c.clone())
            .ok_or_else(|| Refusal::invalid("the upstream asks for no consent"))?;
        let found = match &consent.server {
            ConsentServer::Endpoints {
                authorization,
                token,
            } => AuthServer {
                issuer: String::new(),
                authorization_endpoint: authorization.clone(),
                token_endpoint: token.clone(),
                registration_endpoint: None,
                revocation_endpoint: None,
                iss_in_response: false,
            },
            ConsentServer::Issuer(issuer) => {
                server::of_issuer(&self.http, issuer, self.timeout).await?
            }
            ConsentServer::OfResource(url) => {
                let issuer = server::issuer_of_resource(&self.http, url, self.timeout).await?;
                server::of_issuer(&self.http, &issuer, self.timeout).await?
            }
        };
        self.servers.insert(upstream.into(), found.clone());
        Ok(found)
    }

    /// The consent `user` is asked for: a new flow, its URL the gateway's.
    pub(super) async fn ask(
        &self,
        tenant: &str,
        user: &User,
        upstream: &str,
    ) -> Result<ConsentAsk, Refusal> {
        let ask = self.begin(tenant, user, upstream).await?;
        self.counted(upstream, "started");
        self.audit(tenant, &user.subject, upstream, "consent", "started");
        Ok(ask)
    }

    /// The upstreams `user` connected: `{upstream, scope, expires_at}` each.
    pub async fn connections(
        &self,
        tenant: &str,
        user: &User,
    ) -> Result<Vec<serde_json::Value>, Unavailable> {
        let prefix = format!(
            "conn:{tenant}:{}:",
            user_digest(&user.issuer, &user.subject)
        );
        let mut found = Vec::new();
        for key in self.keep.keys_like(&prefix, "").await? {
            let upstream = &key[prefix.len()..];
            let aad = connection_aad(tenant, &user.issuer, &user.subject, upstream);
            let Ok(Some(c)) = self.read_connection(&key, &aad).await else {
                continue;
            };
            found.push(serde_json::json!({
                "upstream": upstream,
                "scope": c.scope,
                "expires_at": c.expires_at,
            }));
        }
        found.sort_by(|a, b| a["upstream"].as_str().cmp(&b["upstream"].as_str()));
        Ok(found)
    }

    /// Drops `user`'s connection to `upstream`, revoking its refresh token
    /// at the server when it can (RFC 7009): whether there was one.
    pub async fn disconnect(
        &self,
        tenant: &str,
        user: &User,
        upstream: &str,
    ) -> Result<bool, Unavailable> {
        let key = connection_key(tenant, &user.issuer, &user.subject, upstream);
        let aad = connection_aad(tenant, &user.issuer, &user.subject, upstream);
        let held = self
            .read_connection(&key, &aad)
            .await
            .map_err(|_| Unavailable)?;
        let removed = self.keep.remove(&key).await?;
        if let Some(c) = held {
            self.revoke_at_server(upstream, &c).await;
        }
        if removed {
            self.counted(upstream, "revoked");
            self.audit(tenant, &user.subject, upstream, "revoke", "ok");
        }
        Ok(removed)
    }

    async fn revoke_at_server(&self, upstream: &str, c: &Connection) {
        let (Some(endpoint), Some(token)) = (&c.server.revocation_endpoint, &c.refresh_token)
        else {
            return;
        };
        let auth = ClientAuth {
            id: &c.client.client_id,
            secret: c.client.client_secret.as_deref(),
            basic: c.client.basic,
        };
        let form = [
            ("token", token.as_str()),
            ("token_type_hint", "refresh_token"),
        ];
        if let Err(r) = post_form(&self.http, endpoint, &form, Some(auth), self.timeout).await {
            tracing::warn!(
                upstream,
                reason = r.reason,
                "revoking a refresh token failed; it was dropped here"
            );
        }
    }

    /// An admin's removal: every connection of `tenant` to `upstream`, or
    /// one user's: how many there were.
    pub async fn remove(
        &self,
        tenant: &str,
        upstream: &str,
        user: Option<(&str, &str)>,
    ) -> Result<usize, Unavailable> {
        let keys = match user {
            Some((issuer, subject)) => vec![connection_key(tenant, issuer, subject, upstream)],
            None => {
                self.keep
                    .keys_like(&format!("conn:{tenant}:"), &format!(":{upstream}"))
                    .await?
            }
        };
        let mut removed = 0;
        for key in keys {
            if self.keep.remove(&key).await? {
                removed += 1;
                self.counted(upstream, "revoked");
            }
        }
        Ok(removed)
    }
}

/// A connection from a token answer.
fn connection_of(
    access_token: String,
    expires_in: Option<serde_json::Value>,
    server: AuthServer,
    client: Client,
    resource: Option<String>,
    scope: Option<String>,
) -> Connection {
    let lifetime = expires_in
        .and_then(|v| v.as_u64().or_else(|| v.as_str()?.parse().ok()))
        .or_else(|| super::token::jwt_lifetime(&access_token).map(|d| d.as_secs()));
    Connection {
        access_token,
        refresh_token: None,
        expires_at: lifetime.map(|l| now_s() + l),
        scope,
        server,
        client,
        resource,
    }
}

fn store_down() -> Refusal {
    Refusal::new("unreachable", "the shared store does not answer")
}
