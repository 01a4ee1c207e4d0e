//! The YAML file as written: every field optional where a default exists,
//! unknown fields rejected so that a typo is an error, not a silent default.

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub gateway: Option<RawGateway>,
    #[serde(default)]
    pub upstreams: BTreeMap<String, RawUpstream>,
    #[serde(default)]
    pub tenants: BTreeMap<String, RawTenant>,
    pub telemetry: Option<RawTelemetry>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTelemetry {
    pub traces: Option<RawTraces>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTraces {
    pub endpoint: Option<String>,
    pub protocol: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub service_name: Option<String>,
    pub sampler: Option<String>,
    pub sampler_arg: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGateway {
    pub id: Option<String>,
    pub listen: Option<String>,
    pub admin_listen: Option<String>,
    pub shutdown_timeout_ms: Option<u64>,
    pub server_request_timeout_ms: Option<u64>,
    pub pins_file: Option<String>,
    pub reload_poll_ms: Option<u64>,
    pub admin_token: Option<String>,
    pub session_secret: Option<String>,
    pub tool_name_budget: Option<u64>,
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    #[serde(default)]
    pub limits: RawLimits,
    pub auth: Option<RawAuth>,
    pub store: Option<RawStore>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStore {
    pub url: String,
    pub username: Option<String>,
    pub password: Option<String>,
    pub key_prefix: Option<String>,
    pub when_down: Option<String>,
    pub timeout_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAuth {
    pub resource: Option<String>,
    #[serde(default)]
    pub jwt: Vec<RawJwt>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawJwt {
    pub issuer: String,
    #[serde(default)]
    pub audiences: Vec<String>,
    pub jwks_url: Option<String>,
    pub jwks_file: Option<String>,
    pub tenant_claim: Option<String>,
    #[serde(default)]
    pub tenants: Vec<String>,
    pub tenant: Option<String>,
    pub leeway_s: Option<u64>,
    pub refresh_s: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    pub max_body_bytes: Option<u64>,
    pub max_frame_bytes: Option<u64>,
    pub max_batch: Option<u64>,
    pub header_read_timeout_ms: Option<u64>,
    pub body_read_timeout_ms: Option<u64>,
    pub max_connections: Option<u64>,
    pub max_sessions_per_tenant: Option<u64>,
    pub max_connections_per_tenant: Option<u64>,
    pub session_idle_timeout_ms: Option<u64>,
    pub max_session_in_flight: Option<u64>,
    pub max_session_records_per_tenant: Option<u64>,
    pub max_subscription_bytes_per_session: Option<u64>,
    pub max_subscription_bytes_per_tenant: Option<u64>,
    pub max_listing_bytes: Option<u64>,
    pub max_definition_bytes: Option<u64>,
    pub max_server_requests: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstream {
    pub stdio: Option<RawStdio>,
    pub http: Option<RawHttp>,
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub required: bool,
    pub max_concurrency: Option<u64>,
    pub max_queue: Option<u64>,
    #[serde(default)]
    pub pin: bool,
    pub protocol: Option<String>,
    #[serde(default)]
    pub per_session: bool,
    #[serde(default)]
    pub shared: bool,
    pub max_children: Option<u64>,
    pub idle_timeout_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStdio {
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub cwd: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHttp {
    pub url: String,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub notifications: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTenant {
    #[serde(default)]
    pub api_keys: Vec<String>,
    #[serde(default)]
    pub upstreams: Vec<String>,
    pub tools: Option<RawToolPolicy>,
    pub rate_limit: Option<RawRateLimit>,
    pub max_concurrency: Option<u64>,
    pub max_sessions: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRateLimit {
    pub per_second: u64,
    pub burst: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawToolPolicy {
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default)]
    pub deny: Vec<String>,
    #[serde(default)]
    pub scopes: BTreeMap<String, String>,
}
