//! The demo server speaking the Model Context Protocol
//! (`demo-upstream --modelcontext`): the same tools, in the handshake era
//! (2025-11-25 and the revisions before it that it still accepts), over
//! Streamable HTTP answering JSON and over stdio (one message per line).
//! No sessions: every POST stands alone, as a stateless server's do. A
//! request whose `_meta` names the 2026-07-28 revision is answered in that
//! revision's shape (`server/discover`, `resultType`), its headers taken on
//! trust. Small and quick on purpose: it is the benchmarks' upstream of the
//! protocol, in front of which the gateway and other proxies are measured;
//! its `calls` tool says how many `tools/call` it has answered, so a
//! benchmark can check that every call it made went through.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use super::{Answer, DemoServer};
use crate::jsonrpc::{ErrorObject, Incoming, Json, Reply, classify, write_error, write_reply};

/// The revisions it speaks, newest first: a client asking for another gets the newest.
const REVISIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];
/// The stateless revision, named in each request's `_meta` under this key.
const STATELESS: &str = "2026-07-28";
const VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";
/// The tool that counts the calls (of other tools) answered so far.
const CALLS: &str = "calls";

/// `tools/list`'s result: the demo's well-formed tools under their names
/// (and how long the listing may be kept, when it says).
pub(super) fn tool_list(tools: &[Value], ttl_ms: Option<u64>) -> String {
    let tools: Vec<Value> = tools
        .iter()
        .filter(|t| {
            t.get("outputSchema").is_some()
                && t["inputSchema"].get("type") == Some(&json!("object"))
        })
        .map(|t| {
            json!({"name": t["name"], "description": t["description"],
                   "inputSchema": t["inputSchema"], "outputSchema": t["outputSchema"]})
        })
        .chain([json!({
            "name": CALLS,
            "description": "How many tools/call requests (of the other tools) this server has answered.",
            "inputSchema": {"type": "object"},
            "outputSchema": {"type": "object", "properties": {"calls": {"type": "integer"}}, "required": ["calls"]},
        })])
        .collect();
    match ttl_ms {
        Some(ttl) => json!({ "tools": tools, "ttlMs": ttl }).to_string(),
        None => json!({ "tools": tools }).to_string(),
    }
}

/// A result of the 2026-07-28 revision: the handshake era's, and `resultType`.
fn stateless(result: String) -> String {
    match result.strip_suffix('}') {
        Some(open) if open.len() > 1 => format!(r#"{open},"resultType":"complete"}}"#),
        _ => r#"{"resultType":"complete"}"#.into(),
    }
}

impl DemoServer {
    /// Answers one request of the protocol: the result's or the error's JSON text.
    async fn answer_mc(&self, method: &str, params: Option<Json<'_>>) -> Result<String, Value> {
        let params: Value = params
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or(Value::Null);
        if params["_meta"][VERSION_META].is_string() {
            return match method {
                "server/discover" => Ok(json!({
                    "supportedVersions": [STATELESS],
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": format!("demo-{}", self.opts.name), "version": env!("CARGO_PKG_VERSION")},
                    "resultType": "complete",
                })
                .to_string()),
                "initialize" | "ping" => {
                    Err(json!({"code": -32601, "message": "Method not found"}))
                }
                _ if params["_meta"][VERSION_META] != STATELESS => Err(json!({
                    "code": -32022, "message": "Unsupported protocol version",
                    "data": {"supported": [STATELESS], "requested": params["_meta"][VERSION_META]},
                })),
                _ => Box::pin(self.answer_handshake(method, params))
                    .await
                    .map(stateless),
            };
        }
        self.answer_handshake(method, params).await
    }

    /// Answers one request in the handshake era's shapes.
    async fn answer_handshake(&self, method: &str, params: Value) -> Result<String, Value> {
        match method {
            "initialize" => {
                let asked = params["protocolVersion"].as_str().unwrap_or_default();
                let revision = REVISIONS
                    .into_iter()
                    .find(|r| *r == asked)
                    .unwrap_or(REVISIONS[0]);
                Ok(json!({
                    "protocolVersion": revision,
                    "capabilities": {"tools": {"listChanged": false}},
                    "serverInfo": {"name": format!("demo-{}", self.opts.name), "version": env!("CARGO_PKG_VERSION")}
                })
                .to_string())
            }
            "ping" => Ok("{}".into()),
            "tools/list" => Ok(self.mc_tools.clone()),
            "tools/call" if params["name"] == CALLS => {
                let output = json!({ "calls": self.calls() });
                Ok(json!({"content": [{"type": "text", "text": output.to_string()}], "structuredContent": output}).to_string())
            }
            "tools/call" => {
                self.calls
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let name = params["name"].as_str().unwrap_or_default();
                let Some(id) = self
                    .tools
                    .iter()
                    .find(|t| t["name"] == name)
                    .and_then(|t| t["mcpId"].as_str())
                else {
                    return Err(
                        json!({"code": -32602, "message": format!("Unknown tool: {name}")}),
                    );
                };
                let args = params.get("arguments").cloned().unwrap_or(json!({}));
                let output =
                    match super::tools::execute(&self.opts.name, self.opts.test_tools, id, &args)
                        .await
                    {
                        Answer::Result(v) => v["output"].clone(),
                        Answer::Raw(_, then) => then.map_or(json!({}), |v| v["output"].clone()),
                        Answer::StderrFlood(_) => json!({}),
                        Answer::Crash => std::process::exit(3),
                        // A tool's own failure is a result the model reads.
                        Answer::Error(e) => {
                            let text = e["message"].as_str().unwrap_or("failed").to_owned();
                            return Ok(
                            json!({"content": [{"type": "text", "text": text}], "isError": true})
                                .to_string(),
                        );
                        }
                    };
                Ok(json!({"content": [{"type": "text", "text": output.to_string()}], "structuredContent": output}).to_string())
            }
            _ => Err(json!({"code": -32601, "message": "Method not found"})),
        }
    }

    /// One message in, its answer out (`None` for a notification or a response).
    async fn message_mc(&self, raw: &RawValue) -> Option<Vec<u8>> {
        self.record(raw.get().as_bytes());
        let mut out = Vec::with_capacity(256);
        match classify(raw).without_responses() {
            Incoming::Request { id, method, params } => {
                match self.answer_mc(&method, params).await {
                    Ok(result) => write_reply(&mut out, Some(id), Reply::Result(result.as_bytes())),
                    Err(e) => write_reply(
                        &mut out,
                        Some(id),
                        Reply::RawError(e.to_string().as_bytes()),
                    ),
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
}

/// `POST /mcp`: a request gets its answer as JSON, anything else 202.
pub(super) async fn post(State(server): State<Arc<DemoServer>>, body: Bytes) -> Response {
    let Ok(raw) = serde_json::from_slice::<&RawValue>(&body) else {
        let mut out = Vec::new();
        write_error(&mut out, None, &ErrorObject::parse_error());
        return (
            StatusCode::BAD_REQUEST,
            [(header::CONTENT_TYPE, "application/json")],
            out,
        )
            .into_response();
    };
    match server.message_mc(raw).await {
        Some(out) => ([(header::CONTENT_TYPE, "application/json")], out).into_response(),
        None => StatusCode::ACCEPTED.into_response(),
    }
}

/// Serves the protocol on stdin and stdout, one message per line; requests
/// are answered as they finish, so a slow one holds up no other.
pub async fn serve_stdio(server: Arc<DemoServer>) -> std::io::Result<()> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(256);
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        let mut buf = Vec::new();
        while let Some(first) = rx.recv().await {
            buf.clear();
            let mut next = Some(first);
            while let Some(line) = next {
                buf.extend_from_slice(&line);
                buf.push(b'\n');
                next = rx.try_recv().ok();
            }
            if stdout.write_all(&buf).await.is_err() || stdout.flush().await.is_err() {
                break;
            }
        }
    });
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        if line.trim().is_empty() {
            continue;
        }
        let (server, tx) = (server.clone(), tx.clone());
        tokio::spawn(async move {
            let out = match serde_json::from_str::<&RawValue>(&line) {
                Ok(raw) => server.message_mc(raw).await,
                Err(_) => {
                    let mut out = Vec::new();
                    write_error(&mut out, None, &ErrorObject::parse_error());
                    Some(out)
                }
            };
            if let Some(out) = out {
                let _ = tx.send(out).await;
            }
        });
    }
    drop(tx);
    let _ = writer.await;
    Ok(())
}
