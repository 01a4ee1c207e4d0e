//! The JWTs the gateway signs for upstreams: an identity assertion that
//! says who the caller is (for upstreams that trust the gateway's keys),
//! and the actor token of a delegated token exchange (RFC 8693 section
//! 4.1: the gateway is the party acting for the user).

use std::time::Duration;

use serde_json::json;

use super::token::{Refusal, Token};
use crate::config::upstream_auth::{Assertion, Signer};
use crate::tenant::User;

/// The longest an actor token lives: it is used once, at once.
const ACTOR_TTL: u64 = 60;

/// `user`'s identity assertion for an upstream: `iss` the gateway, `sub`
/// and `idp` the caller's subject and issuer, their tenant and scopes, for
/// `aud` until `iat + ttl`, with a `jti` of its own.
pub(super) fn signed(
    signer: &Signer,
    tenant: &str,
    user: &User,
    a: &Assertion,
) -> Result<Token, Refusal> {
    let iat = crate::auth::now();
    let ttl = a.ttl.as_secs();
    let claims = json!({
        "iss": signer.issuer,
        "sub": &*user.subject,
        "idp": &*user.issuer,
        "tenant": tenant,
        "scope": &*user.scope,
        "aud": a.audience,
        "iat": iat,
        "exp": iat + ttl,
        "jti": jti()?,
    });
    Ok(Token {
        token: signer.keys.signer().sign(&claims).ok_or_else(unsigned)?,
        lifetime: Duration::from_secs(ttl),
        refreshed: false,
    })
}

/// The gateway's actor token for a token exchange at `endpoint`: `sub` its
/// client id there, `aud` the endpoint.
pub(super) fn actor(signer: &Signer, client_id: &str, endpoint: &str) -> Result<String, Refusal> {
    let iat = crate::auth::now();
    let jti = jti()?;
    signer
        .keys
        .signer()
        .sign(&json!({
            "iss": signer.issuer,
            "sub": client_id,
            "aud": endpoint,
            "iat": iat,
            "exp": iat + ACTOR_TTL,
            "jti": jti,
        }))
        .ok_or_else(unsigned)
}

/// 128 random bits, hex.
fn jti() -> Result<String, Refusal> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|_| unsigned())?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Without the system's random source nothing is signed.
fn unsigned() -> Refusal {
    Refusal::invalid("the system's random source failed: nothing can be signed")
}
