//! `user_consent` and what consents share: the URL browsers reach the
//! gateway at, the sealing keys (32 bytes each, ids distinct, never
//! echoed), a flow's life, and each identity provider's login client; an
//! upstream that asks for consent without them is refused, with its path.

use super::values::{basic_auth, checked_url};
use super::*;
use crate::config::consent::{
    ConsentClient, ConsentServer, ConsentSettings, DEFAULT_TTL, Login, SealingKeys, UserConsent,
    key_bytes,
};
use crate::config::raw::RawUpstreamAuthSettings;
use crate::config::raw_consent::{RawLogin, RawUserConsent};

const AT: &str = "gateway.upstream_auth";

/// A login client, with its issuer and where it was written.
pub(super) struct RawLoginAt {
    pub at: String,
    pub issuer: String,
    pub login: RawLogin,
}

/// The login clients of `gateway.auth.jwt`, taken out of it.
pub(super) fn logins(raw: &mut crate::config::raw::RawAuth) -> Vec<RawLoginAt> {
    raw.jwt
        .iter_mut()
        .enumerate()
        .filter_map(|(i, j)| {
            Some(RawLoginAt {
                at: format!("gateway.auth.jwt[{i}]"),
                issuer: j.issuer.clone(),
                login: j.login.take()?,
            })
        })
        .collect()
}

/// What consents share; else why an upstream cannot ask for one.
pub(super) fn settings(
    raw: &mut RawUpstreamAuthSettings,
    public_url: Option<&str>,
    logins: Vec<RawLoginAt>,
    secrets: &dyn Secrets,
    p: &mut Problems,
) -> (Option<ConsentSettings>, Option<String>) {
    let ttl = match raw.consent_ttl_s {
        None => DEFAULT_TTL,
        Some(s @ 60..=3600) => Duration::from_secs(s),
        Some(_) => {
            p.add(format!("{AT}.consent_ttl_s"), "must be from 60 to 3600");
            DEFAULT_TTL
        }
    };
    let mut keys: Vec<(String, [u8; 32])> = Vec::new();
    for (i, k) in std::mem::take(&mut raw.encryption_keys)
        .into_iter()
        .enumerate()
    {
        let at = format!("{AT}.encryption_keys[{i}]");
        if k.id.is_empty() || k.id.len() > 64 || k.id.contains('.') {
            p.add(
                format!("{at}.id"),
                "must be 1 to 64 characters, without '.'",
            );
            continue;
        }
        if keys.iter().any(|(id, _)| *id == k.id) {
            p.add(format!("{at}.id"), format!("'{}' names two keys", k.id));
            continue;
        }
        let Some(text) = header_value(&k.key, secrets, &format!("{at}.key"), p) else {
            continue;
        };
        let bytes = match key_bytes(&text) {
            Some(bytes) => bytes,
            // A stand-in says nothing of the key: one of its own is checked.
            None if secrets.stands_in() && k.key != text => [0u8; 32],
            None => {
                p.add(
                    format!("{at}.key"),
                    "must be 32 bytes, as 64 hex digits or base64",
                );
                continue;
            }
        };
        keys.push((k.id, bytes));
    }
    let logins: Vec<Login> = logins
        .into_iter()
        .filter_map(|l| {
            let at = format!("{}.login.client_secret", l.at);
            let secret = header_value(&l.login.client_secret, secrets, &at, p)?;
            Some(Login {
                issuer: l.issuer,
                client_id: l.login.client_id,
                client_secret: secret,
            })
        })
        .collect();
    let missing = match (public_url, keys.is_empty(), logins.is_empty()) {
        (None, ..) => Some(format!(
            "needs {AT}.public_url: the consent URL is the gateway's own"
        )),
        (_, true, _) => Some(format!(
            "needs {AT}.encryption_keys: the tokens of a consent are kept sealed"
        )),
        (_, _, true) => Some(
            "needs an issuer of gateway.auth.jwt with login: the browser user is identified before the consent"
                .to_owned(),
        ),
        _ => None,
    };
    let settings = match (missing.is_none(), public_url) {
        (true, Some(url)) => Some(ConsentSettings {
            public_url: url.trim_end_matches('/').to_owned(),
            keys: SealingKeys(keys),
            ttl,
            logins,
        }),
        _ => None,
    };
    (settings, missing)
}

/// An upstream's `user_consent`.
pub(super) fn user_consent(
    raw: RawUserConsent,
    upstream_url: Option<&str>,
    at: &str,
    secrets: &dyn Secrets,
    p: &mut Problems,
) -> Option<UserConsent> {
    let url = |u: String, key: &str, p: &mut Problems| checked_url(u, &format!("{at}.{key}"), p);
    let server = match (raw.issuer, raw.authorization_url, raw.token_url) {
        (Some(issuer), None, None) => ConsentServer::Issuer(url(issuer, "issuer", p)?),
        (None, Some(a), Some(t)) => ConsentServer::Endpoints {
            authorization: url(a, "authorization_url", p)?,
            token: url(t, "token_url", p)?,
        },
        (None, None, None) => match upstream_url {
            Some(u) => ConsentServer::OfResource(u.to_owned()),
            None => {
                p.add(
                    at,
                    "a stdio upstream publishes no metadata: give issuer, or authorization_url and token_url",
                );
                return None;
            }
        },
        (Some(_), ..) => {
            p.add(
                at,
                "give issuer, or authorization_url and token_url, not both",
            );
            return None;
        }
        _ => {
            p.add(at, "give authorization_url and token_url together");
            return None;
        }
    };
    let basic = basic_auth(raw.auth_method.as_deref(), at, p)?;
    let client = match (raw.client_id, raw.client_secret) {
        (Some(client_id), secret) => {
            let client_secret = match secret {
                Some(s) => Some(header_value(
                    &s,
                    secrets,
                    &format!("{at}.client_secret"),
                    p,
                )?),
                None => None,
            };
            Some(ConsentClient {
                client_id,
                client_secret,
                basic,
            })
        }
        (None, Some(_)) => {
            p.add(
                format!("{at}.client_secret"),
                "needs client_id (without both, the gateway registers its client)",
            );
            return None;
        }
        (None, None) => None,
    };
    let resource = match raw.resource {
        Some(r) => Some(url(r, "resource", p)?),
        None => upstream_url.map(str::to_owned),
    };
    Some(UserConsent {
        server,
        client,
        scope: raw.scope,
        resource,
    })
}
