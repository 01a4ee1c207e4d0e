//! HTTP upstreams of the Model Context Protocol: its Streamable HTTP
//! transport. Each message is a POST accepting JSON or an SSE stream; the
//! server's `Mcp-Session-Id` is kept and echoed, `MCP-Protocol-Version` sent
//! after the handshake; a session answered with 404 is initialised again and
//! the request retried once (it was not executed); the GET stream carries
//! the server's notifications where it offers one; DELETE ends the session
//! on shutdown. Notifications that arrive on a call's stream are heard too.
//!
//! Longer than most files: one link and its supervisor. Its POST, SSE answers
//! and their resumption, the session's re-initialisation and the GET stream
//! all act on the one session state (`Shared`); apart, each part would reach
//! into the others'.

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

    /// One request and its answer: through the plain-http pool when there
    /// is one (a session over http://), through reqwest otherwise.
    async fn exchange_any(
        &self,
        method_name: &str,
        params: Params<'_>,
        id: u64,
        started: std::time::Instant,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<JsonBuf, Failure> {
        let answer = self
            .exchange_once(method_name, params, id, started, deadline)
            .await;
        let Err(Failure::Ended(resume)) = answer else {
            return answer;
        };
        // The stream ended before the answer (the server closed it, as the
        // 2025-11-25 revision lets it): resumed from its last event.
        let mut digits = [0; 20];
        let id_text = super::decimal(id, &mut digits);
        let resumed = self.resume(resume, id_text);
        match deadline {
            Some(at) => tokio::time::timeout_at(at, resumed)
                .await
                .unwrap_or(Err(Failure::Call(CallError::Timeout))),
            None => resumed.await,
        }
    }

    /// [`Self::exchange_any`] without resuming.
    async fn exchange_once(
        &self,
        method_name: &str,
        params: Params<'_>,
        id: u64,
        started: std::time::Instant,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<JsonBuf, Failure> {
        let Some(pool) = read(&self.0.fast) else {
            let body = encode_request(Some(id), method_name, params);
            let exchange = self.exchange(body, id, params.trace());
            return match deadline {
                Some(at) => tokio::time::timeout_at(at, exchange)
                    .await
                    .unwrap_or(Err(Failure::Call(CallError::Timeout))),
                None => exchange.await,
            };
        };
        let mut digits = [0; 20];
        let scan = StreamScan::new(self, super::decimal(id, &mut digits));
        pool.post_until(
            started,
            deadline,
            (
                |out: &mut Vec<u8>| write_request(out, Some(id), method_name, params),
                64 + params.len_hint(),
                params.trace(),
            ),
            &[],
            self.0.max_bytes,
            |body| scan.holds_answer(body),
            |status, body| self.read_answer(status, body, id, &scan),
        )
        .await
        .map_err(Failure::Call)?
    }

    /// Resumes an answer's stream that ended early: a GET with
    /// `Last-Event-ID` after the wait the server asked for, as many times
    /// as it ends again (up to [`MAX_RESUMES`]) while it says where it is.
    async fn resume(&self, mut at: Resume, id_text: &[u8]) -> Result<JsonBuf, Failure> {
        for _ in 0..MAX_RESUMES {
            let Some(last) = at.last_id.clone() else {
                break;
            };
            let wait = at.retry.unwrap_or(RESUME_WAIT.0).min(RESUME_WAIT.1);
            tokio::time::sleep(wait).await;
            let req = self
                .0
                .client
                .get(self.0.url.clone())
                .headers(self.headers())
                .header(ACCEPT, "text/event-stream")
                .header("last-event-id", last);
            let response = self
                .with_session(req)
                .send()
                .await
                .map_err(|_| CallError::unavailable("connection failed"))?;
            match response.status() {
                StatusCode::OK if is_event_stream(response.headers()) => {}
                StatusCode::NOT_FOUND => return Err(Failure::Expired),
                s => {
                    return Err(CallError::protocol(format!(
                        "HTTP {} to the stream's resumption",
                        s.as_u16()
                    ))
                    .into());
                }
            }
            let (found, next) = self
                .read_stream(response, at, |data| self.hear(data, id_text))
                .await?;
            if let Some(found) = found {
                return found.map_err(Failure::Call);
            }
            at = next;
        }
        Err(ended_without_answer().into())
    }

    /// A whole answer read by the pool: a JSON body, or an event stream.
    fn read_answer(
        &self,
        status: StatusCode,
        body: &[u8],
        id: u64,
        scan: &StreamScan<'_>,
    ) -> Result<JsonBuf, Failure> {
        match status.as_u16() {
            200 => {}
            // The session is gone (a server without sessions has no such answer).
            404 if read(&self.0.session).is_some() => return Err(Failure::Expired),
            401 if self.0.credentials.is_some() => {
                return Err(super::credentials::rejected().into());
            }
            code @ 502..=504 => return Err(CallError::unavailable(format!("HTTP {code}")).into()),
            code => return Err(CallError::protocol(format!("HTTP {code} to a request")).into()),
        }
        if matches!(
            body.iter().find(|b| !b.is_ascii_whitespace()),
            Some(b'{' | b'[')
        ) {
            return super::http::find_answer(body, id).map_err(Failure::Call);
        }
        // Events that came in one piece with the end of the body.
        scan.holds_answer(body);
        match scan.take_answer() {
            Some(answer) => answer.map_err(Failure::Call),
            None => Err(Failure::Ended(scan.resume())),
        }
    }

    /// One message of an event stream: a notification is queued for the
    /// supervisor, a request of the server answered; the response to
    /// `id_text` is returned.
    fn hear(&self, data: &[u8], id_text: &[u8]) -> Option<Result<JsonBuf, CallError>> {
        let skipped = || {
            tracing::debug!(url = %crate::redact::url(&self.0.url), "an event that is not JSON skipped");
            None
        };
        let Ok(text) = std::str::from_utf8(data) else {
            return skipped();
        };
        // One pass for the usual event (one object); serde for the rest.
        let message = match crate::jsonrpc::message::parse_upstream_text(text) {
            Some(message) => message,
            None => match serde_json::from_str::<&RawValue>(text) {
                Ok(raw) => parse_upstream(raw),
                Err(_) => return skipped(),
            },
        };
        match message {
            // Progress goes to the call waiting for it, ahead of its answer.
            Ok(UpstreamMessage::Notification { method, params })
                if method == "notifications/progress" =>
            {
                if let Some(params) = params {
                    self.0.progress.deliver(params);
                }
                None
            }
            // A log line on a call's own stream is that call's, when its
            // caller can hear it; any other is the upstream's (see `run`).
            Ok(UpstreamMessage::Notification { method, params })
                if method == "notifications/message" && self.message_of_call(id_text, params) =>
            {
                None
            }
            // The upstream withdrawing a request it forwarded to a client.
            Ok(UpstreamMessage::Notification {
                method,
                params: Some(params),
            }) if method == "notifications/cancelled" && self.0.progress.withdraw(params) => None,
            Ok(UpstreamMessage::Notification { method, params }) => {
                let event = (method.to_string(), params.map(Json::to_buf));
                // Queued for the supervisor, which relists (coalesced) as
                // fast as it hears: a flood past the queue loses only what
                // the relisting already covers, so it is not logged per message.
                if self.0.events.try_send(event).is_err() {
                    tracing::debug!(url = %crate::redact::url(&self.0.url), "notification dropped: too many queued");
                }
                None
            }
            Ok(UpstreamMessage::Request { id, method, params }) => {
                if let Err(()) = self.ask_of_call(id_text, id, &method, params) {
                    self.answer(answer_server_request(Dialect::ModelContext, id, &method));
                }
                None
            }
            Ok(UpstreamMessage::Response { id, outcome }) if id.get().as_bytes() == id_text => {
                Some(
                    outcome
                        .map(Json::to_buf)
                        .map_err(|e| CallError::Remote(e.to_buf())),
                )
            }
            Err(broken) if broken.id.is_some_and(|i| i.get().as_bytes() == id_text) => {
                Some(Err(CallError::protocol(broken.why)))
            }
            _ => None,
        }
    }

    /// Hands a log line heard on the stream of call `id_text` to that call;
    /// whether it was taken.
    fn message_of_call(&self, id_text: &[u8], params: Option<Json<'_>>) -> bool {
        let (Some(params), Some(id)) = (
            params,
            std::str::from_utf8(id_text)
                .ok()
                .and_then(|t| t.parse::<u64>().ok()),
        ) else {
            return false;
        };
        let tokens = self
            .0
            .tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        tokens
            .get(&id)
            .is_some_and(|token| self.0.progress.deliver_message(token, params))
    }

    /// Hands a request heard on the stream of call `id_text` to that call,
    /// for its client to answer, and answers the upstream when the client
    /// has (within [`ServerAnswers`]' wait); `Err` when no call of a client
    /// that can hear it waits there, or it is not a request a client answers.
    fn ask_of_call(
        &self,
        id_text: &[u8],
        id: Json<'_>,
        method: &str,
        params: Option<Json<'_>>,
    ) -> Result<(), ()> {
        if !super::progress::ASKED.contains(&method) {
            return Err(());
        }
        let link_id = std::str::from_utf8(id_text)
            .ok()
            .and_then(|t| t.parse::<u64>().ok())
            .ok_or(())?;
        let token = self
            .0
            .tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&link_id)
            .cloned()
            .ok_or(())?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| ())?;
        let (reply, answered) = tokio::sync::oneshot::channel();
        let ask = super::progress::Ask {
            id: id.to_buf(),
            method: method.into(),
            params: params.map(Json::to_buf),
            reply,
        };
        self.0.progress.deliver_ask(&token, ask).map_err(|_| ())?;
        let (link, id) = (self.clone(), id.to_buf());
        let withdrawn = self.0.progress.asked(&id);
        runtime.spawn(async move { link.answer_when_asked(id, answered, withdrawn).await });
        Ok(())
    }

    /// Waits for what becomes of a forwarded request (at most the wait of
    /// [`ServerAnswers`]) and POSTs the upstream its answer.
    async fn answer_when_asked(
        &self,
        id: JsonBuf,
        answered: tokio::sync::oneshot::Receiver<super::progress::AskReply>,
        withdrawn: CancellationToken,
    ) {
        use crate::metrics::ServerRequest;
        let answers = &self.0.answers;
        let waiting = &answers.metrics.server_requests_waiting;
        let (reply, outcome) =
            super::progress::answer_of(&id, answered, answers.wait, waiting, &withdrawn).await;
        self.0.progress.answered(&id);
        if outcome == ServerRequest::Withdrawn {
            answers.metrics.server_request(outcome);
            return;
        }
        let sent = tokio::time::timeout(answers.within, self.post_message(reply)).await;
        let outcome = match sent {
            Ok(Ok(())) => outcome,
            Ok(Err(_)) | Err(_) => ServerRequest::Failed,
        };
        answers.metrics.server_request(outcome);
    }

    /// POSTs the answer to a server's request, within the bounds of [`ServerAnswers`].
    fn answer(&self, (reply, outcome): (Vec<u8>, crate::metrics::ServerRequest)) {
        use crate::metrics::ServerRequest;
        let answers = &self.0.answers;
        let Ok(slot) = answers.slots.clone().try_acquire_owned() else {
            answers.metrics.server_request(ServerRequest::Dropped);
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let link = self.clone();
        // Ends within `within` whatever the server does; the slot goes with it.
        runtime.spawn(async move {
            let _slot = slot;
            let answers = &link.0.answers;
            let sent = tokio::time::timeout(answers.within, link.post_message(reply)).await;
            let outcome = match sent {
                Ok(Ok(())) => outcome,
                Ok(Err(_)) | Err(_) => ServerRequest::Failed,
            };
            answers.metrics.server_request(outcome);
        });
    }

    fn with_session(&self, mut req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        if let Some(session) = read(&self.0.session) {
            req = req.header(SESSION, session);
        }
        if let Some(revision) = read(&self.0.revision) {
            req = req.header(REVISION, revision);
        }
        req
    }

    /// POSTs `body` through reqwest with the session's headers (and those
    /// of the `trace` it carries).
    async fn send_post(
        &self,
        body: Vec<u8>,
        trace: Option<&Outbound>,
    ) -> Result<reqwest::Response, CallError> {
        let req = self
            .0
            .client
            .post(self.0.url.clone())
            .headers(self.headers())
            .headers(super::http::trace_headers(trace))
            .body(body);
        self.with_session(req)
            .send()
            .await
            .map_err(|_| CallError::unavailable("connection failed"))
    }

    /// POSTs one request and reads its answer, from a JSON body or an SSE stream.
    async fn exchange(
        &self,
        body: Vec<u8>,
        id: u64,
        trace: Option<&Outbound>,
    ) -> Result<JsonBuf, Failure> {
        let had_session = read(&self.0.session).is_some();
        let response = self.send_post(body, trace).await?;
        match response.status() {
            StatusCode::OK => {}
            StatusCode::NOT_FOUND if had_session => return Err(Failure::Expired),
            StatusCode::UNAUTHORIZED if self.0.credentials.is_some() => {
                return Err(super::credentials::rejected().into());
            }
            s if matches!(s.as_u16(), 502..=504) => {
                return Err(CallError::unavailable(format!("HTTP {}", s.as_u16())).into());
            }
            s => {
                return Err(
                    CallError::protocol(format!("HTTP {} to a request", s.as_u16())).into(),
                );
            }
        }
        if let Some(session) = response.headers().get(SESSION) {
            if id == 1 {
                write(&self.0.session, Some(session.clone()));
            }
        }
        self.read_response(response, id).await
    }

    /// The answer to request `id` in a response of status 200.
    async fn read_response(
        &self,
        response: reqwest::Response,
        id: u64,
    ) -> Result<JsonBuf, Failure> {
        if is_event_stream(response.headers()) {
            let mut id_digits = [0; 20];
            let id_text = super::decimal(id, &mut id_digits).to_vec();
            let (found, resume) = self
                .read_stream(response, Resume::default(), |data| {
                    self.hear(data, &id_text)
                })
                .await?;
            return match found {
                Some(found) => found.map_err(Failure::Call),
                None => Err(Failure::Ended(resume)),
            };
        }
        let body = read_body(response, self.0.max_bytes).await?;
        super::http::find_answer(&body, id).map_err(Failure::Call)
    }

    /// A request of the 2026-07-28 revision (see [`Params::Stateless`]):
    /// POSTed without the session, with that revision's headers, through
    /// the plain-http pool when the upstream is http://. The revision
    /// cancels a request by closing its connection, which dropping this
    /// does. Its errors may come with a 4xx status and the JSON-RPC error
    /// as the body: that error is the answer.
    async fn call_stateless(
        &self,
        method_name: &str,
        params: Params<'_>,
        mirrored: &[(String, String)],
        started: std::time::Instant,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<JsonBuf, CallError> {
        let id = self.0.next_id.fetch_add(1, Ordering::Relaxed);
        let _token = params.token().map(|token| TokenOf::new(self, id, token));
        // `server/discover` names nothing.
        let name = params
            .name()
            .filter(|n| !n.is_empty())
            .map(crate::modelcontext::param_headers::encode);
        let authed;
        let pool = match &self.0.credentials {
            None => self.0.stateless.as_deref(),
            Some(_) => {
                authed = self.0.stateless_authed.load_full();
                authed.as_deref()
            }
        };
        let Some(pool) = pool else {
            let exchange = self.call_stateless_slow(method_name, params, name, mirrored, id);
            return match deadline {
                Some(at) => tokio::time::timeout_at(at, exchange)
                    .await
                    .unwrap_or(Err(CallError::Timeout)),
                None => exchange.await,
            };
        };
        let named: [(&str, &[u8]); 2] = [
            ("mcp-method", method_name.as_bytes()),
            ("mcp-name", name.as_deref().unwrap_or("").as_bytes()),
        ];
        let named = &named[..if name.is_some() { 2 } else { 1 }];
        // The mirrored arguments' headers, for the few tools that have some.
        let all: Vec<(&str, &[u8])>;
        let extra = if mirrored.is_empty() {
            named
        } else {
            all = named
                .iter()
                .copied()
                .chain(mirrored.iter().map(|(n, v)| (n.as_str(), v.as_bytes())))
                .collect();
            &all
        };
        let mut digits = [0; 20];
        let scan = StreamScan::new(self, super::decimal(id, &mut digits));
        let authed = self.0.credentials.is_some();
        pool.post_until(
            started,
            deadline,
            (
                |out: &mut Vec<u8>| write_request(out, Some(id), method_name, params),
                64 + params.len_hint(),
                params.trace(),
            ),
            extra,
            self.0.max_bytes,
            |body| scan.holds_answer(body),
            |status, body| {
                let json = matches!(
                    body.iter().find(|b| !b.is_ascii_whitespace()),
                    Some(b'{' | b'[')
                );
                if status == StatusCode::OK && !json {
                    scan.holds_answer(body);
                    return scan
                        .take_answer()
                        .unwrap_or_else(|| Err(ended_without_answer()));
                }
                stateless_answer(status.as_u16(), body, id, authed)
            },
        )
        .await?
    }

    /// [`Self::call_stateless`] through reqwest (an https:// upstream).
    async fn call_stateless_slow(
        &self,
        method_name: &str,
        params: Params<'_>,
        name: Option<std::borrow::Cow<'_, str>>,
        mirrored: &[(String, String)],
        id: u64,
    ) -> Result<JsonBuf, CallError> {
        let mut req = self
            .0
            .client
            .post(self.0.url.clone())
            .headers(self.headers())
            .headers(super::http::trace_headers(params.trace()))
            .header(REVISION, HeaderValue::from_static(mc::STATELESS_REVISION))
            .header(MCP_METHOD, method_name);
        if let Some(name) = name {
            req = req.header(MCP_NAME, &*name);
        }
        for (name, value) in mirrored {
            req = req.header(name.as_str(), value.as_str());
        }
        let body = encode_request(Some(id), method_name, params);
        let response = req
            .body(body)
            .send()
            .await
            .map_err(|_| CallError::unavailable("connection failed"))?;
        let status = response.status().as_u16();
        if status == 200 {
            return match self.read_response(response, id).await {
                Ok(answer) => Ok(answer),
                Err(Failure::Call(e)) => Err(e),
                Err(Failure::Ended(_) | Failure::Expired) => Err(ended_without_answer()),
            };
        }
        let body = read_body(response, self.0.max_bytes).await?;
        stateless_answer(status, &body, id, self.0.credentials.is_some())
    }

    /// Reads an SSE stream, handing each event's data to `answer` until it
    /// returns something; also where to resume it (from `at` on).
    async fn read_stream<T>(
        &self,
        mut response: reqwest::Response,
        at: Resume,
        mut answer: impl FnMut(&[u8]) -> Option<T>,
    ) -> Result<(Option<T>, Resume), CallError> {
        let mut events = EventBuffer::resuming(at);
        loop {
            let chunk = response
                .chunk()
                .await
                .map_err(|_| CallError::unavailable("the event stream broke"))?;
            let Some(chunk) = chunk else {
                return Ok((None, events.resume));
            };
            events.push(&chunk);
            for data in events.take_data() {
                if let Some(found) = answer(&data) {
                    return Ok((Some(found), events.resume));
                }
            }
            if events.len() > self.0.max_bytes {
                return Err(CallError::protocol("an event over the frame limit"));
            }
        }
    }

    /// POSTs a notification or a response: 202 (or 200, 204) expected.
    async fn post_message(&self, body: Vec<u8>) -> Result<(), CallError> {
        let response = self.send_post(body, None).await?;
        match response.status().as_u16() {
            200 | 202 | 204 => Ok(()),
            code => Err(CallError::protocol(format!(
                "HTTP {code} to a notification"
            ))),
        }
    }

    /// The session the server forgot (`stale`) is replaced by a new one, once
    /// however many calls found it gone.
    async fn reinitialize(&self, stale: Option<HeaderValue>) -> Result<(), CallError> {
        let _one = self.0.reinit.lock().await;
        if read(&self.0.session) != stale {
            return Ok(());
        }
        tracing::info!(url = %crate::redact::url(&self.0.url), "the upstream ended the session; initialising again");
        // Whatever the server numbered in the forgotten session (a restart
        // forgets them all) is never taken for what it numbers in the next.
        self.0.renewed.fetch_add(1, Ordering::AcqRel);
        write(&self.0.session, None);
        write(&self.0.fast, None);
        let params = mc::initialize_params(true);
        let params: &RawValue = serde_json::from_str(&params)
            .map_err(|_| CallError::protocol("initialize params are not JSON"))?;
        let result = match self
            .exchange(
                encode_request(Some(1), method::INITIALIZE, params.into()),
                1,
                None,
            )
            .await
        {
            Ok(result) => result,
            Err(Failure::Expired) => return Err(CallError::unavailable("the session was refused")),
            Err(Failure::Ended(_)) => return Err(ended_without_answer()),
            Err(Failure::Call(e)) => return Err(e),
        };
        self.learn_revision(&result)?;
        let done = encode_request(None, method::INITIALIZED, super::empty_object().into());
        self.post_message(done).await
    }

    fn learn_revision(&self, initialize: &JsonBuf) -> Result<(), CallError> {
        let handshake = mc::read_initialize(initialize.get()).map_err(CallError::protocol)?;
        let value = HeaderValue::from_str(&handshake.revision)
            .map_err(|_| CallError::protocol("the revision is not a header value"))?;
        write(&self.0.revision, Some(value));
        self.rebuild_fast();
        Ok(())
    }

    /// Holds the GET stream open and hears the server's notifications on
    /// it; returns at once when the server offers none (405).
    async fn listen(&self, shutdown: &CancellationToken) {
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
        while !shutdown.is_cancelled() {
            let started = std::time::Instant::now();
            let req = self
                .0
                .client
                .get(self.0.url.clone())
                .headers(self.headers())
                .header(ACCEPT, "text/event-stream");
            let sent = self.with_session(req).send().await;
            self.0.answered_get.send_replace(true);
            match sent {
                Ok(r) if r.status() == StatusCode::METHOD_NOT_ALLOWED => {
                    tracing::debug!(url = %crate::redact::url(&self.0.url), "the upstream offers no GET stream");
                    return;
                }
                Ok(r) if r.status() == StatusCode::OK && is_event_stream(r.headers()) => {
                    let ended = self
                        .read_stream(r, Resume::default(), |data| self.hear(data, b""))
                        .await;
                    tracing::debug!(url = %crate::redact::url(&self.0.url), ended = ?ended.err(), "GET stream ended; opening it again");
                }
                Ok(r) => {
                    tracing::debug!(url = %crate::redact::url(&self.0.url), status = r.status().as_u16(), "GET stream refused");
                }
                Err(_) => {}
            }
            if started.elapsed() > Duration::from_secs(30) {
                backoff.reset();
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff.next_delay()) => {}
                _ = shutdown.cancelled() => return,
            }
        }
    }

    /// Ends the session (DELETE), if there is one; a server that does not
    /// let clients end sessions answers 405, which is fine.
    pub async fn close(&self) {
        let Some(session) = read(&self.0.session) else {
            return;
        };
        let req = self
            .0
            .client
            .delete(self.0.url.clone())
            .headers(self.headers())
            .header(SESSION, session);
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, req.send()).await;
        write(&self.0.session, None);
        write(&self.0.fast, None);
    }

    /// Tells the server that request `id` is no longer waited for.
    fn cancel(&self, id: u64) {
        let params = mc::cancelled_params(id, "the gateway stopped waiting");
        let Ok(params) = serde_json::from_str::<&RawValue>(&params) else {
            return;
        };
        let body = encode_request(None, method::CANCELLED, params.into());
        let link = self.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = tokio::time::timeout(CLOSE_TIMEOUT, link.post_message(body)).await;
            });
        }
    }
}

/// Cancels the request upstream when dropped before it is disarmed.
/// A call's progress token known by its id on the link, until dropped.
struct TokenOf<'a> {
    link: &'a StreamableLink,
    id: u64,
}

impl<'a> TokenOf<'a> {
    fn new(link: &'a StreamableLink, id: u64, token: &str) -> Self {
        link.0
            .tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(id, token.into());
        TokenOf { link, id }
    }
}

impl Drop for TokenOf<'_> {
    fn drop(&mut self) {
        self.link
            .0
            .tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.id);
    }
}

struct CancelOnDrop<'a> {
    link: &'a StreamableLink,
    id: Option<u64>,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.link.cancel(id);
        }
    }
}

/// The answer to a 2026-07-28 request `id` in a whole JSON body of this
/// status: that revision's errors may come with a 4xx status.
fn stateless_answer(status: u16, body: &[u8], id: u64, authed: bool) -> Result<JsonBuf, CallError> {
    match status {
        200 => super::http::find_answer(body, id),
        401 if authed => Err(super::credentials::rejected()),
        502..=504 => Err(CallError::unavailable(format!("HTTP {status}"))),
        _ => match super::http::find_answer(body, id) {
            Err(remote @ CallError::Remote(_)) => Err(remote),
            _ => Err(CallError::protocol(format!("HTTP {status} to a request"))),
        },
    }
}

fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        })
}

async fn read_body(mut response: reqwest::Response, max: usize) -> Result<BytesMut, CallError> {
    let mut out = BytesMut::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|_| CallError::unavailable("connection lost while reading the answer"))?
    {
        if out.len() + chunk.len() > max {
            return Err(CallError::protocol("answer larger than the frame limit"));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// An event stream read by the pool as it arrives: each complete event is
/// heard once, and the answer to the call kept when it comes.
struct StreamScan<'a> {
    link: &'a StreamableLink,
    id_text: &'a [u8],
    /// Where the events not yet heard start.
    scanned: AtomicUsize,
    answer: std::sync::Mutex<Option<Result<JsonBuf, CallError>>>,
    /// Where to resume the stream if it ends before the answer.
    resume: std::sync::Mutex<Resume>,
}

impl<'a> StreamScan<'a> {
    /// A scan of the answer to request `id_text` on `link`, nothing heard yet.
    fn new(link: &'a StreamableLink, id_text: &'a [u8]) -> Self {
        StreamScan {
            link,
            id_text,
            scanned: AtomicUsize::new(0),
            answer: std::sync::Mutex::new(None),
            resume: std::sync::Mutex::new(Resume::default()),
        }
    }

    /// Hears the complete events of `body` not heard yet; whether the answer is in.
    fn holds_answer(&self, body: &[u8]) -> bool {
        let mut answer = self
            .answer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut resume = self
            .resume
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let from = self.scanned.load(Ordering::Relaxed);
        let rest = each_event(body, from, |event| {
            resume.saw(&event);
            if let Some(found) = event
                .data
                .and_then(|data| self.link.hear(&data, self.id_text))
            {
                answer.get_or_insert(found);
            }
        });
        self.scanned.store(rest, Ordering::Relaxed);
        answer.is_some()
    }

    fn resume(&self) -> Resume {
        self.resume
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn take_answer(&self) -> Option<Result<JsonBuf, CallError>> {
        self.answer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_found_in_a_stream_as_it_grows() {
        let client = super::super::http::client().unwrap();
        let spec = HttpSpec {
            url: "http://127.0.0.1:1/mcp".into(),
            headers: Default::default(),
            notifications: false,
        };
        let answers = ServerAnswers::new(
            4,
            Duration::from_secs(1),
            Duration::from_secs(1),
            Default::default(),
        );
        let (link, mut heard) =
            StreamableLink::new(client, &spec, 1 << 20, answers, Arc::default(), None).unwrap();
        let scan = |id: &'static [u8]| StreamScan::new(&link, id);
        let seven = scan(b"7");
        let mut body =
            b"id: 1\ndata: \n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"n\"}\n\n"
                .to_vec();
        assert!(!seven.holds_answer(&body));
        assert_eq!(heard.try_recv().unwrap().0, "n");
        body.extend_from_slice(b"data: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}");
        assert!(!seven.holds_answer(&body), "not complete yet");
        body.extend_from_slice(b"\n\n");
        assert!(!scan(b"8").holds_answer(&body));
        assert!(seven.holds_answer(&body));
        assert_eq!(seven.take_answer().unwrap().unwrap().get(), "{}");
        // Each event was heard once.
        assert_eq!(
            heard.try_recv().unwrap().0,
            "n",
            "the other scan heard it too"
        );
        assert!(heard.try_recv().is_err());
    }
}
