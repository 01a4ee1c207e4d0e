//! Sessions: a stream of messages in, one message out per answer, each sent as
//! soon as it is ready (answers may overtake each other), with the handshake
//! rules, resource-change notifications and `$/logTrace` of docs/mcp-v1.md
//! ("Sessions, notifications and `$/logTrace`").
//! Transports (HTTP bodies, the stdio mode) feed it messages and frame what it
//! sends; this type knows no framing.
//!
//! One state machine: answers out of order, notifications, listens and
//! cancellation act on the one session's state. What a message is to it (the
//! MCP v1.0 handshake's steps, the notifications it writes) is `messages`;
//! its Model Context Protocol requests (subscriptions, listens) `modelcontext`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::value::RawValue;
use tokio::sync::{broadcast, mpsc};
use tokio::task::{JoinHandle, JoinSet};
use tracing::Instrument;

use super::mcp::{self, Via};
use super::rpc::write_gateway_error;
use super::watch::{Announced, Change, Watcher};
use super::{Dispatcher, respond, respond_traced};
use crate::error::GatewayError;
use crate::jsonrpc::Json;
use crate::jsonrpc::{ErrorObject, Incoming, classify, write_error};
use crate::protocol::Method;
use crate::tenant::subscriptions::Subscribed;
use crate::tenant::{Credential, Standing, Tenant};
use crate::upstream::asks::Taken;

mod messages;
mod modelcontext;

use messages::*;
pub use messages::{cancelled_request, holds_several_messages, is_initialize, starts_session};

/// One agent's session. Dropping it cancels everything it started.
pub struct Session {
    dispatcher: Dispatcher,
    tenant: Arc<Tenant>,
    handshake: Handshake,
    /// Messages out, unframed. Bounded: a client that stops reading slows its own session only.
    out: mpsc::Sender<Vec<u8>>,
    /// Set once `initialized` is read: server notifications may flow.
    notify: Arc<AtomicBool>,
    trace: bool,
    inflight: JoinSet<()>,
    notifier: Option<JoinHandle<()>>,
    /// The key the session was opened with, checked again at every message
    /// (`None`: the tenant was chosen otherwise, as by the stdio mode).
    credential: Option<Credential>,
    max_in_flight: usize,
    /// The protocol the client speaks.
    face: Face,
    /// Open `subscriptions/listen` streams, by the listen's id (JSON text).
    listens: HashMap<Box<str>, JoinHandle<()>>,
    /// Calls in flight of a client of the Model Context Protocol, by request id (JSON text).
    calls: HashMap<Box<str>, tokio::task::AbortHandle>,
    /// Resources the handshake era's `resources/subscribe` asked for (and
    /// the tenant can read), within its subscription budget.
    subscribed: Arc<Mutex<Subscribed>>,
    /// The tools a client of the Model Context Protocol loaded (`load_tools`).
    loaded: Arc<crate::dispatch::discovery::loaded::LoadedHere>,
    /// The level a handshake-era client set with `logging/setLevel`: its
    /// calls' log lines reach it at that level and above.
    log_level: Option<mcp::LogLevel>,
    /// What a handshake-era client declared it answers at `initialize`.
    can: mcp::ClientCan,
    /// The scope its answers to requests of upstreams come back in (random,
    /// the session's own).
    scope: Arc<[u8]>,
}

/// The protocol a session's client speaks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Face {
    /// MCP v1.0: its handshake, `mcp/resourceDidChange`, `$/logTrace`.
    V1,
    /// The Model Context Protocol, either era: requests with `_meta` need no
    /// handshake, changes are heard on `subscriptions/listen` (stateless) or
    /// after `notifications/initialized` (handshake).
    ModelContext,
}

/// A new session's scope for the answers of its client (random: see `upstream::asks`).
fn session_scope() -> Arc<[u8]> {
    let mut nonce = [0u8; 16];
    let _ = getrandom::fill(&mut nonce);
    nonce.into()
}

/// Listens one session may hold open at once.
const MAX_LISTENS: usize = 16;

impl Drop for Session {
    fn drop(&mut self) {
        self.dispatcher
            .metrics()
            .sessions_open
            .with_label_values(&[&self.tenant.name])
            .dec();
        // In-flight calls are aborted by the JoinSet's own drop.
        if let Some(n) = self.notifier.take() {
            n.abort();
        }
        for (_, l) in self.listens.drain() {
            l.abort();
        }
    }
}

impl Session {
    pub fn new(dispatcher: Dispatcher, tenant: Arc<Tenant>, out: mpsc::Sender<Vec<u8>>) -> Self {
        dispatcher
            .metrics()
            .sessions_open
            .with_label_values(&[&tenant.name])
            .inc();
        Self {
            dispatcher,
            tenant,
            handshake: Handshake::default(),
            out,
            notify: Arc::new(AtomicBool::new(false)),
            trace: false,
            inflight: JoinSet::new(),
            notifier: None,
            credential: None,
            log_level: None,
            max_in_flight: usize::MAX,
            face: Face::V1,
            listens: HashMap::new(),
            calls: HashMap::new(),
            subscribed: Arc::default(),
            can: mcp::ClientCan::default(),
            loaded: Arc::default(),
            scope: session_scope(),
        }
    }

    /// The client speaks the Model Context Protocol (the stdio mode saw `{` first).
    pub fn speaking(mut self, face: Face) -> Self {
        self.face = face;
        self
    }

    /// Admits every message by the keys in force when it arrives (see
    /// [`Credential`]), not only the first.
    pub fn with_credential(mut self, credential: Credential) -> Self {
        self.credential = Some(credential);
        self
    }

    /// When the token the session was opened with expires (seconds since
    /// the epoch): the session ends then.
    pub fn token_expires(&self) -> Option<u64> {
        self.credential.as_ref().and_then(Credential::expires)
    }

    /// Follows a reload: false when the session's key is no longer valid.
    fn still_admitted(&mut self) -> bool {
        let Some(credential) = &mut self.credential else {
            return true;
        };
        match credential.standing() {
            Standing::Unchanged => true,
            Standing::Revoked => false,
            Standing::Reloaded(tenant) => {
                if tenant.name != self.tenant.name {
                    let open = &self.dispatcher.metrics().sessions_open;
                    open.with_label_values(&[&self.tenant.name]).dec();
                    open.with_label_values(&[&tenant.name]).inc();
                    // Notifications are the new tenant's from now on.
                    if let Some(n) = self.notifier.take() {
                        n.abort();
                    }
                    self.tenant = tenant;
                    if self.notify.load(Ordering::Acquire) {
                        self.start_notifications();
                    }
                } else {
                    self.tenant = tenant;
                }
                true
            }
        }
    }

    /// Requests being answered right now.
    pub fn in_flight(&mut self) -> usize {
        while self.inflight.try_join_next().is_some() {}
        self.inflight.len()
    }

    /// Refuses a call (-32004) while `limit` are in flight in this session.
    pub fn with_max_in_flight(mut self, limit: usize) -> Self {
        self.max_in_flight = limit;
        self
    }

    async fn send(&self, message: Vec<u8>) -> bool {
        self.out.send(message).await.is_ok()
    }

    /// Handles one message. Returns false once the peer is gone: stop reading.
    pub async fn on_message(&mut self, raw: &RawValue) -> bool {
        // Reap finished calls as we go, so a long session keeps no dead task handles.
        while self.inflight.try_join_next().is_some() {}
        if !self.still_admitted() {
            // Answered, then the session ends (its calls in flight with it).
            let id = match classify(raw) {
                Incoming::Request { id, .. } => Some(id),
                _ => None,
            };
            tracing::info!(tenant = %self.tenant.name, "session ended: its key is no longer valid");
            if id.is_some() {
                let mut reply = Vec::new();
                write_gateway_error(&mut reply, id, &GatewayError::Revoked);
                let _ = self.send(reply).await;
            }
            return false;
        }
        if self.face == Face::ModelContext {
            return self.on_modelcontext(raw).await;
        }
        match self.handshake.step(raw) {
            Step::Reply(reply) => self.send(reply).await,
            Step::Initialize { trace } => {
                self.trace = trace;
                match respond(&self.dispatcher, &self.tenant, raw).await {
                    Some(reply) => self.send(reply.into_vec()).await,
                    None => true,
                }
            }
            Step::Initialized => {
                self.start_notifications();
                true
            }
            Step::Nothing => true,
            Step::Dispatch => self.dispatch(raw, Via::default(), false).await,
        }
    }

    /// Answers a request when it is ready, as one of the session's calls in flight.
    /// `asked`: its client can be asked by upstreams during the call.
    async fn dispatch(&mut self, raw: &RawValue, via: Via<'static>, asked: bool) -> bool {
        let continues = self.face == Face::ModelContext
            && matches!(classify(raw), Incoming::Request { method, params, .. }
                if crate::dispatch::continues_round(&method, params));
        let admission = match self.admit(continues).await {
            Ok(a) => a,
            Err(e) => {
                let id = match classify(raw) {
                    Incoming::Request {
                        id, method, params, ..
                    } => {
                        self.dispatcher
                            .audit_refused(&self.tenant, &method, params, &e);
                        Some(id)
                    }
                    _ => None,
                };
                let mut reply = Vec::new();
                write_gateway_error(&mut reply, id, &e);
                return self.send(reply).await;
            }
        };
        let (dispatcher, tenant, out) = (
            self.dispatcher.clone(),
            self.tenant.clone(),
            self.out.clone(),
        );
        let (notify, trace) = (self.notify.clone(), self.trace);
        let owned = raw.to_owned();
        let reports = self.face == Face::ModelContext;
        let asking = asked.then(|| (self.scope.clone(), self.can));
        let loaded = reports.then(|| self.loaded.clone());
        let handle = self.inflight.spawn(
            async move {
                // The tenant's concurrency slot is held until the answer is
                // out, or by a call held across its client's rounds.
                let place = admission;
                // A call's progress goes out on the session, before its answer.
                let asking = asking
                    .as_ref()
                    .map(|(scope, can)| mcp::Asking { scope, can: *can });
                let via = Via {
                    progress: reports.then_some(mcp::Outlet::Session(&out)),
                    asks: asking.as_ref(),
                    place: Some(&place),
                    tools: loaded
                        .as_deref()
                        .map(|l| l as &dyn crate::dispatch::discovery::loaded::SessionTools),
                    ..via
                };
                let (reply, line) = respond_traced(&dispatcher, &tenant, &owned, trace, via).await;
                if let Some(reply) = reply {
                    let _ = out.send(reply.into_vec()).await;
                }
                if let Some(line) = line.filter(|_| notify.load(Ordering::Acquire)) {
                    let _ = out.send(log_trace(&line)).await;
                }
            }
            .in_current_span(),
        );
        if self.face == Face::ModelContext
            && let Incoming::Request { id, .. } = classify(raw)
        {
            // So that `notifications/cancelled` can end it; finished ones go as others come.
            self.calls.retain(|_, h| !h.is_finished());
            self.calls.insert(id.get().into(), handle);
        }
        true
    }

    /// A call's admission: a place among the session's calls in flight, then
    /// the tenant's limits (its rate alone for a retry of a round, whose
    /// call holds its place: see `crate::dispatch::Place`).
    async fn admit(&mut self, continues: bool) -> Result<crate::dispatch::Place, GatewayError> {
        if self.inflight.len() >= self.max_in_flight {
            self.dispatcher
                .metrics()
                .requests_limited
                .with_label_values(&[&self.tenant.name, "session_in_flight_limited"])
                .inc();
            return Err(GatewayError::SessionBusy {
                limit: self.max_in_flight,
            });
        }
        if continues {
            self.dispatcher.admit_rate(&self.tenant).await?;
            return Ok(crate::dispatch::Place::default());
        }
        self.dispatcher
            .admit(&self.tenant, 1)
            .await
            .map(crate::dispatch::Place::new)
    }

    /// Answers a message that could not be parsed (-32700, id null).
    pub async fn on_parse_error(&mut self) -> bool {
        let mut reply = Vec::new();
        write_error(&mut reply, None, &ErrorObject::parse_error());
        self.send(reply).await
    }

    fn start_notifications(&mut self) {
        self.notify.store(true, Ordering::Release);
        if self.notifier.is_some() {
            return;
        }
        if self.face == Face::ModelContext {
            // The handshake era: every listing change, and the resources subscribed to.
            let mut watcher = Watcher::new(&self.dispatcher, &self.tenant);
            let (out, subscribed) = (self.out.clone(), self.subscribed.clone());
            let (mut holder, tenant) = (self.credential.clone(), self.tenant.name.clone());
            self.notifier = Some(tokio::spawn(async move {
                while let Some(change) = watcher.next().await {
                    if !still_names(&mut holder, &tenant) {
                        return;
                    }
                    let wanted = match &change {
                        Change::Listing(_) | Change::TaskStatus(_) => true,
                        Change::Resource(uri) => subscribed
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .contains(uri),
                    };
                    if wanted
                        && out
                            .send(mcp::change_notification(&change, None))
                            .await
                            .is_err()
                    {
                        return;
                    }
                }
            }));
            return;
        }
        let Some(mut changes) = self.dispatcher.subscribe_changes(&self.tenant) else {
            return;
        };
        let out = self.out.clone();
        let (mut holder, tenant) = (self.credential.clone(), self.tenant.name.clone());
        self.notifier = Some(tokio::spawn(async move {
            loop {
                let change = changes.recv().await;
                if !still_names(&mut holder, &tenant) {
                    return;
                }
                match change {
                    Ok(Announced::Resource(id)) => {
                        if out.send(resource_did_change(&id)).await.is_err() {
                            return;
                        }
                    }
                    // MCP v1.0 has no tasks.
                    Ok(Announced::TaskStatus(_)) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        }));
    }

    /// The input ended: waits until every answer is out (or the peer is gone).
    pub async fn finish(mut self) {
        // Nobody is left to hear a listen.
        for (_, l) in self.listens.drain() {
            l.abort();
        }
        let out = self.out.clone();
        tokio::select! {
            _ = async { while self.inflight.join_next().await.is_some() {} } => {}
            // The peer left: abandon the calls (dropping self aborts them).
            _ = out.closed() => {}
        }
    }
}

/// Whether what a session pushes to its client may go on: the key it was
/// opened with (if any) still names `tenant`. A reload that removes the key
/// silences the session's listens and notifications at once, not only at
/// the client's next message.
fn still_names(holder: &mut Option<Credential>, tenant: &str) -> bool {
    holder.as_mut().is_none_or(|c| c.still_names(tenant))
}
