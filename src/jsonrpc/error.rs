//! JSON-RPC error objects and the codes this gateway uses.

use serde::Serialize;

/// Error codes: JSON-RPC 2.0's own, and the gateway's (docs/mcp-v1.md, "Errors").
pub mod codes {
    /// Invalid JSON was received.
    pub const PARSE_ERROR: i64 = -32700;
    /// The JSON sent is not a valid Request object.
    pub const INVALID_REQUEST: i64 = -32600;
    /// The method does not exist or is not available.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Invalid method parameters (also: unknown or foreign mcpId).
    pub const INVALID_PARAMS: i64 = -32602;
    /// Internal error.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// The owning upstream is unavailable (not running, refused, restarting).
    pub const UPSTREAM_UNAVAILABLE: i64 = -32001;
    /// A request arrived before `initialize` in a session.
    pub const NOT_INITIALIZED: i64 = -32002;
    /// The upstream did not answer within its timeout.
    pub const UPSTREAM_TIMEOUT: i64 = -32003;
    /// Over capacity: tenant rate or concurrency limit.
    pub const OVER_CAPACITY: i64 = -32004;
    /// The owning upstream does not declare the needed capability.
    pub const CAPABILITY_MISSING: i64 = -32005;
    /// The upstream broke the protocol (framing, JSON-RPC, schema-invalid output).
    pub const UPSTREAM_PROTOCOL: i64 = -32006;
    /// The tenant's policy does not allow this tool.
    pub const UNAUTHORIZED_TOOL: i64 = -32007;
    /// The tool itself failed (a Model Context Protocol result with `isError`).
    pub const TOOL_ERROR: i64 = -32008;
    /// No credential for the upstream could be had (its `auth`).
    pub const CREDENTIAL_UNAVAILABLE: i64 = -32009;
    /// The user has to consent at the upstream first (`user_consent`):
    /// the error for clients that take no URL-mode elicitation.
    pub const AUTHORIZATION_REQUIRED: i64 = -32010;
    /// The 2025-11-25 revision's URLElicitationRequiredError.
    pub const URL_ELICITATION_REQUIRED: i64 = -32042;
    /// The Model Context Protocol's "Resource not found" (its face only; the
    /// same number is MCP v1.0's "not initialized").
    pub const RESOURCE_NOT_FOUND: i64 = -32002;
    /// 2026-07-28: the HTTP headers do not match the body they mirror.
    pub const HEADER_MISMATCH: i64 = -32020;
    /// 2026-07-28: the request needs a client capability it did not declare.
    pub const MISSING_CAPABILITY: i64 = -32021;
    /// 2026-07-28: the request's protocol version is not served.
    pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
}

/// A JSON-RPC error object as the gateway writes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorObject {
    pub code: i64,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
}

impl ErrorObject {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn with_data(mut self, data: impl Into<String>) -> Self {
        self.data = Some(data.into());
        self
    }

    pub fn parse_error() -> Self {
        Self::new(codes::PARSE_ERROR, "Parse error")
    }

    pub fn invalid_request(why: impl Into<String>) -> Self {
        Self::new(codes::INVALID_REQUEST, "Invalid Request").with_data(why)
    }
}
