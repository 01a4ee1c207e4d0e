//! The gateway's error, and the ONE place it becomes a JSON-RPC error object.
//! Agents never see internals: no paths, no stderr, no config, no secrets, and
//! another tenant's tool reads exactly like a tool that does not exist.

use std::sync::Arc;

use crate::jsonrpc::{ErrorObject, JsonBuf, codes};
use crate::protocol::Method;
use crate::upstream::CallError;

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("method not found")]
    MethodNotFound,
    #[error("invalid params: {0}")]
    InvalidParams(String),
    /// An mcpId that is unknown, foreign, or another tenant's: all look the same.
    #[error("unknown tool {0}")]
    UnknownTool(String),
    /// Arguments that break the tool's inputSchema; the text says what is wrong.
    #[error("{0}")]
    InvalidArguments(String),
    #[error("initialize must have id 1")]
    InitializeId,
    #[error("request before initialize")]
    NotInitialized,
    /// The tool's pinned definition changed; refused until an operator approves it.
    #[error("tool {0} is quarantined")]
    Quarantined(String),
    /// The tenant's policy denies this tool.
    #[error("tool {0} is not allowed for this tenant")]
    ToolDenied(String),
    /// The caller's token lacks the scope this tool needs: answered exactly
    /// as [`Self::ToolDenied`]; over HTTP a lone request also gets the
    /// `insufficient_scope` challenge naming the scope.
    #[error("tool {id} needs scope {scope}")]
    ScopeMissing { id: String, scope: Arc<str> },
    #[error("upstream {upstream} does not declare {}", .method.as_str())]
    CapabilityMissing { upstream: Arc<str>, method: Method },
    #[error("upstream {upstream}: {error}")]
    Upstream {
        upstream: Arc<str>,
        error: CallError,
    },
    /// The tenant is over its rate or concurrency limit.
    #[error("over capacity: {reason}")]
    OverCapacity {
        reason: &'static str,
        retry_after_secs: u64,
    },
    /// The shared store is down, and `when_down: refuse` refuses the calls
    /// of tenants with limits (HTTP 503).
    #[error("the shared store is down")]
    StoreDown,
    /// The user has to consent at `upstream` first, at `url` (the
    /// 2025-11-25 revision's URL-mode elicitation error, elicitation `id`).
    #[error("upstream {upstream} needs the user's consent")]
    UrlElicitation {
        upstream: Arc<str>,
        url: String,
        id: String,
    },
    /// The upstream's result breaks the tool's outputSchema (or has no `output`).
    #[error("upstream {upstream}: {detail}")]
    InvalidOutput { upstream: Arc<str>, detail: String },
    /// A session's key was removed by a reload: the session ends.
    #[error("the session's key is no longer valid")]
    Revoked,
    /// The tenant has as many sessions open as it may.
    #[error("too many sessions")]
    TooManySessions { limit: usize },
    /// The tenant holds as many connections as it may.
    #[error("too many connections")]
    TooManyConnections { limit: usize },
    /// The session has as many calls in flight as it may.
    #[error("too many calls in flight in this session")]
    SessionBusy { limit: usize },
    /// A `resources/read` of a uri the tenant does not see (the Model Context Protocol's face).
    #[error("resource not found")]
    ResourceNotFound(String),
    /// A tool its upstream runs only as a task, called by an MCP v1.0 agent (which cannot ask for one).
    #[error("the tool runs only as a task")]
    TaskOnly { upstream: Arc<str> },
    /// A task id that names no task of this tenant's (unknown, another
    /// tenant's, altered or forged: all read the same).
    #[error("task not found")]
    TaskNotFound,
    /// A call asked to run as a task, of a tool that does not run as one.
    #[error("tool {0} does not run as a task")]
    TaskUnsupported(String),
    /// A call not asked to run as a task, of a tool that runs only as one.
    #[error("tool {0} runs only as a task")]
    TaskRequired(String),
    /// A 2026-07-28 request that needs the tasks extension its client did not declare.
    #[error("the client did not declare the tasks extension")]
    TasksExtensionMissing,
    /// A 2026-07-28 request whose mirrored headers disagree with its body.
    #[error("header mismatch: {0}")]
    HeaderMismatch(String),
    /// Not an error: a 2026-07-28 client's call whose upstream needs its
    /// input first (`resultType: "input_required"`, its state sealed). The
    /// face answers it as a result; nothing else ever gets one.
    #[error("the upstream needs the client's input")]
    InputRequired(Box<serde_json::Value>),
    /// A 2026-07-28 request for a protocol version not served, and those that are.
    #[error("unsupported protocol version {requested}")]
    UnsupportedVersion {
        requested: String,
        supported: &'static [&'static str],
    },
}

/// An error as it goes on the wire.
pub enum WireError<'a> {
    Own(ErrorObject),
    /// The gateway's own, written whole because its `data` is structured:
    /// its code, and its JSON text.
    Written(i64, String),
    /// An upstream's own error object, passed through unchanged.
    Raw(&'a JsonBuf),
}

impl GatewayError {
    pub fn to_wire(&self) -> WireError<'_> {
        use GatewayError as E;
        let own = |code, message: &str, data: Option<String>| {
            let e = ErrorObject::new(code, message);
            WireError::Own(match data {
                Some(d) => e.with_data(d),
                None => e,
            })
        };
        match self {
            E::HeaderMismatch(why) => own(
                codes::HEADER_MISMATCH,
                &format!("Header mismatch: {why}"),
                None,
            ),
            E::UnsupportedVersion {
                requested,
                supported,
            } => WireError::Written(
                codes::UNSUPPORTED_PROTOCOL_VERSION,
                serde_json::json!({
                    "code": codes::UNSUPPORTED_PROTOCOL_VERSION,
                    "message": "Unsupported protocol version",
                    "data": {"supported": supported, "requested": requested},
                })
                .to_string(),
            ),
            E::MethodNotFound => own(codes::METHOD_NOT_FOUND, "Method not found", None),
            E::InvalidParams(why) => {
                own(codes::INVALID_PARAMS, "Invalid params", Some(why.clone()))
            }
            E::UnknownTool(id) => own(
                codes::INVALID_PARAMS,
                "Invalid params",
                Some(format!("Unknown tool: {id}")),
            ),
            E::InvalidArguments(why) => {
                own(codes::INVALID_PARAMS, "Invalid params", Some(why.clone()))
            }
            E::InitializeId => own(
                codes::INVALID_REQUEST,
                "Invalid Request",
                Some("initialize must have id 1".into()),
            ),
            E::NotInitialized => own(codes::NOT_INITIALIZED, "Server not initialized", None),
            E::Quarantined(id) => own(
                codes::UNAUTHORIZED_TOOL,
                "Unauthorized tool",
                Some(format!(
                    "the definition of tool {id} changed since it was pinned, or is new to its pinned upstream; it is refused until an operator approves it"
                )),
            ),
            E::ToolDenied(id) | E::ScopeMissing { id, .. } => own(
                codes::UNAUTHORIZED_TOOL,
                "Unauthorized tool",
                Some(format!("tool {id} is not allowed for this tenant")),
            ),
            E::CapabilityMissing { upstream, method } => own(
                codes::CAPABILITY_MISSING,
                "Capability not provided",
                Some(format!(
                    "upstream {upstream} does not provide {}",
                    method.as_str()
                )),
            ),
            E::Upstream { upstream, error } => match error {
                CallError::Remote(raw) => WireError::Raw(raw),
                CallError::Unavailable(why) => own(
                    codes::UPSTREAM_UNAVAILABLE,
                    "Upstream unavailable",
                    Some(format!("upstream {upstream} is unavailable: {why}")),
                ),
                CallError::Timeout => own(
                    codes::UPSTREAM_TIMEOUT,
                    "Upstream timed out",
                    Some(format!("upstream {upstream} did not answer in time")),
                ),
                CallError::Protocol(why) => own(
                    codes::UPSTREAM_PROTOCOL,
                    "Upstream protocol error",
                    Some(format!("upstream {upstream}: {why}")),
                ),
                CallError::Tool(text) => own(codes::TOOL_ERROR, "Tool error", Some(text.clone())),
                CallError::OverCapacity => own(
                    codes::OVER_CAPACITY,
                    "Over capacity",
                    Some(format!(
                        "upstream {upstream} is at its concurrency limit; retry later"
                    )),
                ),
                CallError::Credential(refusal) if let Some(ask) = refusal.consent.as_deref() => {
                    WireError::Written(
                        codes::AUTHORIZATION_REQUIRED,
                        serde_json::json!({
                            "code": codes::AUTHORIZATION_REQUIRED,
                            "message": format!("Upstream authorization required: connect your account at {}", ask.url),
                            "data": {"upstream": &**upstream, "url": ask.url, "elicitationId": ask.id},
                        })
                        .to_string(),
                    )
                }
                CallError::Credential(refusal) => {
                    let mut data = serde_json::json!({"upstream": &**upstream, "reason": refusal.reason});
                    if let Some(error) = &refusal.error {
                        data["error"] = error.as_str().into();
                    }
                    WireError::Written(
                        codes::CREDENTIAL_UNAVAILABLE,
                        serde_json::json!({
                            "code": codes::CREDENTIAL_UNAVAILABLE,
                            "message": "Upstream credential unavailable",
                            "data": data,
                        })
                        .to_string(),
                    )
                }
            },
            E::UrlElicitation { upstream, url, id } => {
                let message = format!("Connect your account for {upstream} at {url}");
                WireError::Written(
                    codes::URL_ELICITATION_REQUIRED,
                    serde_json::json!({
                        "code": codes::URL_ELICITATION_REQUIRED,
                        "message": format!("URL elicitation required: {message}"),
                        "data": {"elicitations": [{
                            "mode": "url",
                            "elicitationId": id,
                            "url": url,
                            "message": message,
                        }]},
                    })
                    .to_string(),
                )
            }
            E::OverCapacity {
                retry_after_secs,
                reason,
            } => own(
                codes::OVER_CAPACITY,
                "Over capacity",
                Some(format!(
                    "the tenant's {reason}; retry after {retry_after_secs} s"
                )),
            ),
            E::StoreDown => own(
                codes::OVER_CAPACITY,
                "Over capacity",
                Some(
                    "the limits shared by the gateway's replicas cannot be checked now (its store is down); retry shortly"
                        .into(),
                ),
            ),
            E::InvalidOutput { upstream, detail } => own(
                codes::UPSTREAM_PROTOCOL,
                "Upstream protocol error",
                Some(format!("upstream {upstream}: {detail}")),
            ),
            // The body of a 401, as the key would get on a new request.
            E::Revoked => own(
                codes::INVALID_REQUEST,
                "Unauthorized",
                Some("the key this session was opened with is no longer valid".into()),
            ),
            E::TooManySessions { limit } => own(
                codes::OVER_CAPACITY,
                "Over capacity",
                Some(format!(
                    "the tenant has {limit} sessions open, its limit; retry after one ends"
                )),
            ),
            E::TooManyConnections { limit } => own(
                codes::OVER_CAPACITY,
                "Over capacity",
                Some(format!(
                    "the tenant has {limit} connections open, its limit; retry on one of them"
                )),
            ),
            E::TaskOnly { upstream } => own(
                codes::INTERNAL_ERROR,
                "The tool runs only as a task",
                Some(format!(
                    "upstream {upstream} runs this tool only as a task, which MCP v1.0 cannot ask for"
                )),
            ),
            E::TaskNotFound => own(
                codes::INVALID_PARAMS,
                "Failed to retrieve task: Task not found",
                None,
            ),
            E::TaskUnsupported(id) => own(
                codes::METHOD_NOT_FOUND,
                "Method not found",
                Some(format!("tool {id} does not run as a task")),
            ),
            E::TaskRequired(id) => own(
                codes::METHOD_NOT_FOUND,
                "Method not found",
                Some(format!(
                    "tool {id} runs only as a task: call it with params.task"
                )),
            ),
            E::TasksExtensionMissing => WireError::Written(
                codes::MISSING_CAPABILITY,
                serde_json::json!({
                    "code": codes::MISSING_CAPABILITY,
                    "message": "Missing required client capability",
                    "data": {"requiredCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}},
                })
                .to_string(),
            ),
            E::ResourceNotFound(uri) => own(
                codes::RESOURCE_NOT_FOUND,
                "Resource not found",
                Some(format!("Unknown resource: {uri}")),
            ),
            E::SessionBusy { limit } => own(
                codes::OVER_CAPACITY,
                "Over capacity",
                Some(format!(
                    "this session has {limit} calls in flight, its limit; retry after one is answered"
                )),
            ),
            E::InputRequired(_) => own(
                codes::INTERNAL_ERROR,
                "Internal error",
                Some("the upstream needs input this client cannot be asked for".into()),
            ),
        }
    }

    /// The error's code, when the gateway wrote the error (not an upstream's own).
    pub fn code(&self) -> Option<i64> {
        match self.to_wire() {
            WireError::Own(obj) => Some(obj.code),
            WireError::Written(code, _) => Some(code),
            WireError::Raw(_) => None,
        }
    }

    /// A closed-set label for metrics.
    pub fn outcome(&self) -> &'static str {
        use GatewayError as E;
        match self {
            E::HeaderMismatch(_) | E::UnsupportedVersion { .. } => "invalid_request",
            E::MethodNotFound => "method_not_found",
            E::InvalidParams(_) | E::UnknownTool(_) | E::InvalidArguments(_) => "invalid_params",
            E::InitializeId => "invalid_request",
            E::NotInitialized => "not_initialized",
            E::ToolDenied(_) | E::ScopeMissing { .. } => "unauthorized_tool",
            E::Quarantined(_) => "quarantined",
            E::CapabilityMissing { .. } => "capability_missing",
            E::Upstream { error, .. } => match error {
                CallError::Unavailable(_) => "upstream_unavailable",
                CallError::Timeout => "upstream_timeout",
                CallError::Protocol(_) => "upstream_protocol_error",
                CallError::Remote(_) => "upstream_error",
                CallError::Tool(_) => "tool_error",
                CallError::OverCapacity => "over_capacity",
                CallError::Credential(r) if r.consent.is_some() => "authorization_required",
                CallError::Credential(_) => "credential_unavailable",
            },
            E::UrlElicitation { .. } => "authorization_required",
            E::OverCapacity { .. } | E::StoreDown => "over_capacity",
            E::InvalidOutput { .. } => "upstream_protocol_error",
            E::Revoked => "unauthorized",
            E::ResourceNotFound(_) => "invalid_params",
            E::TaskOnly { .. } => "task_only",
            E::TaskNotFound => "invalid_params",
            E::TaskUnsupported(_) | E::TaskRequired(_) => "method_not_found",
            E::TasksExtensionMissing => "invalid_request",
            E::InputRequired(_) => "input_required",
            E::TooManySessions { .. } | E::TooManyConnections { .. } | E::SessionBusy { .. } => {
                "over_capacity"
            }
        }
    }
}
