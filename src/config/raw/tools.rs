//! What a tenant's `tools:` curates, as written: progressive discovery, result
//! caching, output budgets and per-tool overrides.

use schemars::JsonSchema;
use serde::Deserialize;

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
