//! A call whose client may be told things before its answer (a `tools/call`
//! asking for progress): answered as JSON when nothing comes before the
//! result, and as an SSE stream once something does, its messages in order
//! and the result last. The call runs in a task of its own so the stream can
//! start while it runs; a client that leaves drops the stream and with it
//! the call, as it would a call answered as JSON.

use std::sync::Arc;

use crate::tenant::reports::report_queue;
use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use bytes::Bytes;

use super::exchange::{Exchange, exchange, mirrored};
use super::listen::{event, event_stream};
use super::state::AgentState;
use super::{Reply, ReplyBody, error};
use crate::jsonrpc::{ErrorObject, codes};
use crate::tenant::Tenant;

/// Aborts the call when the answer (or its stream) is dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Answers the one message of `body`, whose call may report before its answer.
pub(super) async fn streamed(
    s: &AgentState,
    tenant: Arc<Tenant>,
    body: Bytes,
    headers: HeaderMap,
) -> Response {
    let (tx, mut rx) = report_queue::<Vec<u8>>(
        Some(tenant.reports.clone()),
        Some(s.dispatcher.metrics().reports_dropped.clone()),
    );
    let state = s.clone();
    let mut call = tokio::spawn(async move {
        let mirrored = mirrored(&headers);
        match exchange(&state, &tenant, &body, false, mirrored, Some(&tx)).await {
            Exchange::Reply(reply) => reply,
            // One message that asks for progress is never a session or a listen.
            _ => internal(),
        }
    });
    let abort = AbortOnDrop(call.abort_handle());
    // What comes first decides how the answer goes out; a report queued
    // before the call ended still comes first.
    let first = tokio::select! {
        biased;
        first = rx.recv() => first,
        reply = &mut call => return reply.unwrap_or_else(|_| internal()).into_response(),
    };
    let Some(first) = first else {
        return call.await.unwrap_or_else(|_| internal()).into_response();
    };
    let events = futures_util::stream::unfold(
        (Some(first), rx, Some(call), abort),
        |(first, mut rx, call, abort)| async move {
            if let Some(message) = first {
                return Some((
                    Ok::<_, std::convert::Infallible>(event(&message)),
                    (None, rx, call, abort),
                ));
            }
            // The call's sender is dropped when its task ends: every report
            // is read before its answer.
            if let Some(message) = rx.recv().await {
                return Some((Ok(event(&message)), (None, rx, call, abort)));
            }
            let reply = call?.await.unwrap_or_else(|_| internal());
            Some((Ok(last_event(reply)), (None, rx, None, abort)))
        },
    );
    event_stream(Body::from_stream(events))
}

/// The call's answer as the stream's last event.
fn last_event(reply: Reply) -> Bytes {
    match reply.body {
        ReplyBody::Json(body) => event(&body),
        ReplyBody::JsonParts(parts) => event(&parts.concat()),
        // A request always has an answer; nothing to add if it had none.
        ReplyBody::Empty => Bytes::new(),
    }
}

fn internal() -> Reply {
    error(
        StatusCode::INTERNAL_SERVER_ERROR,
        ErrorObject::new(codes::INTERNAL_ERROR, "Internal error"),
    )
}
