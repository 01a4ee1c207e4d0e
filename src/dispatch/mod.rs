//! The RPC tier: what a tenant's request means, across its upstreams.
//! `core` holds the tenant's upstreams behind neutral operations
//! ([`Dispatcher`]); each agent protocol is a face, a type holding a handle
//! on the core: MCP v1.0's is [`v1::V1`] (method names, params and result
//! shapes, its metric labels), the Model Context Protocol's is
//! [`mcp::ModelContext`] (both eras). `rpc` answers whole messages
//! (`respond`) for every transport toward agents, picking the face.

mod core;
pub mod discovery;
pub mod mcp;
mod rpc;
pub mod session;
mod v1;
mod v1_discovery;
pub mod watch;

use bytes::Bytes;

use crate::jsonrpc::JsonBuf;

pub use self::core::{Audit, Dispatcher, Place, continues_round};
pub use rpc::{Outgoing, Status, respond, respond_classified, respond_traced, write_gateway_error};

/// The protocols an agent's request may come in (labels of metrics and audit lines).
pub const PROTOCOL_V1: &str = crate::metrics::PROTOCOLS[0];
pub const PROTOCOL_MCP: &str = crate::metrics::PROTOCOLS[1];

/// A successful result, as raw JSON text.
pub enum Payload {
    Raw(JsonBuf),
    Text(String),
    /// JSON text in parts shared with the catalogs (a listing).
    Parts(Vec<Bytes>),
}

/// How an answer stands apart from its body, for a transport that says so
/// (HTTP's status, in the 2026-07-28 revision); every answer otherwise stands
/// as answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Standing {
    #[default]
    Answered,
    /// The request was malformed, or broke a rule of its revision.
    Malformed,
    /// The method is not one the gateway answers.
    UnknownMethod,
}
