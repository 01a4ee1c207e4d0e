//! What a message is to a session: whether a body opens one, the MCP v1.0
//! handshake's steps (initialize, then initialized, then anything), what a
//! cancellation names, and the notifications a session writes
//! (`$/logTrace`, `mcp/resourceDidChange`).

use super::*;

/// Whether a body's first message opens a session (`initialize`).
pub fn starts_session(first: &RawValue) -> bool {
    is_initialize(&classify(first))
}

/// Whether a classified message is the request that opens a session.
pub fn is_initialize(message: &Incoming<'_>) -> bool {
    // The Model Context Protocol's `initialize` opens none: its face is stateless.
    matches!(message, Incoming::Request { method, params, .. }
        if Method::parse(method) == Method::Initialize && !super::mcp::speaks(method, *params))
}

/// Whether a body that is not one JSON value holds several messages, one per
/// line (a session), rather than one value followed by garbage (a parse error).
pub fn holds_several_messages(body: &[u8]) -> bool {
    let mut values = serde_json::Deserializer::from_slice(body).into_iter::<&RawValue>();
    if !matches!(values.next(), Some(Ok(_))) {
        return false;
    }
    let rest = &body[values.byte_offset()..];
    let gap = rest.iter().take_while(|b| b.is_ascii_whitespace()).count();
    gap < rest.len() && rest[..gap].contains(&b'\n')
}

/// What to do with one message of a session.
pub(super) enum Step {
    /// Answer now with this message (handshake errors, invalid messages).
    Reply(Vec<u8>),
    /// Answer `initialize` before reading on: its answer is the session's first message.
    Initialize { trace: bool },
    /// The client sent `initialized`: notifications may flow from now on.
    Initialized,
    /// Dispatch it; the answer comes when it is ready.
    Dispatch,
    /// Nothing to send (other notifications).
    Nothing,
}

#[derive(Default)]
pub(super) struct Handshake {
    /// `initialize` was answered.
    pub(super) initialized: bool,
}

impl Handshake {
    pub(super) fn step(&mut self, raw: &RawValue) -> Step {
        match classify(raw).without_responses() {
            Incoming::Request { id, method, params } => {
                let mut out = Vec::new();
                match Method::parse(&method) {
                    // The Model Context Protocol's `initialize` takes any id.
                    Method::Initialize
                        if id.get() != "1" && !super::mcp::speaks(&method, params) =>
                    {
                        write_gateway_error(&mut out, Some(id), &GatewayError::InitializeId)
                    }
                    Method::Initialize if self.initialized => write_error(
                        &mut out,
                        Some(id),
                        &ErrorObject::invalid_request("the session is already initialized"),
                    ),
                    Method::Initialize => {
                        self.initialized = true;
                        return Step::Initialize {
                            trace: wants_trace(params),
                        };
                    }
                    _ if !self.initialized => {
                        write_gateway_error(&mut out, Some(id), &GatewayError::NotInitialized)
                    }
                    _ => return Step::Dispatch,
                }
                Step::Reply(out)
            }
            Incoming::Notification { method, .. }
                if Method::parse(&method) == Method::Initialized && self.initialized =>
            {
                Step::Initialized
            }
            Incoming::Notification { .. } | Incoming::Ignored | Incoming::Response { .. } => {
                Step::Nothing
            }
            Incoming::Invalid { id, error } => {
                let mut out = Vec::new();
                write_error(&mut out, id, &error);
                Step::Reply(out)
            }
        }
    }
}

pub(super) fn uri_of(params: Option<Json<'_>>) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct P {
        uri: String,
    }
    params
        .and_then(|p| serde_json::from_str::<P>(p.get()).ok())
        .map(|p| p.uri)
}

/// The request a `notifications/cancelled` names.
pub fn cancelled_request(params: Option<Json<'_>>) -> Option<Json<'_>> {
    params
        .and_then(|p| crate::jsonrpc::scan::members_of(p, ["requestId"]))
        .and_then(|[id]| id)
}

/// `params.trace == "on"` in `initialize`.
pub(super) fn wants_trace(params: Option<Json<'_>>) -> bool {
    #[derive(serde::Deserialize)]
    struct P<'a> {
        #[serde(borrow)]
        trace: Option<std::borrow::Cow<'a, str>>,
    }
    params
        .and_then(|p| serde_json::from_str::<P<'_>>(p.get()).ok())
        .and_then(|p| p.trace)
        .is_some_and(|t| t == "on")
}

/// The body of a `$/logTrace` notification (LSP's shape: `{"message": ...}`).
pub(super) fn log_trace(message: &str) -> Vec<u8> {
    let params = serde_json::json!({ "message": message });
    format!(r#"{{"jsonrpc":"2.0","method":"$/logTrace","params":{params}}}"#).into_bytes()
}

pub(super) fn resource_did_change(id: &str) -> Vec<u8> {
    let params = serde_json::json!({ "id": id });
    format!(r#"{{"jsonrpc":"2.0","method":"mcp/resourceDidChange","params":{params}}}"#)
        .into_bytes()
}
