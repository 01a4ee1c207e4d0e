//! A whole body, answered: one message, a batch, or the start of a session of
//! several messages; a large body on a blocking-pool thread.
//!
//! A body's three shapes (one message, a batch, a session's start) share
//! tenant admission and the large-body path; the handshake era's session
//! checks are `handshake`'s, what goes to other replicas `relay`'s.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::BytesMut;
use futures_util::future::join_all;
use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::first_look::{First, peek_first};
use super::mcp_sessions::McpSessions;
use super::refusal::Refusal;
use super::relay::accepted;
use super::session;
use super::state::AgentState;
use super::{Reply, ReplyBody, error};
use super::{handshake, relay};
use crate::dispatch::mcp::{self, Mirrored, Via};
use crate::dispatch::{self, Outgoing, Standing, respond_classified, write_gateway_error};
use crate::error::GatewayError;
use crate::jsonrpc::Json;
use crate::jsonrpc::{ErrorObject, codes};
use crate::jsonrpc::{Incoming, classify, classify_bytes};
use crate::tenant::reports::ReportSender;
use crate::tenant::{Credential, Tenant};

/// Bodies larger than this are parsed and validated on a thread of the
/// blocking pool, not on the runtime's: reading a body of several MiB (and
/// checking it against a schema) takes milliseconds, during which a runtime
/// thread would serve nobody else, and with one worker nobody at all. The
/// edge's own path leaves such bodies to hyper's, which does this.
pub(super) const LARGE_BODY: usize = 256 * 1024;

/// [`exchange`] of a large body, driven on a blocking-pool thread (its
/// upstream I/O still runs on the runtime). If the client goes away, the
/// exchange is cancelled there too. `Err`: the body's call may report
/// before its answer, and is for `streamed` to run.
pub(super) async fn exchange_aside(
    s: &AgentState,
    tenant: Arc<Tenant>,
    credential: Option<Credential>,
    buf: BytesMut,
    decided: bool,
    headers: &axum::http::HeaderMap,
) -> Result<Response, bytes::Bytes> {
    let runtime = tokio::runtime::Handle::current();
    let cancel = CancellationToken::new();
    let _cancel_on_drop = cancel.clone().drop_guard();
    let (state, who, body) = (s.clone(), tenant.clone(), buf.freeze());
    let headers = headers.clone();
    let span = tracing::Span::current();
    let task = tokio::task::spawn_blocking(move || {
        let mirrored = mirrored(&headers);
        let exchanged = runtime.block_on(
            async {
                tokio::select! {
                    exchanged = exchange(&state, &who, &body, decided, mirrored, None) => Some(exchanged),
                    () = cancel.cancelled() => None,
                }
            }
            .instrument(span),
        );
        (exchanged, body)
    });
    Ok(match task.await {
        Ok((Some(Exchange::Reply(reply)), _)) => reply.into_response(),
        Ok((Some(Exchange::Session), body)) => {
            session_of(s, tenant, credential, BytesMut::from(&body[..])).await
        }
        Ok((Some(Exchange::Listen(id, filter)), _)) => {
            let holder = credential.map(|c| super::listen::Holder::new(c, &tenant));
            super::listen::stream(s, &tenant, holder, id, filter).await
        }
        Ok((Some(Exchange::Streamed), body)) => return Err(body),
        // Cancelled (the client is gone) or the thread failed.
        Ok((None, _)) | Err(_) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorObject::new(codes::INTERNAL_ERROR, "Internal error"),
        )
        .into_response(),
    })
}

/// The HTTP status an answer goes out with, by how it stands.
fn status_of(standing: Standing) -> StatusCode {
    match standing {
        Standing::Answered => StatusCode::OK,
        Standing::Malformed => StatusCode::BAD_REQUEST,
        Standing::UnknownMethod => StatusCode::NOT_FOUND,
    }
}

/// What a whole body comes to.
pub(super) enum Exchange {
    Reply(Reply),
    /// A session of the body's messages (its caller starts it).
    Session,
    /// A `subscriptions/listen` that passed its checks: its id (JSON text)
    /// and what it asks to hear (its caller opens the stream).
    Listen(Box<str>, mcp::Filter),
    /// A call that may report before its answer, which was not given
    /// anywhere to put reports: its caller runs it again with one
    /// (`streamed`), nothing having been done yet.
    Streamed,
}

/// A whole body: a stateless exchange, or a session of several messages.
/// `progress` is where a call's reports go before its answer, when the
/// answer can be a stream.
pub(super) async fn exchange(
    s: &AgentState,
    tenant: &Tenant,
    bytes: &[u8],
    peeked: bool,
    mirrored: Mirrored<'_>,
    progress: Option<&ReportSender<Vec<u8>>>,
) -> Exchange {
    // The common case, one JSON object, is classified straight from the bytes.
    if let Some(message) = classify_bytes(bytes) {
        return one_message(s, tenant, message, mirrored, progress).await;
    }
    match serde_json::from_slice::<&RawValue>(bytes) {
        Ok(raw) if raw.get().starts_with('[') => {
            Exchange::Reply(batch(s, tenant, raw, &mirrored).await)
        }
        Ok(raw) => one_message(s, tenant, classify(raw), mirrored, progress).await,
        // Not one JSON value. Its first message decides, as when it is looked
        // at while the body arrives: not JSON is a parse error, `initialize`
        // opens a session, and so do several newline-delimited messages.
        Err(_) => {
            let first = if peeked {
                First::Other
            } else {
                peek_first(bytes)
            };
            match first {
                First::Invalid => Exchange::Reply(Refusal::ParseError.reply()),
                First::Initialize => Exchange::Session,
                _ if dispatch::session::holds_several_messages(bytes) => Exchange::Session,
                _ => Exchange::Reply(Refusal::ParseError.reply()),
            }
        }
    }
}

/// A body of one message, classified once: its envelope is parsed nowhere else.
async fn one_message(
    s: &AgentState,
    tenant: &Tenant,
    message: Incoming<'_>,
    mirrored: Mirrored<'_>,
    progress: Option<&ReportSender<Vec<u8>>>,
) -> Exchange {
    // MCP v1.0's `initialize` opens a session; one with the Model Context
    // Protocol's headers is that protocol's (answered, or refused in 2026-07-28).
    if dispatch::session::is_initialize(&message) && !mirrored.say_modelcontext() {
        return Exchange::Session;
    }
    if let Incoming::Request { id, method, params } = &message
        && method == "subscriptions/listen"
    {
        return listen(s, tenant, *id, *params, &mirrored).await;
    }
    // A request of the Model Context Protocol has its params scanned here,
    // once, for the session's checks, the stream's and the face's.
    let scanned = match &message {
        Incoming::Request { method, params, .. } | Incoming::Notification { method, params }
            if mirrored.say_modelcontext() || mcp::speaks(method, *params) =>
        {
            Some(mcp::Scanned::of(method, *params))
        }
        _ => None,
    };
    if progress.is_none() && answers_as_stream(s, tenant, &message, scanned.as_ref(), &mirrored) {
        return Exchange::Streamed;
    }
    if let Incoming::Response { id, outcome } = &message
        && mirrored.say_modelcontext()
    {
        return Exchange::Reply(relay::client_answer(s, tenant, &mirrored, *id, *outcome).await);
    }
    let id = match &message {
        Incoming::Request { id, .. } => Some(*id),
        _ => None,
    };
    let place = match admit(s, tenant, &message, scanned.as_ref()).await {
        Ok(place) => place,
        Err(refused) => return refused,
    };
    // The handshake era's session: checked, or issued by `initialize`.
    let mut session = handshake::InSession::default();
    if let Some(sessions) = &s.mcp_sessions {
        let taken = progress.is_some();
        if let Some(answered) = session
            .enter(
                s,
                sessions,
                tenant,
                &message,
                scanned.as_ref(),
                &mirrored,
                taken,
            )
            .await
        {
            return Exchange::Reply(answered);
        }
    }
    let via = Via {
        http: Some(mirrored),
        notifies: s.mcp_sessions.is_some(),
        progress: progress.map(mcp::Outlet::Call),
        log_level: session.log_level,
        asks: session.asks.as_ref(),
        scanned: scanned.as_ref(),
        place: Some(&place),
        tools: session
            .loads
            .as_ref()
            .map(|l| l as &dyn dispatch::discovery::loaded::SessionTools),
    };
    let (out, _, status) = match &mut session.in_flight {
        None => respond_classified(&s.dispatcher, tenant, message, false, via).await,
        // A call its client cancelled is dropped, and with it the upstream
        // call. Pinned in place: this branch's future and the other's are
        // never alive together, so they share their room in this one's.
        Some(call) => {
            let responded = std::pin::pin!(respond_classified(
                &s.dispatcher,
                tenant,
                message,
                false,
                via,
            ));
            tokio::select! {
                responded = responded => responded,
                Ok(()) = &mut call.cancelled => return Exchange::Reply(cancelled(id)),
            }
        }
    };
    Exchange::Reply(reply_of(s, out, status, session.issue))
}

/// `subscriptions/listen`, checked: the stream its caller opens, or why not.
async fn listen(
    s: &AgentState,
    tenant: &Tenant,
    id: Json<'_>,
    params: Option<Json<'_>>,
    mirrored: &Mirrored<'_>,
) -> Exchange {
    let opened = match s.dispatcher.admit_rate(tenant).await {
        Ok(()) => dispatch::mcp::ModelContext::new(&s.dispatcher).open_listen(
            tenant,
            id,
            params,
            Some(mirrored),
        ),
        Err(e) => Err(e),
    };
    match opened {
        Ok(filter) => Exchange::Listen(id.get().into(), filter),
        Err(e @ GatewayError::OverCapacity { .. }) => {
            Exchange::Reply(Refusal::OverCapacity(Some(id), &e).reply())
        }
        Err(e) => {
            let mut body = Vec::new();
            write_gateway_error(&mut body, Some(id), &e);
            let status = status_of(mcp::stateless_standing(e.code()));
            Exchange::Reply(Reply::json(status, body))
        }
    }
}

/// Whether a request is answered as a stream once something comes first:
/// a call that may report, or whose client can be asked by the upstream
/// while it runs (a task's too, while it waits for input), or that logs
/// to its session, or that loads tools (the session hears its listing
/// changed before the answer).
fn answers_as_stream(
    s: &AgentState,
    tenant: &Tenant,
    message: &Incoming<'_>,
    scanned: Option<&mcp::Scanned<'_>>,
    mirrored: &Mirrored<'_>,
) -> bool {
    let Incoming::Request { method, params, .. } = message else {
        return false;
    };
    if scanned.is_some_and(|scanned| scanned.may_report(method)) {
        return true;
    }
    if s.mcp_sessions.is_none() {
        return false;
    }
    let Some(session) = mirrored.session else {
        return false;
    };
    match &**method {
        "tasks/result" => McpSessions::may_ask(session),
        "tools/call" => {
            let face = mcp::ModelContext::new(&s.dispatcher);
            McpSessions::may_ask(session)
                || face.logs_during(tenant, *params)
                || face.loads_tools(tenant, *params)
        }
        _ => false,
    }
}

/// The message's place among the tenant's calls, or the refusal. A retry
/// of a round is admitted at the tenant's rate alone: the call it
/// continues holds its place (see `dispatch::Place`).
async fn admit(
    s: &AgentState,
    tenant: &Tenant,
    message: &Incoming<'_>,
    scanned: Option<&mcp::Scanned<'_>>,
) -> Result<dispatch::Place, Exchange> {
    let (id, continues) = match message {
        Incoming::Request { id, method, .. } => (
            Some(*id),
            scanned.is_some_and(|scanned| scanned.continues_round(method)),
        ),
        _ => (None, false),
    };
    let place = match continues {
        false => s
            .dispatcher
            .admit(tenant, u32::from(id.is_some()))
            .await
            .map(dispatch::Place::new),
        true => s
            .dispatcher
            .admit_rate(tenant)
            .await
            .map(|()| dispatch::Place::default()),
    };
    place.map_err(|e| {
        if let Incoming::Request { method, params, .. } = message {
            s.dispatcher.audit_refused(tenant, method, *params, &e);
        }
        Exchange::Reply(Refusal::OverCapacity(id, &e).reply())
    })
}

/// The reply to an answered message: its status (403 and the challenge
/// that names the scope a token lacks, so that an OAuth client can ask
/// for a token with it: RFC 6750 3.1, the MCP authorization spec's
/// step-up), and the session id `initialize` issued.
fn reply_of(
    s: &AgentState,
    out: Option<Outgoing>,
    status: dispatch::Status,
    issue: Option<String>,
) -> Reply {
    let challenge = status.missing_scope.map(|scope| {
        let keys = s.keys.load();
        let mut v = format!("Bearer error=\"insufficient_scope\", scope=\"{scope}\"");
        if let Some(r) = keys.resource() {
            v.push_str(&format!(", resource_metadata=\"{}\"", r.metadata_url));
        }
        v
    });
    let status = match challenge {
        Some(_) => StatusCode::FORBIDDEN,
        None => status_of(status.standing),
    };
    let reply = match out {
        Some(Outgoing::Flat(reply)) => Reply::json(status, reply),
        Some(Outgoing::Parts(parts)) => Reply {
            status,
            body: ReplyBody::JsonParts(parts),
            header: None,
        },
        None => accepted(),
    };
    let reply = match challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
        Some(c) => reply.with_header(header::WWW_AUTHENTICATE, c),
        None => reply,
    };
    match issue.and_then(|id| HeaderValue::from_str(&id).ok()) {
        Some(id) => reply.with_header(HeaderName::from_static("mcp-session-id"), id),
        None => reply,
    }
}

/// A session of the messages of a body that has ended.
pub(super) async fn session_of(
    s: &AgentState,
    tenant: Arc<Tenant>,
    credential: Option<Credential>,
    buf: BytesMut,
) -> Response {
    let opening = session::Opening {
        tenant,
        credential,
        buf,
        body: Body::empty().into_data_stream(),
    };
    session::start(s.dispatcher.clone(), &s.sessions, opening, s.max_body_bytes).await
}

/// The answer to a call its client cancelled: it no longer waits for one,
/// but the POST it was sent in is answered.
fn cancelled(id: Option<Json<'_>>) -> Reply {
    let mut body = Vec::new();
    crate::jsonrpc::write_error(
        &mut body,
        id,
        &ErrorObject::new(codes::INTERNAL_ERROR, "Request cancelled by the client"),
    );
    Reply::json(StatusCode::OK, body)
}

async fn batch(s: &AgentState, tenant: &Tenant, raw: &RawValue, mirrored: &Mirrored<'_>) -> Reply {
    let invalid = |why: &str| {
        let mut body = Vec::new();
        crate::jsonrpc::write_error(&mut body, None, &ErrorObject::invalid_request(why));
        Reply::json(StatusCode::OK, body)
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
    if !mcp::batch_allowed(mirrored, items.iter().map(|i| classify(i))) {
        return Refusal::BatchInThisRevision.reply();
    }
    // A batch in a handshake-era session is that session's: refused once it has ended.
    if let (Some(sessions), Some(session)) = (&s.mcp_sessions, mirrored.session)
        && sessions.open(session, &tenant.name).await.is_none()
    {
        return Refusal::SessionNotFound(None).reply();
    }
    // Every request in the batch counts against the tenant's limits (notifications do not).
    let requests = items
        .iter()
        .filter(|i| matches!(classify(i), Incoming::Request { .. }))
        .count();
    let _admission = match s
        .dispatcher
        .admit(tenant, u32::try_from(requests).unwrap_or(u32::MAX))
        .await
    {
        Ok(a) => a,
        Err(e) => return Refusal::OverCapacity(None, &e).reply(),
    };
    let via = Via {
        http: Some(*mirrored),
        notifies: s.mcp_sessions.is_some(),
        progress: None,
        log_level: None,
        asks: None,
        scanned: None,
        place: None,
        tools: None,
    };
    let replies = join_all(
        items
            .iter()
            .map(|item| dispatch::respond_traced(&s.dispatcher, tenant, item, false, via)),
    )
    .await;
    let replies: Vec<Vec<u8>> = replies
        .into_iter()
        .filter_map(|(reply, _)| reply)
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
    Reply::json(StatusCode::OK, body)
}

/// The Model Context Protocol's mirrored headers of a request hyper parsed.
impl crate::dispatch::mcp::Headers for axum::http::HeaderMap {
    fn values(&self, name: &str) -> Vec<&[u8]> {
        self.get_all(name)
            .iter()
            .map(HeaderValue::as_bytes)
            .collect()
    }

    fn any_named(&self, prefix: &str) -> bool {
        // Header names are held in lower case.
        self.keys().any(|k| k.as_str().starts_with(prefix))
    }
}

pub(super) fn mirrored(headers: &axum::http::HeaderMap) -> Mirrored<'_> {
    let mut repeated = false;
    let mut one = |name: &str| {
        let mut all = headers.get_all(name).iter();
        let first = all.next().map(HeaderValue::as_bytes);
        repeated |= all.next().is_some();
        first
    };
    Mirrored {
        protocol_version: one("mcp-protocol-version"),
        method: one("mcp-method"),
        name: one("mcp-name"),
        session: one("mcp-session-id"),
        repeated,
        all: Some(headers),
    }
}
