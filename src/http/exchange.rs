//! A whole body, answered: one message, a batch, or the start of a session of
//! several messages; a large body on a blocking-pool thread.
//!
//! Longer than most files: a body's three shapes (one message, a batch, a
//! session's start) share tenant admission, the large-body path and the
//! handshake era's session checks that each applies.

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
use super::session;
use super::state::AgentState;
use super::{Reply, ReplyBody, error};
use crate::dispatch::mcp::{self, Mirrored, Via};
use crate::dispatch::watch::Change;
use crate::dispatch::{self, Outgoing, Standing, respond_classified, write_gateway_error};
use crate::error::GatewayError;
use crate::jsonrpc::Json;
use crate::jsonrpc::{ErrorObject, codes};
use crate::jsonrpc::{Incoming, classify, classify_bytes};
use crate::tenant::reports::ReportSender;
use crate::tenant::{Credential, Tenant};
use crate::upstream::asks::Taken;

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
        let opened = match s.dispatcher.admit_rate(tenant).await {
            Ok(()) => dispatch::mcp::ModelContext::new(&s.dispatcher).open_listen(
                tenant,
                *id,
                *params,
                Some(&mirrored),
            ),
            Err(e) => Err(e),
        };
        return match opened {
            Ok(filter) => Exchange::Listen(id.get().into(), filter),
            Err(e @ GatewayError::OverCapacity { .. }) => {
                Exchange::Reply(Refusal::OverCapacity(Some(*id), &e).reply())
            }
            Err(e) => {
                let mut body = Vec::new();
                write_gateway_error(&mut body, Some(*id), &e);
                let status = status_of(mcp::stateless_standing(e.code()));
                Exchange::Reply(Reply::json(status, body))
            }
        };
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
    // A call that may report, or whose client can be asked by the upstream
    // while it runs (a task's too, while it waits for input), is answered as
    // a stream once something comes first.
    if progress.is_none()
        && let Incoming::Request { method, params, .. } = &message
        && (scanned.is_some_and(|scanned| scanned.may_report(method))
            || (matches!(&**method, "tools/call" | "tasks/result")
                && s.mcp_sessions.is_some()
                && mirrored.session.is_some_and(McpSessions::may_ask))
            || (method == "tools/call"
                && s.mcp_sessions.is_some()
                && mirrored.session.is_some()
                && mcp::ModelContext::new(&s.dispatcher).logs_during(tenant, *params))
            // A load changes the session's listing: the client hears it first.
            || (method == "tools/call"
                && s.mcp_sessions.is_some()
                && mirrored.session.is_some()
                && mcp::ModelContext::new(&s.dispatcher).loads_tools(tenant, *params)))
    {
        return Exchange::Streamed;
    }
    if let Incoming::Response { id, outcome } = &message
        && mirrored.say_modelcontext()
    {
        return Exchange::Reply(client_answer(s, tenant, &mirrored, *id, *outcome).await);
    }
    let id = match &message {
        Incoming::Request { id, .. } => Some(*id),
        _ => None,
    };
    // A retry of a round is admitted at the tenant's rate alone: the call
    // it continues holds its place (see `dispatch::Place`).
    let continues = match &message {
        Incoming::Request { method, .. } => {
            scanned.is_some_and(|scanned| scanned.continues_round(method))
        }
        _ => false,
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
    let place = match place {
        Ok(place) => place,
        Err(e) => {
            if let Incoming::Request { method, params, .. } = &message {
                s.dispatcher.audit_refused(tenant, method, *params, &e);
            }
            return Exchange::Reply(Refusal::OverCapacity(id, &e).reply());
        }
    };
    // The handshake era's session: checked, or issued by `initialize`.
    let mut issue = None;
    let mut in_flight = None;
    let mut asks = None;
    let mut log_level = None;
    let mut loads = None;
    if let Some(sessions) = &s.mcp_sessions {
        match handshake_session(s, sessions, tenant, &message, scanned.as_ref(), &mirrored).await {
            SessionStep::None => {}
            SessionStep::Known(opened) => {
                loads = Some(super::session_tools::SessionLoads {
                    sessions,
                    opened: opened.clone(),
                });
                let session = mirrored.session.unwrap_or_default();
                let can = mcp::ClientCan(opened.can);
                if progress.is_some() && can.any() {
                    asks = Some(mcp::Asking {
                        scope: session,
                        can,
                    });
                }
                // Only a call answered as a stream hears log lines.
                if progress.is_some() {
                    log_level = sessions.level(&opened).await;
                }
                match &message {
                    Incoming::Request { id, .. } => {
                        in_flight = Some(s.calls.begin(&opened.nonce, id.get()))
                    }
                    Incoming::Notification { method, params }
                        if method == "notifications/cancelled" =>
                    {
                        if let Some(id) = dispatch::session::cancelled_request(*params)
                            && !s.calls.cancel(&opened.nonce, id.get())
                            && let Some(store) = sessions.store()
                        {
                            // An id no call of the session can have is
                            // never published (ids are small by far).
                            if id.get().len() > CANCELLED_ID_BYTES {
                                s.dispatcher.metrics().stray_answers.inc();
                                return Exchange::Reply(accepted());
                            }
                            // Not here: the replica running it hears it through
                            // the store, within the tenant's rate; while that
                            // is down, the client is told.
                            if let Err(e) = s.dispatcher.admit_rate(tenant).await {
                                return Exchange::Reply(Refusal::OverCapacity(None, &e).reply());
                            }
                            let nonce = opened.nonce.as_bytes();
                            if let Err(e) = store.announce_cancel(nonce, id.get()).await {
                                tracing::debug!(error = %e, "a cancellation not shared with the other replicas");
                                return Exchange::Reply(store_unavailable("cancellation"));
                            }
                        }
                    }
                    _ => {}
                }
            }
            SessionStep::Issue(revision, can) => {
                issue = Some(sessions.issue_for(&tenant.name, revision, can.0))
            }
            SessionStep::Refused(id) => {
                return Exchange::Reply(Refusal::SessionNotFound(id).reply());
            }
            SessionStep::Reply(reply) => return Exchange::Reply(reply),
        }
    }
    let via = Via {
        http: Some(mirrored),
        notifies: s.mcp_sessions.is_some(),
        progress: progress.map(mcp::Outlet::Call),
        log_level,
        asks: asks.as_ref(),
        scanned: scanned.as_ref(),
        place: Some(&place),
        tools: loads
            .as_ref()
            .map(|l| l as &dyn dispatch::discovery::loaded::SessionTools),
    };
    let (out, _, status) = match &mut in_flight {
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
    // A call refused for a scope the token lacks: 403 and the challenge that
    // names it, so that an OAuth client can ask for a token with it (RFC 6750
    // 3.1, the MCP authorization spec's step-up).
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
    Exchange::Reply(match issue.and_then(|id| HeaderValue::from_str(&id).ok()) {
        Some(id) => reply.with_header(HeaderName::from_static("mcp-session-id"), id),
        None => reply,
    })
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

/// A client's answer to a request of an upstream's forwarded to it: handed
/// to the call waiting for it when the session is the client's (checked)
/// and the request went out in it; with a shared store, published for the
/// replica where it waits; counted and dropped otherwise. 202 either way,
/// as for any response (a 404 when the session is not one).
async fn client_answer(
    s: &AgentState,
    tenant: &Tenant,
    mirrored: &Mirrored<'_>,
    id: Json<'_>,
    outcome: Result<Json<'_>, Json<'_>>,
) -> Reply {
    let (Some(sessions), Some(session)) = (&s.mcp_sessions, mirrored.session) else {
        // Nothing was asked without a session.
        s.dispatcher.metrics().stray_answers.inc();
        return accepted();
    };
    if sessions.open(session, &tenant.name).await.is_none() {
        return Refusal::SessionNotFound(None).reply();
    }
    if s.dispatcher.asks().answer(session, id.get(), outcome) == Taken::Stray {
        let asks = s.dispatcher.asks();
        match sessions.store() {
            // Nothing waits for it anywhere (an id this deployment did not
            // send this session, or whose wait is over): never published.
            Some(_) if !asks.may_wait_somewhere(session, id.get()) => {
                s.dispatcher.metrics().stray_answers.inc();
            }
            Some(_)
                if outcome.map_or_else(|e| e.get().len(), |r| r.get().len()) > PUBLISHED_BYTES =>
            {
                s.dispatcher.metrics().stray_answers.inc();
                return too_large_to_share("answer");
            }
            // Not waiting here: the replica where it waits takes it from the
            // store, within the tenant's rate; while the store is down, the
            // client is told.
            Some(store) => {
                if let Err(e) = s.dispatcher.admit_rate(tenant).await {
                    return Refusal::OverCapacity(None, &e).reply();
                }
                let outcome = outcome.map(Json::get).map_err(Json::get);
                if let Err(e) = store.announce_answer(session, id.get(), outcome).await {
                    tracing::debug!(error = %e, "a client's answer not shared with the other replicas");
                    return store_unavailable("answer");
                }
            }
            None => s.dispatcher.metrics().stray_answers.inc(),
        }
    }
    accepted()
}

/// The most a client's answer or cancellation may hold to be passed to the
/// other replicas through the store: what a client makes the gateway
/// publish is its tenant's traffic, and the store's channel every tenant's.
const PUBLISHED_BYTES: usize = 64 << 10;

/// 413 for an answer too large to pass through the store (see [`PUBLISHED_BYTES`]).
fn too_large_to_share(what: &str) -> Reply {
    error(
        StatusCode::PAYLOAD_TOO_LARGE,
        ErrorObject::new(codes::INVALID_REQUEST, "Too large to share").with_data(format!(
            "this {what} must reach another replica through the gateway's shared store, which takes at most {PUBLISHED_BYTES} bytes"
        )),
    )
}

/// 503 and `Retry-After` for a message that must reach another replica
/// through the shared store while the store cannot be reached.
fn store_unavailable(what: &str) -> Reply {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        ErrorObject::new(codes::INTERNAL_ERROR, "Store unavailable").with_data(format!(
            "this {what} must reach the replica holding the request through the gateway's shared store, which cannot be reached now; retry shortly"
        )),
    )
    .with_header(header::RETRY_AFTER, HeaderValue::from(1))
}

/// The longest request id a cancellation passed to the other replicas may
/// name: JSON-RPC clients number their requests, or name them briefly.
const CANCELLED_ID_BYTES: usize = 256;

fn accepted() -> Reply {
    Reply {
        status: StatusCode::ACCEPTED,
        body: ReplyBody::Empty,
        header: None,
    }
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

/// What the handshake era's session makes of a message.
enum SessionStep<'a> {
    /// Nothing: not that era, or no session named.
    None,
    /// `initialize`: a session at this revision is issued, for a client
    /// that declared it answers this.
    Issue(&'static str, mcp::ClientCan),
    /// The id names no session: 404, with the request's id.
    Refused(Option<Json<'a>>),
    /// Answered here (`resources/subscribe` and `unsubscribe`).
    Reply(Reply),
    /// A message of this open session, checked: its calls can be
    /// cancelled, its client asked what it declared it answers, and its
    /// calls' log lines filtered at the level it set.
    Known(super::mcp_sessions::Opened),
}

async fn handshake_session<'a>(
    s: &AgentState,
    sessions: &McpSessions,
    tenant: &Tenant,
    message: &Incoming<'a>,
    scanned: Option<&mcp::Scanned<'_>>,
    mirrored: &Mirrored<'_>,
) -> SessionStep<'a> {
    let (id, method, params) = match message {
        Incoming::Request { id, method, params } => (Some(*id), &**method, *params),
        Incoming::Notification { method, params } => (None, &**method, *params),
        _ => return SessionStep::None,
    };
    // Only a message of the Model Context Protocol has its params scanned.
    let Some(scanned) = scanned else {
        return SessionStep::None;
    };
    if scanned.era(method, Some(mirrored)) != mcp::Era::Handshake {
        return SessionStep::None;
    }
    if method == "initialize" {
        return SessionStep::Issue(
            mcp::negotiated(params),
            mcp::ClientCan::of_initialize(params),
        );
    }
    let Some(session) = mirrored.session else {
        return SessionStep::None;
    };
    let Some(opened) = sessions.open(session, &tenant.name).await else {
        return SessionStep::Refused(id);
    };
    let on = match method {
        "resources/subscribe" => true,
        "resources/unsubscribe" => false,
        "logging/setLevel" => return set_level(sessions, &opened, id, params).await,
        _ => return SessionStep::Known(opened),
    };
    #[derive(serde::Deserialize)]
    struct P<'a> {
        #[serde(borrow)]
        uri: std::borrow::Cow<'a, str>,
    }
    let mut body = Vec::new();
    let mut status = StatusCode::OK;
    let refused = match params.and_then(|p| serde_json::from_str::<P<'_>>(p.get()).ok()) {
        None => Some(GatewayError::InvalidParams(
            "params must be an object {\"uri\": string}".into(),
        )),
        // Only what the tenant can read is kept: a made-up uri costs nothing.
        Some(p) if on && !s.dispatcher.readable(tenant, &p.uri) => {
            Some(GatewayError::ResourceNotFound(p.uri.into_owned()))
        }
        Some(p) => match sessions.subscribe(&opened, &p.uri, on).await {
            Ok(()) => None,
            Err(refused) => {
                let e = record_refused(refused);
                if matches!(e, GatewayError::OverCapacity { .. }) {
                    status = StatusCode::TOO_MANY_REQUESTS;
                }
                Some(e)
            }
        },
    };
    match refused {
        None => crate::jsonrpc::write_reply(&mut body, id, crate::jsonrpc::Reply::Result(b"{}")),
        Some(e) => write_gateway_error(&mut body, id, &e),
    }
    let reply = Reply::json(status, body);
    SessionStep::Reply(match status {
        StatusCode::TOO_MANY_REQUESTS => {
            reply.with_header(header::RETRY_AFTER, HeaderValue::from(1))
        }
        _ => reply,
    })
}

/// `logging/setLevel` in a session: its level kept for the session's calls
/// on every replica (see `McpSessions::set_level`).
async fn set_level<'a>(
    sessions: &McpSessions,
    opened: &super::mcp_sessions::Opened,
    id: Option<Json<'_>>,
    params: Option<Json<'_>>,
) -> SessionStep<'a> {
    let mut body = Vec::new();
    let kept = match mcp::level_of(params) {
        None => Err(GatewayError::InvalidParams(mcp::LEVEL_PARAMS.into())),
        Some(level) => sessions
            .set_level(opened, level)
            .await
            .map_err(record_refused),
    };
    let status = match &kept {
        Ok(()) => {
            crate::jsonrpc::write_reply(&mut body, id, crate::jsonrpc::Reply::Result(b"{}"));
            StatusCode::OK
        }
        Err(e) => {
            write_gateway_error(&mut body, id, e);
            match e {
                GatewayError::OverCapacity { .. } => StatusCode::TOO_MANY_REQUESTS,
                _ => StatusCode::OK,
            }
        }
    };
    let reply = Reply::json(status, body);
    SessionStep::Reply(match status {
        StatusCode::TOO_MANY_REQUESTS => {
            reply.with_header(header::RETRY_AFTER, HeaderValue::from(1))
        }
        _ => reply,
    })
}

/// The error a record the session table could not keep becomes.
fn record_refused(refused: super::mcp_sessions::Refused) -> GatewayError {
    use super::mcp_sessions::Refused;
    match refused {
        Refused::Full { retry_after_secs } => GatewayError::OverCapacity {
            reason: "session records",
            retry_after_secs,
        },
        Refused::StoreDown => GatewayError::StoreDown,
        Refused::Subscriptions(r @ crate::tenant::subscriptions::Refused::Session(_)) => {
            GatewayError::InvalidParams(r.explain())
        }
        Refused::Subscriptions(crate::tenant::subscriptions::Refused::Tenant(_)) => {
            GatewayError::OverCapacity {
                reason: "subscription budget",
                retry_after_secs: 1,
            }
        }
    }
}

/// GET on `/mcp` (an event stream of the session's changes: listings, and
/// resources it subscribed to) and DELETE (ends the session), when sessions
/// are issued.
pub(super) async fn session_request(
    s: &AgentState,
    method: &axum::http::Method,
    headers: &axum::http::HeaderMap,
) -> Response {
    let Some(sessions) = s.mcp_sessions.clone() else {
        return Refusal::MethodNotAllowed { sessions: false }
            .reply()
            .into_response();
    };
    // The stream holds the key: a reload that removes it ends the stream.
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(crate::tenant::bearer_token);
    let (credential, tenant) = match token {
        Some(token) => match Credential::new(s.keys.clone(), token).await {
            Ok(found) => found,
            Err(denied) => {
                return Refusal::Unauthorized(&s.keys.load(), denied)
                    .reply()
                    .into_response();
            }
        },
        None => {
            let denied = crate::tenant::Denied::Unknown;
            return Refusal::Unauthorized(&s.keys.load(), denied)
                .reply()
                .into_response();
        }
    };
    let Some(id) = headers.get("mcp-session-id") else {
        return Refusal::NoSessionId(method).reply().into_response();
    };
    let Some(opened) = sessions.open(id.as_bytes(), &tenant.name).await else {
        return Refusal::SessionNotFound(None).reply().into_response();
    };
    if let Err(e) = s.dispatcher.admit_rate(&tenant).await {
        return Refusal::OverCapacity(None, &e).reply().into_response();
    }
    if method == axum::http::Method::DELETE {
        // 200 only for an end that was recorded: otherwise the session would go on.
        return match sessions.end(&opened).await {
            Ok(()) => {
                // Its children per session end with it (here; another
                // replica's end when idle).
                for up in s.dispatcher.upstreams() {
                    up.end_session(&tenant.name, id.as_bytes());
                }
                Reply {
                    status: StatusCode::OK,
                    body: ReplyBody::Empty,
                    header: None,
                }
                .into_response()
            }
            Err(refused) => {
                tracing::warn!(tenant = %tenant.name, "a session's end could not be recorded: the tenant keeps as many session records as it may");
                Refusal::OverCapacity(None, &record_refused(refused))
                    .reply()
                    .into_response()
            }
        };
    }
    let wants_events = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/event-stream"));
    if !wants_events {
        return Refusal::NotAcceptable.reply().into_response();
    }
    let place = match super::listen::place(s, &tenant).await {
        Ok(place) => place,
        Err(refused) => return *refused,
    };
    // Each change: the session must still be open (a DELETE on any replica
    // ends it), and a resource's update is heard only if it subscribed.
    let here = (sessions.clone(), opened.clone());
    let render = move |change: &Change| -> super::listen::Rendering {
        let (sessions, opened, change) = (sessions.clone(), opened.clone(), change.clone());
        Box::pin(async move {
            if sessions.ended(&opened).await {
                return super::listen::Rendered::End;
            }
            let heard = match &change {
                Change::Listing(_) | Change::TaskStatus(_) => true,
                Change::Resource(uri) => sessions.subscribed(&opened, uri).await,
            };
            match heard {
                true => super::listen::Rendered::Send(mcp::change_notification(&change, None)),
                false => super::listen::Rendered::Skip,
            }
        })
    };
    let framing = super::listen::Framing {
        first: None,
        last: None,
    };
    let mut credential = super::listen::Holder::new(credential, &tenant);
    super::listen::changes(s, &tenant, place, framing, render, move || {
        credential.still_holds() && !here.0.ended_here(&here.1)
    })
}
