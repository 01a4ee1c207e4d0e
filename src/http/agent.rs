//! `POST /mcp`: authentication, content type, body limit, then one message, a
//! batch, or a session (docs/protocol-decisions.md, "HTTP edge").
//!
//! Longer than most files: `POST /mcp`'s checks in the order they run, shared
//! by hyper's path and the own HTTP/1.1 path (`h1`), so that both refuse
//! alike; about 50 of its lines are its tests.

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
use super::streamed::streamed;
use crate::tenant::{Credential, Denied, KeyStore, Tenant, bearer_token};

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
                let response =
                    super::handshake::session_request(&edge, request.method(), request.headers())
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

/// Where the gateway publishes the public keys of what it signs.
const JWKS_PATH: &str = "/.well-known/jwks.json";

impl Edge {
    /// `GET /.well-known/jwks.json`: the public keys of the JWTs the gateway
    /// signs (identity assertions, actor tokens), unauthenticated, for the
    /// upstreams and authorization servers that verify them; 404 when it
    /// signs nothing.
    fn jwks(&self, method: &axum::http::Method) -> Response {
        let keys = self.keys.load();
        let Some(document) = keys.jwks() else {
            return Refusal::NotFound.reply().into_response();
        };
        if method != axum::http::Method::GET {
            return Refusal::MetadataByGet.reply().into_response();
        }
        self.count(StatusCode::OK);
        public_document(document.clone())
    }

    /// `GET` of this gateway's protected resource metadata (RFC 9728), when
    /// `gateway.auth.resource` is set; `None` for any other request.
    fn resource_metadata<B>(&self, request: &hyper::Request<B>) -> Option<Response> {
        let keys = self.keys.load();
        let resource = keys.resource()?;
        if !resource.paths.iter().any(|p| p == request.uri().path()) {
            return None;
        }
        if request.method() != axum::http::Method::GET {
            return Some(Refusal::MetadataByGet.reply().into_response());
        }
        self.count(StatusCode::OK);
        Some(public_document(resource.document.clone()))
    }

    /// A request without `Origin` is served; one with an `Origin` only when it
    /// is one of `gateway.allowed_origins` (a browser page on another origin
    /// must not reach a gateway on localhost: DNS rebinding).
    fn origin_allowed(&self, headers: &axum::http::HeaderMap) -> bool {
        let mut origins = headers.get_all(header::ORIGIN).iter();
        match (origins.next(), origins.next()) {
            (None, _) => true,
            (Some(origin), None) => origin.to_str().is_ok_and(|o| {
                let o = o.trim().to_ascii_lowercase();
                self.allowed_origins.contains(&o)
            }),
            (Some(_), Some(_)) => false,
        }
    }
}

/// A JSON document anyone may read, which a reader may keep five minutes.
fn public_document(document: impl Into<Body>) -> Response {
    let mut response = Response::new(document.into());
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("max-age=300"),
    );
    response
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

/// The tenant that a connection's last `Authorization` value named, kept while
/// the key set it was found in is the current one: the key's digest is
/// computed once per connection, not once per request.
/// A JWT's tenant is kept while the key set still trusts the token (not
/// expired, its key still published by its issuer).
#[derive(Default)]
struct AuthCache(Option<Cached>);

struct Cached {
    store: Arc<KeyStore>,
    value: Vec<u8>,
    tenant: Arc<Tenant>,
    /// A JWT's digest, looked up again at each request; `None` for an API key.
    jwt: Option<crate::config::KeyDigest>,
}

impl AuthCache {
    async fn authenticate(
        &mut self,
        keys: &arc_swap::ArcSwap<KeyStore>,
        authorization: Option<&[u8]>,
    ) -> Result<Arc<Tenant>, Denied> {
        let sent = authorization.ok_or(Denied::Unknown)?;
        if let Some(c) = &self.0
            && Arc::ptr_eq(&c.store, &keys.load())
            && c.value.as_slice() == sent
            && c.jwt.is_none_or(|d| c.store.by_digest(&d).is_some())
        {
            return Ok(c.tenant.clone());
        }
        let current = keys.load_full();
        let token = header_str(sent)
            .and_then(bearer_token)
            .ok_or(Denied::Unknown)?;
        let tenant = current.authenticate_token(token).await?;
        self.0 = Some(Cached {
            jwt: current
                .expiry_of(token)
                .map(|_| crate::config::KeyDigest::of(token.as_bytes())),
            store: current,
            value: sent.to_vec(),
            tenant: tenant.clone(),
        });
        Ok(tenant)
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

/// A header value as text, when it is visible ASCII (what `HeaderValue::to_str` accepts).
fn header_str(v: &[u8]) -> Option<&str> {
    if v.iter().all(|&b| b == b'\t' || (32..127).contains(&b)) {
        std::str::from_utf8(v).ok()
    } else {
        None
    }
}

/// `application/json`, parameters (e.g. `charset=utf-8`) allowed, in any case.
fn is_json(content_type: Option<&[u8]>) -> bool {
    // On the bytes, with the check `header_str` makes (visible ASCII and tabs):
    // as text it cost more than the rest of the head's checks.
    content_type.is_some_and(|v| {
        // The usual value, whole: it passes every check below.
        v.eq_ignore_ascii_case(b"application/json")
            || (v.iter().all(|&b| b == b'\t' || (32..127).contains(&b))
                && v.split(|&b| b == b';').next().is_some_and(|mime| {
                    mime.trim_ascii().eq_ignore_ascii_case(b"application/json")
                }))
    })
}

/// The checks of a head before its body is read, in order: the tenant its
/// credentials name (401), then the content type (415). The tenant is
/// recorded in the request's span unless the span was made with it.
fn admit_head(
    keys: &arc_swap::ArcSwap<KeyStore>,
    tenant: Result<Arc<Tenant>, Denied>,
    content_type: Option<&[u8]>,
    in_span: bool,
) -> Result<Arc<Tenant>, Reply> {
    let tenant = match tenant {
        Ok(tenant) => tenant,
        Err(denied) => {
            tracing::debug!("unauthenticated request");
            return Err(Refusal::Unauthorized(&keys.load(), denied).reply());
        }
    };
    // Finding the current span costs even when it is disabled: only when it can be enabled.
    if !in_span && tracing::level_enabled!(tracing::Level::INFO) {
        tracing::Span::current().record("tenant", &*tenant.name);
    }
    if !is_json(content_type) {
        return Err(Refusal::NotJson.reply());
    }
    Ok(tenant)
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

/// Reads the body as it arrives. A first message that is `initialize` starts a
/// session at once (the client may wait for its answer before sending more);
/// otherwise the whole body is read, up to the limit, and then answered.
async fn read_body(
    s: &AgentState,
    tenant: Arc<Tenant>,
    credential: Option<Credential>,
    body: Body,
    headers: &HeaderMap,
) -> Response {
    let mut body = body.into_data_stream();
    let mut buf = BytesMut::new();
    let mut first = FirstLook::default();
    // A request with the Model Context Protocol's headers opens no MCP v1.0 session.
    first.decided = mirrored(headers).say_modelcontext();
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
                match first.look(&buf) {
                    Some(First::Initialize) => {
                        let opening = session::Opening {
                            tenant,
                            credential,
                            buf,
                            body,
                        };
                        return session::start(
                            s.dispatcher.clone(),
                            &s.sessions,
                            opening,
                            s.max_body_bytes,
                        )
                        .await;
                    }
                    Some(First::Invalid) => return Refusal::ParseError.reply().into_response(),
                    _ => {}
                }
                match tokio::time::timeout_at(deadline, body.next()).await {
                    Ok(next) => next,
                    Err(_) => return Refusal::BodyTimeout.reply().into_response(),
                }
            }
        };
        let Some(chunk) = next else { break };
        let Ok(chunk) = chunk else {
            return Refusal::UnreadableBody.reply().into_response();
        };
        if buf.len() + chunk.len() > s.max_body_bytes {
            return Refusal::TooLarge(s.max_body_bytes).reply().into_response();
        }
        buf.extend_from_slice(&chunk);
    }
    if buf.len() > LARGE_BODY {
        return match exchange_aside(s, tenant.clone(), credential, buf, first.decided, headers)
            .await
        {
            Ok(response) => response,
            Err(body) => streamed(s, tenant, body, headers.clone()).await,
        };
    }
    match exchange(s, &tenant, &buf, first.decided, mirrored(headers), None).await {
        Exchange::Reply(reply) => reply.into_response(),
        Exchange::Streamed => streamed(s, tenant, buf.freeze(), headers.clone()).await,
        Exchange::Session => session_of(s, tenant, credential, buf).await,
        Exchange::Listen(id, filter) => {
            let holder = credential.map(|c| super::listen::Holder::new(c, &tenant));
            super::listen::stream(s, &tenant, holder, id, filter).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_content_types_are_read_as_the_text_check_read_them() {
        let as_text = |v: &[u8]| {
            header_str(v)
                .and_then(|v| v.split(';').next())
                .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"))
        };
        for v in [
            &b"application/json"[..],
            b"Application/JSON; charset=utf-8",
            b" application/json\t;x=y",
            b"application/json;",
            b"application/jsonx",
            b"application/ json",
            b"text/plain",
            b"",
            b";application/json",
            b"application/json\xc2\xa0",
            b"application/json; charset=\xff",
            b"application/json\x00",
            b"\x0bapplication/json",
        ] {
            assert_eq!(
                is_json(Some(v)),
                as_text(v),
                "{:?}",
                String::from_utf8_lossy(v)
            );
        }
        assert!(!is_json(None));
    }

    proptest::proptest! {
        #[test]
        fn json_content_types_agree_with_the_text_check(
            pre in "[ \t\x0b;a]{0,3}",
            upper in proptest::prelude::any::<bool>(),
            post in "[ \t;=a\u{a0}\x00\x7f]{0,4}",
        ) {
            let mime = if upper { "APPLICATION/Json" } else { "application/json" };
            let v = format!("{pre}{mime}{post}");
            let as_text = header_str(v.as_bytes())
                .and_then(|v| v.split(';').next())
                .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"));
            proptest::prop_assert_eq!(is_json(Some(v.as_bytes())), as_text, "{:?}", v);
        }
    }
}
