//! Calls to plain http:// upstreams: HTTP/1.1 POSTs over a small pool of
//! keep-alive connections, written and read by the calling task itself.
//!
//! The gateway sends one kind of request (a POST with a JSON body it has in
//! memory) to servers it is configured for, so the request is one `write` of
//! a head built once plus the body, and the answer is parsed with `httparse`
//! and framed by Content-Length, chunked encoding or the end of the connection.
//! hyper's client, even driven in the calling task, spends much of a forwarded
//! call's work on its channels and state machines (docs/PERFORMANCE.md).
//!
//! A pooled connection is checked before use: one the upstream closed while it
//! was idle (or that holds unexpected bytes) is dropped and the call moves on
//! before anything is sent, so a request is never sent twice. A call dropped
//! half way drops its connection; only connections whose exchange completed
//! cleanly, with nothing left over, return to the pool.
//!
//! Here the pool: a head written once, connections kept, checked and
//! retired; the answer's reading is `response`, its unit tests `tests.rs`.

use std::future::Future;
use std::mem::MaybeUninit;
use std::pin::{Pin, pin};
use std::sync::Mutex;
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use hyper::StatusCode;
use hyper::header::HeaderMap;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Sleep;

use super::CallError;
use crate::telemetry::traces::Outbound;

mod response;
pub(crate) use response::read_answer;
use response::*;

/// Where a request's head ends: its length and the body follow.
const LENGTH: &[u8] = b"Content-Length: ";

/// A call's connection ended before any of the answer came.
const CLOSED_BEFORE_ANSWER: &str = "connection closed before the answer arrived";
const LOST_WHILE_SENDING: &str = "connection lost while sending the request";
/// How long connections are not kept after an upstream closed one it had
/// left open, unannounced, right after an answer.
const NO_REUSE_FOR: Duration = Duration::from_secs(300);

/// Longest response head accepted (status line and headers).
const MAX_HEAD: usize = 64 * 1024;
/// Most response headers accepted.
const MAX_HEADERS: usize = 64;

/// A keep-alive connection and its buffers, which go back to the pool with it:
/// a call allocates nothing for its request and its answer.
struct Conn {
    stream: TcpStream,
    write: Vec<u8>,
    read: BytesMut,
    /// The deadline of the call using the connection. It stays registered with
    /// the runtime's timer between calls, and moving it to a later deadline
    /// only updates it (tokio re-files it when its old time comes), where a
    /// timer per call would be filed in and out of the timer wheel under its
    /// lock. While the connection is idle, an
    /// old deadline passing wakes the last caller's task once, for nothing.
    deadline: Pin<Box<Sleep>>,
}

/// Buffers grown past this by a large exchange are not kept for the next one.
const KEPT_BUFFER: usize = 64 * 1024;

struct Idle {
    conn: Conn,
    since: Instant,
}

pub(super) struct Pool {
    /// `host:port`, as `TcpStream::connect` takes it.
    authority: String,
    /// `POST /path HTTP/1.1`, `Host`, the configured headers and
    /// `Content-Type`, up to `Content-Length: ` (the length and the body follow).
    head: Vec<u8>,
    idle: Mutex<Vec<Idle>>,
    max_idle: usize,
    idle_timeout: Duration,
    connect_timeout: Duration,
    /// Until when connections go unpooled (see [`NO_REUSE_FOR`]); `paused`
    /// says whether there is such a time, so that a call reads one atomic.
    no_reuse_until: Mutex<Option<Instant>>,
    paused: std::sync::atomic::AtomicBool,
}

impl Pool {
    /// `None` unless `url` is plain `http://` with a host.
    pub(super) fn new(url: &reqwest::Url, headers: &HeaderMap) -> Option<Pool> {
        if url.scheme() != "http" {
            return None;
        }
        let host = url.host_str()?;
        let port = url.port_or_known_default()?;
        let mut path = url.path().to_owned();
        if let Some(q) = url.query() {
            path.push('?');
            path.push_str(q);
        }
        let mut head = format!("POST {path} HTTP/1.1\r\nHost: {host}").into_bytes();
        if let Some(p) = url.port() {
            head.extend_from_slice(format!(":{p}").as_bytes());
        }
        head.extend_from_slice(b"\r\n");
        for (name, value) in headers {
            head.extend_from_slice(name.as_str().as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(value.as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        head.extend_from_slice(LENGTH);
        Some(Pool {
            authority: format!("{host}:{port}"),
            head,
            idle: Mutex::new(Vec::new()),
            max_idle: 256,
            // Below the usual server keep-alive timeouts (60 s and more), so
            // that an idle connection is rarely found closed.
            idle_timeout: Duration::from_secs(50),
            connect_timeout: Duration::from_secs(5),
            no_reuse_until: Mutex::new(None),
            paused: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// POSTs the body `encode` writes (about `len_hint` bytes); what `answer`
    /// makes of the status and the whole answer (up to `max_bytes`), which it
    /// reads in the connection's own buffer. `now` is when the call started
    /// (the caller has read the clock already): it dates the connections'
    /// idleness. Past `deadline`, if there is one, the call ends with
    /// `CallError::Timeout` and its connection is closed.
    pub(super) async fn post<T>(
        &self,
        now: Instant,
        deadline: Option<tokio::time::Instant>,
        request: (impl FnOnce(&mut Vec<u8>), usize, Option<&Outbound>),
        max_bytes: usize,
        answer: impl FnOnce(StatusCode, &[u8]) -> T,
    ) -> Result<T, CallError> {
        self.post_until(now, deadline, request, &[], max_bytes, |_| false, answer)
            .await
    }

    /// [`Self::post`], where a chunked answer is read only until `enough`
    /// says what has arrived of its body holds what the caller needs (an
    /// event stream the server keeps open after the answer): then the
    /// connection is closed instead of kept. `extra`: headers of this
    /// request's own, besides the pool's (and the trace's).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn post_until<T>(
        &self,
        now: Instant,
        deadline: Option<tokio::time::Instant>,
        (encode, len_hint, trace): (impl FnOnce(&mut Vec<u8>), usize, Option<&Outbound>),
        extra: &[(&str, &[u8])],
        max_bytes: usize,
        enough: impl Fn(&[u8]) -> bool,
        answer: impl FnOnce(StatusCode, &[u8]) -> T,
    ) -> Result<T, CallError> {
        let (mut conn, reused) = match self.take(now) {
            Some(conn) => (conn, true),
            None => {
                let fresh = match deadline {
                    Some(at) => tokio::time::timeout_at(at, self.connect())
                        .await
                        .map_err(|_| CallError::Timeout)??,
                    None => self.connect().await?,
                };
                (fresh, false)
            }
        };
        // A call in a trace carries its context in headers of its own,
        // before the length.
        let (head, length_line) = self.head.split_at(self.head.len() - LENGTH.len());
        let traced = trace.map_or(0, Outbound::head_len);
        let extra_len: usize = extra.iter().map(|(n, v)| n.len() + v.len() + 4).sum();
        let own_head = head.len() + traced + extra_len + LENGTH.len();
        // The body is written after room for the head, and the head, once its
        // length is known, right before it: one buffer and one write, no copy.
        let room = own_head + 24;
        let request = &mut conn.write;
        request.clear();
        request.reserve(room + len_hint);
        request.resize(room, 0);
        encode(request);
        let mut digits = [0; 20];
        let length = super::decimal((request.len() - room) as u64, &mut digits);
        let start = room - own_head - length.len() - 4;
        let mut at = start;
        let mut put = |bytes: &[u8]| {
            request[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        };
        put(head);
        if let Some(trace) = trace {
            trace.write_head(&mut put);
        }
        for (name, value) in extra {
            put(name.as_bytes());
            put(b": ");
            put(value);
            put(b"\r\n");
        }
        put(length_line);
        put(length);
        put(b"\r\n\r\n");
        let read = {
            let Conn {
                stream,
                write,
                read: buf,
                deadline: timer,
            } = &mut conn;
            let exchange = pin!(async {
                stream
                    .write_all(&write[start..])
                    .await
                    .map_err(|_| CallError::unavailable(LOST_WHILE_SENDING))?;
                read_response_until(stream, buf, max_bytes, &enough).await
            });
            let timer = deadline.map(|at| {
                timer.as_mut().reset(at);
                timer.as_mut()
            });
            within(timer, exchange).await
        };
        let read = match read {
            Ok(read) => read,
            Err(e) => {
                if reused && ended_unanswered(&e) {
                    self.stop_reuse(now);
                }
                return Err(e);
            }
        };
        let value = match read.body {
            Body::Buffered(n) => {
                let value = answer(read.status, &conn.read[..n]);
                conn.read.advance(n);
                value
            }
            Body::Owned(body) => answer(read.status, &body),
        };
        if read.keep_alive && conn.read.is_empty() && self.reusing(now) {
            self.put(conn, now);
        }
        Ok(value)
    }

    /// The upstream closed a kept connection right after an answer without
    /// saying so (`Connection: close`): the check before reuse cannot see a
    /// close that has not arrived yet, so connections to it are not kept for
    /// a while, and no further call meets a closed one.
    fn stop_reuse(&self, now: Instant) {
        tracing::warn!(
            "an upstream closed a kept-alive connection without Connection: close; not reusing its connections for {} s",
            NO_REUSE_FOR.as_secs()
        );
        *self
            .no_reuse_until
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(now + NO_REUSE_FOR);
        self.paused
            .store(true, std::sync::atomic::Ordering::Release);
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    fn reusing(&self, now: Instant) -> bool {
        if !self.paused.load(std::sync::atomic::Ordering::Acquire) {
            return true;
        }
        let mut until = self
            .no_reuse_until
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match *until {
            Some(t) if now < t => false,
            _ => {
                *until = None;
                self.paused
                    .store(false, std::sync::atomic::Ordering::Release);
                true
            }
        }
    }

    /// An idle connection that is still open and clean, if there is one.
    fn take(&self, now: Instant) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        // The most recently used first: the likeliest to be open still.
        while let Some(i) = idle.pop() {
            if now.saturating_duration_since(i.since) < self.idle_timeout
                && still_open(&i.conn.stream)
            {
                return Some(i.conn);
            }
        }
        None
    }

    /// Back to the pool, idle since `since` (the start of its last call: its
    /// idleness is counted from a little early, never late).
    fn put(&self, mut conn: Conn, since: Instant) {
        if conn.write.capacity() > KEPT_BUFFER {
            conn.write = Vec::new();
        }
        // The answer was consumed from the front: `capacity` counts only what
        // is left after it, so the allocation is measured by reclaiming it.
        if conn.read.try_reclaim(KEPT_BUFFER + 1) {
            conn.read = BytesMut::with_capacity(4096);
        }
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < self.max_idle {
            idle.push(Idle { conn, since });
        }
    }

    /// Closes connections idle for longer than the idle timeout, or closed by the upstream.
    pub(super) fn sweep(&self) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.retain(|i| i.since.elapsed() < self.idle_timeout && still_open(&i.conn.stream));
    }

    async fn connect(&self) -> Result<Conn, CallError> {
        let failed = || CallError::unavailable("connection failed");
        let stream = tokio::time::timeout(
            self.connect_timeout,
            TcpStream::connect(self.authority.as_str()),
        )
        .await
        .map_err(|_| failed())?
        .map_err(|_| failed())?;
        let _ = stream.set_nodelay(true);
        Ok(Conn {
            stream,
            write: Vec::new(),
            read: BytesMut::with_capacity(4096),
            // Not filed with the timer until a call sets and polls it.
            deadline: Box::pin(tokio::time::sleep(Duration::ZERO)),
        })
    }
}

/// Whether a call's connection ended before any of its answer came: on a
/// reused connection, the sign of an upstream that closes after answering.
fn ended_unanswered(e: &CallError) -> bool {
    matches!(e, CallError::Unavailable(why) if why == CLOSED_BEFORE_ANSWER || why == LOST_WHILE_SENDING)
}

/// `work`, unless `timer` (if there is one) elapses first: then
/// `CallError::Timeout`. Not an async fn, and `work` is pinned by the caller:
/// an async fn would hold `work` twice and copy it in.
fn within<'a, T, F: Future<Output = Result<T, CallError>>>(
    mut timer: Option<Pin<&'a mut Sleep>>,
    mut work: Pin<&'a mut F>,
) -> impl Future<Output = Result<T, CallError>> + 'a {
    std::future::poll_fn(move |cx| {
        if let Poll::Ready(done) = work.as_mut().poll(cx) {
            return Poll::Ready(done);
        }
        match timer.as_mut().map(|t| t.as_mut().poll(cx)) {
            Some(Poll::Ready(())) => Poll::Ready(Err(CallError::Timeout)),
            _ => Poll::Pending,
        }
    })
}

/// An idle connection must have nothing to read: end of stream means the
/// upstream closed it, bytes mean it spoke out of turn. Either way it is unusable.
fn still_open(stream: &TcpStream) -> bool {
    let mut probe = [0u8; 1];
    matches!(stream.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

#[cfg(test)]
mod tests;
