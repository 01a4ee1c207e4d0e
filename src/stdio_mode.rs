//! `mcp-gateway stdio`: the gateway for one local agent over its own stdin and
//! stdout, exactly as a single server would be. The first byte of stdin says
//! the protocol: `{` is a client of the Model Context Protocol, spoken to in
//! newline-delimited JSON; anything else MCP v1.0, Content-Length framed.
//! Nothing but messages goes to stdout (logs go to stderr); MCP v1.0's
//! handshake is enforced and its notifications forwarded; the Model Context
//! Protocol's client is served in either era (see `Face`); it exits when
//! stdin closes.

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use serde_json::value::RawValue;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;
use tokio_util::codec::{Decoder, Encoder, FramedRead, FramedWrite};

use crate::app::Core;
use crate::config::Config;
use crate::dispatch::session::{Face, Session};
use crate::jsonrpc::{CodecError, ContentLengthCodec, LineCodec};

/// The framing the agent's first byte chose.
enum Framing {
    ContentLength(ContentLengthCodec),
    Lines(LineCodec),
}

impl Decoder for Framing {
    type Item = Bytes;
    type Error = CodecError;

    fn decode(&mut self, src: &mut bytes::BytesMut) -> Result<Option<Bytes>, CodecError> {
        match self {
            Framing::ContentLength(c) => c.decode(src),
            Framing::Lines(c) => c.decode(src),
        }
    }
}

impl Encoder<Bytes> for Framing {
    type Error = CodecError;

    fn encode(&mut self, body: Bytes, dst: &mut bytes::BytesMut) -> Result<(), CodecError> {
        match self {
            Framing::ContentLength(c) => c.encode(body, dst),
            Framing::Lines(c) => c.encode(body, dst),
        }
    }
}

impl Framing {
    fn new(lines: bool, max_frame: usize) -> Self {
        if lines {
            Framing::Lines(LineCodec::new(max_frame))
        } else {
            Framing::ContentLength(ContentLengthCodec::new(max_frame))
        }
    }
}

/// Serves one session for `tenant` on stdin/stdout until stdin closes.
pub async fn run(mut config: Config, tenant: &str) -> Result<(), String> {
    // One process serving one host has no replicas to share a store with:
    // its limits and pins are its own (the pins file).
    config.gateway.store = None;
    let core = Core::start(&config).map_err(|e| format!("cannot start: {e}"))?;
    let traces = match crate::app::start_traces(&config, &core.metrics) {
        Ok(traces) => traces,
        Err(why) => {
            core.stop().await;
            return Err(why);
        }
    };
    let keys = core.keys().load_full();
    let Some(tenant) = keys.tenants().iter().find(|t| &*t.name == tenant).cloned() else {
        core.stop().await;
        return Err(format!("no tenant named '{tenant}' in the configuration"));
    };
    let max_frame = config.gateway.limits.max_frame_bytes;
    // The first byte, read before anything is framed, and then read again.
    let mut stdin = crate::stdio_pipes::stdin();
    let mut first = [0u8; 1];
    let read = stdin.read(&mut first).await.unwrap_or(0);
    let lines = read == 1 && first[0] == b'{';
    let stdin: Box<dyn AsyncRead + Unpin + Send> =
        Box::new(std::io::Cursor::new(first[..read].to_vec()).chain(stdin));
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(64);
    let writer = tokio::spawn(async move {
        let mut out =
            FramedWrite::new(crate::stdio_pipes::stdout(), Framing::new(lines, max_frame));
        while let Some(message) = rx.recv().await {
            if out.send(Bytes::from(message)).await.is_err() {
                return;
            }
        }
    });
    let face = if lines { Face::ModelContext } else { Face::V1 };
    let mut session = Session::new(core.dispatcher.clone(), tenant, tx)
        .with_max_in_flight(config.gateway.limits.max_session_in_flight)
        .speaking(face);
    let mut input = FramedRead::new(stdin, Framing::new(lines, max_frame));
    let mut result = Ok(());
    while let Some(frame) = input.next().await {
        let body = match frame {
            Ok(body) => body,
            Err(e) => {
                // The byte stream cannot be delimited any more: end the session.
                tracing::error!(error = %e, "bad frame on stdin; ending the session");
                result = Err(format!("bad frame on stdin: {e}"));
                break;
            }
        };
        let alive = match serde_json::from_slice::<&RawValue>(&body) {
            Ok(raw) => session.on_message(raw).await,
            Err(_) => session.on_parse_error().await,
        };
        if !alive {
            break;
        }
    }
    session.finish().await;
    let _ = writer.await;
    core.stop().await;
    if let Some(traces) = traces {
        traces.shutdown(crate::app::TRACES_FLUSH).await;
    }
    result
}
