//! `POST /mcp`: authentication, content type, body limit, then one message, a
//! batch, or a session (PROTOCOL-NOTES, "HTTP transport").

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::BytesMut;
use futures_util::future::join_all;
use futures_util::{FutureExt, StreamExt};
use serde_json::value::RawValue;
use tracing::Instrument;

use super::session;
use super::{error, json, json_parts};
use crate::dispatch::{
    self, Dispatcher, Outgoing, respond, respond_classified, write_gateway_error,
};
use crate::error::GatewayError;
use crate::jsonrpc::{ErrorObject, codes};
use crate::jsonrpc::{Incoming, classify, classify_bytes};
use crate::metrics::Metrics;
use crate::tenant::{KeyStore, Tenant, bearer_token};

/// What the agent edge needs; a cheap clone.
#[derive(Clone)]
pub struct AgentState {
    pub dispatcher: Dispatcher,
    /// Swapped whole on reload.
    pub keys: Arc<arc_swap::ArcSwap<KeyStore>>,
    pub max_body_bytes: usize,
    pub max_batch: usize,
    pub body_read_timeout: std::time::Duration,
    pub metrics: Metrics,
}

/// [`AgentState`] with what the edge derives from it once.
struct Edge {
    state: AgentState,
    /// `http_responses{status="200"}`, resolved once.
    ok_responses: prometheus::IntCounter,
}

impl std::ops::Deref for Edge {
    type Target = AgentState;
    fn deref(&self) -> &AgentState {
        &self.state
    }
}

/// The agent edge as a hyper service: `POST /mcp`, 404 elsewhere, 405 for
/// other methods. One path needs no router; calling the handler directly
/// saves axum's routing layers on every request.
#[derive(Clone)]
pub struct AgentService(Arc<Edge>);

pub fn service(state: AgentState) -> AgentService {
    AgentService(Arc::new(Edge {
        ok_responses: state.metrics.http_responses.with_label_values(&["200"]),
        state,
    }))
}

impl hyper::service::Service<hyper::Request<hyper::body::Incoming>> for AgentService {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<Response, Self::Error>> + Send>>;

    fn call(&self, request: hyper::Request<hyper::body::Incoming>) -> Self::Future {
        let edge = self.0.clone();
        Box::pin(async move {
            Ok(if request.uri().path() != "/mcp" {
                not_found().await
            } else if request.method() != axum::http::Method::POST {
                method_not_allowed().await
            } else {
                mcp(edge, request.map(Body::new)).await
            })
        })
    }
}

async fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        ErrorObject::invalid_request("the MCP endpoint is POST /mcp"),
    )
}

async fn method_not_allowed() -> Response {
    let mut r = error(
        StatusCode::METHOD_NOT_ALLOWED,
        ErrorObject::invalid_request("the MCP endpoint accepts POST only"),
    );
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("POST"));
    r
}

/// The request id: the client's `x-request-id` when it is a sane token, else a new one.
fn request_id(headers: &HeaderMap) -> HeaderValue {
    headers
        .get(REQUEST_ID)
        .filter(|v| {
            (1..=128).contains(&v.len()) && v.as_bytes().iter().all(|b| b.is_ascii_graphic())
        })
        .cloned()
        .unwrap_or_else(new_request_id)
}

/// 16 hex digits, unique in this process and not guessable across processes.
fn new_request_id() -> HeaderValue {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEED: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let seed = *SEED.get_or_init(|| {
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    // An odd multiplier makes this a bijection of the counter: ids never repeat.
    let v = (n ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut hex = [0u8; 16];
    for (i, digit) in hex.iter_mut().enumerate() {
        *digit = b"0123456789abcdef"[((v >> (60 - 4 * i)) & 0xf) as usize];
    }
    HeaderValue::from_bytes(&hex).unwrap_or(HeaderValue::from_static("-"))
}

const REQUEST_ID: &str = "x-request-id";

async fn mcp(s: Arc<Edge>, request: axum::extract::Request) -> Response {
    // The whole request rather than a `HeaderMap` extractor, which clones the headers.
    let (parts, body) = request.into_parts();
    let headers = &parts.headers;
    let id = request_id(headers);
    let span = tracing::info_span!(
        "request",
        request_id = id.to_str().unwrap_or("-"),
        tenant = tracing::field::Empty
    );
    let mut response = handle(&s, headers, body).instrument(span).await;
    match response.status() {
        StatusCode::OK => s.ok_responses.inc(),
        status => s
            .metrics
            .http_responses
            .with_label_values(&[status.as_str()])
            .inc(),
    }
    response.headers_mut().insert(REQUEST_ID, id);
    response
}

fn unauthorized() -> Response {
    let mut r = error(
        StatusCode::UNAUTHORIZED,
        ErrorObject::new(codes::INVALID_REQUEST, "Unauthorized")
            .with_data("send Authorization: Bearer <api key>"),
    );
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

fn too_large(limit: usize) -> Response {
    error(
        StatusCode::PAYLOAD_TOO_LARGE,
        ErrorObject::invalid_request(format!("the request body is larger than {limit} bytes")),
    )
}

/// `application/json`, parameters (e.g. `charset=utf-8`) allowed, in any case.
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"))
}

fn authenticate(keys: &arc_swap::ArcSwap<KeyStore>, headers: &HeaderMap) -> Option<Arc<Tenant>> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    keys.load().authenticate(bearer_token(value)?).cloned()
}

async fn handle(s: &AgentState, headers: &HeaderMap, body: Body) -> Response {
    let Some(tenant) = authenticate(&s.keys, headers) else {
        tracing::debug!("unauthenticated request");
        return unauthorized();
    };
    tracing::Span::current().record("tenant", &*tenant.name);
    if !is_json(headers) {
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorObject::invalid_request("Content-Type must be application/json"),
        );
    }
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > s.max_body_bytes as u64) {
        return too_large(s.max_body_bytes);
    }
    read_body(s, tenant, body).await
}

/// What the first message of a body says about the exchange.
enum First {
    /// Not complete yet.
    Incomplete,
    /// `initialize`: a session, to be served while the body is still arriving.
    Initialize,
    /// Anything else: read the whole body, then decide.
    Other,
    /// Not JSON.
    Invalid,
}

fn peek_first(buf: &[u8]) -> First {
    let mut values = serde_json::Deserializer::from_slice(buf).into_iter::<&RawValue>();
    match values.next() {
        None => First::Incomplete,
        Some(Ok(v)) if dispatch::session::starts_session(v) => First::Initialize,
        Some(Ok(_)) => First::Other,
        Some(Err(e)) if e.is_eof() => First::Incomplete,
        Some(Err(_)) => First::Invalid,
    }
}

/// Reads the body as it arrives. A first message that is `initialize` starts a
/// session at once (the client may wait for its answer before sending more);
/// otherwise the whole body is read, up to the limit, and then answered.
async fn read_body(s: &AgentState, tenant: Arc<Tenant>, body: Body) -> Response {
    let mut body = body.into_data_stream();
    let mut buf = BytesMut::new();
    // Whether the first message has been looked at, and whether a `}` (an object
    // can only end in one) arrived since the last look.
    let (mut decided, mut unseen_brace) = (false, false);
    // The whole body must arrive within the deadline, unless it opens a session.
    let deadline = tokio::time::Instant::now() + s.body_read_timeout;
    loop {
        // What has arrived already is taken at once. A body that arrives whole
        // is never peeked at here: `exchange` parses it once.
        let next = match body.next().now_or_never() {
            Some(next) => next,
            None => {
                // The client is still sending: an `initialize` first starts a
                // session now, as its client may wait for the answer.
                if !decided && unseen_brace {
                    unseen_brace = false;
                    match peek_first(&buf) {
                        First::Incomplete => {}
                        First::Initialize => {
                            return session::start(
                                s.dispatcher.clone(),
                                tenant,
                                buf,
                                body,
                                s.max_body_bytes,
                            );
                        }
                        First::Other => decided = true,
                        First::Invalid => return parse_error(),
                    }
                }
                match tokio::time::timeout_at(deadline, body.next()).await {
                    Ok(next) => next,
                    Err(_) => {
                        return error(
                            StatusCode::REQUEST_TIMEOUT,
                            ErrorObject::invalid_request("the request body did not arrive in time"),
                        );
                    }
                }
            }
        };
        let Some(chunk) = next else { break };
        let Ok(chunk) = chunk else {
            return error(
                StatusCode::BAD_REQUEST,
                ErrorObject::invalid_request("the request body could not be read"),
            );
        };
        if buf.len() + chunk.len() > s.max_body_bytes {
            return too_large(s.max_body_bytes);
        }
        unseen_brace |= !decided && chunk.contains(&b'}');
        buf.extend_from_slice(&chunk);
    }
    exchange(s, tenant, buf, decided).await
}

fn parse_error() -> Response {
    let mut body = Vec::new();
    crate::jsonrpc::write_error(&mut body, None, &ErrorObject::parse_error());
    json(StatusCode::BAD_REQUEST, body)
}

/// A whole body: a stateless exchange, or a session of several messages.
async fn exchange(s: &AgentState, tenant: Arc<Tenant>, bytes: BytesMut, peeked: bool) -> Response {
    // The common case, one JSON object, is classified straight from the bytes.
    if let Some(message) = classify_bytes(&bytes) {
        return one_message(s, tenant, &bytes, message).await;
    }
    match serde_json::from_slice::<&RawValue>(&bytes) {
        Ok(raw) if raw.get().starts_with('[') => batch(s, &tenant, raw).await,
        Ok(raw) => one_message(s, tenant, &bytes, classify(raw)).await,
        // Not one JSON value. Its first message decides, as when it is looked
        // at while the body arrives: not JSON is a parse error, `initialize`
        // opens a session, and so do several newline-delimited messages.
        Err(_) => {
            let first = if peeked {
                First::Other
            } else {
                peek_first(&bytes)
            };
            match first {
                First::Invalid => parse_error(),
                First::Initialize => session_of(s, tenant, bytes),
                _ if dispatch::session::holds_several_messages(&bytes) => {
                    session_of(s, tenant, bytes)
                }
                _ => parse_error(),
            }
        }
    }
}

/// A body of one message, classified once: its envelope is parsed nowhere else.
async fn one_message(
    s: &AgentState,
    tenant: Arc<Tenant>,
    bytes: &BytesMut,
    message: Incoming<'_>,
) -> Response {
    if dispatch::session::is_initialize(&message) {
        return session_of(s, tenant, bytes.clone());
    }
    let id = match &message {
        Incoming::Request { id, .. } => Some(*id),
        _ => None,
    };
    let _admission = match s.dispatcher.admit(&tenant, u32::from(id.is_some())) {
        Ok(a) => a,
        Err(e) => return over_capacity(id, &e),
    };
    match respond_classified(&s.dispatcher, &tenant, message, false)
        .await
        .0
    {
        Some(Outgoing::Flat(reply)) => json(StatusCode::OK, reply),
        Some(Outgoing::Parts(parts)) => json_parts(StatusCode::OK, parts),
        None => accepted(),
    }
}

/// A session of the messages of a body that has ended.
fn session_of(s: &AgentState, tenant: Arc<Tenant>, bytes: BytesMut) -> Response {
    session::start(
        s.dispatcher.clone(),
        tenant,
        bytes,
        Body::empty().into_data_stream(),
        s.max_body_bytes,
    )
}

/// 429, `Retry-After`, and the -32004 error object (with the request's id when it has one).
fn over_capacity(id: Option<&RawValue>, e: &GatewayError) -> Response {
    let mut body = Vec::new();
    write_gateway_error(&mut body, id, e);
    let mut r = json(StatusCode::TOO_MANY_REQUESTS, body);
    if let GatewayError::OverCapacity {
        retry_after_secs, ..
    } = e
    {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_secs));
    }
    r
}

fn accepted() -> Response {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::ACCEPTED;
    r
}

async fn batch(s: &AgentState, tenant: &Tenant, raw: &RawValue) -> Response {
    let invalid = |why: &str| {
        let mut body = Vec::new();
        crate::jsonrpc::write_error(&mut body, None, &ErrorObject::invalid_request(why));
        json(StatusCode::OK, body)
    };
    let Ok(items) = serde_json::from_str::<Vec<&RawValue>>(raw.get()) else {
        return invalid("not a batch");
    };
    if items.is_empty() {
        return invalid("an empty batch");
    }
    if items.len() > s.max_batch {
        return invalid(&format!("a batch holds at most {} messages", s.max_batch));
    }
    // Every request in the batch counts against the tenant's limits (notifications do not).
    let requests = items
        .iter()
        .filter(|i| matches!(classify(i), Incoming::Request { .. }))
        .count();
    let _admission = match s
        .dispatcher
        .admit(tenant, u32::try_from(requests).unwrap_or(u32::MAX))
    {
        Ok(a) => a,
        Err(e) => return over_capacity(None, &e),
    };
    let replies = join_all(
        items
            .iter()
            .map(|item| respond(&s.dispatcher, tenant, item)),
    )
    .await;
    let replies: Vec<Vec<u8>> = replies
        .into_iter()
        .flatten()
        .map(Outgoing::into_vec)
        .collect();
    if replies.is_empty() {
        return accepted();
    }
    let mut body = Vec::with_capacity(replies.iter().map(|r| r.len() + 1).sum::<usize>() + 2);
    body.push(b'[');
    for (i, r) in replies.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(r);
    }
    body.push(b']');
    json(StatusCode::OK, body)
}
