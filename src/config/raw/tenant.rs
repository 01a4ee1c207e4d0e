//! `tenants:` as written: a tenant's keys, upstreams, limits and the policy
//! over its tools.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;

use super::*;

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
