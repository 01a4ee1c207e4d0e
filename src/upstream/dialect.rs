//! The seam between what the gateway asks of an upstream and how the
//! upstream's protocol says it. `dispatch` and [`super::Upstream`]'s callers
//! speak [`Op`]s (hand-shake, list a kind, call a tool, ...); a [`Dialect`]
//! names each on the wire. MCP v1.0 is one dialect, the Model Context
//! Protocol (`modelcontext`) the other.

use crate::config::Protocol;
use crate::metrics::ServerRequest;
use crate::modelcontext::method as mc;
use crate::protocol::{Kind, Method};

/// What the gateway asks of an upstream, whatever its protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Initialize,
    List(Kind),
    CallTool,
    ReadResource,
    GetPrompt,
    ListTemplates,
    Subscribe,
    Complete,
    /// One of the 2025-11-25 revision's task requests.
    Task(TaskOp),
}

/// The requests about a task an upstream created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskOp {
    Get,
    Result,
    List,
    Cancel,
}

impl TaskOp {
    pub fn method(self) -> &'static str {
        match self {
            TaskOp::Get => mc::TASKS_GET,
            TaskOp::Result => mc::TASKS_RESULT,
            TaskOp::List => mc::TASKS_LIST,
            TaskOp::Cancel => mc::TASKS_CANCEL,
        }
    }
}

/// The protocol an upstream speaks on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// MCP v1.0: Content-Length frames on stdio, `mcp/...` methods, mcpIds.
    V1,
    /// The Model Context Protocol: newline-delimited JSON on stdio,
    /// Streamable HTTP, `tools/...` methods, names.
    ModelContext,
}

impl Dialect {
    /// The dialect a configured protocol names; `None` for `auto`, told
    /// at the first handshake.
    pub fn of(p: Protocol) -> Option<Self> {
        match p {
            Protocol::Auto => None,
            Protocol::V1 => Some(Dialect::V1),
            Protocol::ModelContext => Some(Dialect::ModelContext),
        }
    }
}

/// An upstream's dialect: set from the start, or once, when told.
pub(super) struct Settled(std::sync::atomic::AtomicU8);

impl Settled {
    const UNKNOWN: u8 = 0;
    const V1: u8 = 1;
    const MODEL_CONTEXT: u8 = 2;

    pub fn new(dialect: Option<Dialect>) -> Self {
        let s = Settled(std::sync::atomic::AtomicU8::new(Self::UNKNOWN));
        if let Some(d) = dialect {
            s.set(d);
        }
        s
    }

    pub fn get(&self) -> Option<Dialect> {
        match self.0.load(std::sync::atomic::Ordering::Acquire) {
            Self::V1 => Some(Dialect::V1),
            Self::MODEL_CONTEXT => Some(Dialect::ModelContext),
            _ => None,
        }
    }

    pub fn set(&self, dialect: Dialect) {
        let v = match dialect {
            Dialect::V1 => Self::V1,
            Dialect::ModelContext => Self::MODEL_CONTEXT,
        };
        self.0.store(v, std::sync::atomic::Ordering::Release);
    }
}

impl Dialect {
    /// The method an operation is sent as (also the `method` label of the
    /// upstream's metrics: a closed set per dialect); "other" where the
    /// dialect has no such operation.
    pub fn method(self, op: Op) -> &'static str {
        match (self, op) {
            (Dialect::V1, Op::Initialize) => Method::Initialize.as_str(),
            (Dialect::V1, Op::List(kind)) => kind.list_method().as_str(),
            (Dialect::V1, Op::CallTool) => Method::ExecuteTool.as_str(),
            // MCP v1.0 carries contents in listings and has no templates or
            // subscriptions: these are never sent to its upstreams.
            (Dialect::V1, _) => Method::Other.as_str(),
            (Dialect::ModelContext, Op::Initialize) => mc::INITIALIZE,
            (Dialect::ModelContext, Op::List(kind)) => crate::modelcontext::list_method(kind).0,
            (Dialect::ModelContext, Op::CallTool) => mc::CALL_TOOL,
            (Dialect::ModelContext, Op::ReadResource) => mc::READ_RESOURCE,
            (Dialect::ModelContext, Op::GetPrompt) => mc::GET_PROMPT,
            (Dialect::ModelContext, Op::ListTemplates) => mc::LIST_TEMPLATES,
            (Dialect::ModelContext, Op::Subscribe) => mc::SUBSCRIBE,
            (Dialect::ModelContext, Op::Complete) => mc::COMPLETE,
            (Dialect::ModelContext, Op::Task(op)) => op.method(),
        }
    }

    /// The notification that ends the handshake.
    pub fn initialized(self) -> &'static str {
        match self {
            Dialect::V1 => Method::Initialized.as_str(),
            Dialect::ModelContext => mc::INITIALIZED,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::V1 => Protocol::V1.as_str(),
            Dialect::ModelContext => Protocol::ModelContext.as_str(),
        }
    }
}

/// The answer to a request a server sent the gateway: a Model Context
/// Protocol `ping` gets `{}`; the gateway serves nothing else (it declares no
/// client capabilities), so everything else is -32601.
pub(crate) fn answer_server_request(
    dialect: Dialect,
    id: crate::jsonrpc::Json<'_>,
    method: &str,
) -> (Vec<u8>, ServerRequest) {
    use crate::jsonrpc::message::{Reply, write_reply};
    use crate::jsonrpc::{ErrorObject, codes};
    let mut out = Vec::new();
    if dialect == Dialect::ModelContext && method == mc::PING {
        write_reply(&mut out, Some(id), Reply::Result(b"{}"));
        (out, ServerRequest::Answered)
    } else {
        let err = ErrorObject::new(codes::METHOD_NOT_FOUND, "Method not found");
        write_reply(&mut out, Some(id), Reply::Error(&err));
        (out, ServerRequest::Refused)
    }
}
