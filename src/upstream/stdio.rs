//! Stdio upstreams: the only place the gateway spawns processes.
//!
//! One child per configured upstream, shared by every agent call. The gateway
//! gives each request its own id (a counter per child, 1 for `initialize`), so
//! agents' colliding ids never reach the child; the pending table maps answers
//! back. When the child dies, every call in flight fails at once with
//! -32001, and the supervisor starts it again after a backoff. MCP v1.0
//! children speak Content-Length frames; children of the Model Context
//! Protocol one message per line, and hear `notifications/cancelled` for a
//! call the gateway stopped waiting for.
//!
//! Longer than most files: a child's supervisor, its link and its reader share
//! the child's state (its pipes, its pending calls, its process group), and
//! keeping them together keeps spawning in one file.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::{SinkExt, StreamExt};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::value::RawValue;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, FramedWrite};
use tokio_util::sync::CancellationToken;

use super::backoff::Backoff;
use super::dialect::answer_server_request;
use super::pending::Pending;
use super::{CallError, Dialect, Params, Transport, Upstream, encode_request};
use crate::config::StdioSpec;
use crate::jsonrpc::message::{UpstreamMessage, parse_upstream};
use crate::jsonrpc::{CodecError, ContentLengthCodec, LineCodec};
use crate::jsonrpc::{Json, JsonBuf};

/// What a child gets for PATH: its environment is otherwise only what the config gives.
const MINIMAL_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// Frames queued for a child's stdin before callers wait.
const OUTBOX: usize = 1024;
/// Longest stderr line logged whole.
const MAX_LOG_LINE: usize = 8 * 1024;
/// Garbage on a child's stdout skipped in a row before the stream is given up.
const MAX_GARBAGE: usize = 1 << 20;
/// stderr lines logged per second per upstream, and the burst allowed above it.
const LOG_LINES_PER_SECOND: f64 = 50.0;
const LOG_BURST: f64 = 200.0;
/// After this long up, a crash no longer counts toward the backoff.
const STABLE_AFTER: Duration = Duration::from_secs(30);
/// How long a child has to exit after its stdin closes, before SIGTERM.
const STDIN_GRACE: Duration = Duration::from_millis(500);
/// How long a child has to exit after SIGTERM, before SIGKILL.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// A live connection to one child.
pub struct StdioLink {
    outbox: mpsc::Sender<Bytes>,
    pending: Arc<Pending>,
    next_id: AtomicU64,
    /// Cancelled when the reader or writer stops: the connection is dead.
    dead: CancellationToken,
    dialect: Dialect,
}

/// Tells a Model Context Protocol child that a call it was sent is no longer
/// waited for (timed out, or its agent went away), unless disarmed first.
struct CancelOnDrop<'a> {
    outbox: &'a mpsc::Sender<Bytes>,
    id: Option<u64>,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            let params = crate::modelcontext::cancelled_params(id, "the gateway stopped waiting");
            if let Ok(params) = serde_json::from_str::<&RawValue>(&params) {
                let frame =
                    encode_request(None, crate::modelcontext::method::CANCELLED, params.into());
                // A full outbox loses the cancellation, never the caller's time.
                let _ = self.outbox.try_send(Bytes::from(frame));
            }
        }
    }
}

impl Transport for StdioLink {
    fn request<'a>(
        &'a self,
        method: &'a str,
        params: Params<'a>,
    ) -> BoxFuture<'a, Result<JsonBuf, CallError>> {
        Box::pin(async move {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let (answer, _registration) = self.pending.register(id)?;
            let frame = Bytes::from(encode_request(Some(id), method, params));
            self.outbox
                .send(frame)
                .await
                .map_err(|_| CallError::unavailable("connection closed"))?;
            // `initialize` is never cancelled (the protocol forbids it).
            let cancellable = self.dialect == Dialect::ModelContext && method != "initialize";
            let mut cancel = CancelOnDrop {
                outbox: &self.outbox,
                id: cancellable.then_some(id),
            };
            let answer = answer
                .await
                .unwrap_or_else(|_| Err(CallError::unavailable("connection closed")));
            cancel.id = None;
            answer
        })
    }

    fn notify<'a>(
        &'a self,
        method: &'a str,
        params: &'a RawValue,
    ) -> BoxFuture<'a, Result<(), CallError>> {
        Box::pin(async move {
            let frame = Bytes::from(encode_request(None, method, params.into()));
            self.outbox
                .send(frame)
                .await
                .map_err(|_| CallError::unavailable("connection closed"))
        })
    }
}

impl StdioLink {
    /// Requests waiting for an answer (for tests and diagnostics).
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }
}

/// The PATH a child is started with: its configured one, or the minimal one.
fn child_path(spec: &StdioSpec) -> &str {
    spec.env.get("PATH").map_or(MINIMAL_PATH, String::as_str)
}

/// The executable a spec's `command` names, found as the child's start will
/// find it (on the PATH the child gets, not the gateway's), or why not.
pub fn locate(spec: &StdioSpec) -> Result<std::path::PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let command = std::path::Path::new(&spec.command);
    if spec.command.contains('/') {
        let path = match &spec.cwd {
            Some(cwd) if command.is_relative() => cwd.join(command),
            _ => command.to_owned(),
        };
        return if runnable(&path) {
            Ok(path)
        } else {
            Err(format!("'{}' is not an executable file", path.display()))
        };
    }
    let path = child_path(spec);
    path.split(':')
        .map(|dir| std::path::Path::new(dir).join(command))
        .find(|p| runnable(p))
        .ok_or_else(|| {
            format!(
                "'{}' is not on the PATH the child gets ({path}): give its full path, or set env.PATH",
                spec.command
            )
        })
}

fn spawn(spec: &StdioSpec) -> std::io::Result<Child> {
    let mut cmd = Command::new(&spec.command);
    cmd.args(&spec.args)
        .env_clear()
        .env("PATH", MINIMAL_PATH)
        .envs(&spec.env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        // Its own process group: a Ctrl-C in the gateway's terminal is the gateway's to handle.
        .process_group(0);
    if let Some(cwd) = &spec.cwd {
        cmd.current_dir(cwd);
    }
    cmd.spawn()
}

/// Runs one stdio upstream until `shutdown`: spawn, handshake, serve, restart.
pub async fn run(
    up: Arc<Upstream>,
    spec: StdioSpec,
    max_frame: usize,
    shutdown: CancellationToken,
) {
    run_with(up, spec, max_frame, shutdown, None).await;
}

/// [`run`], each process started with `credential` in its environment.
pub async fn run_with(
    up: Arc<Upstream>,
    spec: StdioSpec,
    max_frame: usize,
    shutdown: CancellationToken,
    credential: Option<super::env_credential::EnvCredential>,
) {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(30));
    let mut first = true;
    loop {
        if !std::mem::take(&mut first) && !up.is_child() {
            up.metrics()
                .upstream_restarts
                .with_label_values(&[&up.name])
                .inc();
        }
        let started = Instant::now();
        let told = tokio::select! {
            told = told(&up, &spec) => told,
            () = shutdown.cancelled() => return,
        };
        let with_credential = match &credential {
            Some(c) => c.spec_for(&up, &spec).await,
            None => Ok(std::borrow::Cow::Borrowed(&spec)),
        };
        match told.and_then(|dialect| {
            spawn(&*with_credential?)
                .map(|c| (c, dialect))
                .map_err(|e| e.to_string())
        }) {
            Ok((child, dialect)) => {
                let served = serve_child(&up, child, max_frame, dialect, &shutdown);
                let reused = async {
                    match &credential {
                        Some(c) => c.past_reuse(&up).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    ended = served => if ended == Ended::Shutdown {
                        return;
                    },
                    // The process ends with its credential: the next one
                    // starts with a fresh one.
                    () = reused => up.disconnect(),
                }
            }
            Err(e) => {
                // Why, as far as can be told: most often a command that is on
                // the gateway's PATH but not on the child's.
                let why = locate(&spec).err();
                tracing::error!(upstream = %up.name, command = %spec.command, error = %e, hint = why.as_deref().unwrap_or(""), "cannot start upstream");
                up.note_problem(why.as_deref().unwrap_or(&e));
                up.disconnect();
            }
        }
        if started.elapsed() > STABLE_AFTER {
            backoff.reset();
        }
        let delay = backoff.next_delay();
        tracing::info!(upstream = %up.name, delay_ms = delay.as_millis() as u64, "restarting upstream after a delay");
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}

/// The protocol its processes speak: as configured, or (`protocol: auto`)
/// asked of one process before the first is served (see `detect`).
async fn told(up: &Upstream, spec: &StdioSpec) -> Result<Dialect, String> {
    if !up.detecting() {
        return Ok(up.dialect());
    }
    let asked = async {
        let mut child = spawn(spec).map_err(|e| format!("cannot start it: {e}"))?;
        let pid = child.id().unwrap_or(0);
        let told = super::detect::over_stdio(&mut child, up.handshake_timeout()).await;
        stop(&mut child, pid, &up.name).await;
        told
    };
    match asked.await {
        Ok(dialect) => {
            up.settle(dialect);
            tracing::info!(upstream = %up.name, protocol = dialect.as_str(), "upstream protocol told at its handshake");
            Ok(dialect)
        }
        Err(why) => {
            tracing::warn!(upstream = %up.name, command = %spec.command, tried = super::detect::TRIED, error = %why, "upstream answered in neither protocol; set protocol: modelcontextprotocol or v1 to skip the question");
            Err(format!("it answered in neither protocol: {why}"))
        }
    }
}

#[derive(PartialEq)]
enum Ended {
    Exited,
    Shutdown,
}

async fn serve_child(
    up: &Arc<Upstream>,
    mut child: Child,
    max_frame: usize,
    dialect: Dialect,
    shutdown: &CancellationToken,
) -> Ended {
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        tracing::error!(upstream = %up.name, "child started without pipes");
        return Ended::Exited;
    };
    let pid = child.id().unwrap_or(0);
    tracing::info!(upstream = %up.name, pid, "upstream process started");
    let (events_tx, mut events) = mpsc::channel(64);
    let (link, writer) = start_link(up, stdin, stdout, events_tx, max_frame, dialect);
    let dropped = up
        .metrics()
        .upstream_log_lines_dropped
        .with_label_values(&[&up.name]);
    let log = tokio::spawn(log_stderr(up.name.clone(), stderr, dropped));
    let connected = tokio::select! {
        r = up.connect(link.clone()) => r,
        _ = link.dead.cancelled() => Err(CallError::unavailable("connection lost during handshake")),
        _ = shutdown.cancelled() => Err(CallError::unavailable("shutting down")),
    };
    let ended = match connected {
        Err(e) if !shutdown.is_cancelled() => {
            tracing::warn!(upstream = %up.name, error = %e, "handshake failed");
            up.note_problem(&format!("handshake failed: {e}"));
            Ended::Exited
        }
        Err(_) => Ended::Shutdown,
        Ok(()) => {
            let relister = up.relister();
            tokio::pin!(relister);
            loop {
                tokio::select! {
                    status = child.wait() => {
                        tracing::warn!(upstream = %up.name, pid, status = ?status.as_ref().ok(), "upstream process exited");
                        up.note_failure(&match status {
                            Ok(status) => format!("the process exited ({status})"),
                            Err(e) => format!("the process exited; its status is unknown: {e}"),
                        });
                        break Ended::Exited;
                    }
                    _ = link.dead.cancelled() => {
                        tracing::warn!(upstream = %up.name, pid, "upstream connection broke; stopping the process");
                        break Ended::Exited;
                    }
                    Some((method, params)) = events.recv() => {
                        let params: Option<JsonBuf> = params;
                        up.on_notification(&method, params.as_ref().map(JsonBuf::as_json));
                    }
                    () = &mut relister => {}
                    _ = shutdown.cancelled() => break Ended::Shutdown,
                }
            }
        }
    };
    up.disconnect();
    link.pending
        .close(CallError::unavailable("upstream process exited"));
    writer.abort();
    stop(&mut child, pid, &up.name).await;
    log.abort();
    ended
}

/// Stops the child and everything it spawned: stdin is already closed (its cue
/// to exit); then SIGTERM to its process group, SIGKILL after a grace; and
/// whatever is left of the group is killed even when the child exited by itself.
async fn stop(child: &mut Child, pid: u32, name: &str) {
    // The child leads its own process group (process_group(0)), whose id is its pid.
    // Taken at spawn: once the child is reaped, `child.id()` is gone.
    let group = (pid > 0).then(|| Pid::from_raw(pid as i32));
    if !matches!(child.try_wait(), Ok(Some(_))) {
        let exited = tokio::time::timeout(STDIN_GRACE, child.wait())
            .await
            .is_ok();
        if !exited {
            signal_group(group, Signal::SIGTERM);
            if tokio::time::timeout(EXIT_GRACE, child.wait())
                .await
                .is_err()
            {
                tracing::warn!(upstream = %name, "upstream did not exit on SIGTERM; killing its process group");
                signal_group(group, Signal::SIGKILL);
                let _ = child.wait().await;
            }
        }
    }
    // Grandchildren left behind (the child's own children) die with the group.
    signal_group(group, Signal::SIGKILL);
}

fn signal_group(group: Option<Pid>, signal: Signal) {
    if let Some(group) = group {
        // ESRCH (nothing left in the group) is the normal case after an exit.
        let _ = killpg(group, signal);
    }
}

type Event = (String, Option<JsonBuf>);

fn start_link(
    up: &Arc<Upstream>,
    stdin: ChildStdin,
    stdout: ChildStdout,
    events: mpsc::Sender<Event>,
    max_frame: usize,
    dialect: Dialect,
) -> (Arc<StdioLink>, tokio::task::JoinHandle<()>) {
    let (outbox, rx) = mpsc::channel(OUTBOX);
    let link = Arc::new(StdioLink {
        outbox: outbox.clone(),
        pending: Arc::new(Pending::default()),
        // 1 is the handshake's `initialize`, as the spec requires.
        next_id: AtomicU64::new(1),
        dead: CancellationToken::new(),
        dialect,
    });
    let writer = tokio::spawn(write_frames(
        stdin,
        rx,
        Framing::new(dialect, max_frame),
        link.dead.clone(),
    ));
    let reader = Reader {
        up: up.clone(),
        pending: link.pending.clone(),
        outbox,
        events,
        dialect,
    };
    let dead = link.dead.clone();
    tokio::spawn(async move {
        let why = reader.run(stdout, max_frame).await;
        reader
            .pending
            .close(CallError::unavailable("upstream connection closed"));
        tracing::debug!(upstream = %reader.up.name, why, "reader stopped");
        dead.cancel();
    });
    (link, writer)
}

/// The framing a child's dialect speaks on stdio.
enum Framing {
    ContentLength(ContentLengthCodec),
    Lines(LineCodec),
}

impl Framing {
    fn new(dialect: Dialect, max_frame: usize) -> Self {
        match dialect {
            Dialect::V1 => Framing::ContentLength(
                ContentLengthCodec::new(max_frame).resynchronizing(MAX_GARBAGE),
            ),
            Dialect::ModelContext => Framing::Lines(LineCodec::new(max_frame)),
        }
    }

    /// Garbage skipped since the last call (Content-Length frames resynchronise).
    fn take_skipped(&mut self) -> u64 {
        match self {
            Framing::ContentLength(c) => c.take_skipped(),
            Framing::Lines(_) => 0,
        }
    }
}

impl tokio_util::codec::Decoder for Framing {
    type Item = Bytes;
    type Error = CodecError;

    fn decode(&mut self, src: &mut bytes::BytesMut) -> Result<Option<Bytes>, CodecError> {
        match self {
            Framing::ContentLength(c) => c.decode(src),
            Framing::Lines(c) => c.decode(src),
        }
    }
}

impl tokio_util::codec::Encoder<Bytes> for Framing {
    type Error = CodecError;

    fn encode(&mut self, body: Bytes, dst: &mut bytes::BytesMut) -> Result<(), CodecError> {
        match self {
            Framing::ContentLength(c) => c.encode(body, dst),
            Framing::Lines(c) => c.encode(body, dst),
        }
    }
}

async fn write_frames(
    stdin: ChildStdin,
    mut rx: mpsc::Receiver<Bytes>,
    framing: Framing,
    dead: CancellationToken,
) {
    let mut sink = FramedWrite::new(stdin, framing);
    while let Some(frame) = rx.recv().await {
        // Coalesce what is already queued into one write.
        let mut ok = sink.feed(frame).await.is_ok();
        while ok {
            match rx.try_recv() {
                Ok(frame) => ok = sink.feed(frame).await.is_ok(),
                Err(_) => break,
            }
        }
        if !ok || sink.flush().await.is_err() {
            break;
        }
    }
    dead.cancel();
}

struct Reader {
    up: Arc<Upstream>,
    pending: Arc<Pending>,
    outbox: mpsc::Sender<Bytes>,
    events: mpsc::Sender<Event>,
    dialect: Dialect,
}

impl Reader {
    async fn run(&self, stdout: ChildStdout, max_frame: usize) -> &'static str {
        let mut frames = FramedRead::new(stdout, Framing::new(self.dialect, max_frame));
        while let Some(frame) = frames.next().await {
            for _ in 0..frames.decoder_mut().take_skipped() {
                self.protocol_error("non-protocol output on stdout skipped");
            }
            match frame {
                Ok(body) => self.on_frame(&body),
                Err(e) if e.is_io() => return "stdout read failed",
                Err(e) => {
                    self.protocol_error(&e.to_string());
                    return "framing error";
                }
            }
        }
        "stdout closed"
    }

    fn protocol_error(&self, why: &str) {
        tracing::warn!(upstream = %self.up.name, error = why, "upstream broke the protocol");
        self.up
            .metrics()
            .upstream_protocol_errors
            .with_label_values(&[&self.up.name])
            .inc();
    }

    /// One message from the child. A bad message costs that message, not the connection.
    fn on_frame(&self, body: &[u8]) {
        let Ok(raw) = serde_json::from_slice::<&RawValue>(body) else {
            return self.protocol_error("a frame is not valid JSON");
        };
        match parse_upstream(raw) {
            Ok(UpstreamMessage::Response { id, outcome }) => {
                let Ok(id) = id.get().parse::<u64>() else {
                    return self.protocol_error("a response has an id the gateway never sent");
                };
                let outcome = outcome
                    .map(Json::to_buf)
                    .map_err(|e| CallError::Remote(e.to_buf()));
                if !self.pending.complete(id, outcome) {
                    tracing::debug!(upstream = %self.up.name, id, "answer for a call nobody waits for (timed out or cancelled)");
                }
            }
            Ok(UpstreamMessage::Notification { method, params }) => {
                // Progress goes to the call waiting for it, ahead of its answer.
                if method == "notifications/progress" {
                    if let Some(params) = params {
                        self.up.progress().deliver(params);
                    }
                    return;
                }
                // A child of one client session logs for that client.
                if method == "notifications/message"
                    && self.up.serves_one_session().is_some()
                    && params.is_some_and(|p| self.up.progress().deliver_message_any(p))
                {
                    return;
                }
                // The child withdrawing a request it forwarded to a client.
                if method == "notifications/cancelled"
                    && params.is_some_and(|p| self.up.progress().withdraw(p))
                {
                    return;
                }
                if self
                    .events
                    .try_send((method.into_owned(), params.map(Json::to_buf)))
                    .is_err()
                {
                    tracing::warn!(upstream = %self.up.name, "notification dropped: too many queued");
                }
            }
            Ok(UpstreamMessage::Request { id, method, params }) => {
                tracing::debug!(upstream = %self.up.name, method = %method, "upstream sent a request");
                // A child of one client session asks that client, through
                // one of its calls in flight.
                if let Some((wait, counted)) = self.up.serves_one_session()
                    && super::progress::ASKED.contains(&&*method)
                    && let Ok(runtime) = tokio::runtime::Handle::try_current()
                {
                    let (reply, answered) = tokio::sync::oneshot::channel();
                    let ask = super::progress::Ask {
                        id: id.to_buf(),
                        method: (&*method).into(),
                        params: params.map(Json::to_buf),
                        reply,
                    };
                    if self.up.progress().deliver_ask_any(ask).is_ok() {
                        let (wait, counted) = (*wait, counted.clone());
                        let (outbox, id, up) = (self.outbox.clone(), id.to_buf(), self.up.clone());
                        let withdrawn = up.progress().asked(&id);
                        runtime.spawn(async move {
                            use crate::metrics::ServerRequest;
                            let waiting = &counted.server_requests_waiting;
                            let (out, outcome) = super::progress::answer_of(
                                &id, answered, wait, waiting, &withdrawn,
                            )
                            .await;
                            up.progress().answered(&id);
                            let outcome = if outcome == ServerRequest::Withdrawn {
                                outcome
                            } else {
                                match outbox.try_send(Bytes::from(out)) {
                                    Ok(()) => outcome,
                                    Err(_) => ServerRequest::Failed,
                                }
                            };
                            counted.server_request(outcome);
                        });
                        return;
                    }
                }
                let (out, outcome) = answer_server_request(self.dialect, id, &method);
                // The outbox is bounded: a child that asks faster than it
                // reads its answers loses answers, never the gateway's memory.
                let outcome = match self.outbox.try_send(Bytes::from(out)) {
                    Ok(()) => outcome,
                    Err(_) => crate::metrics::ServerRequest::Dropped,
                };
                self.up.metrics().server_request(outcome);
            }
            Err(broken) => {
                self.protocol_error(broken.why);
                // A broken answer to a call is still its answer: the call
                // fails now instead of waiting for its timeout.
                if let Some(id) = broken.id.and_then(|id| id.get().parse::<u64>().ok()) {
                    self.pending
                        .complete(id, Err(CallError::protocol(broken.why)));
                }
            }
        }
    }
}

/// Copies the child's stderr into the gateway log, line by line, labelled with
/// the upstream. A flood is rate-limited (a token bucket): excess lines are
/// counted, summarised in one line, and never slow the child down.
async fn log_stderr(
    name: Arc<str>,
    stderr: tokio::process::ChildStderr,
    dropped: prometheus::IntCounter,
) {
    let mut lines = BufReader::new(stderr);
    let mut line = Vec::new();
    let mut tokens = LOG_BURST;
    let mut refilled = Instant::now();
    let mut suppressed = 0u64;
    loop {
        line.clear();
        match (&mut lines)
            .take(MAX_LOG_LINE as u64)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        tokens = (tokens + refilled.elapsed().as_secs_f64() * LOG_LINES_PER_SECOND).min(LOG_BURST);
        refilled = Instant::now();
        if tokens < 1.0 {
            suppressed += 1;
            dropped.inc();
            continue;
        }
        tokens -= 1.0;
        if suppressed > 0 {
            tracing::warn!(target: "upstream_stderr", upstream = %name, suppressed, "stderr lines suppressed: the upstream writes too fast");
            suppressed = 0;
        }
        let text = String::from_utf8_lossy(&line);
        tracing::info!(target: "upstream_stderr", upstream = %name, "{}", text.trim_end());
    }
    if suppressed > 0 {
        tracing::warn!(target: "upstream_stderr", upstream = %name, suppressed, "stderr lines suppressed: the upstream writes too fast");
    }
}
