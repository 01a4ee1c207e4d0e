//! GET and DELETE on `/mcp` for the handshake era's sessions: GET is an
//! event stream of the session's changes (listings, task statuses, and the
//! resources it subscribed to), DELETE ends the session on every replica.
//! Both are answered only when sessions are issued, to the key that holds
//! the session.

use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::Response;

use super::mcp_sessions::{McpSessions, Opened};
use super::refusal::Refusal;
use super::state::AgentState;
use super::{Reply, ReplyBody};
use crate::dispatch::mcp;
use crate::dispatch::watch::Change;
use crate::tenant::{Credential, Tenant};
use std::sync::Arc;

/// GET on `/mcp` (an event stream of the session's changes: listings, and
/// resources it subscribed to) and DELETE (ends the session), when sessions
/// are issued.
pub(super) async fn session_request(
    s: &AgentState,
    method: &Method,
    headers: &HeaderMap,
) -> Response {
    let Some(sessions) = s.mcp_sessions.clone() else {
        return Refusal::MethodNotAllowed { sessions: false }
            .reply()
            .into_response();
    };
    let (credential, tenant) = match bearer(s, headers).await {
        Ok(found) => found,
        Err(refused) => return refused,
    };
    let Some(id) = headers.get("mcp-session-id") else {
        return Refusal::NoSessionId(method).reply().into_response();
    };
    let Some(opened) = sessions.open(id.as_bytes(), &tenant.name).await else {
        return Refusal::SessionNotFound(None).reply().into_response();
    };
    if let Err(e) = s.dispatcher.admit_rate(&tenant).await {
        return Refusal::OverCapacity(None, &e).reply().into_response();
    }
    if method == Method::DELETE {
        return end(s, &sessions, &opened, &tenant, id.as_bytes()).await;
    }
    let wants_events = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/event-stream"));
    if !wants_events {
        return Refusal::NotAcceptable.reply().into_response();
    }
    let place = match super::listen::place(s, &tenant).await {
        Ok(place) => place,
        Err(refused) => return *refused,
    };
    // Each change: the session must still be open (a DELETE on any replica
    // ends it), and a resource's update is heard only if it subscribed.
    let here = (sessions.clone(), opened.clone());
    let render = move |change: &Change| -> super::listen::Rendering {
        let (sessions, opened, change) = (sessions.clone(), opened.clone(), change.clone());
        Box::pin(async move {
            if sessions.ended(&opened).await {
                return super::listen::Rendered::End;
            }
            let heard = match &change {
                Change::Listing(_) | Change::TaskStatus(_) => true,
                Change::Resource(uri) => sessions.subscribed(&opened, uri).await,
            };
            match heard {
                true => super::listen::Rendered::Send(mcp::change_notification(&change, None)),
                false => super::listen::Rendered::Skip,
            }
        })
    };
    let framing = super::listen::Framing {
        first: None,
        last: None,
    };
    let mut credential = super::listen::Holder::new(credential, &tenant);
    super::listen::changes(s, &tenant, place, framing, render, move || {
        credential.still_holds() && !here.0.ended_here(&here.1)
    })
}

/// The key the request's bearer token names, and its tenant; the stream
/// holds the key, so a reload that removes it ends the stream.
async fn bearer(
    s: &AgentState,
    headers: &HeaderMap,
) -> Result<(Credential, Arc<Tenant>), Response> {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(crate::tenant::bearer_token);
    let denied = match token {
        Some(token) => match Credential::new(s.keys.clone(), token).await {
            Ok(found) => return Ok(found),
            Err(denied) => denied,
        },
        None => crate::tenant::Denied::Unknown,
    };
    Err(Refusal::Unauthorized(&s.keys.load(), denied)
        .reply()
        .into_response())
}

/// DELETE: the session ends, with its children per session here (another
/// replica's end when idle). 200 only for an end that was recorded:
/// otherwise the session would go on.
async fn end(
    s: &AgentState,
    sessions: &McpSessions,
    opened: &Opened,
    tenant: &Tenant,
    id: &[u8],
) -> Response {
    match sessions.end(opened).await {
        Ok(()) => {
            for up in s.dispatcher.upstreams() {
                up.end_session(&tenant.name, id);
            }
            Reply {
                status: StatusCode::OK,
                body: ReplyBody::Empty,
                header: None,
            }
            .into_response()
        }
        Err(refused) => {
            tracing::warn!(tenant = %tenant.name, "a session's end could not be recorded: the tenant keeps as many session records as it may");
            Refusal::OverCapacity(None, &super::session_answers::record_refused(refused))
                .reply()
                .into_response()
        }
    }
}
