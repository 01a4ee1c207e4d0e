//! The HTTP edges: the agent listener (`POST /mcp`) and the admin listener
//! (`/healthz`, `/readyz`, `/metrics`), both served by our own accept loop.

pub mod admin;
pub mod agent;
pub mod serve;
pub mod session;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;

use crate::jsonrpc::{ErrorObject, write_error};

/// A response with an `application/json` body.
pub(crate) fn json(status: StatusCode, body: Vec<u8>) -> Response {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// A transport-level failure: the status, and a JSON-RPC error object with id null.
pub(crate) fn error(status: StatusCode, err: ErrorObject) -> Response {
    let mut body = Vec::new();
    write_error(&mut body, None, &err);
    json(status, body)
}
