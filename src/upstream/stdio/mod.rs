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
//! Here the supervisor: a child started (its PATH, its credential), served,
//! stopped with its process group, started again after a backoff. Its link
//! (`link`), what it writes (`reader`) and the framing both speak
//! (`framing`) are the siblings.

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

mod framing;
mod link;
mod reader;

pub use link::StdioLink;
use link::start_link;
use reader::log_stderr;

type Event = (String, Option<JsonBuf>);

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
