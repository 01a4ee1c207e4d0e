//! The handshake era's sessions over HTTP, as a message meets them: its
//! session checked (or issued by `initialize`), what the session lends
//! its calls (cancellation, asking its client, its log level, the tools it
//! loaded), the requests answered here (`resources/subscribe`,
//! `logging/setLevel`, session_answers.rs's). GET and DELETE on `/mcp` are
//! session_stream.rs's.

use super::Reply;
use super::calls::InFlight;
use super::mcp_sessions::McpSessions;
use super::refusal::Refusal;
use super::session_answers;
use super::session_tools::SessionLoads;
use super::state::AgentState;
use crate::dispatch::mcp::{self, Mirrored};
use crate::dispatch::{self};
use crate::jsonrpc::{Incoming, Json};
use crate::tenant::Tenant;

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
    let answered = match method {
        "resources/subscribe" => {
            session_answers::subscribe(s, sessions, tenant, &opened, params, true).await
        }
        "resources/unsubscribe" => {
            session_answers::subscribe(s, sessions, tenant, &opened, params, false).await
        }
        "logging/setLevel" => session_answers::set_level(sessions, &opened, params).await,
        _ => return SessionStep::Known(opened),
    };
    SessionStep::Reply(session_answers::reply(id, answered))
}
