//! The framing a child's dialect speaks on stdio: MCP v1.0's Content-Length
//! frames (resynchronising past garbage), or one message per line.

use super::*;

/// The framing a child's dialect speaks on stdio.
pub(super) enum Framing {
    ContentLength(ContentLengthCodec),
    Lines(LineCodec),
}

impl Framing {
    pub(super) fn new(dialect: Dialect, max_frame: usize) -> Self {
        match dialect {
            Dialect::V1 => Framing::ContentLength(
                ContentLengthCodec::new(max_frame).resynchronizing(MAX_GARBAGE),
            ),
            Dialect::ModelContext => Framing::Lines(LineCodec::new(max_frame)),
        }
    }

    /// Garbage skipped since the last call (Content-Length frames resynchronise).
    pub(super) fn take_skipped(&mut self) -> u64 {
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
