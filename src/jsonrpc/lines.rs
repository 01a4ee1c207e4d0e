//! Newline-delimited JSON framing (the Model Context Protocol's stdio
//! transport): one message per line, UTF-8, no embedded newlines.
//!
//! Reading skips blank lines and a `\r` before the newline; a line longer
//! than the frame limit is an error raised before more of it is buffered.
//! Writing turns any newline in a body into a space: in valid JSON text a
//! newline can only be white space between tokens (inside strings it is
//! always escaped), so the message is unchanged and stays on one line.

use bytes::{BufMut, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use super::CodecError;

/// A `tokio_util` codec for newline-delimited messages. Frames are the lines' bodies.
#[derive(Debug, Clone)]
pub struct LineCodec {
    max_frame_bytes: usize,
    /// Bytes at the front of the buffer known to hold no newline.
    scanned: usize,
}

impl LineCodec {
    pub fn new(max_frame_bytes: usize) -> Self {
        LineCodec {
            max_frame_bytes,
            scanned: 0,
        }
    }
}

impl Decoder for LineCodec {
    type Item = Bytes;
    type Error = CodecError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, CodecError> {
        loop {
            let Some(at) = src[self.scanned..].iter().position(|&b| b == b'\n') else {
                self.scanned = src.len();
                if src.len() > self.max_frame_bytes {
                    return Err(CodecError::FrameTooLarge {
                        length: src.len() as u64,
                        limit: self.max_frame_bytes,
                    });
                }
                return Ok(None);
            };
            let end = self.scanned + at;
            self.scanned = 0;
            if end > self.max_frame_bytes {
                return Err(CodecError::FrameTooLarge {
                    length: end as u64,
                    limit: self.max_frame_bytes,
                });
            }
            let mut line = src.split_to(end + 1);
            line.truncate(end);
            if line.last() == Some(&b'\r') {
                line.truncate(end - 1);
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return Ok(Some(line.freeze()));
        }
    }
}

impl Encoder<Bytes> for LineCodec {
    type Error = CodecError;

    fn encode(&mut self, body: Bytes, dst: &mut BytesMut) -> Result<(), CodecError> {
        dst.reserve(body.len() + 1);
        if body.contains(&b'\n') {
            dst.extend(body.iter().map(|&b| if b == b'\n' { b' ' } else { b }));
        } else {
            dst.put_slice(&body);
        }
        dst.put_u8(b'\n');
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(codec: &mut LineCodec, input: &[u8]) -> Result<Vec<Bytes>, CodecError> {
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        while let Some(line) = codec.decode(&mut buf)? {
            out.push(line);
        }
        Ok(out)
    }

    #[test]
    fn lines_in_pieces_and_blank_lines() {
        let mut codec = LineCodec::new(64);
        let mut buf = BytesMut::from(&b"{\"a\":"[..]);
        assert!(codec.decode(&mut buf).unwrap().is_none());
        buf.extend_from_slice(b"1}\r\n\n  \n{}\n{\"b");
        assert_eq!(codec.decode(&mut buf).unwrap().unwrap(), &b"{\"a\":1}"[..]);
        assert_eq!(codec.decode(&mut buf).unwrap().unwrap(), &b"{}"[..]);
        assert!(codec.decode(&mut buf).unwrap().is_none());
        assert_eq!(&buf[..], b"{\"b");
    }

    #[test]
    fn an_overlong_line_is_an_error_before_it_is_buffered() {
        let mut codec = LineCodec::new(8);
        assert!(matches!(
            decode_all(&mut codec, b"0123456789"),
            Err(CodecError::FrameTooLarge { .. })
        ));
        let mut codec = LineCodec::new(8);
        assert!(matches!(
            decode_all(&mut codec, b"0123456789\n"),
            Err(CodecError::FrameTooLarge { .. })
        ));
    }

    #[test]
    fn writing_keeps_a_message_on_one_line() {
        let mut out = BytesMut::new();
        let body = Bytes::from_static(b"{\"a\":\n[1,\n2],\"s\":\"x\\ny\"}");
        LineCodec::new(64).encode(body, &mut out).unwrap();
        assert_eq!(&out[..], b"{\"a\": [1, 2],\"s\":\"x\\ny\"}\n");
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["s"], "x\ny");
    }
}
