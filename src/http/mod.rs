//! The HTTP edges: the agent listener (`POST /mcp`) and the admin listener
//! (`/healthz`, `/readyz`, `/metrics`), both served by our own accept loop.

pub mod admin;
mod admin_pins;
mod admin_state;
pub mod agent;
mod browser;
pub(crate) mod calls;
mod conn_place;
pub mod consent;
pub mod console;
mod exchange;
mod first_look;
pub(crate) mod h1;
mod handshake;
mod listen;
pub(crate) mod mcp_sessions;
mod refusal;
mod relay;
mod request_id;
pub mod serve;
pub mod session;
mod session_answers;
mod session_stream;
mod session_tools;
mod state;
mod streamed;

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::Response;

use crate::jsonrpc::{ErrorObject, write_error};

/// A response with an `application/json` body.
pub(crate) fn json(status: StatusCode, body: Vec<u8>) -> Response {
    json_body(status, Body::from(body))
}

fn json_body(status: StatusCode, body: Body) -> Response {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// A response whose `application/json` body is written from `parts` as they
/// are (shared buffers, never joined), with their total as its Content-Length.
pub(crate) fn json_parts(status: StatusCode, parts: Vec<bytes::Bytes>) -> Response {
    json_body(status, Body::new(Parts::new(parts)))
}

/// A body of buffers already in memory, of known length.
struct Parts {
    parts: std::collections::VecDeque<bytes::Bytes>,
    remaining: u64,
}

impl Parts {
    fn new(parts: Vec<bytes::Bytes>) -> Self {
        let remaining = parts.iter().map(|p| p.len() as u64).sum();
        Parts {
            parts: parts.into_iter().filter(|p| !p.is_empty()).collect(),
            remaining,
        }
    }
}

impl hyper::body::Body for Parts {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<bytes::Bytes>, Self::Error>>> {
        let next = self.parts.pop_front();
        if let Some(p) = &next {
            self.remaining -= p.len() as u64;
        }
        std::task::Poll::Ready(next.map(|p| Ok(hyper::body::Frame::data(p))))
    }

    fn is_end_stream(&self) -> bool {
        self.parts.is_empty()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(self.remaining)
    }
}

/// An answer whose body is in memory: what the agent edge's two paths write
/// (hyper's through [`Reply::into_response`], its own directly).
pub(crate) struct Reply {
    pub status: StatusCode,
    pub body: ReplyBody,
    /// One header beside the usual ones (`Allow`, `WWW-Authenticate`, `Retry-After`).
    pub header: Option<(HeaderName, HeaderValue)>,
}

pub(crate) enum ReplyBody {
    /// No body, no content type (202).
    Empty,
    Json(Vec<u8>),
    /// A JSON body written from shared buffers as they are.
    JsonParts(Vec<bytes::Bytes>),
}

impl Reply {
    pub fn json(status: StatusCode, body: Vec<u8>) -> Self {
        Reply {
            status,
            body: ReplyBody::Json(body),
            header: None,
        }
    }

    pub fn with_header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.header = Some((name, value));
        self
    }

    pub fn into_response(self) -> Response {
        let mut r = match self.body {
            ReplyBody::Empty => {
                let mut r = Response::new(Body::empty());
                *r.status_mut() = self.status;
                r
            }
            ReplyBody::Json(body) => json(self.status, body),
            ReplyBody::JsonParts(parts) => json_parts(self.status, parts),
        };
        if let Some((name, value)) = self.header {
            r.headers_mut().insert(name, value);
        }
        r
    }
}

/// A transport-level failure: the status, and a JSON-RPC error object with id null.
pub(crate) fn error(status: StatusCode, err: ErrorObject) -> Reply {
    let mut body = Vec::new();
    write_error(&mut body, None, &err);
    Reply::json(status, body)
}
