//! An HTTP/1.1 answer read off a pooled connection: its head parsed
//! (httparse, bounded in bytes and headers), its body by Content-Length,
//! chunked, or an event stream read until the answer it carries.

use super::*;

pub(super) struct Answer {
    pub(super) status: StatusCode,
    pub(super) body: Body,
    /// Whether the connection may carry another request.
    pub(super) keep_alive: bool,
}

/// Where the body of an answer is.
pub(super) enum Body {
    /// The first `n` bytes of the read buffer (framed by length or by the end of the connection).
    Buffered(usize),
    /// Decoded from chunks into a buffer of its own.
    Owned(BytesMut),
}

pub(super) fn protocol(why: &'static str) -> CallError {
    CallError::protocol(why)
}

pub(super) fn too_large() -> CallError {
    CallError::protocol("answer larger than the frame limit")
}

/// Reads more of the answer into `buf`; false at the end of the stream.
pub(super) async fn fill<R: AsyncRead + Unpin>(
    io: &mut R,
    buf: &mut BytesMut,
) -> Result<bool, CallError> {
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
pub(super) enum Framing {
    Length(usize),
    Chunked,
    /// Until the upstream closes the connection (HTTP/1.0 style).
    Close,
}

/// Reads one response (skipping interim 1xx ones). What follows it stays in `buf`.
pub(super) async fn read_response<R: AsyncRead + Unpin>(
    io: &mut R,
    buf: &mut BytesMut,
    max_bytes: usize,
) -> Result<Answer, CallError> {
    read_response_until(io, buf, max_bytes, &|_| false).await
}

/// [`read_response`], stopping a chunked body early once `enough` holds for it.
pub(super) async fn read_response_until<R: AsyncRead + Unpin>(
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
pub(super) fn parse_response(
    buf: &[u8],
) -> Result<Option<(StatusCode, Framing, bool, usize)>, CallError> {
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

pub(super) fn parse_head(
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
pub(super) async fn line_end<R: AsyncRead + Unpin>(
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
pub(super) const STREAM_END_GRACE: Duration = Duration::from_millis(20);

pub(super) fn never(_: &[u8]) -> bool {
    false
}

/// Reads a chunked body: `size[;ext]\r\n data \r\n` ... `0\r\n` trailers `\r\n`;
/// or, once `enough` holds for what has arrived, that much (`false`: not whole).
pub(super) async fn read_chunked<R: AsyncRead + Unpin>(
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
