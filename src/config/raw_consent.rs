//! The raw form of what per-user consent needs (`auth.user_consent`, the
//! keys its records are sealed with, the identity provider's login client),
//! as the config file writes it; checked in `validate::consent`.

use schemars::JsonSchema;
use serde::Deserialize;

/// The user's own consent, given in a browser at the upstream's
/// authorization server (authorization code with PKCE).
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawUserConsent {
    /// The upstream's authorization server, found by RFC 8414 (then
    /// OpenID) discovery; default: what the upstream's RFC 9728 metadata names.
    pub issuer: Option<String>,
    /// Or its endpoints, given with token_url instead of issuer.
    pub authorization_url: Option<String>,
    pub token_url: Option<String>,
    /// The gateway's client there; default: registered once (RFC 7591).
    pub client_id: Option<String>,
    /// Its secret (none for a public client), env:VAR or file:PATH.
    pub client_secret: Option<String>,
    /// client_secret_basic (default) or client_secret_post.
    #[schemars(extend("enum" = ["client_secret_basic", "client_secret_post", null]))]
    pub auth_method: Option<String>,
    /// The scope asked for.
    pub scope: Option<String>,
    /// RFC 8707 resource (default: the upstream's http.url).
    pub resource: Option<String>,
}

/// A key consent records are sealed with (AES-256-GCM).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawEncryptionKey {
    /// Its id, kept with every record it seals.
    #[schemars(length(min = 1, max = 64))]
    pub id: String,
    /// 32 bytes, hex or base64: itself, env:VAR or file:PATH.
    pub key: String,
}

/// The gateway's OpenID client at an identity provider, which identifies
/// the browser user of a consent as one of the issuer's users.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawLogin {
    #[schemars(length(min = 1))]
    pub client_id: String,
    /// The secret, env:VAR or file:PATH.
    pub client_secret: String,
}
