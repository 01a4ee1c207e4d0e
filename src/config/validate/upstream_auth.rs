//! An upstream's `auth`: exactly one mode, for an HTTP upstream, its
//! authorization server's URL (http or https, no credentials in it), its
//! client's secret read like a header's (itself, env:VAR, file:PATH), and
//! a header the configured `http.headers` does not also set.

use super::values::{basic_auth, checked_url};
use super::*;
use crate::config::raw::{RawClientCredentials, RawUpstreamAuth, RawUpstreamAuthSettings};
use crate::config::signing::{SigningKey, SigningKeys};
use crate::config::upstream_auth::{
    ACCESS_TOKEN_TYPE, Assertion, AuthMode, ENV_CARRIER, Exchange, JWT_TOKEN_TYPE, OAuthClient,
    Signer, TokenEndpoint, UpstreamAuth,
};

/// What an upstream's `auth` needs to know of the upstream.
pub(super) struct Upstream<'a> {
    pub at: &'a str,
    /// Its URL, when it is an HTTP upstream.
    pub url: Option<&'a str>,
    /// The headers `http.headers` sets, lower-cased.
    pub headers: Vec<String>,
    /// Whether it runs a child per client session (`per_session`).
    pub per_session: bool,
}

/// `gateway.upstream_auth`, as every upstream's `auth` needs it.
pub(super) struct Settings {
    timeout: std::time::Duration,
    /// The signing keys and the `iss` of what they sign, when any is given.
    pub signer: Option<Signer>,
    /// Whether callers may bear JWTs (`gateway.auth.jwt`): a per-user mode
    /// needs them.
    jwt_issuers: bool,
    /// Tokens obtained and kept at most, every upstream's together.
    pub max_cached_tokens: usize,
    /// What consents share, when public_url and encryption_keys are given.
    pub consent: Option<crate::config::consent::ConsentSettings>,
    /// Why there is no `consent`, for an upstream that asks for one.
    consent_missing: Option<String>,
}

const AT: &str = "gateway.upstream_auth";

pub(super) fn settings(
    mut raw: RawUpstreamAuthSettings,
    jwt_issuers: bool,
    logins: Vec<super::consent::RawLoginAt>,
    secrets: &dyn Secrets,
    p: &mut Problems,
) -> Settings {
    let timeout = match raw.token_timeout_ms {
        Some(ms @ 1..=60_000) => Duration::from_millis(ms),
        Some(_) => {
            p.add(format!("{AT}.token_timeout_ms"), "must be from 1 to 60000");
            Duration::from_secs(5)
        }
        None => Duration::from_secs(5),
    };
    let max_cached_tokens = match raw.max_cached_tokens {
        Some(n @ 1..=10_000_000) => n as usize,
        Some(_) => {
            p.add(
                format!("{AT}.max_cached_tokens"),
                "must be from 1 to 10000000",
            );
            crate::config::upstream_auth::DEFAULT_MAX_CACHED_TOKENS
        }
        None => crate::config::upstream_auth::DEFAULT_MAX_CACHED_TOKENS,
    };
    let public_url = raw
        .public_url
        .take()
        .and_then(|u| checked_url(u, &format!("{AT}.public_url"), p));
    let (consent, consent_missing) =
        super::consent::settings(&mut raw, public_url.as_deref(), logins, secrets, p);
    let mut keys: Vec<SigningKey> = Vec::new();
    for (i, key) in raw.signing_keys.iter().enumerate() {
        let at = format!("{AT}.signing_keys[{i}]");
        let Some(pem) = super::header_value(key, secrets, &at, p) else {
            continue;
        };
        let read = if secrets.stands_in() && key != &pem {
            // A stand-in says nothing of the key: one of its own is checked.
            SigningKey::generated()
        } else {
            SigningKey::from_pem(&pem)
        };
        match read {
            Ok(k) if keys.iter().any(|o| o.kid == k.kid) => {
                p.add(at, "is the same key as one before it")
            }
            Ok(k) => keys.push(k),
            Err(why) => p.add(at, why),
        }
    }
    let issuer = raw.issuer.or(public_url);
    let signer = match (keys.is_empty(), issuer) {
        (true, _) => None,
        (false, Some(issuer)) => Some(Signer {
            keys: SigningKeys(keys.into()),
            issuer,
        }),
        (false, None) => {
            p.add(
                AT,
                "signing_keys need issuer (or public_url): the iss of what they sign",
            );
            None
        }
    };
    Settings {
        timeout,
        signer,
        jwt_issuers,
        max_cached_tokens,
        consent,
        consent_missing,
    }
}

pub(super) fn auth(
    raw: RawUpstreamAuth,
    up: &Upstream<'_>,
    settings: &Settings,
    secrets: &dyn Secrets,
    p: &mut Problems,
) -> Option<UpstreamAuth> {
    let at = format!("{}.auth", up.at);
    let (header, env) = match up.url {
        Some(_) => (http_header(&raw, up, &at, p)?, None),
        None => (ENV_CARRIER.to_owned(), Some(stdio_env(&raw, up, &at, p)?)),
    };
    let mode = mode(raw, up, &at, settings, secrets, p)?;
    if env.is_some() && mode.per_user() && !up.per_session {
        p.add(
            &at,
            "acts for each user: a stdio upstream needs per_session: true, so that a child never serves another user",
        );
        return None;
    }
    let signs = matches!(&mode, AuthMode::Assertion(_))
        || matches!(&mode, AuthMode::TokenExchange(e) if e.actor_token);
    Some(UpstreamAuth {
        mode,
        header,
        env,
        timeout: settings.timeout,
        signer: settings.signer.clone().filter(|_| signs),
    })
}

/// The header an HTTP upstream's credential goes in: a valid name, which
/// `http.headers` does not also set, and no `env`.
fn http_header(
    raw: &RawUpstreamAuth,
    up: &Upstream<'_>,
    at: &str,
    p: &mut Problems,
) -> Option<String> {
    if raw.env.is_some() {
        p.add(
            format!("{at}.env"),
            "is for stdio upstreams: an HTTP upstream's credential goes in a header",
        );
        return None;
    }
    let header = raw
        .header
        .clone()
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
    Some(header)
}

/// The environment variable a stdio upstream's credential goes in: given,
/// a name a shell could set, and no `header`.
fn stdio_env(
    raw: &RawUpstreamAuth,
    up: &Upstream<'_>,
    at: &str,
    p: &mut Problems,
) -> Option<String> {
    if raw.header.is_some() {
        p.add(
            format!("{at}.header"),
            "is for HTTP upstreams: a stdio upstream's credential goes in env",
        );
        return None;
    }
    let Some(env) = raw.env.clone() else {
        p.add(
            at,
            "needs env: the environment variable of the child that holds the credential",
        );
        return None;
    };
    let valid = !env.is_empty()
        && !env.starts_with(|c: char| c.is_ascii_digit())
        && env.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !valid || env == "PATH" {
        p.add(
            format!("{at}.env"),
            "is not an environment variable name (letters, digits, _; not PATH)",
        );
        return None;
    }
    let _ = up;
    Some(env)
}

/// The one mode `raw` holds.
fn mode(
    raw: RawUpstreamAuth,
    up: &Upstream<'_>,
    at: &str,
    settings: &Settings,
    secrets: &dyn Secrets,
    p: &mut Problems,
) -> Option<AuthMode> {
    const MODES: &str = "client_credentials, token_exchange, user_consent or assertion";
    let given = [
        raw.client_credentials.is_some(),
        raw.token_exchange.is_some(),
        raw.assertion.is_some(),
        raw.user_consent.is_some(),
    ];
    if given.iter().filter(|g| **g).count() != 1 {
        p.add(at, format!("needs exactly one mode: {MODES}"));
        return None;
    }
    let per_user = raw.client_credentials.is_none();
    if let Some(consent) = raw.user_consent {
        let at = format!("{at}.user_consent");
        if let Some(why) = &settings.consent_missing {
            p.add(&at, why);
        }
        return super::consent::user_consent(consent, up.url, &at, secrets, p)
            .map(AuthMode::UserConsent);
    }
    if per_user && !settings.jwt_issuers {
        p.add(
            at,
            "acts for the caller, who is known only by a JWT: it needs gateway.auth.jwt",
        );
    }
    if let Some(cc) = raw.client_credentials {
        let at = format!("{at}.client_credentials");
        return client(cc, up.url, &at, secrets, p).map(AuthMode::ClientCredentials);
    }
    if let Some(te) = raw.token_exchange {
        let at = format!("{at}.token_exchange");
        let (cc, subject_token_type, actor_token) = te.client();
        let subject_token_type = match subject_token_type.as_deref() {
            None | Some(ACCESS_TOKEN_TYPE) => ACCESS_TOKEN_TYPE,
            Some(JWT_TOKEN_TYPE) => JWT_TOKEN_TYPE,
            Some(_) => {
                p.add(
                    format!("{at}.subject_token_type"),
                    format!("is not {ACCESS_TOKEN_TYPE} or {JWT_TOKEN_TYPE}"),
                );
                return None;
            }
        };
        if actor_token && settings.signer.is_none() {
            p.add(
                format!("{at}.actor_token"),
                "needs gateway.upstream_auth.signing_keys to sign the actor token",
            );
        }
        let client = client(cc, up.url, &at, secrets, p)?;
        return Some(AuthMode::TokenExchange(Exchange {
            client,
            subject_token_type,
            actor_token,
        }));
    }
    let a = raw.assertion.unwrap_or_default();
    let at = format!("{at}.assertion");
    if settings.signer.is_none() {
        p.add(
            &at,
            "needs gateway.upstream_auth.signing_keys to sign the assertion",
        );
    }
    let ttl = match a.ttl_s {
        None => 60,
        Some(s @ 1..=300) => s,
        Some(_) => {
            p.add(format!("{at}.ttl_s"), "must be from 1 to 300");
            return None;
        }
    };
    Some(AuthMode::Assertion(Assertion {
        // A stdio upstream has no URL: its name stands in.
        audience: a.audience.unwrap_or_else(|| {
            let name = up.at.strip_prefix("upstreams.").unwrap_or(up.at);
            up.url.unwrap_or(name).to_owned()
        }),
        ttl: Duration::from_secs(ttl),
    }))
}

fn client(
    raw: RawClientCredentials,
    upstream_url: Option<&str>,
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
    let basic = basic_auth(raw.auth_method.as_deref(), at, p)?;
    let secret = super::header_value(
        &raw.client_secret,
        secrets,
        &format!("{at}.client_secret"),
        p,
    )?;
    let resource = match raw.resource {
        Some(r) => Some(checked_url(r, &format!("{at}.resource"), p)?),
        // A stdio upstream has no URL: no resource unless configured.
        None => upstream_url.map(str::to_owned),
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
