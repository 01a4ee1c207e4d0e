//! The browser's steps of a consent, each on the agent listener under
//! `{public_url}/oauth/upstream/`:
//!
//! 1. `connect?id=E`: the flow the agent was handed, bound to this browser
//!    (a cookie of its own), and the browser sent to the user's identity
//!    provider to say who they are (code + PKCE, a nonce);
//! 2. `login`: unless the ID token names the flow's user, 403 and the flow
//!    ends (nobody attaches their upstream account to another user, or
//!    another user's to theirs); else the browser goes to the upstream's
//!    authorization server (code + PKCE S256, `resource`, `scope`);
//! 3. `callback`: its code redeemed once, the tokens kept; 200.
//!
//! Every `state` is single-use and names its step; a state unknown, used,
//! expired or from another browser, or an `iss` not the server's (RFC
//! 9207), is refused (400) before anything is sent to a server. The ID
//! token comes straight from the identity provider's token endpoint over
//! the gateway's own connection, so its claims are checked and its
//! signature is not (OpenID Connect Core 3.1.3.7, step 6).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::server::{self, AuthServer, Client};
use super::{Consents, connection_aad, connection_key, connection_of, now_s, seal};
use crate::upstream::credentials::token::{ConsentAsk, Refusal, TokenAnswer, encode};

/// The cookie that binds a flow to the browser that began it.
pub const COOKIE: &str = "mcp_gateway_consent";

/// A flow between its steps.
#[derive(Serialize, Deserialize)]
struct Flow {
    tenant: String,
    issuer: String,
    subject: String,
    upstream: String,
    expires_at: u64,
    /// SHA-256 of the browser's cookie, once it has come.
    browser: Option<String>,
    /// The step under way: the identity provider's, then the upstream's.
    leg: Option<Leg>,
}

#[derive(Serialize, Deserialize)]
struct Leg {
    verifier: String,
    nonce: Option<String>,
    server: AuthServer,
    client: Client,
}

/// What a step answers the browser.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// 303 to `location`, with the binding cookie to set when it is new.
    Redirect {
        location: String,
        cookie: Option<String>,
    },
    Page(Page),
}

/// A page of the gateway's own: its status, and what it says.
#[derive(Debug, PartialEq, Eq)]
pub struct Page {
    pub status: u16,
    pub title: &'static str,
    pub text: String,
}

fn page(status: u16, title: &'static str, text: impl Into<String>) -> Answer {
    Answer::Page(Page {
        status,
        title,
        text: text.into(),
    })
}

/// 128 random bits, URL-safe; `None` without a random source (every step
/// then refuses: nothing guessable is ever handed out).
fn random() -> Option<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).ok()?;
    Some(B64.encode(bytes))
}

fn digest(text: &str) -> String {
    B64.encode(Sha256::digest(text.as_bytes()))
}

fn flow_key(id: &str) -> String {
    format!("flow:{id}")
}

fn flow_aad(id: &str) -> String {
    format!("flow\n{id}")
}

/// The query of a step.
#[derive(Debug, Default, Deserialize)]
pub struct Returned {
    pub id: Option<String>,
    pub code: Option<String>,
    pub state: Option<String>,
    pub iss: Option<String>,
    pub error: Option<String>,
}

impl Consents {
    /// A new flow for `user`'s consent to `upstream`.
    pub(super) async fn begin(
        &self,
        tenant: &str,
        user: &crate::tenant::User,
        upstream: &str,
    ) -> Result<ConsentAsk, Refusal> {
        let id = random().ok_or_else(|| Refusal::invalid("no random source"))?;
        let flow = Flow {
            tenant: tenant.to_owned(),
            issuer: user.issuer.to_string(),
            subject: user.subject.to_string(),
            upstream: upstream.to_owned(),
            expires_at: now_s() + self.settings.ttl.as_secs(),
            browser: None,
            leg: None,
        };
        self.put_flow(&id, &flow)
            .await
            .map_err(|_| super::store_down())?;
        Ok(ConsentAsk {
            url: format!(
                "{}/oauth/upstream/connect?id={id}",
                self.settings.public_url
            ),
            id,
        })
    }

    async fn put_flow(&self, id: &str, flow: &Flow) -> Result<(), super::Unavailable> {
        let sealed = serde_json::to_vec(flow)
            .ok()
            .and_then(|plain| seal::seal(&self.settings.keys, &flow_aad(id), &plain))
            .ok_or(super::Unavailable)?;
        let ttl = std::time::Duration::from_secs(flow.expires_at.saturating_sub(now_s()).max(1));
        self.keep.put(&flow_key(id), &sealed, Some(ttl)).await
    }

    async fn get_flow(&self, id: &str) -> Result<Option<Flow>, super::Unavailable> {
        let Some(sealed) = self.keep.get(&flow_key(id)).await? else {
            return Ok(None);
        };
        Ok(seal::open(&self.settings.keys, &flow_aad(id), &sealed)
            .and_then(|plain| serde_json::from_slice::<Flow>(&plain).ok())
            .filter(|f| f.expires_at > now_s()))
    }

    /// Ends a flow that failed or succeeded: its URL serves no more.
    async fn end_flow(&self, id: &str) {
        let _ = self.keep.remove(&flow_key(id)).await;
    }

    /// A state of `step` for flow `id`, used once.
    async fn new_state(
        &self,
        step: &str,
        id: &str,
        flow: &Flow,
    ) -> Result<String, super::Unavailable> {
        let state = random().ok_or(super::Unavailable)?;
        let ttl = std::time::Duration::from_secs(flow.expires_at.saturating_sub(now_s()).max(1));
        self.keep
            .put(
                &format!("state:{state}"),
                &format!("{step}:{id}"),
                Some(ttl),
            )
            .await?;
        Ok(state)
    }

    /// Step 1: `GET connect?id=E`.
    pub async fn connect(&self, id: &str, cookie: Option<&str>) -> Answer {
        let Ok(flow) = self.get_flow(id).await else {
            return unavailable();
        };
        let Some(mut flow) = flow else {
            return page(
                400,
                "Link expired",
                "This consent link is unknown, used or expired. Ask your agent again for a new one.",
            );
        };
        let (cookie, new_cookie) = match cookie {
            Some(c) if !c.is_empty() => (c.to_owned(), None),
            _ => {
                let Some(c) = random() else {
                    return unavailable();
                };
                (c.clone(), Some(c))
            }
        };
        match &flow.browser {
            Some(bound) if *bound != digest(&cookie) => {
                return page(
                    400,
                    "Another browser",
                    "This consent was begun in another browser.",
                );
            }
            _ => flow.browser = Some(digest(&cookie)),
        }
        let Some(login) = self
            .settings
            .logins
            .iter()
            .find(|l| l.issuer == flow.issuer)
        else {
            return page(
                400,
                "No login",
                "Your identity provider has no login client for the gateway.",
            );
        };
        let idp = match server::of_issuer(&self.http, &login.issuer, self.timeout).await {
            Ok(idp) => idp,
            Err(r) => return server_failed("your identity provider", &r),
        };
        let client = Client {
            client_id: login.client_id.clone(),
            client_secret: Some(login.client_secret.clone()),
            basic: true,
        };
        let (Some(v1), Some(v2), Some(nonce)) = (random(), random(), random()) else {
            return unavailable();
        };
        let verifier = v1 + &v2;
        let query = [
            ("response_type", "code"),
            ("client_id", &*client.client_id),
            ("redirect_uri", &*self.redirect("login")),
            ("scope", "openid"),
            ("nonce", &*nonce),
            ("code_challenge", &*digest(&verifier)),
            ("code_challenge_method", "S256"),
        ];
        let Ok(state) = self.new_state("login", id, &flow).await else {
            return unavailable();
        };
        let location = with_query(&idp.authorization_endpoint, &query, &state);
        flow.leg = Some(Leg {
            verifier,
            nonce: Some(nonce),
            server: idp,
            client,
        });
        if self.put_flow(id, &flow).await.is_err() {
            return unavailable();
        }
        Answer::Redirect {
            location,
            cookie: new_cookie,
        }
    }

    fn redirect(&self, step: &str) -> String {
        format!("{}/oauth/upstream/{step}", self.settings.public_url)
    }

    /// The flow a returning browser's state names for `step`, checked:
    /// the state used up, the browser the one that began it, the `iss`
    /// the server's. `Err`: the page refusing it (nothing sent anywhere).
    async fn returning(
        &self,
        step: &str,
        r: &Returned,
        cookie: Option<&str>,
    ) -> Result<(String, Flow, Leg), Answer> {
        let unknown = || {
            page(
                400,
                "Link expired",
                "This step is unknown, used or expired. Ask your agent again.",
            )
        };
        let state = r.state.as_deref().ok_or_else(unknown)?;
        let named = self
            .keep
            .take(&format!("state:{state}"))
            .await
            .map_err(|_| unavailable())?
            .ok_or_else(unknown)?;
        let id = named
            .strip_prefix(step)
            .and_then(|rest| rest.strip_prefix(':'))
            .ok_or_else(unknown)?
            .to_owned();
        let mut flow = self
            .get_flow(&id)
            .await
            .map_err(|_| unavailable())?
            .ok_or_else(unknown)?;
        let same_browser = cookie.is_some_and(|c| flow.browser.as_deref() == Some(&*digest(c)));
        if !same_browser {
            return Err(page(
                400,
                "Another browser",
                "This consent was begun in another browser.",
            ));
        }
        let leg = flow.leg.take().ok_or_else(unknown)?;
        let iss_ok = match (&r.iss, leg.server.iss_in_response) {
            (Some(iss), _) => leg.server.issuer.is_empty() || *iss == leg.server.issuer,
            (None, needed) => !needed,
        };
        if !iss_ok {
            return Err(page(
                400,
                "Wrong server",
                "The answer names another authorization server than the one asked.",
            ));
        }
        Ok((id, flow, leg))
    }

    /// Step 2: `GET login?code&state[&iss]`, from the identity provider.
    pub async fn login(&self, r: &Returned, cookie: Option<&str>) -> Answer {
        let (id, mut flow, leg) = match self.returning("login", r, cookie).await {
            Ok(found) => found,
            Err(answer) => return answer,
        };
        let (Some(code), None) = (&r.code, &r.error) else {
            self.end_flow(&id).await;
            return page(
                403,
                "Not signed in",
                "Your identity provider did not sign you in.",
            );
        };
        let redirect = self.redirect("login");
        let form = [
            ("grant_type", "authorization_code"),
            ("code", code.as_str()),
            ("redirect_uri", &*redirect),
            ("code_verifier", &*leg.verifier),
        ];
        let answer = match self
            .token_request(
                &flow.upstream,
                "authorization_code",
                &leg.server,
                &leg.client,
                &form,
            )
            .await
        {
            Ok(a) => a,
            Err(r) => {
                self.end_flow(&id).await;
                return server_failed("your identity provider", &r);
            }
        };
        if !self.names_the_user(&answer, &flow, &leg) {
            self.end_flow(&id).await;
            self.audit(
                &flow.tenant,
                &flow.subject,
                &flow.upstream,
                "login",
                "another_user",
            );
            return page(
                403,
                "Another user",
                "You signed in as another user than the one whose agent asked. Nothing was connected.",
            );
        }
        match self.upstream_leg(&id, &mut flow).await {
            Ok(location) => Answer::Redirect {
                location,
                cookie: None,
            },
            Err(answer) => {
                self.end_flow(&id).await;
                answer
            }
        }
    }

    /// Whether the ID token of `answer` is the flow's user's, issued now
    /// for the gateway's login client, with the flow's nonce.
    fn names_the_user(&self, answer: &TokenAnswer, flow: &Flow, leg: &Leg) -> bool {
        #[derive(Deserialize)]
        struct Claims {
            iss: String,
            sub: String,
            aud: serde_json::Value,
            nonce: Option<String>,
            exp: u64,
        }
        let claims = answer
            .id_token
            .as_deref()
            .and_then(|t| t.split('.').nth(1))
            .and_then(|p| B64.decode(p.trim_end_matches('=')).ok())
            .and_then(|bytes| serde_json::from_slice::<Claims>(&bytes).ok());
        let Some(c) = claims else {
            return false;
        };
        let client_id = &leg.client.client_id;
        let audience = match &c.aud {
            serde_json::Value::String(a) => a == client_id,
            serde_json::Value::Array(all) => all.iter().any(|a| a.as_str() == Some(client_id)),
            _ => false,
        };
        c.iss == flow.issuer
            && c.sub == flow.subject
            && audience
            && c.nonce.is_some()
            && c.nonce == leg.nonce
            && c.exp > now_s()
    }

    /// The upstream's authorization server's step: its URL, the flow kept.
    async fn upstream_leg(&self, id: &str, flow: &mut Flow) -> Result<String, Answer> {
        let upstream = flow.upstream.clone();
        let consent = self
            .upstreams
            .get(&*upstream)
            .map(|c| c.clone())
            .ok_or_else(|| {
                page(
                    400,
                    "Unknown upstream",
                    "This upstream no longer asks for consent.",
                )
            })?;
        let server = self
            .server_of(&upstream)
            .await
            .map_err(|r| server_failed("the upstream's authorization server", &r))?;
        let client = self
            .client_at(&upstream, &server, consent.client.as_ref())
            .await
            .map_err(|r| server_failed("the upstream's authorization server", &r))?;
        let (Some(v1), Some(v2)) = (random(), random()) else {
            return Err(unavailable());
        };
        let verifier = v1 + &v2;
        let mut query = vec![
            ("response_type", "code".to_owned()),
            ("client_id", client.client_id.clone()),
            ("redirect_uri", self.redirect("callback")),
            ("code_challenge", digest(&verifier)),
            ("code_challenge_method", "S256".to_owned()),
        ];
        if let Some(scope) = &consent.scope {
            query.push(("scope", scope.clone()));
        }
        if let Some(resource) = &consent.resource {
            query.push(("resource", resource.clone()));
        }
        let location = server.authorization_endpoint.clone();
        flow.leg = Some(Leg {
            verifier,
            nonce: None,
            server,
            client,
        });
        let state = self
            .new_state("consent", id, flow)
            .await
            .map_err(|_| unavailable())?;
        self.put_flow(id, flow).await.map_err(|_| unavailable())?;
        let query: Vec<(&str, &str)> = query.iter().map(|(k, v)| (*k, v.as_str())).collect();
        Ok(with_query(&location, &query, &state))
    }

    /// The gateway's client at `server`: configured, else registered once
    /// per issuer (RFC 7591) and kept like tokens.
    async fn client_at(
        &self,
        upstream: &str,
        server: &AuthServer,
        configured: Option<&crate::config::consent::ConsentClient>,
    ) -> Result<Client, Refusal> {
        if let Some(c) = configured {
            return Ok(Client {
                client_id: c.client_id.clone(),
                client_secret: c.client_secret.clone(),
                basic: c.basic,
            });
        }
        let redirect = self.redirect("callback");
        let key = format!("reg:{}", digest(&format!("{}\n{redirect}", server.issuer)));
        let aad = format!("reg\n{}", server.issuer);
        let kept = self.keep.get(&key).await.map_err(|_| super::store_down())?;
        if let Some(client) = kept
            .and_then(|s| seal::open(&self.settings.keys, &aad, &s))
            .and_then(|plain| serde_json::from_slice::<Client>(&plain).ok())
        {
            return Ok(client);
        }
        let started = std::time::Instant::now();
        let registered = server::register(&self.http, server, &redirect, self.timeout).await;
        self.count_request(upstream, "registration", registered.as_ref().err(), started);
        let client = registered?;
        let sealed = serde_json::to_vec(&client)
            .ok()
            .and_then(|plain| seal::seal(&self.settings.keys, &aad, &plain))
            .ok_or_else(|| Refusal::invalid("a registration cannot be sealed"))?;
        self.keep
            .put(&key, &sealed, None)
            .await
            .map_err(|_| super::store_down())?;
        Ok(client)
    }

    /// Step 3: `GET callback?code&state[&iss]`, from the upstream's server.
    pub async fn callback(&self, r: &Returned, cookie: Option<&str>) -> Answer {
        let (id, flow, leg) = match self.returning("consent", r, cookie).await {
            Ok(found) => found,
            Err(answer) => return answer,
        };
        self.end_flow(&id).await;
        let (tenant, subject, upstream) = (&flow.tenant, &flow.subject, &flow.upstream);
        let (Some(code), None) = (&r.code, &r.error) else {
            self.counted(upstream, "refused");
            self.audit(tenant, subject, upstream, "consent", "refused");
            return page(
                403,
                "Not connected",
                "The upstream's authorization server did not grant access. Nothing was connected.",
            );
        };
        let redirect = self.redirect("callback");
        let resource = self
            .upstreams
            .get(&**upstream)
            .and_then(|c| c.resource.clone());
        let mut form = vec![
            ("grant_type", "authorization_code"),
            ("code", code.as_str()),
            ("redirect_uri", &*redirect),
            ("code_verifier", &*leg.verifier),
        ];
        if let Some(resource) = &resource {
            form.push(("resource", resource));
        }
        let answer = match self
            .token_request(
                upstream,
                "authorization_code",
                &leg.server,
                &leg.client,
                &form,
            )
            .await
        {
            Ok(a) => a,
            Err(r) => {
                self.counted(upstream, "refused");
                self.audit(tenant, subject, upstream, "consent", r.reason);
                return server_failed("the upstream's authorization server", &r);
            }
        };
        let mut connection = connection_of(
            answer.access_token.unwrap_or_default(),
            answer.expires_in,
            leg.server,
            leg.client,
            resource,
            answer.scope,
        );
        connection.refresh_token = answer.refresh_token;
        let key = connection_key(tenant, &flow.issuer, subject, upstream);
        let aad = connection_aad(tenant, &flow.issuer, subject, upstream);
        if self
            .write_connection(&key, &aad, &connection)
            .await
            .is_err()
        {
            return unavailable();
        }
        self.counted(upstream, "connected");
        self.audit(tenant, subject, upstream, "consent", "connected");
        page(
            200,
            "Connected",
            format!(
                "Your account is connected to {upstream}. You can close this page and return to your agent."
            ),
        )
    }
}

/// `base?query&state=state`, `base` keeping its own query.
fn with_query(base: &str, query: &[(&str, &str)], state: &str) -> String {
    let mut all = query.to_vec();
    all.push(("state", state));
    let joiner = if base.contains('?') { '&' } else { '?' };
    format!("{base}{joiner}{}", encode(&all))
}

fn unavailable() -> Answer {
    page(
        503,
        "Try again",
        "The gateway cannot keep this consent right now. Try again in a moment.",
    )
}

fn server_failed(whom: &str, r: &Refusal) -> Answer {
    let why = match r.reason {
        "timeout" => "did not answer in time",
        "unreachable" => "cannot be reached",
        "refused" => "refused the request",
        _ => "answered what the gateway cannot use",
    };
    page(
        502,
        "Try again",
        format!("{whom} {why}. Nothing was connected."),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redirect_keeps_the_servers_own_query() {
        assert_eq!(
            with_query("https://as/auth?x=1", &[("scope", "read write")], "s"),
            "https://as/auth?x=1&scope=read%20write&state=s"
        );
        assert_eq!(
            with_query("https://as/auth", &[], "s"),
            "https://as/auth?state=s"
        );
    }

    #[test]
    fn a_pkce_challenge_is_s256_of_its_verifier() {
        // RFC 7636, appendix B.
        assert_eq!(
            digest("dBjftJeZ4CVP-mJ92K9Qmu_ZhJsFQxZk-IHSgnEYkV8"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }
}
