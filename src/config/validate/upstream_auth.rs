//! An upstream's `auth`: exactly one mode, for an HTTP upstream, its
//! authorization server's URL (http or https, no credentials in it), its
//! client's secret read like a header's (itself, env:VAR, file:PATH), and
//! a header the configured `http.headers` does not also set.

use super::*;
use crate::config::raw::{RawClientCredentials, RawUpstreamAuth};
use crate::config::upstream_auth::{AuthMode, OAuthClient, TokenEndpoint, UpstreamAuth};

/// What an upstream's `auth` needs to know of the upstream.
pub(super) struct Upstream<'a> {
    pub at: &'a str,
    /// Its URL, when it is an HTTP upstream.
    pub url: Option<&'a str>,
    /// The headers `http.headers` sets, lower-cased.
    pub headers: Vec<String>,
    pub timeout: std::time::Duration,
}

pub(super) fn auth(
    raw: RawUpstreamAuth,
    up: &Upstream<'_>,
    secrets: &dyn Secrets,
    p: &mut Problems,
) -> Option<UpstreamAuth> {
    let at = format!("{}.auth", up.at);
    let Some(url) = up.url else {
        p.add(
            &at,
            "is for HTTP upstreams: a stdio upstream's credential (env) is not supported yet",
        );
        return None;
    };
    let Some(cc) = raw.client_credentials else {
        p.add(&at, "needs exactly one mode: client_credentials");
        return None;
    };
    let header = raw
        .header
        .unwrap_or_else(|| "authorization".into())
        .to_ascii_lowercase();
    if reqwest::header::HeaderName::from_bytes(header.as_bytes()).is_err() {
        p.add(format!("{at}.header"), "is not a valid HTTP header name");
        return None;
    }
    if up.headers.contains(&header) {
        p.add(
            format!("{}.http.headers.{header}", up.at),
            format!("is the header {at} sends the credential in; give one or the other"),
        );
        return None;
    }
    let client = client(cc, url, &format!("{at}.client_credentials"), secrets, p)?;
    Some(UpstreamAuth {
        mode: AuthMode::ClientCredentials(client),
        header,
        timeout: up.timeout,
    })
}

fn client(
    raw: RawClientCredentials,
    upstream_url: &str,
    at: &str,
    secrets: &dyn Secrets,
    p: &mut Problems,
) -> Option<OAuthClient> {
    let endpoint = match (raw.token_url, raw.issuer) {
        (Some(_), Some(_)) => {
            p.add(at, "give token_url or issuer, not both");
            return None;
        }
        (None, None) => {
            p.add(at, "needs token_url, or issuer to find it by");
            return None;
        }
        (Some(url), None) => TokenEndpoint::Url(checked_url(url, &format!("{at}.token_url"), p)?),
        (None, Some(url)) => TokenEndpoint::Issuer(checked_url(url, &format!("{at}.issuer"), p)?),
    };
    let basic = match raw.auth_method.as_deref() {
        None | Some("client_secret_basic") => true,
        Some("client_secret_post") => false,
        Some(other) => {
            p.add(
                format!("{at}.auth_method"),
                format!("'{other}' is not client_secret_basic or client_secret_post"),
            );
            return None;
        }
    };
    let secret = super::header_value(
        &raw.client_secret,
        secrets,
        &format!("{at}.client_secret"),
        p,
    )?;
    let resource = match raw.resource {
        Some(r) => checked_url(r, &format!("{at}.resource"), p)?,
        None => upstream_url.to_owned(),
    };
    Some(OAuthClient {
        endpoint,
        client_id: raw.client_id,
        client_secret: secret,
        basic,
        scope: raw.scope,
        resource,
        audience: raw.audience,
    })
}

/// `url` if it is an http:// or https:// URL with a host and no
/// credentials (never echoed whole: its query may hold a secret).
fn checked_url(url: String, at: &str, p: &mut Problems) -> Option<String> {
    match reqwest::Url::parse(&url) {
        Ok(u) if !u.username().is_empty() || u.password().is_some() => {
            p.add(
                at,
                "holds credentials: give the client's in client_id and client_secret",
            );
            None
        }
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Some(url),
        _ => {
            let written = crate::redact::written(&url);
            p.add(
                at,
                format!("'{written}' is not an http:// or https:// URL with a host"),
            );
            None
        }
    }
}
