//! HTTP upstreams of the Model Context Protocol: its Streamable HTTP
//! transport. Each message is a POST accepting JSON or an SSE stream; the
//! server's `Mcp-Session-Id` is kept and echoed, `MCP-Protocol-Version` sent
//! after the handshake; a session answered with 404 is initialised again and
//! the request retried once (it was not executed); the GET stream carries
//! the server's notifications where it offers one; DELETE ends the session
//! on shutdown. Notifications that arrive on a call's stream are heard too.
//!
//! Here the link, its calls with their credential and its supervisor, all
//! on the one session state (`Shared`); a POST's answer, read and resumed, is
//! `answers`; the session's requests (re-initialisation, the stateless
//! revision's calls, the GET stream, DELETE) `session`.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use arc_swap::{ArcSwap, ArcSwapOption};
use bytes::BytesMut;
use futures_util::future::BoxFuture;
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::value::RawValue;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::backoff::Backoff;
use super::credentials::Credentials;
use super::dialect::answer_server_request;
use super::http_pool::Pool;
use super::sse::{EventBuffer, Resume, each_event};
use super::{CallError, Dialect, Params, Transport, Upstream, encode_request, write_request};
use crate::config::HttpSpec;
use crate::jsonrpc::message::{UpstreamMessage, parse_upstream};
use crate::jsonrpc::{Json, JsonBuf};
use crate::modelcontext::{self as mc, method};
use crate::telemetry::traces::Outbound;

mod answers;
mod session;

use answers::*;
use session::*;

const SESSION: HeaderName = HeaderName::from_static("mcp-session-id");
const REVISION: HeaderName = HeaderName::from_static("mcp-protocol-version");
const MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
const MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");
/// Notifications heard on streams, queued for the supervisor.
const EVENTS: usize = 256;
/// How long a tenant's session waits for its GET stream before it takes calls.
const CHILD_STREAM_WAIT: Duration = Duration::from_secs(2);
/// How long the DELETE that ends the session may take at shutdown.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// A notification the server sent: method and params.
pub type Event = (String, Option<JsonBuf>);

struct Shared {
    client: reqwest::Client,
    url: reqwest::Url,
    /// The configured headers, `Content-Type` and `Accept`, and the
    /// credential in force when the upstream has `auth`.
    headers: ArcSwap<HeaderMap>,
    /// The same without a credential.
    base: HeaderMap,
    /// The credential each request carries, when the upstream has `auth`,
    /// and the value written into the headers and pools now.
    credentials: Option<Arc<Credentials>>,
    installed: ArcSwapOption<HeaderValue>,
    session: RwLock<Option<HeaderValue>>,
    revision: RwLock<Option<HeaderValue>>,
    next_id: AtomicU64,
    max_bytes: usize,
    events: mpsc::Sender<Event>,
    /// One re-initialisation at a time.
    reinit: tokio::sync::Mutex<()>,
    /// Sessions the server forgot and the link replaced (see `Upstream::incarnation`).
    renewed: AtomicU64,
    /// Set once the server has answered the GET for its stream (opened it,
    /// or refused it): what it sends the session then reaches the link.
    answered_get: tokio::sync::watch::Sender<bool>,
    /// Plain http:// calls of the current session (see `http_pool`).
    fast: RwLock<Option<Arc<Pool>>>,
    /// Plain http:// requests of the 2026-07-28 revision, which carry no
    /// session (its header already written).
    stateless: Option<Arc<Pool>>,
    /// The same with the credential in force, when the upstream has `auth`.
    stateless_authed: ArcSwapOption<Pool>,
    /// How the server's own requests are answered.
    answers: ServerAnswers,
    /// The upstream's calls waiting for reports.
    progress: Arc<super::progress::Progress>,
    /// The progress token of each call in flight that has one, by its id on
    /// this link: a log line on that call's own stream is that call's.
    tokens: std::sync::Mutex<std::collections::HashMap<u64, Box<str>>>,
}

/// Answers to the requests a server sends on its streams (a `ping`, ...):
/// each POSTed within the upstream's timeout, at most `slots` at once; a
/// request past that is left unanswered and counted, so a server that asks
/// without end, and never takes the answers, holds a few sockets for a
/// while and not every descriptor the gateway has.
#[derive(Clone)]
pub struct ServerAnswers {
    slots: Arc<tokio::sync::Semaphore>,
    within: Duration,
    /// How long a request forwarded to a client waits for its answer.
    wait: Duration,
    metrics: crate::metrics::Metrics,
}

impl ServerAnswers {
    pub fn new(
        at_once: usize,
        within: Duration,
        wait: Duration,
        metrics: crate::metrics::Metrics,
    ) -> Self {
        ServerAnswers {
            slots: Arc::new(tokio::sync::Semaphore::new(
                at_once.min(tokio::sync::Semaphore::MAX_PERMITS),
            )),
            within,
            wait,
            metrics,
        }
    }
}

/// A client for one Streamable HTTP upstream. Cheap to clone.
#[derive(Clone)]
pub struct StreamableLink(Arc<Shared>);

impl StreamableLink {
    /// Whether the server gave the link a session (`Mcp-Session-Id`): a
    /// server without one keeps nothing between requests that a session
    /// would scope, so tenants may share the link.
    /// Waits (at most `within`) until the server has answered the GET for
    /// its stream, so that what it sends the session from then on is heard.
    async fn stream_answered(&self, within: Duration) {
        let mut answered = self.0.answered_get.subscribe();
        let _ = tokio::time::timeout(within, answered.wait_for(|a| *a)).await;
    }

    /// How many sessions the server forgot and the link replaced.
    pub fn renewed(&self) -> u64 {
        self.0.renewed.load(Ordering::Acquire)
    }

    pub fn has_session(&self) -> bool {
        self.0
            .session
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some()
    }
}

/// Why an exchange produced no answer.
enum Failure {
    /// The server no longer knows the session (404 to a request that carried one).
    Expired,
    /// The answer's event stream ended before the answer: where to resume it.
    Ended(Resume),
    Call(CallError),
}

/// Resumptions of one answer's stream tried before the call fails.
const MAX_RESUMES: usize = 5;
/// The wait before resuming when the server asked for none (SSE's `retry`),
/// and the longest wait whatever it asked (the call's deadline bounds all).
const RESUME_WAIT: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(30));

fn ended_without_answer() -> CallError {
    CallError::protocol("the event stream ended without an answer")
}

impl From<CallError> for Failure {
    fn from(e: CallError) -> Self {
        Failure::Call(e)
    }
}

fn read<T: Clone>(lock: &RwLock<T>) -> T {
    lock.read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

fn write<T>(lock: &RwLock<T>, value: T) {
    *lock
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = value;
}

impl StreamableLink {
    /// The link, and the notifications it will hear.
    pub fn new(
        client: reqwest::Client,
        spec: &HttpSpec,
        max_bytes: usize,
        answers: ServerAnswers,
        progress: Arc<super::progress::Progress>,
        credentials: Option<Arc<Credentials>>,
    ) -> Result<(Self, mpsc::Receiver<Event>), String> {
        let url = reqwest::Url::parse(&spec.url).map_err(|e| e.to_string())?;
        let mut headers = HeaderMap::new();
        for (k, v) in &spec.headers {
            let name = HeaderName::from_bytes(k.as_bytes()).map_err(|e| e.to_string())?;
            let value = HeaderValue::from_str(v).map_err(|e| e.to_string())?;
            headers.insert(name, value);
        }
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(
            ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        let (events, rx) = mpsc::channel(EVENTS);
        // 2026-07-28 requests carry no session: one pool serves them all.
        let mut stateless_headers = headers.clone();
        stateless_headers.insert(REVISION, HeaderValue::from_static(mc::STATELESS_REVISION));
        let stateless = Pool::new(&url, &stateless_headers).map(Arc::new);
        let link = StreamableLink(Arc::new(Shared {
            client,
            url,
            headers: ArcSwap::from_pointee(headers.clone()),
            base: headers,
            credentials,
            installed: ArcSwapOption::empty(),
            session: RwLock::new(None),
            revision: RwLock::new(None),
            next_id: AtomicU64::new(2),
            max_bytes,
            events,
            reinit: tokio::sync::Mutex::new(()),
            renewed: AtomicU64::new(0),
            answered_get: tokio::sync::watch::Sender::new(false),
            fast: RwLock::new(None),
            stateless,
            stateless_authed: ArcSwapOption::empty(),
            answers,
            progress,
            tokens: Default::default(),
        }));
        Ok((link, rx))
    }

    pub fn url(&self) -> &reqwest::Url {
        &self.0.url
    }

    /// Builds the pool of plain http:// calls for the session now in force
    /// (its headers are written once per pool); none for https:// or
    /// without a session.
    fn rebuild_fast(&self) {
        // A server that keeps no sessions (it gave no id) is served by the
        // pool as well, its requests carrying no session header.
        let mut headers = self.headers();
        if let Some(session) = read(&self.0.session) {
            headers.insert(SESSION, session);
        }
        if let Some(revision) = read(&self.0.revision) {
            headers.insert(REVISION, revision);
        }
        write(&self.0.fast, Pool::new(&self.0.url, &headers).map(Arc::new));
    }
}

impl StreamableLink {
    /// Sends a request and reads its answer, within `deadline` if there is
    /// one (`CallError::Timeout` past it, and the server is told the call is
    /// cancelled). `started` is when the call started.
    pub(crate) async fn call(
        &self,
        method_name: &str,
        params: Params<'_>,
        started: std::time::Instant,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<JsonBuf, CallError> {
        let Some(credentials) = &self.0.credentials else {
            return self.call_once(method_name, params, started, deadline).await;
        };
        super::credentials::retried(credentials, started, |value| async move {
            self.install(&value);
            self.call_once(method_name, params, started, deadline).await
        })
        .await
    }

    /// The headers every request carries now.
    fn headers(&self) -> HeaderMap {
        (**self.0.headers.load()).clone()
    }

    /// Writes `credential` into the headers and the pools, unless it is
    /// there already.
    fn install(&self, credential: &HeaderValue) {
        let Some(credentials) = &self.0.credentials else {
            return;
        };
        if self.0.installed.load().as_deref() == Some(credential) {
            return;
        }
        let mut headers = self.0.base.clone();
        headers.insert(credentials.header().clone(), credential.clone());
        self.0.headers.store(Arc::new(headers.clone()));
        headers.insert(REVISION, HeaderValue::from_static(mc::STATELESS_REVISION));
        let stateless = Pool::new(&self.0.url, &headers).map(Arc::new);
        self.0.stateless_authed.store(stateless);
        self.0.installed.store(Some(Arc::new(credential.clone())));
        if read(&self.0.fast).is_some() {
            self.rebuild_fast();
        }
    }

    /// [`Self::call`] with the credential in force.
    async fn call_once(
        &self,
        method_name: &str,
        params: Params<'_>,
        started: std::time::Instant,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<JsonBuf, CallError> {
        if let Some(mirrored) = params.stateless() {
            // In place, not boxed: the connection's future is no larger for
            // it (its state overlaps a session call's), and a box of it is
            // past glibc's per-thread cache, a slow allocation per call.
            return self
                .call_stateless(method_name, params, mirrored, started, deadline)
                .await;
        }
        let initialize = method_name == method::INITIALIZE;
        let id = if initialize {
            if read(&self.0.session).is_some() {
                // A new handshake starts a new session.
                self.close().await;
            }
            // Through reqwest, which reads the session id the answer gives.
            write(&self.0.fast, None);
            1
        } else {
            self.0.next_id.fetch_add(1, Ordering::Relaxed)
        };
        let mut cancel = CancelOnDrop {
            link: self,
            id: (!initialize).then_some(id),
        };
        // A call that reports: its log lines are told apart by its id.
        let _token = params.token().map(|token| TokenOf::new(self, id, token));
        let stale = read(&self.0.session);
        let first = self
            .exchange_any(method_name, params, id, started, deadline)
            .await;
        let answer = match first {
            Err(Failure::Expired) if !initialize => {
                self.reinitialize(stale).await?;
                let again = self
                    .exchange_any(method_name, params, id, started, deadline)
                    .await;
                match again {
                    Err(Failure::Expired) => Err(CallError::unavailable("the session was refused")),
                    Err(Failure::Ended(_)) => Err(ended_without_answer()),
                    Err(Failure::Call(e)) => Err(e),
                    Ok(answer) => Ok(answer),
                }
            }
            Err(Failure::Expired) => Err(CallError::unavailable("the session was refused")),
            Err(Failure::Ended(_)) => Err(ended_without_answer()),
            Err(Failure::Call(e)) => Err(e),
            Ok(answer) => Ok(answer),
        };
        // A call that timed out is still running upstream: it is cancelled
        // (when `cancel` is dropped); one that ended otherwise is not.
        if !matches!(answer, Err(CallError::Timeout)) {
            cancel.id = None;
        }
        let answer = answer?;
        if initialize {
            self.learn_revision(&answer)?;
        }
        Ok(answer)
    }
}

impl Transport for StreamableLink {
    fn request<'a>(
        &'a self,
        method_name: &'a str,
        params: Params<'a>,
    ) -> BoxFuture<'a, Result<JsonBuf, CallError>> {
        // No deadline here: the caller sets it.
        Box::pin(self.call(method_name, params, std::time::Instant::now(), None))
    }

    fn as_streamable(&self) -> Option<&StreamableLink> {
        Some(self)
    }

    fn notify<'a>(
        &'a self,
        method_name: &'a str,
        params: &'a RawValue,
    ) -> BoxFuture<'a, Result<(), CallError>> {
        Box::pin(self.post_message(encode_request(None, method_name, params.into())))
    }
}

/// Runs one Streamable HTTP upstream until `shutdown`: handshake (retried
/// with backoff, each attempt under a deadline), then serve while it is
/// reachable, hearing its notifications; at shutdown the session is ended.
pub async fn run(
    up: Arc<Upstream>,
    link: StreamableLink,
    mut events: mpsc::Receiver<Event>,
    shutdown: CancellationToken,
) {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
    let handshake_deadline = up.timeout().min(super::http::MAX_HANDSHAKE);
    let transport: Arc<dyn Transport> = Arc::new(link.clone());
    let mut first = true;
    loop {
        loop {
            let attempt = tokio::select! {
                r = tokio::time::timeout(handshake_deadline, up.connect(transport.clone())) => {
                    r.unwrap_or(Err(CallError::Timeout))
                }
                _ = shutdown.cancelled() => {
                    link.close().await;
                    return;
                }
            };
            up.note_refusal(attempt.as_ref().err());
            match attempt {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(upstream = %up.name, url = %crate::redact::url(link.url()), error = %e, "handshake failed; retrying");
                    up.disconnect();
                    tokio::select! {
                        _ = tokio::time::sleep(backoff.next_delay()) => {}
                        // A caller brought the credential it lacked.
                        () = up.user_came() => backoff.reset(),
                        _ = shutdown.cancelled() => return,
                    }
                }
            }
        }
        if !std::mem::take(&mut first) && !up.is_child() {
            up.metrics()
                .upstream_restarts
                .with_label_values(&[&up.name])
                .inc();
        }
        backoff.reset();
        let serving = async {
            let listener = async {
                link.listen(&shutdown).await;
                std::future::pending::<()>().await;
            };
            let hearing = async {
                while let Some((method_name, params)) = events.recv().await {
                    up.on_notification(&method_name, params.as_ref().map(JsonBuf::as_json));
                }
            };
            // A tenant's session takes calls once its stream is open: what
            // the server says of the first call there is heard.
            let ready = async {
                if up.is_child() {
                    link.stream_answered(CHILD_STREAM_WAIT).await;
                    up.mark_ready();
                }
                std::future::pending::<()>().await;
            };
            tokio::select! {
                () = listener => {}
                () = hearing => {}
                () = ready => {}
                () = up.relister() => {}
                () = super::http::watch_health(&up, link.url()) => {}
            }
        };
        tokio::select! {
            () = serving => {
                tracing::warn!(upstream = %up.name, url = %crate::redact::url(link.url()), "upstream unreachable; down until a handshake succeeds again");
                up.disconnect();
            }
            _ = shutdown.cancelled() => {
                up.disconnect();
                link.close().await;
                return;
            }
        }
    }
}
