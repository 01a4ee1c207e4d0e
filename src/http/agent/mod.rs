//! `POST /mcp`: authentication, content type, body limit, then one message, a
//! batch, or a session (docs/protocol-decisions.md, "HTTP edge").
//!
//! `POST /mcp`'s checks run in this order on hyper's path and on the own
//! HTTP/1.1 path (`h1`) alike, so that both refuse alike: the head's
//! (`head`), then the body's (`body`); a connection's authentication is
//! remembered (`auth_cache`); the public documents are `documents`'.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::BytesMut;
use futures_util::{FutureExt, StreamExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::Reply;
use super::conn_place::ConnPlace;
use super::exchange::{Exchange, LARGE_BODY, exchange, exchange_aside, mirrored, session_of};
use super::first_look::{First, FirstLook};
use super::h1::{self, Conn, Filled, Next};
use super::refusal::Refusal;
use super::request_id::{REQUEST_ID, RequestId};
use super::session;
pub use super::state::AgentState;

mod auth_cache;
mod body;
mod documents;
mod head;

use super::streamed::streamed;
use crate::tenant::{Credential, Denied, KeyStore, Tenant, bearer_token};
use auth_cache::AuthCache;
use body::read_body;
use documents::JWKS_PATH;
use head::{admit_head, header_str};

/// [`AgentState`] with what the edge derives from it once.
struct Edge {
    state: AgentState,
    /// `http_responses{status="200"}`, resolved once.
    ok_responses: prometheus::IntCounter,
    /// The CORS rules for browsers of the allowed origins, when there are any.
    cors: Option<tower_http::cors::CorsLayer>,
}

impl std::ops::Deref for Edge {
    type Target = AgentState;
    fn deref(&self) -> &AgentState {
        &self.state
    }
}

impl Edge {
    fn count(&self, status: StatusCode) {
        match status {
            StatusCode::OK => self.ok_responses.inc(),
            status => self
                .metrics
                .http_responses
                .with_label_values(&[status.as_str()])
                .inc(),
        }
    }
}

/// The agent edge as a hyper service: `POST /mcp`, 404 elsewhere, 405 for
/// other methods. One path needs no router; calling the handler directly
/// saves axum's routing layers on every request.
#[derive(Clone)]
pub struct AgentService(Arc<Edge>, ConnPlace);

pub fn service(state: AgentState) -> AgentService {
    AgentService(
        Arc::new(Edge {
            ok_responses: state.metrics.http_responses.with_label_values(&["200"]),
            cors: (!state.allowed_origins.is_empty())
                .then(|| super::browser::layer(&state.allowed_origins)),
            state,
        }),
        ConnPlace::default(),
    )
}

impl hyper::service::Service<hyper::Request<hyper::body::Incoming>> for AgentService {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<Response, Self::Error>> + Send>>;

    fn call(&self, request: hyper::Request<hyper::body::Incoming>) -> Self::Future {
        let edge = self.0.clone();
        let place = self.1.clone();
        Box::pin(async move {
            Ok(if !one_host(&request) {
                Refusal::BadHost.reply().into_response()
            } else if !edge.origin_allowed(request.headers()) {
                edge.count(StatusCode::FORBIDDEN);
                Refusal::ForeignOrigin.reply().into_response()
            } else if let Some(document) = edge.resource_metadata(&request) {
                document
            } else if request.uri().path() == JWKS_PATH {
                edge.jwks(request.method())
            } else if request.uri().path().starts_with(super::consent::PREFIX) {
                super::consent::serve(&edge.state, request).await
            } else if request.uri().path() != "/mcp" {
                Refusal::NotFound.reply().into_response()
            } else if request.method() == axum::http::Method::POST {
                mcp(edge, &place, request.map(Body::new)).await
            } else if edge.mcp_sessions.is_some()
                && matches!(
                    *request.method(),
                    axum::http::Method::GET | axum::http::Method::DELETE
                )
                // Without a session, GET and DELETE name nothing: the path
                // and method are refused before credentials are looked at.
                && request.headers().contains_key("mcp-session-id")
            {
                let response = super::session_stream::session_request(
                    &edge,
                    request.method(),
                    request.headers(),
                )
                .await;
                edge.count(response.status());
                response
            } else {
                Refusal::MethodNotAllowed {
                    sessions: edge.mcp_sessions.is_some(),
                }
                .reply()
                .into_response()
            })
        })
    }
}

/// The same service for tower's layers (the browsers' CORS).
impl tower::Service<hyper::Request<hyper::body::Incoming>> for AgentService {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future =
        <AgentService as hyper::service::Service<hyper::Request<hyper::body::Incoming>>>::Future;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: hyper::Request<hyper::body::Incoming>) -> Self::Future {
        hyper::service::Service::call(self, request)
    }
}

/// An HTTP/1.1 request names exactly one Host; none or several is 400
/// (RFC 9112, 3.2). HTTP/1.0 may leave it out.
fn one_host<B>(request: &hyper::Request<B>) -> bool {
    let mut hosts = request.headers().get_all(header::HOST).iter();
    match (hosts.next(), hosts.next()) {
        (Some(_), None) => true,
        (None, _) => request.version() < axum::http::Version::HTTP_11,
        (Some(_), Some(_)) => false,
    }
}

/// Serves one agent connection. Requests that the edge's own HTTP/1.1 path
/// answers whole (see `h1.rs`) are served here; at the first one it leaves
/// alone, the connection goes to hyper with every byte read so far.
pub(crate) async fn connection(
    service: AgentService,
    stream: TcpStream,
    header_read_timeout: std::time::Duration,
    shutdown: CancellationToken,
) {
    // This connection's own place; hyper's path, if it takes over, shares it.
    let service = AgentService(service.0, ConnPlace::default());
    let edge = service.0.clone();
    let mut conn = Conn::new(stream, shutdown.clone());
    let mut auth = AuthCache::default();
    let mut scope = crate::telemetry::Scope::default();
    loop {
        let head = match conn
            .read_head(header_read_timeout, edge.max_body_bytes.min(LARGE_BODY))
            .await
        {
            Next::Request(head) => head,
            Next::Closed => return,
            Next::Other => break,
        };
        let id = RequestId::of(conn.value(&head.request_id));
        // The credentials are read first, so that the span is made with its
        // tenant rather than the field recorded into it afterwards.
        let tenant = auth
            .authenticate(&edge.keys, conn.value(&head.authorization))
            .await;
        // The request's future is made in place and polled inside its span
        // or scope (what `Instrument` does): wrapping it would copy its
        // 2.5 KiB twice per request as it moved into the wrapper and into
        // this future.
        let step = {
            let name = tenant.as_deref().ok().map(|t| &*t.name);
            let span = if id.scoped(&mut scope, name) {
                None
            } else {
                Some(id.span(name))
            };
            let mut step = std::pin::pin!(serve_one(&edge, &service.1, &mut conn, &head, tenant));
            match span {
                None => std::future::poll_fn(|cx| scope.run(|| step.as_mut().poll(cx))).await,
                Some(span) => {
                    std::future::poll_fn(|cx| span.in_scope(|| step.as_mut().poll(cx))).await
                }
            }
        };
        let (reply, keep) = match step {
            Step::Reply(reply, keep) => (reply, keep),
            Step::HandOver => break,
            Step::Closed => return,
        };
        edge.count(reply.status);
        let close = head.close || !keep || conn.is_shutting_down();
        let written = conn
            .write(
                reply.status,
                reply.header.as_ref(),
                &reply.body,
                id.as_bytes(),
                close,
            )
            .await;
        if written.is_err() {
            return;
        }
        if close {
            return conn.close().await;
        }
    }
    let io = hyper_util::rt::TokioIo::new(conn.into_rewind());
    match edge.cors.clone() {
        // Browsers of listed origins: their preflights and CORS headers.
        Some(cors) => {
            let guard = edge.clone();
            let refuse: super::browser::Refusal = Arc::new(move |request| {
                (!guard.origin_allowed(request.headers())).then(|| {
                    guard.count(StatusCode::FORBIDDEN);
                    Refusal::ForeignOrigin.reply().into_response()
                })
            });
            let browsers = super::browser::BrowserEdge::new(service, &cors, refuse);
            super::serve::http1(io, browsers, header_read_timeout, shutdown).await;
        }
        None => super::serve::http1(io, service, header_read_timeout, shutdown).await,
    }
}

/// What became of one request on the edge's own path.
enum Step {
    /// The answer, and whether the connection can carry another request.
    Reply(Reply, bool),
    /// hyper serves it, and the connection from now on.
    HandOver,
    /// The client went away.
    Closed,
}

/// One request whose head has been read: the checks of its head, its body,
/// then its exchange; the request is consumed from the buffer only when it is
/// answered here.
async fn serve_one(
    s: &Edge,
    place: &ConnPlace,
    conn: &mut Conn,
    head: &h1::Head,
    tenant: Result<Arc<Tenant>, Denied>,
) -> Step {
    let end = head.len + head.body_len;
    let headers = conn.header(head);
    let tenant = match admit_head(&s.keys, tenant, headers.content_type, true) {
        Ok(tenant) => tenant,
        Err(reply) => {
            // The body is not read: skipped if it is all here, else the
            // connection ends with the answer.
            let whole = conn.buffered().len() >= end;
            if whole {
                conn.consume(end);
            }
            return Step::Reply(reply, whole);
        }
    };
    if let Err(limit) = place.take(s, &tenant).await {
        return Step::Reply(Refusal::TooManyConnections(limit).reply(), false);
    }
    let mut first = FirstLook::default();
    if conn.buffered().len() < end {
        conn.arm(s.body_read_timeout);
        while conn.buffered().len() < end {
            // A session starts while its body is still arriving, and bad JSON
            // is answered at once: hyper's path does both.
            if let Some(First::Initialize | First::Invalid) =
                first.look(&conn.buffered()[head.len..])
            {
                return Step::HandOver;
            }
            match conn.read_more(false).await {
                Filled::More => {}
                Filled::Closed => return Step::Closed,
                Filled::TimedOut => return Step::Reply(Refusal::BodyTimeout.reply(), false),
            }
        }
    }
    // A client that goes away abandons its call: the exchange is dropped,
    // and with it the call upstream, as when a session's client leaves.
    let exchanged = tokio::select! {
        biased;
        exchanged = exchange(s, &tenant, &conn.buffered()[head.len..end], first.decided, conn.header(head).mirrored, None) => exchanged,
        () = conn.client_gone() => return Step::Closed,
    };
    match exchanged {
        Exchange::Reply(reply) => {
            conn.consume(end);
            Step::Reply(reply, true)
        }
        // hyper's path serves streams.
        Exchange::Session | Exchange::Listen(..) | Exchange::Streamed => Step::HandOver,
    }
}

async fn mcp(s: Arc<Edge>, place: &ConnPlace, request: axum::extract::Request) -> Response {
    // The whole request rather than a `HeaderMap` extractor, which clones the headers.
    let (parts, body) = request.into_parts();
    let headers = &parts.headers;
    let id = RequestId::of(headers.get(REQUEST_ID).map(HeaderValue::as_bytes));
    let mut response = handle(&s, place, headers, body)
        .instrument(id.span(None))
        .await;
    s.count(response.status());
    if let Ok(value) = HeaderValue::from_bytes(id.as_bytes()) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    response
}

async fn handle(s: &AgentState, place: &ConnPlace, headers: &HeaderMap, body: Body) -> Response {
    // The key is kept (as its digest): a session it opens is admitted by the
    // keys in force at each of its messages.
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| header_str(v.as_bytes()))
        .and_then(bearer_token);
    let (credential, tenant) = match token {
        Some(token) => match Credential::new(s.keys.clone(), token).await {
            Ok((credential, tenant)) => (Some(credential), Ok(tenant)),
            Err(denied) => (None, Err(denied)),
        },
        None => (None, Err(Denied::Unknown)),
    };
    let content_type = headers.get(header::CONTENT_TYPE).map(HeaderValue::as_bytes);
    let tenant = match admit_head(&s.keys, tenant, content_type, false) {
        Ok(tenant) => tenant,
        Err(reply) => return reply.into_response(),
    };
    if let Err(limit) = place.take(s, &tenant).await {
        let mut r = Refusal::TooManyConnections(limit).reply().into_response();
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return r;
    }
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > s.max_body_bytes as u64) {
        return Refusal::TooLarge(s.max_body_bytes).reply().into_response();
    }
    read_body(s, tenant, credential, body, headers).await
}
