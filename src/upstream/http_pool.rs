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
//! Longer than most files: one client for one kind of request. Writing the
//! head, parsing the answer in place and keeping, checking and retiring
//! connections share the connection type and its buffer; about 160 of its
//! lines are its tests.

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

struct Answer {
    status: StatusCode,
    body: Body,
    /// Whether the connection may carry another request.
    keep_alive: bool,
}

/// Where the body of an answer is.
enum Body {
    /// The first `n` bytes of the read buffer (framed by length or by the end of the connection).
    Buffered(usize),
    /// Decoded from chunks into a buffer of its own.
    Owned(BytesMut),
}

fn protocol(why: &'static str) -> CallError {
    CallError::protocol(why)
}

fn too_large() -> CallError {
    CallError::protocol("answer larger than the frame limit")
}

/// Reads more of the answer into `buf`; false at the end of the stream.
async fn fill<R: AsyncRead + Unpin>(io: &mut R, buf: &mut BytesMut) -> Result<bool, CallError> {
    if buf.capacity() - buf.len() < 1024 {
        buf.reserve(8192);
    }
    let n = io
        .read_buf(buf)
        .await
        .map_err(|_| CallError::unavailable("connection lost while reading the answer"))?;
    Ok(n > 0)
}

/// How the body of an answer is delimited.
enum Framing {
    Length(usize),
    Chunked,
    /// Until the upstream closes the connection (HTTP/1.0 style).
    Close,
}

/// Reads one response (skipping interim 1xx ones). What follows it stays in `buf`.
async fn read_response<R: AsyncRead + Unpin>(
    io: &mut R,
    buf: &mut BytesMut,
    max_bytes: usize,
) -> Result<Answer, CallError> {
    read_response_until(io, buf, max_bytes, &|_| false).await
}

/// [`read_response`], stopping a chunked body early once `enough` holds for it.
async fn read_response_until<R: AsyncRead + Unpin>(
    io: &mut R,
    buf: &mut BytesMut,
    max_bytes: usize,
    enough: &impl Fn(&[u8]) -> bool,
) -> Result<Answer, CallError> {
    loop {
        let (status, framing, keep_alive, head_len) = loop {
            if let Some(head) = parse_response(buf)? {
                break head;
            }
            if buf.len() > MAX_HEAD {
                return Err(protocol("the answer's head is too large"));
            }
            match fill(io, buf).await {
                Ok(true) => {}
                // Closed or reset before a byte of the answer: the same to the caller.
                Ok(false) => return Err(CallError::unavailable(CLOSED_BEFORE_ANSWER)),
                Err(_) if buf.is_empty() => {
                    return Err(CallError::unavailable(CLOSED_BEFORE_ANSWER));
                }
                Err(e) => return Err(e),
            }
        };
        buf.advance(head_len);
        if status.is_informational() {
            // 100 Continue, 103 Early Hints: the real answer follows.
            continue;
        }
        let body = match framing {
            Framing::Length(n) => {
                if n > max_bytes {
                    return Err(too_large());
                }
                while buf.len() < n {
                    if !fill(io, buf).await? {
                        return Err(CallError::unavailable(
                            "connection closed in the middle of the answer",
                        ));
                    }
                }
                Body::Buffered(n)
            }
            Framing::Chunked => {
                let (body, whole) = read_chunked(io, buf, max_bytes, enough).await?;
                if !whole {
                    // The rest of the body is never read: the connection is not kept.
                    return Ok(Answer {
                        status,
                        body: Body::Owned(body),
                        keep_alive: false,
                    });
                }
                Body::Owned(body)
            }
            Framing::Close => {
                while fill(io, buf).await? {
                    if buf.len() > max_bytes {
                        return Err(too_large());
                    }
                }
                Body::Buffered(buf.len())
            }
        };
        let keep_alive = keep_alive && !matches!(framing, Framing::Close);
        return Ok(Answer {
            status,
            body,
            keep_alive,
        });
    }
}

/// The head at the start of `buf`, if it is all there. Not async: its 64
/// header slots (2 KiB) stay on this stack frame instead of in the future of
/// every call, which is copied as it moves.
fn parse_response(buf: &[u8]) -> Result<Option<(StatusCode, Framing, bool, usize)>, CallError> {
    // Uninitialised slots: zeroing 64 of them cost more than parsing a short head.
    let mut headers = [const { MaybeUninit::uninit() }; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut []);
    match httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut response,
        buf,
        &mut headers,
    ) {
        Ok(httparse::Status::Complete(len)) => parse_head(&response, len).map(Some),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(protocol("too many headers in the answer")),
        Err(_) => Err(protocol("the answer is not HTTP/1.1")),
    }
}

fn parse_head(
    response: &httparse::Response<'_, '_>,
    len: usize,
) -> Result<(StatusCode, Framing, bool, usize), CallError> {
    let status = response
        .code
        .and_then(|c| StatusCode::from_u16(c).ok())
        .ok_or_else(|| protocol("the answer has no valid status"))?;
    // HTTP/1.1 keeps the connection unless told otherwise; 1.0 closes unless told otherwise.
    let mut keep_alive = response.version == Some(1);
    let mut length = None;
    let mut chunked = false;
    for h in response.headers.iter() {
        // Only the three headers read here are decoded.
        let value = || std::str::from_utf8(h.value).unwrap_or("").trim();
        if h.name.eq_ignore_ascii_case("content-length") {
            let n: usize = value()
                .parse()
                .map_err(|_| protocol("the answer's Content-Length is not a number"))?;
            if length.is_some_and(|m| m != n) {
                return Err(protocol("the answer has conflicting Content-Lengths"));
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            // Plain `chunked` only: a body in another transfer coding (gzip,
            // chunked) would have to be undone, and the gateway never asks for one.
            chunked = value().eq_ignore_ascii_case("chunked");
            if !chunked {
                return Err(protocol("the answer's Transfer-Encoding is not chunked"));
            }
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in value().split(',').map(str::trim) {
                if token.eq_ignore_ascii_case("close") {
                    keep_alive = false;
                } else if token.eq_ignore_ascii_case("keep-alive") {
                    keep_alive = true;
                }
            }
        }
    }
    let no_body = status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let framing = if no_body {
        Framing::Length(0)
    } else if chunked {
        // A Content-Length beside chunked encoding is ignored (RFC 9112 6.3), and
        // the connection is not trusted with another request.
        if length.is_some() {
            keep_alive = false;
        }
        Framing::Chunked
    } else {
        match length {
            Some(n) => Framing::Length(n),
            None => Framing::Close,
        }
    };
    Ok((status, framing, keep_alive, len))
}

/// The end of the line at the start of `buf` (its CR), reading more as needed.
async fn line_end<R: AsyncRead + Unpin>(
    io: &mut R,
    buf: &mut BytesMut,
    limit: usize,
    too_long: &'static str,
) -> Result<usize, CallError> {
    loop {
        if let Some(i) = buf.windows(2).position(|w| w == b"\r\n") {
            return Ok(i);
        }
        if buf.len() > limit {
            return Err(protocol(too_long));
        }
        if !fill(io, buf).await? {
            return Err(CallError::unavailable(
                "connection closed in the middle of the answer",
            ));
        }
    }
}

/// How long the end of an event stream is waited for once its answer is in.
const STREAM_END_GRACE: Duration = Duration::from_millis(20);

fn never(_: &[u8]) -> bool {
    false
}

/// Reads a chunked body: `size[;ext]\r\n data \r\n` ... `0\r\n` trailers `\r\n`;
/// or, once `enough` holds for what has arrived, that much (`false`: not whole).
async fn read_chunked<R: AsyncRead + Unpin>(
    io: &mut R,
    buf: &mut BytesMut,
    max_bytes: usize,
    enough: &impl Fn(&[u8]) -> bool,
) -> Result<(BytesMut, bool), CallError> {
    let mut body = BytesMut::new();
    loop {
        let end = line_end(io, buf, 1024, "a chunk size line is too long").await?;
        let line =
            std::str::from_utf8(&buf[..end]).map_err(|_| protocol("a chunk size is not text"))?;
        let digits = line.split(';').next().unwrap_or("").trim();
        if digits.is_empty() || digits.len() > 15 {
            return Err(protocol("a chunk size is not a hex number"));
        }
        let size = usize::from_str_radix(digits, 16)
            .map_err(|_| protocol("a chunk size is not a hex number"))?;
        buf.advance(end + 2);
        if size == 0 {
            break;
        }
        if body.len() + size > max_bytes {
            return Err(too_large());
        }
        while buf.len() < size + 2 {
            if !fill(io, buf).await? {
                return Err(CallError::unavailable(
                    "connection closed in the middle of the answer",
                ));
            }
        }
        body.extend_from_slice(&buf[..size]);
        if &buf[size..size + 2] != b"\r\n" {
            return Err(protocol("a chunk does not end with CRLF"));
        }
        buf.advance(size + 2);
        if enough(&body) {
            // The rest, usually already on its way (a server ends the stream
            // after the answer), is read and dropped if it comes at once: then
            // the connection is kept.
            let rest = Box::pin(read_chunked(io, buf, max_bytes, &never));
            let whole = matches!(
                tokio::time::timeout(STREAM_END_GRACE, rest).await,
                Ok(Ok((_, true)))
            );
            return Ok((body, whole));
        }
    }
    // Trailers, ignored, up to the empty line.
    loop {
        let end = line_end(io, buf, MAX_HEAD, "the answer's trailers are too large").await?;
        buf.advance(end + 2);
        if end == 0 {
            return Ok((body, true));
        }
    }
}

/// Yields its bytes a few at a time, as a slow network would (tests and the
/// fuzz target read answers through it).
pub(crate) struct Trickle<'a>(pub &'a [u8], pub usize);

impl AsyncRead for Trickle<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        out: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let n = self.1.min(self.0.len()).min(out.remaining());
        out.put_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Poll::Ready(Ok(()))
    }
}

/// An answer as [`read_answer`] gives it: status, body, whether the
/// connection is kept; or why it was refused.
pub(crate) type ReadAnswer = Result<(u16, Vec<u8>, bool), String>;

/// One answer read from `wire`, `step` bytes a read, as the pool reads it:
/// its status, body and whether the connection is kept, or why it is refused;
/// and how many bytes are left after it. A [`Trickle`] never waits, so this
/// completes at once.
pub(crate) fn read_answer(wire: &[u8], step: usize, max_bytes: usize) -> (ReadAnswer, usize) {
    use futures_util::FutureExt;
    let mut buf = BytesMut::new();
    let mut io = Trickle(wire, step.max(1));
    let read = read_response(&mut io, &mut buf, max_bytes)
        .now_or_never()
        .unwrap_or_else(|| Err(CallError::protocol("a trickled read waited")));
    let read = read.map(|a| {
        let body = match a.body {
            Body::Buffered(n) => buf.split_to(n).to_vec(),
            Body::Owned(body) => body.to_vec(),
        };
        (a.status.as_u16(), body, a.keep_alive)
    });
    (read.map_err(|e| e.to_string()), buf.len() + io.0.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An answer with its body taken out of the buffer.
    struct Read {
        status: StatusCode,
        body: BytesMut,
        keep_alive: bool,
    }

    /// The answer, and what is left in the buffer after it.
    async fn read(wire: &[u8], step: usize, max: usize) -> (Result<Read, CallError>, BytesMut) {
        let mut buf = BytesMut::new();
        let r = read_response(&mut Trickle(wire, step), &mut buf, max)
            .await
            .map(|a| Read {
                status: a.status,
                body: match a.body {
                    Body::Buffered(n) => buf.split_to(n),
                    Body::Owned(body) => body,
                },
                keep_alive: a.keep_alive,
            });
        (r, buf)
    }

    async fn each_step(wire: &[u8]) -> Vec<(Result<Read, CallError>, BytesMut)> {
        let mut all = Vec::new();
        for step in [1, 2, 3, 7, 64, 4096] {
            all.push(read(wire, step, 1 << 20).await);
        }
        all
    }

    #[tokio::test]
    async fn a_connection_goes_back_without_the_large_buffers_of_a_large_answer() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let _peer = listener.accept().await.unwrap();
        let url =
            reqwest::Url::parse(&format!("http://{}/mcp", listener.local_addr().unwrap())).unwrap();
        let pool = Pool::new(&url, &HeaderMap::new()).unwrap();
        // A 1 MiB answer read and consumed: the buffer is empty, its allocation large.
        let mut read = BytesMut::with_capacity(1 << 20);
        read.resize(1 << 20, b' ');
        read.advance(1 << 20);
        let conn = Conn {
            stream,
            write: Vec::with_capacity(1 << 20),
            read,
            deadline: Box::pin(tokio::time::sleep(Duration::ZERO)),
        };
        let now = Instant::now();
        pool.put(conn, now);
        let kept = pool.take(now).expect("the connection is kept");
        assert!(kept.write.capacity() <= KEPT_BUFFER);
        assert!(!{ kept.read }.try_reclaim(KEPT_BUFFER + 1));
    }

    #[tokio::test]
    async fn content_length_and_what_follows() {
        let wire = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\ncontent-length: 7\r\n\r\n{\"a\":1}HTTP/1.1";
        for (r, rest) in each_step(wire).await {
            let a = r.unwrap();
            assert_eq!(
                (a.status.as_u16(), &a.body[..], a.keep_alive),
                (200, &b"{\"a\":1}"[..], true)
            );
            // What follows is not eaten (except what a read brought in already).
            assert!(b"HTTP/1.1".starts_with(&rest));
        }
    }

    #[tokio::test]
    async fn chunked_with_extensions_and_trailers() {
        let wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3;x=y\r\n{\"a\r\n4\r\n\":1}\r\n0\r\nX-Trailer: t\r\n\r\n";
        // gzip before chunked is not ours to undo: refused, not misread.
        let (r, _) = read(wire, 4096, 1 << 20).await;
        assert!(matches!(r, Err(CallError::Protocol(_))));
        let wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\n{\"a\r\nA\r\n\":1}      \r\n0\r\nX-Trailer: t\r\n\r\n";
        for (r, rest) in each_step(wire).await {
            let a = r.unwrap();
            assert_eq!(&a.body[..], b"{\"a\":1}      ");
            assert!(a.keep_alive && rest.is_empty());
        }
    }

    #[tokio::test]
    async fn interim_answers_are_skipped_and_close_is_honoured() {
        let wire = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}";
        for (r, _) in each_step(wire).await {
            let a = r.unwrap();
            assert_eq!(
                (a.status.as_u16(), &a.body[..], a.keep_alive),
                (200, &b"{}"[..], false)
            );
        }
        // HTTP/1.0 without a length: the body runs to the end of the connection.
        let wire = b"HTTP/1.0 200 OK\r\n\r\n{\"x\":2}";
        for (r, _) in each_step(wire).await {
            let a = r.unwrap();
            assert_eq!((&a.body[..], a.keep_alive), (&b"{\"x\":2}"[..], false));
        }
        let (r, _) = read(b"HTTP/1.1 204 No Content\r\n\r\n", 4096, 10).await;
        assert!(r.unwrap().body.is_empty());
    }

    #[tokio::test]
    async fn limits_and_broken_answers() {
        let cases: &[(&[u8], &str)] = &[
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n",
                "too_large",
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n12345678\r\n8\r\n12345678\r\n0\r\n\r\n",
                "too_large",
            ),
            (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n{}", "cut"),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{}",
                "cut",
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                "protocol",
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n",
                "protocol",
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
                "protocol",
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
                "protocol",
            ),
            (b"SSH-2.0-OpenSSH\r\n\r\n", "protocol"),
            (b"HTTP/1.1 200 OK\r\nContent-", "cut"),
            (b"", "cut"),
        ];
        for (wire, want) in cases {
            let (r, _) = read(wire, 3, 10).await;
            let got = match r {
                Err(CallError::Protocol(why)) if why.contains("frame limit") => "too_large",
                Err(CallError::Protocol(_)) => "protocol",
                Err(CallError::Unavailable(_)) => "cut",
                other => panic!(
                    "{}: {:?}",
                    String::from_utf8_lossy(wire),
                    other.map(|a| a.body)
                ),
            };
            assert_eq!(got, *want, "{}", String::from_utf8_lossy(wire));
        }
    }
}
