//! JSON-RPC 2.0 on the wire: message classification, exact id echo, error
//! objects, and the bounded Content-Length framing codec.
//!
//! This layer knows nothing about tenants, tools or upstreams. Ids, params and
//! results stay as raw JSON text ([`Json`]) so that they are echoed byte for
//! byte (`9007199254740993` stays `9007199254740993`) and never re-encoded.

pub mod codec;
pub mod error;
pub mod lines;
pub mod message;
pub mod scan;
pub mod stream;

pub use codec::{CodecError, ContentLengthCodec};
pub use error::{ErrorObject, codes};
pub use lines::LineCodec;
pub use message::{
    Incoming, Reply, classify, classify_bytes, parse_upstream, write_error, write_reply,
    write_result_head,
};
pub use scan::{Json, JsonBuf};
