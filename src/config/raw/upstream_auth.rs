//! An upstream's `auth:` and `gateway.upstream_auth:` as written: the
//! credential the gateway obtains for an upstream (client credentials, token
//! exchange, an identity assertion, a user's consent) and their shared settings.

use schemars::JsonSchema;
use serde::Deserialize;

/// How the gateway authenticates to one upstream.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawUpstreamAuth {
    /// OAuth 2.0 client credentials (RFC 6749 section 4.4): one token for
    /// every caller.
    pub client_credentials: Option<RawClientCredentials>,
    /// OAuth 2.0 token exchange (RFC 8693): the caller's JWT exchanged for
    /// a token for this upstream, per user.
    pub token_exchange: Option<RawTokenExchange>,
    /// A short-lived JWT the gateway signs for the caller, for upstreams
    /// that trust the gateway (its keys at /.well-known/jwks.json).
    pub assertion: Option<RawAssertion>,
    /// The user's own consent at the upstream's authorization server,
    /// given once in a browser (authorization code with PKCE).
    pub user_consent: Option<crate::config::raw_consent::RawUserConsent>,
    /// The header it is sent in (HTTP upstreams; default authorization, as
    /// "Bearer <token>"; any other header carries the token bare).
    pub header: Option<String>,
    /// The environment variable of the child it is given in, bare (stdio
    /// upstreams, required there).
    pub env: Option<String>,
}

/// An OAuth client of an authorization server, for the client credentials grant.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawClientCredentials {
    /// The token endpoint; or `issuer`, found by RFC 8414 (then OpenID) discovery.
    pub token_url: Option<String>,
    /// The authorization server's issuer, when token_url is not given.
    pub issuer: Option<String>,
    #[schemars(length(min = 1))]
    pub client_id: String,
    /// The secret, env:VAR or file:PATH.
    pub client_secret: String,
    /// client_secret_basic (default) or client_secret_post.
    #[schemars(extend("enum" = ["client_secret_basic", "client_secret_post", null]))]
    pub auth_method: Option<String>,
    /// The scope asked for.
    pub scope: Option<String>,
    /// RFC 8707 resource (default: the upstream's http.url).
    pub resource: Option<String>,
    /// An audience, for servers that take one.
    pub audience: Option<String>,
}

/// An OAuth client of an authorization server, for the token exchange grant.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawTokenExchange {
    /// The token endpoint; or `issuer`, found by RFC 8414 (then OpenID) discovery.
    pub token_url: Option<String>,
    /// The authorization server's issuer, when token_url is not given.
    pub issuer: Option<String>,
    #[schemars(length(min = 1))]
    pub client_id: String,
    /// The secret, env:VAR or file:PATH.
    pub client_secret: String,
    /// client_secret_basic (default) or client_secret_post.
    #[schemars(extend("enum" = ["client_secret_basic", "client_secret_post", null]))]
    pub auth_method: Option<String>,
    /// The scope asked for.
    pub scope: Option<String>,
    /// RFC 8707 resource (default: the upstream's http.url).
    pub resource: Option<String>,
    /// An audience, for servers that take one.
    pub audience: Option<String>,
    /// What the caller's token is (default
    /// urn:ietf:params:oauth:token-type:access_token).
    #[schemars(extend("enum" = ["urn:ietf:params:oauth:token-type:access_token", "urn:ietf:params:oauth:token-type:jwt", null]))]
    pub subject_token_type: Option<String>,
    /// Send the gateway's own signed JWT as actor_token (delegation).
    #[serde(default)]
    pub actor_token: bool,
}

impl RawTokenExchange {
    /// Its client, as the client credentials grant's is written.
    pub fn client(self) -> (RawClientCredentials, Option<String>, bool) {
        let client = RawClientCredentials {
            token_url: self.token_url,
            issuer: self.issuer,
            client_id: self.client_id,
            client_secret: self.client_secret,
            auth_method: self.auth_method,
            scope: self.scope,
            resource: self.resource,
            audience: self.audience,
        };
        (client, self.subject_token_type, self.actor_token)
    }
}

/// An identity assertion the gateway signs for each user.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawAssertion {
    /// Its `aud` (default: the upstream's http.url).
    pub audience: Option<String>,
    /// How long it is valid, in seconds (default 60, 1..300).
    #[schemars(range(min = 1, max = 300))]
    pub ttl_s: Option<u64>,
}

/// The gateway's own bounds on obtaining upstream credentials.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawUpstreamAuthSettings {
    /// Each request to an authorization server (default 5000, 1..60000).
    #[schemars(range(min = 1, max = 60000))]
    pub token_timeout_ms: Option<u64>,
    /// The agent listener as browsers and upstreams reach it (https://...).
    pub public_url: Option<String>,
    /// The `iss` of the JWTs the gateway signs (default: public_url).
    pub issuer: Option<String>,
    /// Obtained tokens (client credentials, token exchange) kept at most,
    /// every upstream's and user's together; the least recently used goes
    /// first (default 10000, 1..10000000).
    #[schemars(range(min = 1, max = 10000000))]
    pub max_cached_tokens: Option<u64>,
    /// PKCS#8 PEM keys (P-256, RSA of 2048 bits or more, Ed25519), each
    /// itself, env:VAR or file:PATH: the first signs, all are published.
    #[serde(default)]
    pub signing_keys: Vec<String>,
    /// Keys consent records are sealed with: the first seals, all open.
    #[serde(default)]
    pub encryption_keys: Vec<crate::config::raw_consent::RawEncryptionKey>,
    /// How long a consent URL and its flow last, in seconds (default 600, 60..3600).
    #[schemars(range(min = 60, max = 3600))]
    pub consent_ttl_s: Option<u64>,
}
