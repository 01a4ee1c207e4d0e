//! mcp-gateway: one HTTP URL for MCP v1.0 agents in front of many upstream
//! MCP servers (stdio children and HTTP servers), with tenants kept apart.
//!
//! Layers, lowest first (dependencies point down only):
//! - [`jsonrpc`]: JSON-RPC 2.0 messages and the Content-Length codec;
//! - [`protocol`]: MCP methods, capabilities, definitions, mcpIds, catalogs;
//! - [`config`], [`tenant`]: leaves;
//! - [`upstream`]: the `Transport` trait, stdio and HTTP upstreams, supervisors;
//! - [`dispatch`]: the RPC tier (merging, routing, validation, sessions);
//! - [`http`]: the agent and admin edges;
//! - [`app`]: the composition root. [`demo`] is the demo/test upstream server.

pub mod app;
pub mod auth;
pub mod config;
pub mod cpus;
pub mod demo;
pub mod descriptors;
pub mod dispatch;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
pub mod jsonrpc;
pub mod metrics;
pub mod modelcontext;
pub mod protocol;
pub mod redact;
pub mod seal;
pub mod stdio_mode;
pub mod stdio_pipes;
pub mod store;
pub mod telemetry;
pub mod tenant;
pub mod upstream;

/// rustls needs a process-wide crypto provider; ring is the one built in.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
