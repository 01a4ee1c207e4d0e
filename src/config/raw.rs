//! The YAML file as written: every field optional where a default exists,
//! unknown fields rejected so that a typo is an error, not a silent default.
//! These types are also the file's JSON Schema (`mcp-gateway check
//! --schema`): the editor schema, the Helm chart's values schema and the
//! reference in docs/configuration.md are kept equal to it by tests.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;

/// The configuration file of mcp-gateway.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// The gateway's own settings.
    pub gateway: Option<RawGateway>,
    /// The tool servers it fronts, by name (letters, digits, - _; at most
    /// 64): the name is part of every id it serves.
    #[serde(default)]
    #[schemars(extend("propertyNames" = {"pattern": "^[A-Za-z0-9_-]{1,64}$"}))]
    pub upstreams: BTreeMap<String, RawUpstream>,
    /// Who may call it, by name, and what each sees.
    #[serde(default)]
    pub tenants: BTreeMap<String, RawTenant>,
    /// Where its traces go.
    pub telemetry: Option<RawTelemetry>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawTelemetry {
    /// OTLP export of traces; the OTEL_* variables override each key.
    pub traces: Option<RawTraces>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawTraces {
    /// The collector's base URL (over HTTP, /v1/traces is added). Default:
    /// none, nothing is exported.
    pub endpoint: Option<String>,
    /// http/protobuf (the default) or grpc.
    #[schemars(extend("enum" = ["http/protobuf", "grpc", null]))]
    pub protocol: Option<String>,
    /// Sent with every export; each value as it is, env:VAR or file:PATH.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// service.name of every span (default mcp-gateway).
    pub service_name: Option<String>,
    /// As OTEL_TRACES_SAMPLER names them (default parentbased_always_on).
    pub sampler: Option<String>,
    /// The ratio of the *traceidratio samplers (default 1).
    pub sampler_arg: Option<String>,
}

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
    pub admin_ui: Option<super::admin_ui::RawAdminUi>,
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
    pub login: Option<super::raw_consent::RawLogin>,
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

/// One upstream: exactly one of stdio and http.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("oneOf" = [{"required": ["stdio"]}, {"required": ["http"]}]))]
pub struct RawUpstream {
    /// A child process the gateway starts and speaks to on its stdin and stdout.
    pub stdio: Option<RawStdio>,
    /// A server the gateway posts to.
    pub http: Option<RawHttp>,
    /// Per call; past it the call fails with -32003 (default 30000).
    pub timeout_ms: Option<u64>,
    /// true: /readyz fails while this upstream is not ready (default false).
    #[serde(default)]
    pub required: bool,
    /// Calls in flight to it at once (default: no limit).
    pub max_concurrency: Option<u64>,
    /// Calls waiting for a slot; past it -32004 at once (default: max_concurrency).
    pub max_queue: Option<u64>,
    /// Pin its tool definitions (default false).
    #[serde(default)]
    pub pin: bool,
    /// auto (the default: told by its answer to the first initialize),
    /// modelcontextprotocol, or v1 (MCP v1.0).
    #[schemars(extend("enum" = ["auto", "modelcontextprotocol", "v1", null]))]
    pub protocol: Option<String>,
    /// Stdio servers of the Model Context Protocol: a child per client
    /// session that can be asked, and per 2026-07-28 request chain (default false).
    #[serde(default)]
    pub per_session: bool,
    /// true: every tenant's calls reach one process or session, for servers
    /// that keep nothing between calls; false: each tenant its own (default false).
    #[serde(default)]
    pub shared: bool,
    /// With per_session: children one tenant may run at once (default 16).
    pub max_children: Option<u64>,
    /// A tenant's (or session's) child idle this long is ended (default 300000).
    pub idle_timeout_ms: Option<u64>,
    /// A credential the gateway obtains for this upstream (HTTP upstreams):
    /// exactly one mode.
    pub auth: Option<RawUpstreamAuth>,
}

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
    pub user_consent: Option<super::raw_consent::RawUserConsent>,
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
    pub encryption_keys: Vec<super::raw_consent::RawEncryptionKey>,
    /// How long a consent URL and its flow last, in seconds (default 600, 60..3600).
    #[schemars(range(min = 60, max = 3600))]
    pub consent_ttl_s: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawStdio {
    /// The program: a path, or a name on the child's PATH.
    #[schemars(length(min = 1))]
    pub command: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// The child's whole environment, beside PATH; each value as it is, env:VAR or file:PATH.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Its working directory.
    pub cwd: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawHttp {
    /// http:// or https://, without user:password@.
    #[schemars(regex(pattern = r"^https?://"))]
    pub url: String,
    /// Sent with every request; each value as it is, env:VAR or file:PATH.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// MCP v1.0: hold a long-lived session to hear mcp/resourceDidChange (default false).
    #[serde(default)]
    pub notifications: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawTenant {
    /// Any of these, sent as Authorization: Bearer <key>: the key, sha256:<hex>, env:VAR or file:PATH.
    #[serde(default)]
    pub api_keys: Vec<String>,
    /// What this tenant sees, in listing order.
    #[serde(default)]
    pub upstreams: Vec<String>,
    /// Which tools it may see and call.
    pub tools: Option<RawToolPolicy>,
    /// Requests per second; past it HTTP 429 (default: none).
    pub rate_limit: Option<RawRateLimit>,
    /// Requests in flight at once (default: none).
    pub max_concurrency: Option<u64>,
    /// Sessions open at once (overrides max_sessions_per_tenant).
    pub max_sessions: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRateLimit {
    /// Requests per second, on average.
    #[schemars(range(min = 1))]
    pub per_second: u64,
    /// Requests at once above the rate (default: per_second).
    pub burst: Option<u64>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawToolPolicy {
    /// If given, only tools whose namespaced id matches one of these globs.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Never tools whose namespaced id matches one of these globs.
    #[serde(default)]
    pub deny: Vec<String>,
    /// A tool matching the glob needs that scope in the caller's token.
    #[serde(default)]
    pub scopes: BTreeMap<String, String>,
    /// Tools out of this tenant's listings, called as if they did not exist:
    /// globs on namespaced ids, as deny's.
    #[serde(default)]
    pub hide: Vec<String>,
    /// The Model Context Protocol face lists a tool under its own name where
    /// no other tool of the tenant has that name (default false).
    #[serde(default)]
    pub bare_names: bool,
    /// Per tool, by exact namespaced id: what this tenant's agents see of it.
    #[serde(default)]
    pub overrides: BTreeMap<String, RawOverride>,
    /// A budget for tools' results: a larger one is cut, and the rest kept
    /// in pages the agent reads as resources.
    pub output: Option<RawOutput>,
    /// Results kept and answered again for equal calls: only of tools an
    /// override asks it for, or (with hints) that their upstream marks
    /// read-only and idempotent.
    pub cache: Option<RawCache>,
    /// Progressive discovery: a listing of meta-tools that search, call and
    /// load the tenant's tools, for large catalogs.
    pub discovery: Option<RawDiscovery>,
}

/// A tenant's progressive discovery.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawDiscovery {
    /// direct (default: every tool listed), search (the meta-tools and the
    /// `always` tools) or auto (search past `threshold` visible tools).
    #[schemars(extend("enum" = ["direct", "search", "auto", null]))]
    pub mode: Option<String>,
    /// auto only: search when the caller sees more tools than this (default 40).
    #[schemars(range(min = 1))]
    pub threshold: Option<u64>,
    /// Globs on namespaced ids of tools still listed in search mode.
    #[serde(default)]
    pub always: Vec<String>,
    /// search_tools' default limit (default 5).
    #[schemars(range(min = 1))]
    pub limit: Option<u64>,
    /// The most one search returns (default 50, at most 200).
    #[schemars(range(min = 1, max = 200))]
    pub max_limit: Option<u64>,
    /// Tools one session may load (default 32, at most 256).
    #[schemars(range(min = 1, max = 256))]
    pub max_loaded: Option<u64>,
}

/// A tenant's result cache.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawCache {
    /// How long a result is kept (default 60000).
    #[schemars(range(min = 1))]
    pub ttl_ms: Option<u64>,
    /// Results kept for the tenant, least recently used dropped first (default 1024).
    #[schemars(range(min = 1))]
    pub max_entries: Option<u64>,
    /// Cache the tools their upstream marks readOnlyHint and idempotentHint (default false).
    #[serde(default)]
    pub hints: bool,
}

/// One tool's caching: on (`true`), off (`false`, whatever hints say), or
/// on for this long.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum RawCacheChoice {
    Switch(bool),
    For(RawCacheFor),
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawCacheFor {
    /// How long its results are kept.
    #[schemars(range(min = 1))]
    pub ttl_ms: u64,
}

/// A result budget; an override's keys replace the tenant's.
#[derive(Debug, Default, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawOutput {
    /// Bytes of a result's structuredContent (else content) as JSON.
    #[schemars(range(min = 1))]
    pub max_bytes: Option<u64>,
    /// The same in tokens, 4 bytes a token; the smaller bound wins.
    #[schemars(range(min = 1))]
    pub max_tokens: Option<u64>,
    /// Bytes of one spill page (default 65536, at least 1024).
    #[schemars(range(min = 1024))]
    pub page_bytes: Option<u64>,
    /// How long pages can be read (default 600000).
    #[schemars(range(min = 1))]
    pub spill_ttl_ms: Option<u64>,
    /// Bytes of pages the tenant keeps; oldest dropped first (default 64 MiB).
    #[schemars(range(min = 1))]
    pub spill_quota_bytes: Option<u64>,
}

/// What a tenant's agents see of one tool; its mcpId never changes.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawOverride {
    /// Its name in both faces: letters, digits, - _ (no `__`), within
    /// gateway.tool_name_budget.
    #[schemars(regex(pattern = r"^[A-Za-z0-9_-]{1,64}$"))]
    pub name: Option<String>,
    /// Its title in the Model Context Protocol face.
    pub title: Option<String>,
    /// Its description in both faces.
    pub description: Option<String>,
    /// Its result budget: these keys replace the tenant's `output`.
    pub output: Option<RawOutput>,
    /// Whether its results are cached: true, false, or {ttl_ms}.
    pub cache: Option<RawCacheChoice>,
}

/// The JSON Schema of the configuration file (draft 2020-12).
pub fn schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(RawConfig)).unwrap_or_default()
}
