//! `gateway:` as written: the listeners' and the gateway's own settings,
//! the shared store, the agents' authorization (JWT issuers) and the
//! gateway-wide limits.

use schemars::JsonSchema;
use serde::Deserialize;

use super::*;

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawGateway {
    /// The authority of namespaced mcpIds: letters, digits, - . _ (default gateway).
    #[schemars(regex(pattern = r"^[A-Za-z0-9._-]+$"))]
    pub id: Option<String>,
    /// Where agents reach it: POST /mcp (default 0.0.0.0:8080).
    pub listen: Option<String>,
    /// /metrics, /healthz, /readyz (default 0.0.0.0:9090).
    pub admin_listen: Option<String>,
    /// In-flight requests may finish this long after SIGTERM (default 25000).
    pub shutdown_timeout_ms: Option<u64>,
    /// How long an upstream's request forwarded to a client waits for its
    /// answer, and a 2026-07-28 client has to retry a round (default 300000).
    pub server_request_timeout_ms: Option<u64>,
    /// Fingerprints of pinned upstreams' tools (relative: to the file's directory).
    pub pins_file: Option<String>,
    /// How often the config and key files are checked for changes; 0: SIGHUP only (default 2000).
    pub reload_poll_ms: Option<u64>,
    /// When set, /metrics and /readyz's detail need it as a bearer token.
    pub admin_token: Option<String>,
    /// The admin console under /ui on the admin listener.
    pub admin_ui: Option<crate::config::admin_ui::RawAdminUi>,
    /// At least 32 characters: seals session ids, so every replica with it serves a session.
    pub session_secret: Option<String>,
    /// The length of the Model Context Protocol face's tool names, 20 to 64 (default 48).
    #[schemars(range(min = 20, max = 64))]
    pub tool_name_budget: Option<u64>,
    /// Origins whose requests are served; a request with another Origin gets 403.
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    /// Bounds on what clients and upstreams may make it hold.
    #[serde(default)]
    pub limits: RawLimits,
    /// Bearer tokens from identity providers.
    pub auth: Option<RawAuth>,
    /// The store replicas share limits and sessions through.
    pub store: Option<RawStore>,
    /// How the gateway obtains upstreams' credentials (upstreams' auth).
    pub upstream_auth: Option<RawUpstreamAuthSettings>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawStore {
    /// redis:// or rediss://, database by number; env:VAR or file:PATH.
    pub url: String,
    /// Beside the URL's; the same forms as api_keys.
    pub username: Option<String>,
    /// Beside the URL's; the same forms as api_keys.
    pub password: Option<String>,
    /// Every key starts with it (default mcp-gateway:).
    pub key_prefix: Option<String>,
    /// local (the default): each replica its share of each limit; refuse: 503 for limited tenants.
    #[schemars(extend("enum" = ["local", "refuse", null]))]
    pub when_down: Option<String>,
    /// The longest a call waits on the store, 1 to 10000 (default 50).
    #[schemars(range(min = 1, max = 10000))]
    pub timeout_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawAuth {
    /// This gateway's identifier (RFC 8707/9728).
    pub resource: Option<String>,
    /// The identity providers whose tokens it takes.
    #[serde(default)]
    pub jwt: Vec<RawJwt>,
}

/// One identity provider: exactly one of jwks_url and jwks_file.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("oneOf" = [{"required": ["jwks_url"]}, {"required": ["jwks_file"]}]))]
pub struct RawJwt {
    /// Must equal the tokens' iss.
    #[schemars(length(min = 1))]
    pub issuer: String,
    /// aud must hold one of these (default: [resource]).
    #[serde(default)]
    pub audiences: Vec<String>,
    /// Where its keys are fetched.
    pub jwks_url: Option<String>,
    /// Or a file of its keys, re-read at each refresh.
    pub jwks_file: Option<String>,
    /// The claim that names the tenant.
    pub tenant_claim: Option<String>,
    /// With tenant_claim: the only tenants its tokens may name.
    #[serde(default)]
    pub tenants: Vec<String>,
    /// Or the one tenant of every token of this issuer.
    pub tenant: Option<String>,
    /// The gateway's OpenID client here, to identify browser users (consent).
    pub login: Option<crate::config::raw_consent::RawLogin>,
    /// Clock skew allowed on exp and nbf, at most 300 (default 30).
    #[schemars(range(max = 300))]
    pub leeway_s: Option<u64>,
    /// How often its keys are fetched again, at least 10 (default 300).
    #[schemars(range(min = 10))]
    pub refresh_s: Option<u64>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    /// An agent request's body; 413 past it (default 4 MiB).
    pub max_body_bytes: Option<u64>,
    /// One message to or from an upstream (default 16 MiB).
    pub max_frame_bytes: Option<u64>,
    /// Messages in one JSON-RPC batch (default 128).
    pub max_batch: Option<u64>,
    /// A client must send its headers within this; also a keep-alive connection's idle time (default 10000).
    pub header_read_timeout_ms: Option<u64>,
    /// A whole request body within this, else 408 (default 30000).
    pub body_read_timeout_ms: Option<u64>,
    /// Agent connections open at once (default 4096).
    pub max_connections: Option<u64>,
    /// Sessions one tenant may hold open (default 256).
    pub max_sessions_per_tenant: Option<u64>,
    /// Connections one tenant may hold (default max_connections/4).
    pub max_connections_per_tenant: Option<u64>,
    /// A session with nothing sent and nothing in flight ends after this (default 300000).
    pub session_idle_timeout_ms: Option<u64>,
    /// Calls in flight in one session (default 64).
    pub max_session_in_flight: Option<u64>,
    /// Handshake-era sessions of one tenant a replica keeps a record of (default 16384).
    pub max_session_records_per_tenant: Option<u64>,
    /// Bytes of resource uris one session or listen may subscribe to (default 64 KiB).
    pub max_subscription_bytes_per_session: Option<u64>,
    /// The same, for all of one tenant's sessions and listens (default 1 MiB).
    pub max_subscription_bytes_per_tenant: Option<u64>,
    /// One upstream's listing of one kind (default 8 MiB).
    pub max_listing_bytes: Option<u64>,
    /// One definition in a listing (default 256 KiB).
    pub max_definition_bytes: Option<u64>,
    /// Requests from one upstream answered at once (default 16).
    pub max_server_requests: Option<u64>,
    /// Bytes of spilled result pages this replica keeps, all tenants
    /// together; past it the oldest of the tenant holding most go (default 256 MiB).
    pub max_spill_bytes: Option<u64>,
    /// Bytes of cached results this replica keeps, all tenants together;
    /// least recently used dropped first (default 64 MiB).
    pub max_cache_bytes: Option<u64>,
}
