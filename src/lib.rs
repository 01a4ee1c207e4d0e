//! mcp-gateway: one HTTP URL for agents of MCP v1.0 and of the Model Context
//! Protocol in front of many upstream servers of either (stdio children and
//! HTTP servers), with tenants kept apart.
//!
//! Layers, lowest first; a module names only those below it (ARCHITECTURE.md
//! draws them; `tests/it/architecture.rs` holds the order):
//! - leaves: [`redact`], [`cpus`], [`descriptors`], [`stdio_pipes`],
//!   [`telemetry`], [`metrics`], [`jsonrpc`] (JSON-RPC 2.0, codecs), [`auth`];
//! - [`config`]; [`protocol`] (MCP v1.0 and the core's neutral shapes, no
//!   I/O); [`seal`]; [`modelcontext`] (the official protocol, no I/O);
//! - [`tenant`]; [`store`] (what replicas share); [`output`] (results cut
//!   to a budget, their pages); [`cache`] (results kept for equal calls);
//! - [`upstream`]: the `Transport` trait, links, dialects, supervisors;
//! - [`error`]; [`dispatch`]: the core and the two faces;
//! - [`http`]: the agent and admin edges;
//! - [`demo`], [`app`] (the composition root), [`stdio_mode`].

pub mod app;
pub mod auth;
pub mod cache;
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
pub mod output;
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
