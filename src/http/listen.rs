//! `subscriptions/listen` over Streamable HTTP (2026-07-28): the answer is an
//! event stream that stays open, says first what it will carry, then carries
//! the tenant's changes that the client asked for, each tagged with the
//! listen's id. It ends when the client closes it, and with a final answer
//! when the gateway shuts down. A listen holds one of its tenant's session
//! places while it is open.

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use super::agent::AgentState;
use super::error;
use crate::dispatch::mcp::{self, Filter};
use crate::dispatch::watch::Watcher;
use crate::error::GatewayError;
use crate::jsonrpc::{ErrorObject, Json};
use crate::tenant::{Place, Tenant};

/// A comment line this often keeps a quiet stream from being closed by
/// proxies and clients that time out idle reads.
const KEEPALIVE: Duration = Duration::from_secs(15);

struct Listen {
    watcher: Watcher,
    filter: Filter,
    /// The listen request's id, as JSON text.
    id: Box<str>,
    shutdown: CancellationToken,
    /// The acknowledgment, until it is sent.
    first: Option<Vec<u8>>,
    ended: bool,
    _place: Place,
}

fn event(message: &[u8]) -> Bytes {
    let mut frame = Vec::with_capacity(message.len() + 24);
    frame.extend_from_slice(b"event: message\r\ndata: ");
    frame.extend_from_slice(message);
    frame.extend_from_slice(b"\r\n\r\n");
    Bytes::from(frame)
}

fn id_of(id: &str) -> Option<Json<'_>> {
    serde_json::from_str::<&serde_json::value::RawValue>(id)
        .ok()
        .map(Json::from)
}

/// Opens the stream of a listen that passed its checks.
pub(super) fn stream(s: &AgentState, tenant: &Tenant, id: Box<str>, filter: Filter) -> Response {
    let place = match s.sessions.enter(tenant) {
        Ok(place) => place,
        Err(limit) => {
            s.dispatcher
                .metrics()
                .requests_limited
                .with_label_values(&[&tenant.name, "sessions_limited"])
                .inc();
            return super::exchange::over_capacity(None, &GatewayError::TooManySessions { limit })
                .with_header(header::RETRY_AFTER, HeaderValue::from_static("1"))
                .into_response();
        }
    };
    let Ok(raw_id) = serde_json::from_str::<&serde_json::value::RawValue>(&id) else {
        return error(
            StatusCode::BAD_REQUEST,
            ErrorObject::invalid_request("the request's id is not JSON"),
        )
        .into_response();
    };
    let first = Some(mcp::acknowledged(Json::from(raw_id), &filter));
    let listen = Listen {
        watcher: Watcher::new(&s.dispatcher, tenant),
        filter,
        id,
        shutdown: s.shutdown.clone(),
        first,
        ended: false,
        _place: place,
    };
    let events = futures_util::stream::unfold(listen, |mut l| async move {
        if l.ended {
            return None;
        }
        if let Some(ack) = l.first.take() {
            return Some((Ok::<_, std::convert::Infallible>(event(&ack)), l));
        }
        loop {
            tokio::select! {
                () = l.shutdown.cancelled() => {
                    l.ended = true;
                    let end = id_of(&l.id).map(|id| mcp::listen_ended(id))?;
                    return Some((Ok(event(&end)), l));
                }
                () = tokio::time::sleep(KEEPALIVE) => {
                    return Some((Ok(Bytes::from_static(b":\r\n")), l));
                }
                change = l.watcher.next() => {
                    let change = change?;
                    if l.filter.hears(&change) {
                        let id = id_of(&l.id)?;
                        let message = mcp::change_notification(&change, Some(id));
                        return Some((Ok(event(&message)), l));
                    }
                }
            }
        }
    });
    let mut r = Response::new(Body::from_stream(events));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, no-transform"),
    );
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    r
}
