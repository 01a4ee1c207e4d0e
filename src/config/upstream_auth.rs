//! Credentials the gateway obtains for an upstream (`upstreams.*.auth`),
//! as validated: one mode, its authorization server, the client, what is
//! asked for, and the header the credential goes in.

use std::time::Duration;

/// `gateway.upstream_auth.max_cached_tokens` when it is not set.
pub const DEFAULT_MAX_CACHED_TOKENS: usize = 10_000;

/// How the gateway authenticates to one upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamAuth {
    pub mode: AuthMode,
    /// The header the credential goes in: `authorization` as
    /// `Bearer <token>`, any other the token bare. A stdio upstream's is
    /// [`ENV_CARRIER`]: bare, never sent as a header.
    pub header: String,
    /// A stdio upstream's: the environment variable of its child that
    /// holds the credential.
    pub env: Option<String>,
    /// Each request to an authorization server waits this long at most
    /// (`gateway.upstream_auth.token_timeout_ms`).
    pub timeout: Duration,
    /// The gateway's signing keys and the `iss` of what it signs, where
    /// the mode signs (assertions, actor tokens).
    pub signer: Option<Signer>,
}

/// The header name a stdio upstream's credential is kept under: not
/// `authorization`, so the token stays bare; it is put in the child's
/// environment, never in a request.
pub const ENV_CARRIER: &str = "x-credential";

/// What the gateway signs JWTs with, and as whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signer {
    pub keys: super::signing::SigningKeys,
    pub issuer: String,
}

/// The token type of a caller's token, as RFC 8693 names it.
pub const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";
pub const JWT_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:jwt";

/// The one mode an upstream's `auth` holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthMode {
    /// One token for every caller, by the client credentials grant.
    ClientCredentials(OAuthClient),
    /// The caller's JWT exchanged for one of the upstream's (RFC 8693).
    TokenExchange(Exchange),
    /// A JWT the gateway signs for the caller.
    Assertion(Assertion),
    /// The user's own token, from a consent they gave in a browser.
    UserConsent(super::consent::UserConsent),
}

/// The token exchange grant: a client, the caller's token's type, and
/// whether the gateway's own JWT goes along as the actor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exchange {
    pub client: OAuthClient,
    pub subject_token_type: &'static str,
    pub actor_token: bool,
}

/// An identity assertion: for whom, and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assertion {
    pub audience: String,
    pub ttl: Duration,
}

impl AuthMode {
    /// Its name in audit lines and metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            AuthMode::ClientCredentials(_) => "client_credentials",
            AuthMode::TokenExchange(_) => "token_exchange",
            AuthMode::Assertion(_) => "assertion",
            AuthMode::UserConsent(_) => "user_consent",
        }
    }

    /// Whether its credential is the caller's own (a user's), not one for
    /// every caller.
    pub fn per_user(&self) -> bool {
        !matches!(self, AuthMode::ClientCredentials(_))
    }
}

/// Where the token endpoint is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenEndpoint {
    Url(String),
    /// Found from the issuer's metadata (RFC 8414, then OpenID discovery).
    Issuer(String),
}

/// An OAuth client of an authorization server, and what it asks for.
#[derive(Clone, PartialEq, Eq)]
pub struct OAuthClient {
    pub endpoint: TokenEndpoint,
    pub client_id: String,
    pub client_secret: String,
    /// `client_secret_basic` (true) or `client_secret_post`.
    pub basic: bool,
    pub scope: Option<String>,
    /// RFC 8707: the upstream's URL unless configured (a stdio
    /// upstream's: none unless configured).
    pub resource: Option<String>,
    pub audience: Option<String>,
}

impl std::fmt::Debug for OAuthClient {
    // The secret is never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthClient")
            .field("endpoint", &self.endpoint)
            .field("client_id", &self.client_id)
            .field("basic", &self.basic)
            .field("scope", &self.scope)
            .field("resource", &self.resource)
            .field("audience", &self.audience)
            .finish_non_exhaustive()
    }
}
