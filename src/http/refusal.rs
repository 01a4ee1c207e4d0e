//! Every refusal the agent edge makes of an HTTP request itself (rather than
//! an answer of JSON-RPC to it): one enum, and one mapping to the status, the
//! error object (id null unless the refused request had one) and the one
//! header a refusal may carry.

use axum::http::{HeaderValue, Method, StatusCode, header};

use super::{Reply, error};
use crate::dispatch::write_gateway_error;
use crate::error::GatewayError;
use crate::jsonrpc::{ErrorObject, Json, codes};
use crate::tenant::{Denied, KeyStore};

pub(crate) enum Refusal<'a> {
    /// 400: an HTTP/1.1 request without exactly one `Host` (RFC 9112, 3.2).
    BadHost,
    /// 400: a body that is not JSON (JSON-RPC's parse error).
    ParseError,
    /// 400: a body that broke off or could not be read.
    UnreadableBody,
    /// 400: `GET` or `DELETE` of `/mcp` without `Mcp-Session-Id`.
    NoSessionId(&'a Method),
    /// 400: a listen whose JSON-RPC id is not JSON.
    IdNotJson,
    /// 400: a JSON-RPC batch where the request is in the 2026-07-28 revision.
    BatchInThisRevision,
    /// 401, with the challenge the key store's resource settings call for.
    Unauthorized(&'a KeyStore, Denied),
    /// 403: an `Origin` not in `gateway.allowed_origins`.
    ForeignOrigin,
    /// 404: a path other than `/mcp` (and the resource metadata's).
    NotFound,
    /// 404: a handshake-era session that is unknown or has ended.
    SessionNotFound(Option<Json<'a>>),
    /// 405 on `/mcp`: `sessions` when GET and DELETE are served too.
    MethodNotAllowed { sessions: bool },
    /// 405: the resource metadata is read with GET.
    MetadataByGet,
    /// 406: `GET /mcp` by a client that does not accept an event stream.
    NotAcceptable,
    /// 408: the body did not arrive within `body_read_timeout`.
    BodyTimeout,
    /// 413: a body larger than `max_body_bytes`.
    TooLarge(usize),
    /// 415: a body that is not `application/json`.
    NotJson,
    /// 429 (503 when the shared store is down under `when_down: refuse`),
    /// with the refused request's id when it had one.
    OverCapacity(Option<Json<'a>>, &'a GatewayError),
    /// 429 for a tenant at its connection limit; the connection is closed after it.
    TooManyConnections(usize),
}

impl Refusal<'_> {
    pub(crate) fn reply(self) -> Reply {
        let invalid = |status, why: &str| error(status, ErrorObject::invalid_request(why));
        match self {
            Refusal::BadHost => invalid(
                StatusCode::BAD_REQUEST,
                "an HTTP/1.1 request carries exactly one Host header",
            ),
            Refusal::ParseError => error(StatusCode::BAD_REQUEST, ErrorObject::parse_error()),
            Refusal::UnreadableBody => invalid(
                StatusCode::BAD_REQUEST,
                "the request body could not be read",
            ),
            Refusal::NoSessionId(method) => invalid(
                StatusCode::BAD_REQUEST,
                &format!("{method} /mcp needs an Mcp-Session-Id"),
            ),
            Refusal::IdNotJson => invalid(StatusCode::BAD_REQUEST, "the request's id is not JSON"),
            Refusal::BatchInThisRevision => invalid(
                StatusCode::BAD_REQUEST,
                "JSON-RPC batches are not part of this revision of the Model Context Protocol: send one message per request",
            ),
            Refusal::Unauthorized(keys, denied) => unauthorized(keys, denied),
            Refusal::ForeignOrigin => invalid(
                StatusCode::FORBIDDEN,
                "the request's Origin is not one of gateway.allowed_origins",
            ),
            Refusal::NotFound => invalid(StatusCode::NOT_FOUND, "the MCP endpoint is POST /mcp"),
            Refusal::SessionNotFound(id) => {
                let mut body = Vec::new();
                crate::jsonrpc::write_error(
                    &mut body,
                    id,
                    &ErrorObject::invalid_request(
                        "the session is unknown or has ended: initialize a new one",
                    ),
                );
                Reply::json(StatusCode::NOT_FOUND, body)
            }
            Refusal::MethodNotAllowed { sessions } => {
                let (allow, why) = if sessions {
                    (
                        "GET, POST, DELETE",
                        "the MCP endpoint accepts POST, and GET and DELETE with a session",
                    )
                } else {
                    ("POST", "the MCP endpoint accepts POST only")
                };
                invalid(StatusCode::METHOD_NOT_ALLOWED, why)
                    .with_header(header::ALLOW, HeaderValue::from_static(allow))
            }
            Refusal::MetadataByGet => invalid(
                StatusCode::METHOD_NOT_ALLOWED,
                "the resource metadata is read with GET",
            )
            .with_header(header::ALLOW, HeaderValue::from_static("GET")),
            Refusal::NotAcceptable => invalid(
                StatusCode::NOT_ACCEPTABLE,
                "GET /mcp answers text/event-stream; say so in Accept",
            ),
            Refusal::BodyTimeout => invalid(
                StatusCode::REQUEST_TIMEOUT,
                "the request body did not arrive in time",
            ),
            Refusal::TooLarge(limit) => invalid(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("the request body is larger than {limit} bytes"),
            ),
            Refusal::NotJson => invalid(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "Content-Type must be application/json",
            ),
            Refusal::OverCapacity(id, e) => over_capacity(id, e),
            Refusal::TooManyConnections(limit) => {
                over_capacity(None, &GatewayError::TooManyConnections { limit })
                    .with_header(header::RETRY_AFTER, HeaderValue::from_static("1"))
            }
        }
    }
}

/// 429, `Retry-After`, and the -32004 error object; 503 when the shared
/// store is down and the limits it shares cannot be checked.
fn over_capacity(id: Option<Json<'_>>, e: &GatewayError) -> Reply {
    let mut body = Vec::new();
    write_gateway_error(&mut body, id, e);
    match e {
        GatewayError::OverCapacity {
            retry_after_secs, ..
        } => Reply::json(StatusCode::TOO_MANY_REQUESTS, body)
            .with_header(header::RETRY_AFTER, HeaderValue::from(*retry_after_secs)),
        GatewayError::StoreDown => Reply::json(StatusCode::SERVICE_UNAVAILABLE, body)
            .with_header(header::RETRY_AFTER, HeaderValue::from(1)),
        _ => Reply::json(StatusCode::TOO_MANY_REQUESTS, body),
    }
}

/// A 401. With `gateway.auth.resource` set, its challenge names the
/// resource's metadata (RFC 9728), and says `invalid_token` when a JWT was
/// refused (RFC 6750).
fn unauthorized(keys: &KeyStore, denied: Denied) -> Reply {
    log_refused(denied);
    let (challenge, hint) = match keys.resource() {
        None => (
            HeaderValue::from_static("Bearer"),
            "send Authorization: Bearer <api key>",
        ),
        Some(r) => (
            HeaderValue::from_str(&r.challenge(denied == Denied::InvalidToken))
                .unwrap_or_else(|_| HeaderValue::from_static("Bearer")),
            if denied == Denied::InvalidToken {
                "the bearer token is not valid here: expired, not yet valid, or not for this gateway"
            } else {
                "send Authorization: Bearer <api key or access token>"
            },
        ),
    };
    error(
        StatusCode::UNAUTHORIZED,
        ErrorObject::new(codes::INVALID_REQUEST, "Unauthorized").with_data(hint),
    )
    .with_header(header::WWW_AUTHENTICATE, challenge)
}

/// Says that credentials were refused, at most once a second, with how many
/// were refused since the last line: a brute force shows in the log without
/// flooding it (and without the credential, which is never logged).
fn log_refused(denied: Denied) {
    use std::sync::Mutex;
    use std::time::{Duration, Instant};
    static LAST: Mutex<Option<(Instant, u64)>> = Mutex::new(None);
    let reason = match denied {
        Denied::Unknown => "missing or unknown key",
        Denied::InvalidToken => "invalid token",
    };
    let mut last = LAST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match &mut *last {
        Some((at, suppressed)) if at.elapsed() < Duration::from_secs(1) => *suppressed += 1,
        _ => {
            let suppressed = last.map_or(0, |(_, n)| n);
            *last = Some((Instant::now(), 0));
            drop(last);
            tracing::warn!(
                reason,
                refused_since_last_line = suppressed,
                "credentials refused"
            );
        }
    }
}
