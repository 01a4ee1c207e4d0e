//! Why a call to an upstream did not produce a result.

use std::borrow::Cow;

use crate::jsonrpc::JsonBuf;

/// Why a call to an upstream did not produce a result.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// Not running, connection refused, restarting, or the connection died mid-call.
    #[error("unavailable: {0}")]
    Unavailable(Cow<'static, str>),
    #[error("timed out")]
    Timeout,
    /// Bad framing, invalid JSON-RPC, an answer of the wrong shape.
    #[error("protocol error: {0}")]
    Protocol(Cow<'static, str>),
    /// The upstream answered with its own error object (passed through unchanged).
    #[error("the upstream returned an error")]
    Remote(JsonBuf),
    /// The tool itself failed (a Model Context Protocol result with
    /// `isError: true`): the text of its content blocks.
    #[error("the tool failed")]
    Tool(String),
    /// Every slot busy and the queue full: refused at once.
    #[error("at its concurrency limit")]
    OverCapacity,
    /// No credential for the upstream could be had (its `auth`): why.
    #[error("no credential: {}", .0.detail)]
    Credential(Box<crate::upstream::credentials::Refusal>),
}

impl CallError {
    pub fn unavailable(why: impl Into<Cow<'static, str>>) -> Self {
        CallError::Unavailable(why.into())
    }

    pub fn protocol(why: impl Into<Cow<'static, str>>) -> Self {
        CallError::Protocol(why.into())
    }

    /// A closed-set label for metrics.
    pub fn outcome(&self) -> &'static str {
        match self {
            CallError::Unavailable(_) => "unavailable",
            CallError::Timeout => "timeout",
            CallError::Protocol(_) => "protocol_error",
            CallError::Remote(_) => "upstream_error",
            CallError::Tool(_) => "tool_error",
            CallError::OverCapacity => "over_capacity",
            CallError::Credential(_) => "credential_unavailable",
        }
    }
}
