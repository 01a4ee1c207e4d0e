//! The demo server over stdio: Content-Length frames on stdin and stdout,
//! logs on stderr, the handshake enforced, requests answered concurrently.

use std::sync::Arc;

use bytes::Bytes;
use bytes::BytesMut;
use futures_util::StreamExt;
use serde_json::value::RawValue;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::codec::FramedRead;

use super::{Answer, DemoServer};
use crate::jsonrpc::codec::encode_into;
use crate::jsonrpc::{
    ContentLengthCodec, ErrorObject, Incoming, Reply, classify, codes, write_error, write_reply,
};
use crate::jsonrpc::{Json, JsonBuf};

const MAX_FRAME: usize = 64 << 20;

enum Out {
    Message(Bytes),
    Raw(Bytes),
}

/// Serves stdin/stdout until stdin closes and every answer is written.
pub async fn serve(server: Arc<DemoServer>) -> std::io::Result<()> {
    let mut input = FramedRead::new(
        crate::stdio_pipes::stdin(),
        ContentLengthCodec::new(MAX_FRAME),
    );
    let (tx, rx) = mpsc::channel::<Out>(1024);
    let writer = tokio::spawn(write_out(rx));
    let mut initialized = false;
    let mut tasks = JoinSet::new();
    let mut forwarder = None;
    while let Some(frame) = input.next().await {
        let body = match frame {
            Ok(body) => body,
            Err(e) => {
                eprintln!("demo-upstream: bad frame: {e}");
                break;
            }
        };
        server.record(&body);
        let Ok(raw) = serde_json::from_slice::<&RawValue>(&body) else {
            let mut out = Vec::new();
            write_error(&mut out, None, &ErrorObject::parse_error());
            let _ = tx.send(Out::Message(out.into())).await;
            continue;
        };
        match classify(raw).without_responses() {
            Incoming::Request { id, method, params } => {
                let mut out = Vec::new();
                if method == "initialize" {
                    if id.get() != "1" {
                        write_error(
                            &mut out,
                            Some(id),
                            &ErrorObject::invalid_request("initialize must have id 1"),
                        );
                    } else {
                        initialized = true;
                        let caps =
                            serde_json::json!({"capabilities": server.capabilities()}).to_string();
                        write_reply(&mut out, Some(id), Reply::Result(caps.as_bytes()));
                    }
                    let _ = tx.send(Out::Message(out.into())).await;
                } else if !initialized {
                    write_error(
                        &mut out,
                        Some(id),
                        &ErrorObject::new(codes::NOT_INITIALIZED, "Server not initialized"),
                    );
                    let _ = tx.send(Out::Message(out.into())).await;
                } else {
                    let (id, method, params) =
                        (id.to_buf(), method.into_owned(), params.map(Json::to_buf));
                    tasks.spawn(answer(server.clone(), id, method, params, tx.clone()));
                }
            }
            Incoming::Invalid { id, error } => {
                let mut out = Vec::new();
                write_error(&mut out, id, &error);
                let _ = tx.send(Out::Message(out.into())).await;
            }
            Incoming::Notification { method, .. }
                if method == "initialized" && initialized && forwarder.is_none() =>
            {
                // Notifications flow only after `initialized`.
                forwarder = Some(tokio::spawn(forward_changes(
                    server.subscribe_changes(),
                    tx.clone(),
                )));
            }
            // (A response is an invalid request here: `without_responses`.)
            Incoming::Notification { .. } | Incoming::Ignored | Incoming::Response { .. } => {}
        }
    }
    while tasks.join_next().await.is_some() {}
    if let Some(f) = forwarder {
        f.abort();
    }
    drop(tx);
    let _ = writer.await;
    Ok(())
}

/// Writes what is queued to stdout: messages framed, `Raw` bytes
/// (misbehaving test tools) as they are, everything already queued in one
/// write.
async fn write_out(mut rx: mpsc::Receiver<Out>) {
    let mut stdout = crate::stdio_pipes::stdout();
    let mut buf = BytesMut::new();
    while let Some(first) = rx.recv().await {
        buf.clear();
        let mut next = Some(first);
        while let Some(out) = next {
            match out {
                Out::Message(body) => encode_into(&body, &mut buf),
                Out::Raw(bytes) => buf.extend_from_slice(&bytes),
            }
            next = rx.try_recv().ok();
        }
        if stdout.write_all(&buf).await.is_err() || stdout.flush().await.is_err() {
            break;
        }
    }
}

/// One request answered by the demo server, in a task of its own so that
/// a slow tool holds up no other.
async fn answer(
    server: Arc<DemoServer>,
    id: JsonBuf,
    method: String,
    params: Option<JsonBuf>,
    tx: mpsc::Sender<Out>,
) {
    let answer = server
        .call(&method, params.as_ref().map(JsonBuf::as_json))
        .await;
    let mut out = Vec::new();
    let result = match answer {
        Answer::Result(v) => Some(v),
        Answer::Error(e) => {
            write_reply(
                &mut out,
                Some(id.as_json()),
                Reply::RawError(e.to_string().as_bytes()),
            );
            None
        }
        Answer::Crash => std::process::exit(3),
        Answer::Raw(raw, then) => {
            let _ = tx.send(Out::Raw(raw.into())).await;
            then
        }
        Answer::StderrFlood(lines) => {
            for i in 0..lines {
                eprintln!("flood line {i}");
            }
            Some(serde_json::json!({"output": {}}))
        }
    };
    if let Some(v) = result {
        write_reply(
            &mut out,
            Some(id.as_json()),
            Reply::Result(v.to_string().as_bytes()),
        );
    }
    if !out.is_empty() {
        let _ = tx.send(Out::Message(out.into())).await;
    }
}

/// The server's listing changes, as notifications, until the writer is gone.
async fn forward_changes(
    mut changes: tokio::sync::broadcast::Receiver<String>,
    tx: mpsc::Sender<Out>,
) {
    while let Ok(id) = changes.recv().await {
        if tx
            .send(Out::Message(super::change_notification(&id).into()))
            .await
            .is_err()
        {
            return;
        }
    }
}
