//! The requests a handshake-era session answers itself, never reaching an
//! upstream: `resources/subscribe` and `unsubscribe` (kept per session, of
//! what the tenant can read, within the session's and the tenant's bounds)
//! and `logging/setLevel` (the level the session's calls report at). Each is
//! kept where every replica sees it; a record the table cannot keep is a
//! 429 with Retry-After, any other refusal a JSON-RPC error.

use axum::http::{HeaderValue, StatusCode, header};

use super::Reply;
use super::mcp_sessions::{McpSessions, Opened, Refused};
use super::state::AgentState;
use crate::dispatch::{mcp, write_gateway_error};
use crate::error::GatewayError;
use crate::jsonrpc::Json;
use crate::tenant::Tenant;

/// `resources/subscribe` (`on`) or `resources/unsubscribe` of `params.uri`.
pub(super) async fn subscribe(
    s: &AgentState,
    sessions: &McpSessions,
    tenant: &Tenant,
    opened: &Opened,
    params: Option<Json<'_>>,
    on: bool,
) -> Result<(), GatewayError> {
    #[derive(serde::Deserialize)]
    struct P<'a> {
        #[serde(borrow)]
        uri: std::borrow::Cow<'a, str>,
    }
    let Some(p) = params.and_then(|p| serde_json::from_str::<P<'_>>(p.get()).ok()) else {
        return Err(GatewayError::InvalidParams(
            "params must be an object {\"uri\": string}".into(),
        ));
    };
    // Only what the tenant can read is kept: a made-up uri costs nothing.
    if on && !s.dispatcher.readable(tenant, &p.uri) {
        return Err(GatewayError::ResourceNotFound(p.uri.into_owned()));
    }
    sessions
        .subscribe(opened, &p.uri, on)
        .await
        .map_err(record_refused)
}

/// `logging/setLevel`: the level kept for the session's calls on every
/// replica (see `McpSessions::set_level`).
pub(super) async fn set_level(
    sessions: &McpSessions,
    opened: &Opened,
    params: Option<Json<'_>>,
) -> Result<(), GatewayError> {
    let Some(level) = mcp::level_of(params) else {
        return Err(GatewayError::InvalidParams(mcp::LEVEL_PARAMS.into()));
    };
    sessions
        .set_level(opened, level)
        .await
        .map_err(record_refused)
}

/// The reply to one of these requests: `{}`, or its error; a record the
/// session table could not keep is also a 429 with Retry-After.
pub(super) fn reply(id: Option<Json<'_>>, answered: Result<(), GatewayError>) -> Reply {
    let mut body = Vec::new();
    let status = match &answered {
        Ok(()) => {
            crate::jsonrpc::write_reply(&mut body, id, crate::jsonrpc::Reply::Result(b"{}"));
            StatusCode::OK
        }
        Err(e) => {
            write_gateway_error(&mut body, id, e);
            match e {
                GatewayError::OverCapacity { .. } => StatusCode::TOO_MANY_REQUESTS,
                _ => StatusCode::OK,
            }
        }
    };
    let reply = Reply::json(status, body);
    match status {
        StatusCode::TOO_MANY_REQUESTS => {
            reply.with_header(header::RETRY_AFTER, HeaderValue::from(1))
        }
        _ => reply,
    }
}

/// The error a record the session table could not keep becomes.
pub(super) fn record_refused(refused: Refused) -> GatewayError {
    use crate::tenant::subscriptions::Refused as Subscriptions;
    match refused {
        Refused::Full { retry_after_secs } => GatewayError::OverCapacity {
            reason: "session records",
            retry_after_secs,
        },
        Refused::StoreDown => GatewayError::StoreDown,
        Refused::Subscriptions(r @ Subscriptions::Session(_)) => {
            GatewayError::InvalidParams(r.explain())
        }
        Refused::Subscriptions(Subscriptions::Tenant(_)) => GatewayError::OverCapacity {
            reason: "subscription budget",
            retry_after_secs: 1,
        },
    }
}
