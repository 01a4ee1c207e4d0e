//! `mcp-gateway stdio`: the gateway for one local agent over its own stdin and
//! stdout, Content-Length framed, exactly as a single MCP server would be.
//! Nothing but frames goes to stdout (logs go to stderr); the handshake is
//! enforced; notifications are forwarded; it exits when stdin closes.

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use serde_json::value::RawValue;
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, FramedWrite};

use crate::app::Core;
use crate::config::Config;
use crate::dispatch::session::Session;
use crate::jsonrpc::ContentLengthCodec;

/// Serves one session for `tenant` on stdin/stdout until stdin closes.
pub async fn run(config: Config, tenant: &str) -> Result<(), String> {
    let core = Core::start(&config).map_err(|e| format!("cannot start: {e}"))?;
    let keys = core.keys().load_full();
    let Some(tenant) = keys.tenants().iter().find(|t| &*t.name == tenant).cloned() else {
        core.stop().await;
        return Err(format!("no tenant named '{tenant}' in the configuration"));
    };
    let max_frame = config.gateway.limits.max_frame_bytes;
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(64);
    let writer = tokio::spawn(async move {
        let mut out = FramedWrite::new(
            crate::stdio_pipes::stdout(),
            ContentLengthCodec::new(max_frame),
        );
        while let Some(message) = rx.recv().await {
            if out.send(Bytes::from(message)).await.is_err() {
                return;
            }
        }
    });
    let mut session = Session::new(core.dispatcher.clone(), tenant, tx)
        .with_max_in_flight(config.gateway.limits.max_session_in_flight);
    let mut input = FramedRead::new(
        crate::stdio_pipes::stdin(),
        ContentLengthCodec::new(max_frame),
    );
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
    result
}
