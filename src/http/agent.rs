//! `POST /mcp`: authentication, content type, body limit, then one message, a
//! batch, or a session (PROTOCOL-NOTES, "HTTP transport").

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use axum::routing::post;
use futures_util::future::join_all;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde_json::value::RawValue;
use tokio::sync::mpsc;

use super::{error, json};
use crate::dispatch::{Dispatcher, respond, session};
use crate::jsonrpc::{ErrorObject, codes};
use crate::metrics::Metrics;
use crate::tenant::{KeyStore, Tenant, bearer_token};

/// What the agent edge needs; a cheap clone.
#[derive(Clone)]
pub struct AgentState {
    pub dispatcher: Dispatcher,
    pub keys: Arc<KeyStore>,
    pub max_body_bytes: usize,
    pub max_batch: usize,
    pub metrics: Metrics,
}

pub fn router(state: AgentState) -> Router {
    Router::new()
        .route("/mcp", post(mcp).fallback(method_not_allowed))
        .fallback(not_found)
        .with_state(state)
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

async fn mcp(State(s): State<AgentState>, headers: HeaderMap, body: Body) -> Response {
    let response = handle(&s, &headers, body).await;
    s.metrics
        .http_responses
        .with_label_values(&[response.status().as_str()])
        .inc();
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

fn authenticate<'a>(keys: &'a KeyStore, headers: &HeaderMap) -> Option<&'a Arc<Tenant>> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    keys.authenticate(bearer_token(value)?)
}

async fn handle(s: &AgentState, headers: &HeaderMap, body: Body) -> Response {
    let Some(tenant) = authenticate(&s.keys, headers).cloned() else {
        return unauthorized();
    };
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
    let bytes = match Limited::new(body, s.max_body_bytes).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
            return too_large(s.max_body_bytes);
        }
        Err(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                ErrorObject::invalid_request("the request body could not be read"),
            );
        }
    };
    exchange(s, tenant, bytes).await
}

/// Decides between a stateless exchange and a session, and runs it.
async fn exchange(s: &AgentState, tenant: Arc<Tenant>, bytes: Bytes) -> Response {
    let parse_error = || {
        let mut body = Vec::new();
        crate::jsonrpc::write_error(&mut body, None, &ErrorObject::parse_error());
        json(StatusCode::BAD_REQUEST, body)
    };
    match serde_json::from_slice::<&RawValue>(&bytes) {
        Ok(raw) if raw.get().starts_with('[') => batch(s, &tenant, raw).await,
        Ok(raw) if session::starts_session(raw) => start_session(s, tenant, bytes),
        Ok(raw) => match respond(&s.dispatcher, &tenant, raw).await {
            Some(reply) => json(StatusCode::OK, reply),
            None => accepted(),
        },
        // Not one JSON value: several newline-delimited messages make a session.
        Err(_) if session::holds_several_messages(&bytes) => start_session(s, tenant, bytes),
        Err(_) => parse_error(),
    }
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
    let replies = join_all(
        items
            .iter()
            .map(|item| respond(&s.dispatcher, tenant, item)),
    )
    .await;
    let replies: Vec<Vec<u8>> = replies.into_iter().flatten().collect();
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

/// A session over a body that was read whole: responses stream out, one per
/// line, as each is ready.
fn start_session(s: &AgentState, tenant: Arc<Tenant>, bytes: Bytes) -> Response {
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let dispatcher = s.dispatcher.clone();
    tokio::spawn(session::run_buffered(dispatcher, tenant, bytes, tx));
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|line| (Ok::<_, std::convert::Infallible>(line), rx))
    });
    let mut r = Response::new(Body::from_stream(stream));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}
