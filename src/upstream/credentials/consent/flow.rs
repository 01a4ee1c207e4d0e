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
use super::{Consents, connection_key, now_s, seal};
use crate::upstream::credentials::token::{ConsentAsk, Refusal, encode};

/// The cookie that binds a flow to the browser that began it.
pub const COOKIE: &str = "mcp_gateway_consent";

/// A flow between its steps.
#[derive(Serialize, Deserialize)]
pub(super) struct Flow {
    pub(super) tenant: String,
    pub(super) issuer: String,
    pub(super) subject: String,
    pub(super) upstream: String,
    pub(super) expires_at: u64,
    /// SHA-256 of the browser's cookie, once it has come.
    pub(super) browser: Option<String>,
    /// The step under way: the identity provider's, then the upstream's.
    pub(super) leg: Option<Leg>,
}

#[derive(Serialize, Deserialize)]
pub(super) struct Leg {
    pub(super) verifier: String,
    pub(super) nonce: Option<String>,
    pub(super) server: AuthServer,
    pub(super) client: Client,
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

pub(super) fn page(status: u16, title: &'static str, text: impl Into<String>) -> Answer {
    Answer::Page(Page {
        status,
        title,
        text: text.into(),
    })
}

/// 128 random bits, URL-safe; `None` without a random source (every step
/// then refuses: nothing guessable is ever handed out).
pub(super) fn random() -> Option<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).ok()?;
    Some(B64.encode(bytes))
}

pub(super) fn digest(text: &str) -> String {
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
    /// The flow for `user`'s consent to `upstream`: the one asked for
    /// before while no browser has taken it up (one such flow per user and
    /// upstream, however often they call), else a new one.
    pub(super) async fn begin(
        &self,
        tenant: &str,
        user: &crate::tenant::User,
        upstream: &str,
    ) -> Result<ConsentAsk, Refusal> {
        let pending = format!(
            "pending:{}",
            connection_key(tenant, &user.issuer, &user.subject, upstream)
        );
        let held = self
            .keep
            .get(&pending)
            .await
            .map_err(|_| super::store_down())?;
        if let Some(id) = held
            && let Ok(Some(flow)) = self.get_flow(&id).await
            && flow.browser.is_none()
        {
            return Ok(self.ask_of(id));
        }
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
        self.keep
            .put(&pending, &id, Some(self.settings.ttl))
            .await
            .map_err(|_| super::store_down())?;
        Ok(self.ask_of(id))
    }

    fn ask_of(&self, id: String) -> ConsentAsk {
        ConsentAsk {
            url: format!(
                "{}/oauth/upstream/connect?id={id}",
                self.settings.public_url
            ),
            id,
        }
    }

    pub(super) async fn put_flow(&self, id: &str, flow: &Flow) -> Result<(), super::Unavailable> {
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
    pub(super) async fn end_flow(&self, id: &str) {
        let _ = self.keep.remove(&flow_key(id)).await;
    }

    /// A state of `step` for flow `id`, used once.
    pub(super) async fn new_state(
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

    pub(super) fn redirect(&self, step: &str) -> String {
        format!("{}/oauth/upstream/{step}", self.settings.public_url)
    }

    /// The flow a returning browser's state names for `step`, checked:
    /// the state used up, the browser the one that began it, the `iss`
    /// the server's. `Err`: the page refusing it (nothing sent anywhere).
    pub(super) async fn returning(
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
}

/// `base?query&state=state`, `base` keeping its own query.
pub(super) fn with_query(base: &str, query: &[(&str, &str)], state: &str) -> String {
    let mut all = query.to_vec();
    all.push(("state", state));
    let joiner = if base.contains('?') { '&' } else { '?' };
    format!("{base}{joiner}{}", encode(&all))
}

pub(super) fn unavailable() -> Answer {
    page(
        503,
        "Try again",
        "The gateway cannot keep this consent right now. Try again in a moment.",
    )
}

pub(super) fn server_failed(whom: &str, r: &Refusal) -> Answer {
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
        // SHA-256("abc") of FIPS 180-2 (ba7816bf...15ad), base64url unpadded.
        assert_eq!(digest("abc"), "ungWv48Bz-pBQUDeXa4iI7ADYaOWF3qctBD_YfIAFa0");
    }
}
