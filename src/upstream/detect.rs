//! `protocol: auto`: which protocol an upstream speaks, told by its answer
//! to one `initialize`. Both protocols open with `initialize` (id 1), so
//! one request serves both: its params hold what each asks for
//! (`protocolVersion`, `capabilities` and `clientInfo` of the Model Context
//! Protocol, `clientCapabilities` of MCP v1.0), each ignoring the other's.
//!
//! Over stdio the two frame differently: MCP v1.0 reads `Content-Length`
//! frames, the Model Context Protocol one JSON text per line. The request
//! goes out as a frame whose body ends its own line, so a line reader skips
//! the header lines (as JSON it cannot parse) and reads the body as a
//! line, and a frame reader reads the frame and skips the blank line after
//! it. How the answer comes back (a header, or a line of JSON) tells the
//! protocol. The process is then stopped: the supervisor starts it again
//! and shakes hands in the protocol told, from a clean start.
//!
//! Over HTTP the request is posted as a Model Context Protocol client
//! posts it (accepting JSON or an event stream): a server of that protocol
//! answers with `protocolVersion`, an event stream, or (the 2026-07-28
//! revision alone) its error naming the revisions it speaks; an MCP v1.0
//! server answers with its capabilities.

use std::time::Duration;

use memchr::memmem;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::Dialect;
use crate::config::HttpSpec;

/// What is tried, for the log line of an upstream that answered neither.
pub const TRIED: &str = "an initialize request that either protocol answers (over stdio a Content-Length frame whose body is a line of its own)";

/// How much of an answer is read before the upstream is judged to speak neither.
const MAX_ANSWER: usize = 64 * 1024;

fn request() -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"{}","capabilities":{{}},"clientInfo":{{"name":"mcp-gateway","version":"{}"}},"clientCapabilities":{{}}}}}}"#,
        crate::modelcontext::OFFERED_REVISION,
        env!("CARGO_PKG_VERSION")
    )
}

/// Which protocol the process `child` speaks, asked on its stdin and told
/// by its stdout within `wait`. The caller stops it afterwards.
pub async fn over_stdio(
    child: &mut tokio::process::Child,
    wait: Duration,
) -> Result<Dialect, String> {
    let told = async {
        let (Some(mut stdin), Some(mut stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("started without pipes".to_owned());
        };
        let body = request();
        let frame = format!("Content-Length: {}\r\n\r\n{body}\n", body.len());
        stdin
            .write_all(frame.as_bytes())
            .await
            .map_err(|e| format!("its stdin closed: {e}"))?;
        let _ = stdin.flush().await;
        let mut seen = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(dialect) = told_by_stdout(&seen) {
                return Ok(dialect);
            }
            if seen.len() > MAX_ANSWER {
                return Err(format!(
                    "it wrote {MAX_ANSWER} bytes that are neither a frame nor a JSON line"
                ));
            }
            match stdout.read(&mut chunk).await {
                Ok(0) | Err(_) => {
                    return Err("it exited (or closed its stdout) without answering".to_owned());
                }
                Ok(n) => seen.extend_from_slice(&chunk[..n]),
            }
        }
    };
    tokio::time::timeout(wait, told)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {} ms", wait.as_millis())))
}

/// The protocol what a process wrote so far tells: a `Content-Length`
/// header at the start of a line is MCP v1.0, a whole line that is a
/// JSON-RPC object the Model Context Protocol. Anything else (a stray
/// print) is read past.
fn told_by_stdout(seen: &[u8]) -> Option<Dialect> {
    let mut lines = seen.split(|b| *b == b'\n').peekable();
    while let Some(line) = lines.next() {
        let complete = lines.peek().is_some();
        let trimmed = line.trim_ascii();
        if trimmed.len() >= 15 && trimmed[..15].eq_ignore_ascii_case(b"content-length:") {
            return Some(Dialect::V1);
        }
        if complete
            && trimmed.starts_with(b"{")
            && memmem::find(trimmed, b"\"jsonrpc\"").is_some()
            && serde_json::from_slice::<&RawValue>(trimmed).is_ok()
        {
            return Some(Dialect::ModelContext);
        }
    }
    None
}

/// Why an HTTP upstream told no protocol.
#[derive(Debug)]
pub enum NotTold {
    /// No answer at all: not listening, or no answer in time.
    Unreachable(String),
    /// An answer in neither protocol.
    Neither(String),
}

impl std::fmt::Display for NotTold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotTold::Unreachable(why) => write!(f, "unreachable: {why}"),
            NotTold::Neither(why) => write!(f, "it answered in neither protocol: {why}"),
        }
    }
}

/// Which protocol the HTTP upstream `spec` speaks, by its answer to one
/// `initialize`. A session it opened for the question is ended.
pub async fn over_http(
    client: &reqwest::Client,
    spec: &HttpSpec,
    wait: Duration,
) -> Result<Dialect, NotTold> {
    let mut post = client
        .post(&spec.url)
        .timeout(wait)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    for (k, v) in &spec.headers {
        post = post.header(k, v);
    }
    let response = post
        .body(request())
        .send()
        .await
        .map_err(|e| NotTold::Unreachable(e.to_string()))?;
    let status = response.status();
    let session = response.headers().get("mcp-session-id").cloned();
    let kind = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let told = if kind.starts_with("text/event-stream") && status.is_success() {
        Ok(Dialect::ModelContext)
    } else {
        let body = response.bytes().await.unwrap_or_default();
        told_by_body(status, &body).map_err(NotTold::Neither)
    };
    if let Some(session) = session {
        let mut end = client
            .delete(&spec.url)
            .timeout(wait)
            .header("mcp-session-id", session);
        for (k, v) in &spec.headers {
            end = end.header(k, v);
        }
        let _ = end.send().await;
    }
    told
}

fn told_by_body(status: reqwest::StatusCode, body: &[u8]) -> Result<Dialect, String> {
    #[derive(Deserialize)]
    struct Answer<'a> {
        #[serde(borrow)]
        result: Option<Result_<'a>>,
        #[serde(borrow)]
        error: Option<Error<'a>>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Result_<'a> {
        #[serde(borrow)]
        protocol_version: Option<&'a RawValue>,
        #[serde(borrow)]
        capabilities: Option<&'a RawValue>,
    }
    #[derive(Deserialize)]
    struct Error<'a> {
        code: Option<i64>,
        #[serde(borrow)]
        data: Option<&'a RawValue>,
    }
    let answer = serde_json::from_slice::<Answer<'_>>(body).ok();
    match answer {
        Some(Answer {
            result: Some(r), ..
        }) if r.protocol_version.is_some() => Ok(Dialect::ModelContext),
        Some(Answer {
            result: Some(r), ..
        }) if r.capabilities.is_some() => Ok(Dialect::V1),
        // A server of the 2026-07-28 revision alone: no handshake, and the
        // revisions it speaks in the error.
        Some(Answer { error: Some(e), .. })
            if e.code == Some(crate::jsonrpc::codes::UNSUPPORTED_PROTOCOL_VERSION)
                || e.data.is_some_and(|d| d.get().contains("\"supported\"")) =>
        {
            Ok(Dialect::ModelContext)
        }
        _ => Err(format!(
            "HTTP {status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_tells_its_protocol_by_its_framing() {
        let v1 = b"Content-Length: 52\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}";
        assert_eq!(told_by_stdout(v1), Some(Dialect::V1));
        let line = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n";
        assert_eq!(told_by_stdout(line), Some(Dialect::ModelContext));
        // A line not yet ended, or a stray print, tells nothing yet.
        assert_eq!(told_by_stdout(&line[..20]), None);
        assert_eq!(told_by_stdout(b"starting up\n"), None);
        let late = b"starting up\n{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{}}\n";
        assert_eq!(told_by_stdout(late), Some(Dialect::ModelContext));
    }

    #[test]
    fn an_http_answer_tells_its_protocol_by_its_result() {
        let ok = reqwest::StatusCode::OK;
        let mc = br#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{}}}"#;
        assert_eq!(told_by_body(ok, mc), Ok(Dialect::ModelContext));
        let v1 =
            br#"{"jsonrpc":"2.0","id":1,"result":{"capabilities":{"listToolsProvider":true}}}"#;
        assert_eq!(told_by_body(ok, v1), Ok(Dialect::V1));
        let modern = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"m","data":{"supported":["2026-07-28"]}}}"#;
        assert_eq!(
            told_by_body(reqwest::StatusCode::BAD_REQUEST, modern),
            Ok(Dialect::ModelContext)
        );
        assert!(told_by_body(reqwest::StatusCode::NOT_FOUND, b"nope").is_err());
    }
}
