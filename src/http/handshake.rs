//! The handshake era's sessions over HTTP, as a message meets them: its
//! session checked (or issued by `initialize`), what the session lends
//! its calls (cancellation, asking its client, its log level, the tools it
//! loaded), the requests answered here (`resources/subscribe`,
//! `logging/setLevel`), and GET and DELETE on `/mcp`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;

use super::calls::InFlight;
use super::mcp_sessions::McpSessions;
use super::refusal::Refusal;
use super::session_tools::SessionLoads;
use super::state::AgentState;
use super::{Reply, ReplyBody};
use crate::dispatch::mcp::{self, Mirrored};
use crate::dispatch::watch::Change;
use crate::dispatch::{self, write_gateway_error};
use crate::error::GatewayError;
use crate::jsonrpc::{Incoming, Json};
use crate::tenant::{Credential, Tenant};

/// What a message of an open session takes from it.
#[derive(Default)]
pub(super) struct InSession<'a> {
    /// The id `initialize` issued, for the reply's header.
    pub issue: Option<String>,
    /// A request's entry among the session's calls: a cancellation ends it.
    pub in_flight: Option<InFlight<'a>>,
    /// Its client, when the call may ask it (a call answered as a stream).
    pub asks: Option<mcp::Asking<'a>>,
    /// The level its client set, for a call answered as a stream.
    pub log_level: Option<mcp::LogLevel>,
    /// Where the session keeps the tools it loaded.
    pub loads: Option<SessionLoads<'a>>,
}

impl<'a> InSession<'a> {
    /// The session a message names, entered: `Some` when the message is
    /// answered here (refused, or a request the session answers itself).
    /// `streamed`: the call is answered as a stream, which can carry its
    /// log lines and its upstream's requests of the client.
    #[allow(clippy::too_many_arguments)]
    pub async fn enter(
        &mut self,
        s: &'a AgentState,
        sessions: &'a McpSessions,
        tenant: &Tenant,
        message: &Incoming<'_>,
        scanned: Option<&mcp::Scanned<'_>>,
        mirrored: &Mirrored<'a>,
        streamed: bool,
    ) -> Option<Reply> {
        let opened = match handshake_session(s, sessions, tenant, message, scanned, mirrored).await
        {
            SessionStep::None => return None,
            SessionStep::Known(opened) => opened,
            SessionStep::Issue(revision, can) => {
                self.issue = Some(sessions.issue_for(&tenant.name, revision, can.0));
                return None;
            }
            SessionStep::Refused(id) => {
                return Some(Refusal::SessionNotFound(id).reply());
            }
            SessionStep::Reply(reply) => return Some(reply),
        };
        let can = mcp::ClientCan(opened.can);
        if streamed && can.any() {
            self.asks = Some(mcp::Asking {
                scope: mirrored.session.unwrap_or_default(),
                can,
            });
        }
        // Only a call answered as a stream hears log lines.
        if streamed {
            self.log_level = sessions.level(&opened).await;
        }
        match message {
            Incoming::Request { id, .. } => {
                self.in_flight = Some(s.calls.begin(&opened.nonce, id.get()));
            }
            Incoming::Notification { method, params } if method == "notifications/cancelled" => {
                if let Some(id) = dispatch::session::cancelled_request(*params)
                    && !s.calls.cancel(&opened.nonce, id.get())
                    && let Some(store) = sessions.store()
                    && let Some(answered) =
                        super::relay::cancel_elsewhere(s, store, tenant, &opened, id).await
                {
                    return Some(answered);
                }
            }
            _ => {}
        }
        self.loads = Some(SessionLoads { sessions, opened });
        None
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
