//! The YAML file as written: every field optional where a default exists,
//! unknown fields rejected so that a typo is an error, not a silent default.
//! These types are also the file's JSON Schema (`mcp-gateway check
//! --schema`): the editor schema, the Helm chart's values schema and the
//! reference in docs/configuration.md are kept equal to it by tests.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;

mod gateway;
mod tenant;
mod tools;
mod upstream;
mod upstream_auth;

pub use gateway::*;
pub use tenant::*;
pub use tools::*;
pub use upstream::*;
pub use upstream_auth::*;

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

/// The JSON Schema of the configuration file (draft 2020-12).
pub fn schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(RawConfig)).unwrap_or_default()
}
