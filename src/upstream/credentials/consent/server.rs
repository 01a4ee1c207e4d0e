//! The upstream's authorization server as the MCP authorization spec finds
//! it: the upstream's protected resource metadata (RFC 9728: the URL its
//! 401 names in `resource_metadata`, else the well-known URIs), then the
//! server's own metadata (RFC 8414, then OpenID discovery), which must name
//! the issuer it was asked for. Also the gateway's client there, registered
//! once per issuer when none is configured (RFC 7591).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::super::token::Refusal;

/// What the gateway needs of an authorization server.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct AuthServer {
    pub issuer: String,
    pub authorization_endpoint: String,
    pub token_endpoint: String,
    pub registration_endpoint: Option<String>,
    pub revocation_endpoint: Option<String>,
    /// RFC 9207: its authorization responses carry `iss`.
    #[serde(default)]
    pub iss_in_response: bool,
}

#[derive(Deserialize)]
struct Metadata {
    issuer: Option<String>,
    authorization_endpoint: Option<String>,
    token_endpoint: Option<String>,
    registration_endpoint: Option<String>,
    revocation_endpoint: Option<String>,
    #[serde(default)]
    authorization_response_iss_parameter_supported: bool,
}

/// A GET of a JSON document within `timeout`: `None` when it is not there
/// (4xx), a refusal when the server cannot be reached or answers 5xx.
async fn document<T: for<'de> Deserialize<'de>>(
    http: &reqwest::Client,
    url: &str,
    timeout: Duration,
) -> Result<Option<T>, Refusal> {
    let response = http
        .get(url)
        .timeout(timeout)
        .header("accept", "application/json")
        .send()
        .await
        .map_err(|e| Refusal::of(&e))?;
    let status = response.status();
    if status.is_server_error() {
        return Err(Refusal::new(
            "unreachable",
            format!("metadata: HTTP {status}"),
        ));
    }
    if !status.is_success() {
        return Ok(None);
    }
    let body = tokio::time::timeout(timeout, response.bytes())
        .await
        .map_err(|_| Refusal::new("timeout", "the metadata did not arrive in time"))?
        .map_err(|e| Refusal::of(&e))?;
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|_| Refusal::invalid("the metadata is not the JSON object it should be"))
}

/// The well-known URL of `kind` for `url` (RFC 8615 as RFC 8414 and 9728
/// insert it: between the origin and the path).
fn well_known(url: &reqwest::Url, kind: &str) -> String {
    let path = url.path().trim_end_matches('/');
    format!(
        "{}/.well-known/{kind}{path}",
        url.origin().ascii_serialization()
    )
}

/// The issuer of the upstream's authorization server, from its protected
/// resource metadata.
pub async fn issuer_of_resource(
    http: &reqwest::Client,
    resource: &str,
    timeout: Duration,
) -> Result<String, Refusal> {
    #[derive(Deserialize)]
    struct Resource {
        #[serde(default)]
        authorization_servers: Vec<String>,
    }
    let url = reqwest::Url::parse(resource)
        .map_err(|_| Refusal::invalid("the upstream's URL is not a URL"))?;
    let mut tries = Vec::new();
    // An unauthenticated request: its 401 may say where the metadata is.
    let probe = http
        .get(resource)
        .timeout(timeout)
        .header("accept", "application/json, text/event-stream")
        .send()
        .await
        .map_err(|e| Refusal::of(&e))?;
    if let Some(named) = probe
        .headers()
        .get_all(reqwest::header::WWW_AUTHENTICATE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(resource_metadata_param)
    {
        tries.push(named);
    }
    tries.push(well_known(&url, "oauth-protected-resource"));
    tries.push(format!(
        "{}/.well-known/oauth-protected-resource",
        url.origin().ascii_serialization()
    ));
    for at in tries {
        if let Some(found) = document::<Resource>(http, &at, timeout).await? {
            return found
                .authorization_servers
                .into_iter()
                .next()
                .ok_or_else(|| {
                    Refusal::invalid("the resource metadata names no authorization server")
                });
        }
    }
    Err(Refusal::invalid(
        "the upstream publishes no protected resource metadata (RFC 9728)",
    ))
}

/// `resource_metadata="..."` of a `WWW-Authenticate: Bearer` challenge.
fn resource_metadata_param(challenge: &str) -> Option<String> {
    let at = challenge.find("resource_metadata=")? + "resource_metadata=".len();
    let rest = &challenge[at..];
    let value = match rest.strip_prefix('"') {
        Some(quoted) => &quoted[..quoted.find('"')?],
        None => rest.split([',', ' ']).next()?,
    };
    Some(value.to_owned())
}

/// The metadata of the authorization server `issuer` (RFC 8414, then
/// OpenID discovery in both of its placements).
pub async fn of_issuer(
    http: &reqwest::Client,
    issuer: &str,
    timeout: Duration,
) -> Result<AuthServer, Refusal> {
    let url =
        reqwest::Url::parse(issuer).map_err(|_| Refusal::invalid("the issuer is not a URL"))?;
    let tries = [
        well_known(&url, "oauth-authorization-server"),
        well_known(&url, "openid-configuration"),
        format!(
            "{}/.well-known/openid-configuration",
            issuer.trim_end_matches('/')
        ),
    ];
    for at in tries {
        let Some(meta) = document::<Metadata>(http, &at, timeout).await? else {
            continue;
        };
        let same = |i: &str| i.trim_end_matches('/') == issuer.trim_end_matches('/');
        let issuer = meta
            .issuer
            .filter(|i| same(i))
            .ok_or_else(|| Refusal::invalid("the metadata names another issuer"))?;
        let (Some(authorization_endpoint), Some(token_endpoint)) =
            (meta.authorization_endpoint, meta.token_endpoint)
        else {
            return Err(Refusal::invalid(
                "the metadata names no authorization_endpoint or token_endpoint",
            ));
        };
        return Ok(AuthServer {
            issuer,
            authorization_endpoint,
            token_endpoint,
            registration_endpoint: meta.registration_endpoint,
            revocation_endpoint: meta.revocation_endpoint,
            iss_in_response: meta.authorization_response_iss_parameter_supported,
        });
    }
    Err(Refusal::invalid(
        "the authorization server publishes no metadata (RFC 8414 or OpenID)",
    ))
}

/// A client the gateway registered (or was given).
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Client {
    pub client_id: String,
    pub client_secret: Option<String>,
    pub basic: bool,
}

/// Registers the gateway at `server` (RFC 7591), for `redirect_uri`.
pub async fn register(
    http: &reqwest::Client,
    server: &AuthServer,
    redirect_uri: &str,
    timeout: Duration,
) -> Result<Client, Refusal> {
    #[derive(Deserialize)]
    struct Registered {
        client_id: String,
        client_secret: Option<String>,
        token_endpoint_auth_method: Option<String>,
    }
    let endpoint = server.registration_endpoint.as_deref().ok_or_else(|| {
        Refusal::invalid("the authorization server takes no registration; configure client_id")
    })?;
    let body = serde_json::json!({
        "client_name": "mcp-gateway",
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "client_secret_basic",
    });
    let response = http
        .post(endpoint)
        .timeout(timeout)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| Refusal::of(&e))?;
    let status = response.status();
    let text = tokio::time::timeout(timeout, response.bytes())
        .await
        .map_err(|_| Refusal::new("timeout", "the registration did not arrive in time"))?
        .map_err(|e| Refusal::of(&e))?;
    if status.is_server_error() {
        return Err(Refusal::new(
            "unreachable",
            format!("registration: HTTP {status}"),
        ));
    }
    if !status.is_success() {
        return Err(Refusal::invalid(format!(
            "registration refused: HTTP {status}"
        )));
    }
    let r: Registered = serde_json::from_slice(&text)
        .map_err(|_| Refusal::invalid("the registration answer is not a client"))?;
    let basic = r.token_endpoint_auth_method.as_deref() != Some("client_secret_post");
    Ok(Client {
        client_id: r.client_id,
        client_secret: r.client_secret,
        basic,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_challenge_names_its_resource_metadata() {
        let c = r#"Bearer error="invalid_token", resource_metadata="http://127.0.0.1:9/.well-known/oauth-protected-resource/mcp""#;
        assert_eq!(
            resource_metadata_param(c).as_deref(),
            Some("http://127.0.0.1:9/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(resource_metadata_param("Bearer"), None);
    }

    #[test]
    fn well_known_uris_go_between_origin_and_path() {
        let u = reqwest::Url::parse("https://as.example.com/tenant1").unwrap();
        assert_eq!(
            well_known(&u, "oauth-authorization-server"),
            "https://as.example.com/.well-known/oauth-authorization-server/tenant1"
        );
        let root = reqwest::Url::parse("https://as.example.com").unwrap();
        assert_eq!(
            well_known(&root, "openid-configuration"),
            "https://as.example.com/.well-known/openid-configuration"
        );
    }
}
