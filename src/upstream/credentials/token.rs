//! Requests to an authorization server: the client credentials grant
//! (RFC 6749 section 4.4, with RFC 8707's `resource`), the token exchange
//! grant (RFC 8693), and where its token
//! endpoint is (RFC 8414 metadata, then OpenID discovery). Every request
//! waits `timeout` at most; no token, code or secret reaches a log line or
//! an error.

use std::time::Duration;

use serde::Deserialize;

use crate::config::upstream_auth::OAuthClient;

/// Why no credential could be had, as the caller is told (-32009).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// `timeout`, `unreachable`, `refused`, `invalid_response`, `no_user`
    /// or `rejected`.
    pub reason: &'static str,
    /// The authorization server's OAuth error code, when it refused.
    pub error: Option<String>,
    /// What went wrong, for the log.
    pub detail: String,
    /// `consent_required`: where the user gives it.
    pub consent: Option<Box<ConsentAsk>>,
}

/// A consent the user has to give before the call can run: the URL of
/// the gateway's consent page, and its elicitation id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsentAsk {
    pub url: String,
    pub id: String,
}

impl Refusal {
    pub(super) fn new(reason: &'static str, detail: impl Into<String>) -> Self {
        Refusal {
            reason,
            error: None,
            detail: detail.into(),
            consent: None,
        }
    }

    /// The user's consent is needed first, at `ask.url`.
    pub fn consent(ask: ConsentAsk) -> Self {
        Refusal {
            reason: "consent_required",
            error: None,
            detail: "the user has not connected this upstream".into(),
            consent: Some(Box::new(ask)),
        }
    }

    pub fn invalid(detail: impl Into<String>) -> Self {
        Refusal::new("invalid_response", detail)
    }

    /// A per-user mode's call by a caller who is no user (an API key, or a
    /// JWT without a subject).
    pub fn no_user() -> Self {
        Refusal::new(
            "no_user",
            "the upstream acts for the caller's user, and the caller bears no user's token",
        )
    }

    /// The upstream refused the credential twice.
    pub fn rejected() -> Self {
        Refusal::new(
            "rejected",
            "the upstream refused the credential (401) twice",
        )
    }

    pub(super) fn of(e: &reqwest::Error) -> Self {
        if e.is_timeout() {
            Refusal::new("timeout", "the authorization server did not answer in time")
        } else {
            Refusal::new("unreachable", "the authorization server cannot be reached")
        }
    }
}

/// A token and how long it lives.
pub(super) struct Token {
    pub token: String,
    pub lifetime: Duration,
    /// Obtained by refreshing a user's consent (the audit's `refreshed`).
    pub refreshed: bool,
}

#[derive(Deserialize)]
pub(super) struct TokenAnswer {
    pub access_token: Option<String>,
    pub expires_in: Option<serde_json::Value>,
    pub refresh_token: Option<String>,
    pub id_token: Option<String>,
    pub scope: Option<String>,
}

#[derive(Deserialize)]
struct ErrorAnswer {
    error: String,
}

/// The client credentials grant at `endpoint`.
pub(super) async fn client_credentials(
    http: &reqwest::Client,
    endpoint: &str,
    client: &OAuthClient,
    timeout: Duration,
) -> Result<Token, Refusal> {
    grant(
        http,
        endpoint,
        client,
        vec![("grant_type", "client_credentials")],
        timeout,
    )
    .await
}

/// The token exchange grant at `endpoint` (RFC 8693): `subject` (of type
/// `subject_type`) exchanged for an access token for the client's
/// resource, with `actor` (a JWT) as the actor when given.
pub(super) async fn exchange(
    http: &reqwest::Client,
    endpoint: &str,
    client: &OAuthClient,
    (subject, subject_type): (&str, &str),
    actor: Option<&str>,
    timeout: Duration,
) -> Result<Token, Refusal> {
    let mut form = vec![
        (
            "grant_type",
            "urn:ietf:params:oauth:grant-type:token-exchange",
        ),
        ("subject_token", subject),
        ("subject_token_type", subject_type),
        (
            "requested_token_type",
            "urn:ietf:params:oauth:token-type:access_token",
        ),
    ];
    if let Some(actor) = actor {
        form.push(("actor_token", actor));
        form.push(("actor_token_type", "urn:ietf:params:oauth:token-type:jwt"));
    }
    grant(http, endpoint, client, form, timeout).await
}

/// A request of the token endpoint: `form` with the client's resource,
/// scope and audience, the client authenticated as configured.
async fn grant<'a>(
    http: &reqwest::Client,
    endpoint: &str,
    client: &'a OAuthClient,
    mut form: Vec<(&'a str, &'a str)>,
    timeout: Duration,
) -> Result<Token, Refusal> {
    if let Some(resource) = &client.resource {
        form.push(("resource", resource));
    }
    if let Some(scope) = &client.scope {
        form.push(("scope", scope));
    }
    if let Some(audience) = &client.audience {
        form.push(("audience", audience));
    }
    let auth = ClientAuth {
        id: &client.client_id,
        secret: Some(&client.client_secret),
        basic: client.basic,
    };
    let body = post_form(http, endpoint, &form, Some(auth), timeout).await?;
    let answer: TokenAnswer = serde_json::from_slice(&body)
        .map_err(|_| Refusal::invalid("the token answer is not a JSON object"))?;
    let token = answer
        .access_token
        .filter(|t| !t.is_empty())
        .ok_or_else(|| Refusal::invalid("the token answer has no access_token"))?;
    let lifetime = answer
        .expires_in
        .and_then(|v| v.as_u64().or_else(|| v.as_str()?.parse().ok()))
        .map(Duration::from_secs)
        .or_else(|| jwt_lifetime(&token))
        .unwrap_or(Duration::from_secs(60));
    Ok(Token {
        token,
        lifetime,
        refreshed: false,
    })
}

/// How a client authenticates to a token endpoint: `client_secret_basic`
/// or `_post`, or a public client (its id alone, in the form).
#[derive(Clone, Copy)]
pub(super) struct ClientAuth<'a> {
    pub id: &'a str,
    pub secret: Option<&'a str>,
    pub basic: bool,
}

/// POSTs `form` to `endpoint` as the client: the answer's body when it is
/// a success, else why not (an OAuth error as `refused` with its code).
pub(super) async fn post_form(
    http: &reqwest::Client,
    endpoint: &str,
    form: &[(&str, &str)],
    client: Option<ClientAuth<'_>>,
    timeout: Duration,
) -> Result<bytes::Bytes, Refusal> {
    let mut form = form.to_vec();
    match client {
        Some(c) if c.basic && c.secret.is_some() => {}
        Some(c) => {
            form.push(("client_id", c.id));
            if let Some(secret) = c.secret {
                form.push(("client_secret", secret));
            }
        }
        None => {}
    }
    let mut request = http
        .post(endpoint)
        .timeout(timeout)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("accept", "application/json")
        .body(encode(&form));
    if let Some(ClientAuth {
        id,
        secret: Some(secret),
        basic: true,
    }) = client
    {
        // RFC 6749 section 2.3.1: each part form-encoded before Basic.
        request = request.basic_auth(encode_part(id), Some(encode_part(secret)));
    }
    let response = request.send().await.map_err(|e| Refusal::of(&e))?;
    let status = response.status();
    let body = tokio::time::timeout(timeout, response.bytes())
        .await
        .map_err(|_| Refusal::new("timeout", "the token answer did not arrive in time"))?
        .map_err(|e| Refusal::of(&e))?;
    if status.is_server_error() {
        return Err(Refusal::new(
            "unreachable",
            format!("the authorization server answered HTTP {status}"),
        ));
    }
    if !status.is_success() {
        let error = serde_json::from_slice::<ErrorAnswer>(&body)
            .ok()
            .map(|e| e.error);
        let Some(error) = error.filter(|e| is_error_code(e)) else {
            return Err(Refusal::invalid(format!(
                "HTTP {status} without an OAuth error"
            )));
        };
        return Err(Refusal {
            reason: "refused",
            detail: format!("the authorization server refused: {error}"),
            error: Some(error),
            consent: None,
        });
    }
    Ok(body)
}

/// An OAuth error code: printable ASCII without `"` or `\` (RFC 6749 5.2),
/// so it may be told to the caller as it is.
fn is_error_code(code: &str) -> bool {
    !code.is_empty()
        && code.len() <= 64
        && code
            .bytes()
            .all(|b| (0x20..=0x7e).contains(&b) && b != b'"' && b != b'\\')
}

/// How long a JWT access token has left, from its `exp` (not verified: it
/// is the upstream's to verify; this only says when to get another).
pub(super) fn jwt_lifetime(token: &str) -> Option<Duration> {
    use base64::Engine;
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let exp = serde_json::from_slice::<serde_json::Value>(&bytes).ok()?["exp"].as_u64()?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs();
    Some(Duration::from_secs(exp.saturating_sub(now)))
}

pub(super) fn encode_part(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, FORM).to_string()
}

/// `application/x-www-form-urlencoded`: everything but unreserved characters escaped.
const FORM: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

pub(super) fn encode(form: &[(&str, &str)]) -> String {
    form.iter()
        .map(|(k, v)| format!("{}={}", encode_part(k), encode_part(v)))
        .collect::<Vec<_>>()
        .join("&")
}

#[derive(Deserialize)]
struct Metadata {
    issuer: Option<String>,
    token_endpoint: Option<String>,
}

/// The token endpoint of `issuer`: its RFC 8414 metadata, else its OpenID
/// configuration; the metadata must name the same issuer.
pub(super) async fn discover(
    http: &reqwest::Client,
    issuer: &str,
    timeout: Duration,
) -> Result<String, Refusal> {
    let url =
        reqwest::Url::parse(issuer).map_err(|_| Refusal::invalid("the issuer is not a URL"))?;
    let path = url.path().trim_end_matches('/');
    let origin = url.origin().ascii_serialization();
    let tries = [
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!(
            "{}/.well-known/openid-configuration",
            issuer.trim_end_matches('/')
        ),
    ];
    let mut last = Refusal::invalid("no metadata");
    for at in tries {
        let response = match http.get(&at).timeout(timeout).send().await {
            Ok(r) if r.status().is_success() => r,
            Ok(r) if r.status().is_server_error() => {
                last = Refusal::new("unreachable", format!("metadata: HTTP {}", r.status()));
                continue;
            }
            Ok(r) => {
                last = Refusal::invalid(format!("metadata: HTTP {}", r.status()));
                continue;
            }
            Err(e) => return Err(Refusal::of(&e)),
        };
        let body = tokio::time::timeout(timeout, response.bytes())
            .await
            .map_err(|_| Refusal::new("timeout", "the metadata did not arrive in time"))?
            .map_err(|e| Refusal::of(&e))?;
        let meta: Metadata = serde_json::from_slice(&body)
            .map_err(|_| Refusal::invalid("the metadata is not a JSON object"))?;
        if meta.issuer.as_deref().map(|i| i.trim_end_matches('/'))
            != Some(issuer.trim_end_matches('/'))
        {
            return Err(Refusal::invalid("the metadata names another issuer"));
        }
        return meta
            .token_endpoint
            .ok_or_else(|| Refusal::invalid("the metadata names no token_endpoint"));
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_are_encoded_and_error_codes_checked() {
        assert_eq!(
            encode(&[("scope", "read write"), ("resource", "http://a/mcp?x=1&y")]),
            "scope=read%20write&resource=http%3A%2F%2Fa%2Fmcp%3Fx%3D1%26y"
        );
        assert!(is_error_code("invalid_client"));
        assert!(!is_error_code("bad\"code"));
        assert!(!is_error_code(""));
    }

    #[test]
    fn a_jwts_lifetime_comes_from_its_exp() {
        use base64::Engine;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(format!(r#"{{"exp":{}}}"#, now + 120));
        let left = jwt_lifetime(&format!("e30.{payload}.sig")).unwrap();
        assert!(left <= Duration::from_secs(120) && left >= Duration::from_secs(118));
        assert_eq!(jwt_lifetime("opaque"), None);
    }
}
