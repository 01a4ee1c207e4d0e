//! `upstreams:` as written: one upstream, its transport (a stdio child or an
//! HTTP URL) and what the gateway keeps of it.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;

use super::*;

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
