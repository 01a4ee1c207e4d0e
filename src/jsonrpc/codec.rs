//! The Content-Length framing of MCP's stdio transport (the LSP base protocol).
//!
//! Writing is exact: `Content-Length: N\r\n\r\n` then the N body bytes.
//! Reading is tolerant (header names in any case, bare `\n` line ends, extra
//! spaces, blank lines between frames, unknown headers ignored) but bounded: the
//! header section may not exceed `max_header_bytes`, and a Content-Length above
//! `max_frame_bytes` is an error raised before a single byte of the body is
//! buffered, so a peer can never make us allocate what it merely claims.
//!
//! Longer than most files for its tests (about 275 lines).

use std::fmt::Write as _;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

/// Default bound on the header section: LSP headers are two short lines.
pub const DEFAULT_MAX_HEADER_BYTES: usize = 4 * 1024;

/// Why a byte stream is not a sequence of frames.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    #[error("header section longer than {limit} bytes")]
    HeaderTooLarge { limit: usize },
    #[error("Content-Length {length} exceeds the frame limit of {limit} bytes")]
    FrameTooLarge { length: u64, limit: usize },
    #[error("header section without Content-Length")]
    MissingContentLength,
    #[error("Content-Length is not a decimal byte count")]
    InvalidContentLength,
    /// Two Content-Length headers that disagree: which one frames the body
    /// cannot be known, so the stream cannot be trusted from here on.
    #[error("conflicting Content-Length headers")]
    ConflictingContentLength,
    #[error("header line is not `Name: value`")]
    MalformedHeader,
    #[error("unsupported Content-Type")]
    UnsupportedContentType,
    #[error("more than {limit} bytes of garbage without a frame")]
    TooMuchGarbage { limit: usize },
}

impl CodecError {
    /// True when the stream itself broke (I/O), as opposed to the peer sending garbage.
    pub fn is_io(&self) -> bool {
        matches!(self, CodecError::Io(_))
    }

    /// A header section that is not a header: what a stray print looks like.
    fn is_garbage(&self) -> bool {
        matches!(
            self,
            CodecError::MalformedHeader
                | CodecError::MissingContentLength
                | CodecError::InvalidContentLength
                | CodecError::UnsupportedContentType
        )
    }
}

#[derive(Debug, Clone, Copy)]
enum State {
    /// Looking for the end of a header section; `scanned` bytes are known not to hold it.
    Header { scanned: usize },
    /// Waiting for a body of this many bytes.
    Body(usize),
}

/// A `tokio_util` codec for Content-Length framed messages. Frames are raw bodies.
#[derive(Debug, Clone)]
pub struct ContentLengthCodec {
    max_frame_bytes: usize,
    max_header_bytes: usize,
    state: State,
    /// With `Some(limit)`, garbage between frames is skipped (up to `limit`
    /// bytes in a row) instead of being an error.
    resync_limit: Option<usize>,
    garbage_in_a_row: usize,
    /// Garbage runs skipped since the last `take_skipped`.
    skipped: u64,
}

impl ContentLengthCodec {
    pub fn new(max_frame_bytes: usize) -> Self {
        Self {
            max_frame_bytes,
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
            state: State::Header { scanned: 0 },
            resync_limit: None,
            garbage_in_a_row: 0,
            skipped: 0,
        }
    }

    /// Skips garbage between frames (a stray print) instead of failing, looking
    /// for the next `Content-Length` header, as long as no more than `limit`
    /// bytes of garbage come in a row. An endless header line (no newline within
    /// the header limit) and an oversize Content-Length stay errors.
    pub fn resynchronizing(mut self, limit: usize) -> Self {
        self.resync_limit = Some(limit);
        self
    }

    /// How many runs of garbage were skipped since the last call.
    pub fn take_skipped(&mut self) -> u64 {
        std::mem::take(&mut self.skipped)
    }

    /// Drops `n` bytes of garbage, or fails when too much came in a row.
    fn skip(&mut self, src: &mut BytesMut, n: usize) -> Result<(), CodecError> {
        let limit = self.resync_limit.unwrap_or(0);
        self.garbage_in_a_row += n;
        if self.garbage_in_a_row > limit {
            return Err(CodecError::TooMuchGarbage { limit });
        }
        src.advance(n);
        self.skipped += 1;
        self.state = State::Header { scanned: 0 };
        Ok(())
    }

    pub fn with_max_header_bytes(mut self, limit: usize) -> Self {
        self.max_header_bytes = limit;
        self
    }

    pub fn max_frame_bytes(&self) -> usize {
        self.max_frame_bytes
    }

    /// Parses a header section (without its terminating blank line) into a body length.
    fn parse_headers(&self, section: &[u8]) -> Result<usize, CodecError> {
        let text = std::str::from_utf8(section).map_err(|_| CodecError::MalformedHeader)?;
        let mut length = None;
        for line in text.split('\n') {
            let line = line.strip_suffix('\r').unwrap_or(line);
            if line.trim().is_empty() {
                continue;
            }
            let (name, value) = line.split_once(':').ok_or(CodecError::MalformedHeader)?;
            let (name, value) = (name.trim(), value.trim());
            // A header name is a token; anything else is garbage, not an unknown header.
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
                return Err(CodecError::MalformedHeader);
            }
            if name.eq_ignore_ascii_case("content-length") {
                if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(CodecError::InvalidContentLength);
                }
                // Saturate instead of overflowing: anything that large is over the limit anyway.
                let n: u64 = value.parse().unwrap_or(u64::MAX);
                if n > self.max_frame_bytes as u64 {
                    return Err(CodecError::FrameTooLarge {
                        length: n,
                        limit: self.max_frame_bytes,
                    });
                }
                if length.is_some_and(|m| m != n as usize) {
                    return Err(CodecError::ConflictingContentLength);
                }
                length = Some(n as usize);
            } else if name.eq_ignore_ascii_case("content-type") {
                let mime = value.split(';').next().unwrap_or("").trim();
                if !mime.eq_ignore_ascii_case("application/json")
                    && !mime.eq_ignore_ascii_case("application/vscode-jsonrpc")
                {
                    return Err(CodecError::UnsupportedContentType);
                }
            }
        }
        length.ok_or(CodecError::MissingContentLength)
    }
}

/// Finds the end of a header section: returns (section length, terminator length).
fn find_header_end(buf: &[u8], from: usize) -> Option<(usize, usize)> {
    let mut i = from;
    while let Some(pos) = buf[i..].iter().position(|&b| b == b'\n') {
        let nl = i + pos;
        // The line after this newline is empty if it is "\n" or "\r\n".
        match buf.get(nl + 1) {
            Some(b'\n') => return Some((nl + 1, 1)),
            Some(b'\r') if buf.get(nl + 2) == Some(&b'\n') => return Some((nl + 1, 2)),
            _ => i = nl + 1,
        }
    }
    None
}

/// Where a `Content-Length` header name (any case) starts in `buf`.
fn find_content_length(buf: &[u8]) -> Option<usize> {
    const NAME: &[u8] = b"content-length";
    buf.windows(NAME.len())
        .position(|w| w.eq_ignore_ascii_case(NAME))
}

impl Decoder for ContentLengthCodec {
    type Item = Bytes;
    type Error = CodecError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, CodecError> {
        loop {
            match self.state {
                State::Header { scanned } => {
                    // Blank lines between frames (a stray newline after a body) are tolerated.
                    if scanned == 0 {
                        let skip = src
                            .iter()
                            .take_while(|b| matches!(b, b'\r' | b'\n'))
                            .count();
                        src.advance(skip);
                    }
                    match find_header_end(src, scanned.saturating_sub(2)) {
                        // The limit covers the header section with its blank line, so
                        // that it cuts at the same place however the bytes arrive.
                        Some((section, terminator))
                            if section + terminator <= self.max_header_bytes =>
                        {
                            match self.parse_headers(&src[..section]) {
                                Ok(length) => {
                                    src.advance(section + terminator);
                                    src.reserve(length.saturating_sub(src.len()));
                                    self.state = State::Body(length);
                                }
                                Err(e) if e.is_garbage() && self.resync_limit.is_some() => {
                                    // Resume at a Content-Length inside the section, if any, else after it.
                                    let n = find_content_length(&src[1..section])
                                        .map_or(section + terminator, |p| p + 1);
                                    self.skip(src, n)?;
                                }
                                Err(e) => {
                                    src.advance(section + terminator);
                                    self.state = State::Header { scanned: 0 };
                                    return Err(e);
                                }
                            }
                        }
                        Some(_) => {
                            return Err(CodecError::HeaderTooLarge {
                                limit: self.max_header_bytes,
                            });
                        }
                        None if src.len() > self.max_header_bytes => {
                            let window = &src[..self.max_header_bytes];
                            // An endless line is a broken peer, not a stray print.
                            let Some(last_newline) = window.iter().rposition(|&b| b == b'\n')
                            else {
                                return Err(CodecError::HeaderTooLarge {
                                    limit: self.max_header_bytes,
                                });
                            };
                            if self.resync_limit.is_none() {
                                return Err(CodecError::HeaderTooLarge {
                                    limit: self.max_header_bytes,
                                });
                            }
                            let n =
                                find_content_length(&src[1..]).map_or(last_newline + 1, |p| p + 1);
                            self.skip(src, n)?;
                        }
                        None => {
                            self.state = State::Header { scanned: src.len() };
                            return Ok(None);
                        }
                    }
                }
                State::Body(length) => {
                    if src.len() < length {
                        return Ok(None);
                    }
                    self.state = State::Header { scanned: 0 };
                    self.garbage_in_a_row = 0;
                    return Ok(Some(src.split_to(length).freeze()));
                }
            }
        }
    }
}

impl Encoder<Bytes> for ContentLengthCodec {
    type Error = CodecError;

    fn encode(&mut self, body: Bytes, dst: &mut BytesMut) -> Result<(), CodecError> {
        encode_into(&body, dst);
        Ok(())
    }
}

/// Appends one frame: `Content-Length: N\r\n\r\n` + body.
pub fn encode_into(body: &[u8], dst: &mut BytesMut) {
    dst.reserve(body.len() + 32);
    // Writing into a BytesMut cannot fail.
    let _ = write!(dst, "Content-Length: {}\r\n\r\n", body.len());
    dst.put_slice(body);
}

/// Frames one body: `Content-Length: N\r\n\r\n` + body.
pub fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body);
    out
}

#[cfg(test)]
mod tests;
