//! Sessions over HTTP: the request body is read as it arrives, one message per
//! line; answers go out one per line, each flushed as soon as it is ready, over
//! a chunked response. When the client goes away, everything the session
//! started is cancelled.

use std::sync::Arc;

use axum::body::{Body, BodyDataStream};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use bytes::{Buf, Bytes, BytesMut};
use futures_util::StreamExt;
use serde_json::value::RawValue;
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::dispatch::Dispatcher;
use crate::dispatch::session::Session;
use crate::tenant::Tenant;

/// Answers queued for a slow reader before the session waits for it.
const OUT_BACKLOG: usize = 64;

/// Starts a session: `buf` holds what was read of the body so far, `body` the rest.
pub fn start(
    dispatcher: Dispatcher,
    tenant: Arc<Tenant>,
    buf: BytesMut,
    body: BodyDataStream,
    max_message: usize,
) -> Response {
    let (tx, rx) = mpsc::channel::<Vec<u8>>(OUT_BACKLOG);
    let session = Session::new(dispatcher, tenant, tx.clone());
    tokio::spawn(run(session, tx, buf, body, max_message).in_current_span());
    let lines = futures_util::stream::unfold(rx, |mut rx| async move {
        let mut message = rx.recv().await?;
        message.push(b'\n');
        Some((Ok::<_, std::convert::Infallible>(Bytes::from(message)), rx))
    });
    let mut r = Response::new(Body::from_stream(lines));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

async fn run(
    mut session: Session,
    out: mpsc::Sender<Vec<u8>>,
    mut buf: BytesMut,
    mut body: BodyDataStream,
    max_message: usize,
) {
    let mut skipping = false;
    let mut fresh = true;
    loop {
        if fresh && !drain(&mut session, &mut buf, &mut skipping).await {
            return;
        }
        if buf.len() > max_message {
            // One message larger than the limit: answer, and end the session.
            let _ = session.on_parse_error().await;
            tracing::warn!(
                limit = max_message,
                "a session message exceeded the size limit; ending the session"
            );
            return;
        }
        let chunk = tokio::select! {
            chunk = body.next() => chunk,
            // The client stopped reading (connection closed): cancel everything.
            _ = out.closed() => return,
        };
        match chunk {
            Some(Ok(chunk)) => {
                // A message can only have ended in a chunk holding `}` or a newline.
                fresh = chunk.iter().any(|&b| b == b'}' || b == b'\n');
                buf.extend_from_slice(&chunk);
            }
            // The connection broke mid-body: the client is gone.
            Some(Err(_)) => return,
            None => break,
        }
    }
    if !drain(&mut session, &mut buf, &mut skipping).await {
        return;
    }
    if !skipping && !buf.iter().all(u8::is_ascii_whitespace) {
        let _ = session.on_parse_error().await;
    }
    session.finish().await;
}

/// Handles every complete message in `buf`. After a syntax error, the rest of
/// that line is skipped and reading resumes on the next. False: the peer is gone.
async fn drain(session: &mut Session, buf: &mut BytesMut, skipping: &mut bool) -> bool {
    loop {
        if *skipping {
            match buf.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    buf.advance(i + 1);
                    *skipping = false;
                }
                None => {
                    buf.clear();
                    return true;
                }
            }
        }
        let mut values = serde_json::Deserializer::from_slice(buf).into_iter::<&RawValue>();
        match values.next() {
            Some(Ok(raw)) => {
                let end = values.byte_offset();
                if !session.on_message(raw).await {
                    return false;
                }
                buf.advance(end);
            }
            Some(Err(e)) if e.is_eof() => return true,
            None => {
                buf.clear();
                return true;
            }
            Some(Err(_)) => {
                if !session.on_parse_error().await {
                    return false;
                }
                *skipping = true;
            }
        }
    }
}
