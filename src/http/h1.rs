//! The agent edge's own HTTP/1.1 path for the request it exists to serve: a
//! keep-alive `POST /mcp` with a Content-Length body. hyper's server side was
//! a third of the gateway's work per forwarded call (docs/PERFORMANCE.md);
//! this path reads the head with `httparse` into one buffer per connection,
//! waits for the body there, and writes the answer in one write.
//!
//! Anything else on the connection (another method or path, HTTP/1.0, a
//! chunked body, `Expect`, `Upgrade`, a head we cannot parse or that is too
//! long, a body over the limit, a session) is handed to hyper together with
//! every byte read so far ([`Rewind`]), and hyper serves the connection from
//! then on: its limits, errors and streaming stay exactly as they were. So
//! the rule here is simple: handle the common case completely, and never
//! consume a byte of a request this path does not answer.
//!
//! Its unit tests are in `h1/tests.rs`.

use std::io::{self, IoSlice};
use std::mem::MaybeUninit;
use std::ops::Range;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{HeaderName, HeaderValue, StatusCode};
use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::dispatch::mcp::Mirrored;

/// Headers a request may carry on this path; more go to hyper (its limit is 100).
const MAX_HEADERS: usize = 48;
/// A head longer than this goes to hyper, which applies its own limits.
const MAX_HEAD: usize = 16 * 1024;
/// Room made in the buffer before each read.
const READ_CHUNK: usize = 8 * 1024;
/// A read buffer larger than this is not kept once it is empty.
const KEEP_BUFFER: usize = 64 * 1024;
/// A body up to this size is copied behind the head and written with it.
const COPY_BODY: usize = 32 * 1024;

/// What was read of a request head that this path answers.
pub(crate) struct Head {
    /// The head's length in bytes; the body follows it in the buffer.
    pub len: usize,
    pub body_len: usize,
    /// `Connection: close`: the connection ends after the answer.
    pub close: bool,
    pub authorization: Option<Range<usize>>,
    content_type: Option<Range<usize>>,
    pub request_id: Option<Range<usize>>,
    /// The Model Context Protocol's `Mcp-*` headers, each sent at most once.
    mcp_version: Option<Range<usize>>,
    mcp_method: Option<Range<usize>>,
    mcp_name: Option<Range<usize>>,
    mcp_session: Option<Range<usize>>,
}

/// The outcome of waiting for a request head.
pub(crate) enum Next {
    Request(Head),
    /// The client closed, went quiet past the header-read timeout, or the
    /// gateway is shutting down while the connection is idle.
    Closed,
    /// Not a request this path answers: hand the connection to hyper.
    Other,
}

/// The outcome of waiting for more bytes.
pub(crate) enum Filled {
    More,
    Closed,
    TimedOut,
}

/// One agent connection on this path.
pub(crate) struct Conn {
    stream: TcpStream,
    buf: BytesMut,
    out: Vec<u8>,
    /// When the current wait ends (see [`Conn::arm`]).
    deadline: Instant,
    /// One timer and one cancellation wait for the connection's life. The
    /// timer may be set earlier than `deadline`: when it fires early it is
    /// set again, so that a deadline moving later with every request costs
    /// no timer update.
    timer: Pin<Box<Sleep>>,
    stopping: Pin<Box<WaitForCancellationFutureOwned>>,
    shutdown: CancellationToken,
}

impl Conn {
    pub fn new(stream: TcpStream, shutdown: CancellationToken) -> Self {
        Conn {
            stream,
            buf: BytesMut::with_capacity(READ_CHUNK),
            out: Vec::new(),
            deadline: Instant::now(),
            // Set by the first `arm`.
            timer: Box::pin(tokio::time::sleep(Duration::from_secs(86_400))),
            stopping: Box::pin(shutdown.clone().cancelled_owned()),
            shutdown,
        }
    }

    /// Everything read and not yet answered.
    pub fn buffered(&self) -> &[u8] {
        &self.buf
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutdown.is_cancelled()
    }

    /// Starts the deadline that [`Conn::read_more`] enforces. The timer is
    /// only touched when it would fire too late.
    pub fn arm(&mut self, timeout: Duration) {
        self.deadline = Instant::now() + timeout;
        if self.deadline < self.timer.deadline() {
            self.timer.as_mut().reset(self.deadline);
        }
    }

    /// Waits for a request head, within `timeout` of now. The wait of an idle
    /// connection (nothing buffered) ends with the gateway's shutdown.
    pub async fn read_head(&mut self, timeout: Duration, max_body: usize) -> Next {
        self.arm(timeout);
        // How much of the buffer has been looked at: a head can only be
        // complete once a line ends, so a head dribbled in byte by byte is
        // parsed once a line, not once a byte.
        let mut seen = 0;
        loop {
            if self.buf[seen..].contains(&b'\n') {
                match parse(&self.buf, max_body) {
                    Parsed::Head(head) => return Next::Request(head),
                    Parsed::Partial => {}
                    Parsed::Other => return Next::Other,
                }
            }
            if self.buf.len() > MAX_HEAD {
                return Next::Other;
            }
            seen = self.buf.len();
            let idle = self.buf.is_empty();
            if idle && self.shutdown.is_cancelled() {
                return Next::Closed;
            }
            match self.read_more(idle).await {
                Filled::More => {}
                Filled::Closed | Filled::TimedOut => return Next::Closed,
            }
        }
    }

    /// Reads what arrives, until the armed deadline; with `stop_on_shutdown`,
    /// the gateway's shutdown ends the wait as if the client had closed.
    pub async fn read_more(&mut self, stop_on_shutdown: bool) -> Filled {
        self.buf.reserve(READ_CHUNK);
        let Conn {
            stream,
            buf,
            deadline,
            timer,
            stopping,
            ..
        } = self;
        loop {
            tokio::select! {
                biased;
                read = stream.read_buf(buf) => return match read {
                    Ok(0) | Err(_) => Filled::Closed,
                    Ok(_) => Filled::More,
                },
                () = timer.as_mut() => {
                    if Instant::now() >= *deadline {
                        return Filled::TimedOut;
                    }
                    // Set for an earlier request: wait on to this one's deadline.
                    timer.as_mut().reset(*deadline);
                }
                () = stopping.as_mut(), if stop_on_shutdown => return Filled::Closed,
            }
        }
    }

    /// Resolves when the client has closed the connection (or it broke),
    /// looking without consuming: a request being answered is abandoned
    /// then, as a session's calls are. Bytes of a next request (pipelining)
    /// mean the client is there: it never resolves then.
    pub async fn client_gone(&self) {
        let mut byte = [0u8; 1];
        match self.stream.peek(&mut byte).await {
            Ok(0) | Err(_) => {}
            Ok(_) => std::future::pending().await,
        }
    }

    /// Drops an answered request from the buffer; what follows it is the next
    /// one. A buffer that a large request grew is given back once it is
    /// empty, so an idle connection holds only a small one.
    pub fn consume(&mut self, n: usize) {
        self.buf.advance(n);
        if self.buf.is_empty() && self.buf.capacity() > KEEP_BUFFER {
            self.buf = BytesMut::with_capacity(READ_CHUNK);
        }
    }

    /// The capacity of the read buffer (what an idle connection holds).
    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Writes a response: status, `content-type` when there is a body, its
    /// length, the request id, `date`, one optional header, and `connection:
    /// close` when the connection ends after it.
    pub async fn write(
        &mut self,
        status: StatusCode,
        header: Option<&(HeaderName, HeaderValue)>,
        body: &super::ReplyBody,
        request_id: &[u8],
        close: bool,
    ) -> io::Result<()> {
        use super::ReplyBody;
        let out = &mut self.out;
        out.clear();
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(status.as_str().as_bytes());
        out.push(b' ');
        out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
        out.extend_from_slice(b"\r\n");
        let length = match body {
            ReplyBody::Empty => 0,
            ReplyBody::Json(b) => b.len(),
            ReplyBody::JsonParts(parts) => parts.iter().map(Bytes::len).sum(),
        };
        if !matches!(body, ReplyBody::Empty) {
            out.extend_from_slice(b"content-type: application/json\r\n");
        }
        out.extend_from_slice(b"content-length: ");
        crate::upstream::write_u64(out, length as u64);
        out.extend_from_slice(b"\r\n");
        if let Some((name, value)) = header {
            out.extend_from_slice(name.as_str().as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"x-request-id: ");
        out.extend_from_slice(request_id);
        out.extend_from_slice(b"\r\ndate: ");
        http_date(out);
        if close {
            out.extend_from_slice(b"\r\nconnection: close");
        }
        out.extend_from_slice(b"\r\n\r\n");
        match body {
            ReplyBody::Empty => self.stream.write_all(out).await,
            ReplyBody::Json(b) if b.len() <= COPY_BODY => {
                out.extend_from_slice(b);
                self.stream.write_all(out).await
            }
            ReplyBody::Json(b) => write_all_vectored(&mut self.stream, &[out, b]).await,
            ReplyBody::JsonParts(parts) => {
                let mut slices: Vec<&[u8]> = Vec::with_capacity(parts.len() + 1);
                slices.push(out);
                slices.extend(parts.iter().map(|p| &p[..]));
                write_all_vectored(&mut self.stream, &slices).await
            }
        }
    }

    /// Ends the connection after its last answer.
    pub async fn close(mut self) {
        let _ = self.stream.shutdown().await;
    }

    /// The connection as hyper will serve it: every byte read so far first.
    pub fn into_rewind(self) -> Rewind {
        Rewind {
            prefix: self.buf.freeze(),
            stream: self.stream,
        }
    }

    /// One header's value, as sent: `head`'s range of it.
    pub fn value(&self, range: &Option<Range<usize>>) -> Option<&[u8]> {
        range.clone().map(|r| &self.buf[r])
    }

    pub fn header<'a>(&'a self, head: &Head) -> Headers<'a> {
        let at = |r: &Option<Range<usize>>| r.clone().map(|r| &self.buf[r]);
        Headers {
            content_type: at(&head.content_type),
            mirrored: Mirrored {
                protocol_version: at(&head.mcp_version),
                method: at(&head.mcp_method),
                name: at(&head.mcp_name),
                session: at(&head.mcp_session),
                repeated: false,
                // This path serves no request with `Mcp-Param-*` headers.
                all: None,
            },
        }
    }
}

/// The header values the edge reads, as sent.
pub(crate) struct Headers<'a> {
    pub content_type: Option<&'a [u8]>,
    pub mirrored: Mirrored<'a>,
}

async fn write_all_vectored(stream: &mut TcpStream, bufs: &[&[u8]]) -> io::Result<()> {
    let mut slices: Vec<IoSlice<'_>> = bufs
        .iter()
        .filter(|b| !b.is_empty())
        .map(|b| IoSlice::new(b))
        .collect();
    let mut slices = &mut slices[..];
    while !slices.is_empty() {
        let n = stream.write_vectored(slices).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut slices, n);
    }
    Ok(())
}

pub(crate) enum Parsed {
    Head(Head),
    Partial,
    Other,
}

/// Reads a request head from the start of `buf`: [`Parsed::Head`] only for
/// what this path answers completely.
pub(crate) fn parse(buf: &[u8], max_body: usize) -> Parsed {
    // Uninitialised slots: zeroing 48 of them cost more than parsing a short head.
    let mut headers = [const { MaybeUninit::uninit() }; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut []);
    let len = match request.parse_with_uninit_headers(buf, &mut headers) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Other,
    };
    if request.method != Some("POST") || request.path != Some("/mcp") || request.version != Some(1)
    {
        return Parsed::Other;
    }
    let offset = |s: &[u8]| {
        let start = s.as_ptr() as usize - buf.as_ptr() as usize;
        start..start + s.len()
    };
    let mut head = Head {
        len,
        body_len: 0,
        close: false,
        authorization: None,
        content_type: None,
        request_id: None,
        mcp_version: None,
        mcp_method: None,
        mcp_name: None,
        mcp_session: None,
    };
    let mut body_len = None;
    let mut hosts = 0;
    for h in request.headers.iter() {
        let name = h.name.as_bytes();
        let first = |slot: &mut Option<Range<usize>>| {
            if slot.is_none() {
                *slot = Some(offset(h.value));
            }
        };
        match Named::of(name) {
            Named::ContentLength => match (body_len, decimal(h.value)) {
                (None, Some(n)) if n <= max_body => body_len = Some(n),
                _ => return Parsed::Other,
            },
            Named::Authorization => first(&mut head.authorization),
            Named::ContentType => first(&mut head.content_type),
            Named::RequestId => first(&mut head.request_id),
            Named::Host => hosts += 1,
            Named::Connection => match h.value.trim_ascii() {
                v if v.eq_ignore_ascii_case(b"keep-alive") => {}
                v if v.eq_ignore_ascii_case(b"close") => head.close = true,
                _ => return Parsed::Other,
            },
            Named::Mcp(which) => {
                let slot = match which {
                    Mcp::Version => &mut head.mcp_version,
                    Mcp::Method => &mut head.mcp_method,
                    Mcp::Name => &mut head.mcp_name,
                    Mcp::Session => &mut head.mcp_session,
                };
                if slot.is_some() {
                    // Sent twice: hyper's path refuses it.
                    return Parsed::Other;
                }
                *slot = Some(offset(h.value));
            }
            Named::HypersOwn => return Parsed::Other,
            Named::Other => {}
        }
    }
    // Exactly one Host (RFC 9112, 3.2); hyper's path answers the others with 400.
    match body_len {
        Some(_) if hosts != 1 => Parsed::Other,
        Some(n) => {
            head.body_len = n;
            Parsed::Head(head)
        }
        None => Parsed::Other,
    }
}

/// What a request header is to this path, told by its name.
enum Named {
    ContentLength,
    Authorization,
    ContentType,
    RequestId,
    Host,
    Connection,
    Mcp(Mcp),
    /// A header whose request hyper's path serves: a body not sized by
    /// Content-Length, an upgrade, an origin (checked against
    /// gateway.allowed_origins there), trace context (read from hyper's
    /// header map there), `Mcp-Param-*` and any other `Mcp-` header.
    HypersOwn,
    /// Read by no one here.
    Other,
}

/// The `Mcp-` headers this path reads.
enum Mcp {
    Version,
    Method,
    Name,
    Session,
}

impl Named {
    /// By length first: a name is compared with the few of its length only.
    fn of(name: &[u8]) -> Named {
        let is = |known: &[u8]| lower_is(name, known);
        if name.len() > 4 && lower_is(&name[..4], b"mcp-") {
            let rest = &name[4..];
            let is = |known: &[u8]| lower_is(rest, known);
            return match rest.len() {
                16 if is(b"protocol-version") => Named::Mcp(Mcp::Version),
                6 if is(b"method") => Named::Mcp(Mcp::Method),
                4 if is(b"name") => Named::Mcp(Mcp::Name),
                10 if is(b"session-id") => Named::Mcp(Mcp::Session),
                _ => Named::HypersOwn,
            };
        }
        match name.len() {
            4 if is(b"host") => Named::Host,
            6 if is(b"expect") || is(b"origin") => Named::HypersOwn,
            7 if is(b"upgrade") || is(b"baggage") => Named::HypersOwn,
            10 if is(b"connection") => Named::Connection,
            10 if is(b"tracestate") => Named::HypersOwn,
            11 if is(b"traceparent") => Named::HypersOwn,
            12 if is(b"content-type") => Named::ContentType,
            12 if is(b"x-request-id") => Named::RequestId,
            13 if is(b"authorization") => Named::Authorization,
            14 if is(b"content-length") => Named::ContentLength,
            17 if is(b"transfer-encoding") => Named::HypersOwn,
            _ => Named::Other,
        }
    }
}

/// Whether a header name (a token, as httparse checked) is `known`, a
/// lowercase name of letters and `-`, in any case. Eight bytes at a time,
/// each with its 0x20 bit set: that makes a letter lowercase and leaves `-`
/// as it is, and makes a letter of no byte but a letter (and `-` of none
/// but `-` and CR, which no token holds).
fn lower_is(name: &[u8], known: &[u8]) -> bool {
    const CASE: u64 = u64::from_le_bytes([0x20; 8]);
    if name.len() != known.len() {
        return false;
    }
    let (mut name, mut known) = (name, known);
    while let (Some((n, name_rest)), Some((k, known_rest))) = (
        name.split_first_chunk::<8>(),
        known.split_first_chunk::<8>(),
    ) {
        if u64::from_le_bytes(*n) | CASE != u64::from_le_bytes(*k) {
            return false;
        }
        (name, known) = (name_rest, known_rest);
    }
    name.iter().zip(known).all(|(n, k)| n | 0x20 == *k)
}

/// A Content-Length value: decimal digits only, no sign, no spaces.
fn decimal(v: &[u8]) -> Option<usize> {
    if v.is_empty() || v.len() > 18 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0usize, |n, d| n * 10 + usize::from(d - b'0')))
}

/// Appends the current time as an HTTP date, formatted once a second per thread.
fn http_date(out: &mut Vec<u8>) {
    use std::cell::RefCell;
    use std::time::{SystemTime, UNIX_EPOCH};
    thread_local! {
        static CACHED: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
    }
    let now = SystemTime::now();
    let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    CACHED.with_borrow_mut(|(at, text)| {
        if *at != second {
            *at = second;
            *text = httpdate::fmt_http_date(now);
        }
        out.extend_from_slice(text.as_bytes());
    });
}

/// A connection handed to hyper: the bytes already read, then the socket.
pub(crate) struct Rewind {
    prefix: Bytes,
    stream: TcpStream,
}

impl AsyncRead for Rewind {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.prefix.is_empty() {
            return Pin::new(&mut self.stream).poll_read(cx, buf);
        }
        let n = self.prefix.len().min(buf.remaining());
        buf.put_slice(&self.prefix[..n]);
        self.prefix.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Rewind {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
