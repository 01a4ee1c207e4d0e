//! The demo server over HTTP: `POST /mcp`, stateless messages and batches, and
//! sessions (a body starting with `initialize`, or several messages) answered
//! as newline-delimited JSON.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, BodyDataStream, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::BytesMut;
use futures_util::StreamExt;
use serde_json::value::RawValue;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::{Answer, DemoServer};
use crate::jsonrpc::{ErrorObject, Incoming, Reply, classify, codes, write_error, write_reply};

/// Binds `addr` and serves until the process ends or the returned task is
/// aborted; returns the bound address. Connections are served inside the task,
/// so aborting it closes every open keep-alive connection as well: the server
/// is gone, not merely no longer accepting.
pub async fn start(
    server: Arc<DemoServer>,
    addr: SocketAddr,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = if server.opts.modelcontext {
        Router::new().route("/mcp", post(super::modelcontext::post))
    } else {
        Router::new().route("/mcp", post(mcp))
    }
    .route("/stats", axum::routing::get(stats))
    .with_state(server);
    let task = tokio::spawn(async move {
        let mut connections = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        let service = hyper_util::service::TowerToHyperService::new(app.clone());
                        connections.spawn(async move {
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                                .await;
                        });
                    }
                    // Out of descriptors and the like: pause rather than spin.
                    Err(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
    });
    Ok((bound, task))
}

async fn answer(
    server: &DemoServer,
    raw: &RawValue,
    session: Option<&mut bool>,
) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    match classify(raw).without_responses() {
        Incoming::Request { id, method, params } => {
            if let Some(initialized) = session {
                if method == "initialize" {
                    if id.get() != "1" {
                        write_error(
                            &mut out,
                            Some(id),
                            &ErrorObject::invalid_request("initialize must have id 1"),
                        );
                        return Some(out);
                    }
                    *initialized = true;
                } else if !*initialized {
                    write_error(
                        &mut out,
                        Some(id),
                        &ErrorObject::new(codes::NOT_INITIALIZED, "Server not initialized"),
                    );
                    return Some(out);
                }
            }
            match server.call(&method, params).await {
                Answer::Result(v) => {
                    write_reply(&mut out, Some(id), Reply::Result(v.to_string().as_bytes()))
                }
                Answer::Error(e) => write_reply(
                    &mut out,
                    Some(id),
                    Reply::RawError(e.to_string().as_bytes()),
                ),
                Answer::Crash => std::process::exit(3),
                // Nothing misbehaves on HTTP: just the answer.
                Answer::Raw(_, then) => {
                    let v = then.unwrap_or(serde_json::json!({"output": {}}));
                    write_reply(&mut out, Some(id), Reply::Result(v.to_string().as_bytes()))
                }
                Answer::StderrFlood(_) => {
                    write_reply(&mut out, Some(id), Reply::Result(br#"{"output":{}}"#))
                }
            }
            Some(out)
        }
        Incoming::Invalid { id, error } => {
            write_error(&mut out, id, &error);
            Some(out)
        }
        Incoming::Notification { .. } | Incoming::Ignored | Incoming::Response { .. } => None,
    }
}

/// `GET /stats`: the tool calls answered so far, `{"calls": n}`.
async fn stats(State(server): State<Arc<DemoServer>>) -> Response {
    let body = serde_json::json!({ "calls": server.calls() }).to_string();
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

async fn mcp(State(server): State<Arc<DemoServer>>, headers: HeaderMap, body: Body) -> Response {
    let mut stream = body.into_data_stream();
    let mut buf = BytesMut::new();
    while let Some(chunk) = stream.next().await {
        let Ok(chunk) = chunk else {
            return StatusCode::BAD_REQUEST.into_response();
        };
        buf.extend_from_slice(&chunk);
        let mut values = serde_json::Deserializer::from_slice(&buf).into_iter::<&RawValue>();
        if let Some(Ok(first)) = values.next() {
            if matches!(classify(first), Incoming::Request { ref method, .. } if method == "initialize")
            {
                return stream_session(server, buf, stream);
            }
        }
    }
    whole_body(server, headers, buf.freeze()).await
}

/// A session whose body may stay open: one message per line each way, and
/// `mcp/resourceDidChange` notifications after `initialized`.
fn stream_session(
    server: Arc<DemoServer>,
    mut buf: BytesMut,
    mut stream: BodyDataStream,
) -> Response {
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        let mut initialized = false;
        let mut forwarder: Option<tokio::task::JoinHandle<()>> = None;
        let mut ended = false;
        loop {
            // Whole lines; once the body has ended, whatever is left is the last one.
            while let Some(nl) = buf
                .iter()
                .position(|&b| b == b'\n')
                .or((ended && !buf.is_empty()).then(|| buf.len() - 1))
            {
                let line = buf.split_to(nl + 1);
                let line = line.trim_ascii();
                if line.is_empty() {
                    continue;
                }
                server.record(line);
                let Ok(raw) = serde_json::from_slice::<&RawValue>(line) else {
                    continue;
                };
                if matches!(classify(raw), Incoming::Notification { ref method, .. } if method == "initialized")
                    && initialized
                    && forwarder.is_none()
                {
                    let (mut changes, tx) = (server.subscribe_changes(), tx.clone());
                    forwarder = Some(tokio::spawn(async move {
                        while let Ok(id) = changes.recv().await {
                            let mut line = super::change_notification(&id);
                            line.push(b'\n');
                            if tx.send(line.into()).await.is_err() {
                                return;
                            }
                        }
                    }));
                }
                if let Some(mut reply) = answer(&server, raw, Some(&mut initialized)).await {
                    reply.push(b'\n');
                    if tx.send(reply.into()).await.is_err() {
                        return;
                    }
                }
            }
            if ended {
                break;
            }
            match stream.next().await {
                Some(Ok(chunk)) => buf.extend_from_slice(&chunk),
                _ => ended = true,
            }
        }
        if let Some(f) = forwarder {
            f.abort();
        }
    });
    let body = Body::from_stream(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, std::convert::Infallible>(b), rx))
    }));
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn whole_body(server: Arc<DemoServer>, headers: HeaderMap, body: Bytes) -> Response {
    server.record(&body);
    let json = |status: StatusCode, body: Vec<u8>| {
        (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
    };
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .eq_ignore_ascii_case("application/json")
    {
        let mut out = Vec::new();
        write_error(
            &mut out,
            None,
            &ErrorObject::invalid_request("Content-Type must be application/json"),
        );
        return json(StatusCode::UNSUPPORTED_MEDIA_TYPE, out);
    }
    let values: Result<Vec<&RawValue>, _> = serde_json::Deserializer::from_slice(&body)
        .into_iter::<&RawValue>()
        .collect();
    let Ok(values) = values else {
        let mut out = Vec::new();
        write_error(&mut out, None, &ErrorObject::parse_error());
        return json(StatusCode::BAD_REQUEST, out);
    };
    let is_session = values.len() > 1
        || values.first().is_some_and(|v| matches!(classify(v), Incoming::Request { ref method, .. } if method == "initialize"));
    if is_session {
        let mut initialized = false;
        let mut out = Vec::new();
        for v in values {
            if let Some(reply) = answer(&server, v, Some(&mut initialized)).await {
                out.extend_from_slice(&reply);
                out.push(b'\n');
            }
        }
        return json(StatusCode::OK, out);
    }
    let Some(first) = values.first() else {
        let mut out = Vec::new();
        write_error(&mut out, None, &ErrorObject::parse_error());
        return json(StatusCode::BAD_REQUEST, out);
    };
    if first.get().starts_with('[') {
        let items: Vec<&RawValue> = serde_json::from_str(first.get()).unwrap_or_default();
        let mut replies = Vec::new();
        for item in items {
            if let Some(r) = answer(&server, item, None).await {
                replies.push(String::from_utf8_lossy(&r).into_owned());
            }
        }
        if replies.is_empty() {
            return StatusCode::ACCEPTED.into_response();
        }
        return json(
            StatusCode::OK,
            format!("[{}]", replies.join(",")).into_bytes(),
        );
    }
    match answer(&server, first, None).await {
        Some(reply) => json(StatusCode::OK, reply),
        None => StatusCode::ACCEPTED.into_response(),
    }
}
