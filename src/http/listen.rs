//! `subscriptions/listen` over Streamable HTTP (2026-07-28): the answer is an
//! event stream that stays open, says first what it will carry, then carries
//! the tenant's changes that the client asked for, each tagged with the
//! listen's id. It ends when the client closes it, and with a final answer
//! when the gateway shuts down. A listen holds one of its tenant's session
//! places while it is open.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use super::refusal::Refusal;
use super::state::AgentState;
use crate::dispatch::mcp::{self, Filter};
use crate::dispatch::watch::{Change, Watcher};
use crate::error::GatewayError;
use crate::jsonrpc::Json;
use crate::tenant::{Credential, Place, Tenant};

/// A comment line this often keeps a quiet stream from being closed by
/// proxies and clients that time out idle reads: under the 5 s read
/// timeout of HTTP clients' defaults (httpx's, which the Python SDK's
/// snippets use), three bytes every few seconds per stream.
const KEEPALIVE: Duration = Duration::from_secs(4);

/// What a stream makes of one change.
pub(super) enum Rendered {
    /// This message.
    Send(Vec<u8>),
    /// Nothing: the client does not hear this change.
    Skip,
    /// The stream is over (its session ended).
    End,
}

/// A change's rendering, which may look at the shared store.
pub(super) type Rendering = futures_util::future::BoxFuture<'static, Rendered>;

/// What a stream of changes says, and when.
struct Changes<R, E> {
    watcher: Watcher,
    /// The message each change becomes, if it is one the client hears.
    render: R,
    /// Whether the stream is still wanted (a session ended by DELETE, or a
    /// key a reload removed, closes its stream).
    open: E,
    /// The message that ends the stream when the gateway shuts down, if any.
    last: Option<Vec<u8>>,
    shutdown: CancellationToken,
    /// The first message, until it is sent.
    first: Option<Vec<u8>>,
    ended: bool,
    _place: Place,
}

/// One message as an SSE event. JSON text passed through from an upstream
/// may hold line breaks between its tokens: each line is a `data` line of
/// its own, which a client joins back with `\n` (insignificant in JSON).
pub(super) fn event(message: &[u8]) -> Bytes {
    let mut frame = Vec::with_capacity(message.len() + 24);
    frame.extend_from_slice(b"event: message\r\n");
    for line in message.split(|b| *b == b'\n') {
        frame.extend_from_slice(b"data: ");
        frame.extend_from_slice(line.strip_suffix(b"\r").unwrap_or(line));
        frame.extend_from_slice(b"\r\n");
    }
    frame.extend_from_slice(b"\r\n");
    Bytes::from(frame)
}

fn id_of(id: &str) -> Option<Json<'_>> {
    serde_json::from_str::<&serde_json::value::RawValue>(id)
        .ok()
        .map(Json::from)
}

/// The key a stream was opened with, looked at again at each of its
/// events: a reload that removes the key, or moves it to another tenant,
/// ends the stream, as it ends a session at its next message.
pub(super) struct Holder {
    credential: Credential,
    tenant: Arc<str>,
}

impl Holder {
    pub fn new(credential: Credential, tenant: &Tenant) -> Self {
        Holder {
            credential,
            tenant: tenant.name.clone(),
        }
    }

    /// Whether the key still names the stream's tenant.
    pub fn still_holds(&mut self) -> bool {
        self.credential.still_names(&self.tenant)
    }
}

/// A place among the tenant's sessions for a long-lived stream, or the 429 that refuses it.
pub(super) async fn place(s: &AgentState, tenant: &Tenant) -> Result<Place, Box<Response>> {
    let entered = s.sessions.enter(tenant, s.dispatcher.shared_limits()).await;
    entered.map_err(|limit| {
        s.dispatcher
            .metrics()
            .requests_limited
            .with_label_values(&[&tenant.name, "sessions_limited"])
            .inc();
        Refusal::OverCapacity(None, &GatewayError::TooManySessions { limit })
            .reply()
            .with_header(header::RETRY_AFTER, HeaderValue::from_static("1"))
            .into_response()
            .into()
    })
}

/// The messages of a stream of changes besides the changes themselves.
pub(super) struct Framing {
    /// Sent first.
    pub first: Option<Vec<u8>>,
    /// Sent last, when the gateway shuts down.
    pub last: Option<Vec<u8>>,
}

/// An event stream of `tenant`'s changes: the first message, then what
/// `render` makes of each change, a comment line when it is quiet, the last
/// message at shutdown; it closes once `open` says it is no longer wanted.
pub(super) fn changes<R, E>(
    s: &AgentState,
    tenant: &Tenant,
    place: Place,
    framing: Framing,
    render: R,
    open: E,
) -> Response
where
    R: FnMut(&Change) -> Rendering + Send + 'static,
    E: FnMut() -> bool + Send + 'static,
{
    let Framing { first, last } = framing;
    let stream = Changes {
        watcher: Watcher::new(&s.dispatcher, tenant),
        render,
        open,
        last,
        shutdown: s.shutdown.clone(),
        first,
        ended: false,
        _place: place,
    };
    let events = futures_util::stream::unfold(stream, |mut c| async move {
        if c.ended {
            return None;
        }
        if let Some(first) = c.first.take() {
            return Some((Ok::<_, std::convert::Infallible>(event(&first)), c));
        }
        loop {
            tokio::select! {
                () = c.shutdown.cancelled() => {
                    c.ended = true;
                    let last = c.last.take()?;
                    return Some((Ok(event(&last)), c));
                }
                () = tokio::time::sleep(KEEPALIVE) => {
                    (c.open)().then_some(())?;
                    return Some((Ok(Bytes::from_static(b":\r\n")), c));
                }
                change = c.watcher.next() => {
                    let change = change?;
                    (c.open)().then_some(())?;
                    match (c.render)(&change).await {
                        Rendered::Send(message) => return Some((Ok(event(&message)), c)),
                        Rendered::Skip => {}
                        Rendered::End => return None,
                    }
                }
            }
        }
    });
    event_stream(Body::from_stream(events))
}

/// A 200 answer whose body is a stream of SSE events, kept from caches and
/// from proxies' buffering.
pub(super) fn event_stream(body: Body) -> Response {
    let mut r = Response::new(body);
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

/// Opens the stream of a listen that passed its checks, held by `holder`
/// (the key it was opened with) when it came over HTTP with one.
pub(super) async fn stream(
    s: &AgentState,
    tenant: &Tenant,
    holder: Option<Holder>,
    id: Box<str>,
    filter: Filter,
) -> Response {
    let place = match place(s, tenant).await {
        Ok(place) => place,
        Err(refused) => return *refused,
    };
    let Some(json_id) = id_of(&id) else {
        return Refusal::IdNotJson.reply().into_response();
    };
    // Written once: every message of the stream carries it as it is.
    let tag = mcp::listen_tag(json_id);
    let framing = Framing {
        first: Some(mcp::acknowledged(&tag, &filter)),
        // A listen is open until its client closes it; at shutdown it gets its final answer.
        last: Some(mcp::listen_ended(json_id, &tag)),
    };
    let (dispatcher, owner) = (
        s.dispatcher.clone(),
        s.dispatcher.tenant_named(&tenant.name),
    );
    let render = move |change: &Change| -> Rendering {
        if !filter.hears(change) {
            return Box::pin(std::future::ready(Rendered::Skip));
        }
        let Change::TaskStatus(status) = change else {
            let message = mcp::change_notification(change, Some(&tag));
            return Box::pin(std::future::ready(Rendered::Send(message)));
        };
        // A task's status goes out as `tasks/get` would answer it, which
        // asks its upstream.
        let (dispatcher, owner, status, tag) = (
            dispatcher.clone(),
            owner.clone(),
            status.clone(),
            tag.clone(),
        );
        Box::pin(async move {
            let Some(owner) = owner else {
                return Rendered::Skip;
            };
            match mcp::ModelContext::new(&dispatcher)
                .task_notification(&owner, &status, &tag)
                .await
            {
                Some(message) => Rendered::Send(message),
                None => Rendered::Skip,
            }
        })
    };
    let mut holder = holder;
    changes(s, tenant, place, framing, render, move || {
        holder.as_mut().is_none_or(Holder::still_holds)
    })
}
