//! The Model Context Protocol's surface held against a hostile tenant (a
//! valid key), a compromised upstream (`tests/fixtures/hostile_upstream.py`)
//! and a misbehaving identity provider: every table, cache and stream is
//! bounded, and no path skips a check a lone request gets.

mod checks;
mod memory;
mod subscriptions;
mod upstream;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

pub(crate) const SECRET: &str = "a-session-secret-of-more-than-32-characters";
pub(crate) const STATELESS: &str = "2026-07-28";

/// The hostile upstream, a real process; killed (by its pid) when dropped.
pub(crate) struct Hostile {
    child: Child,
    pub url: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Hostile {
    pub fn start(args: &[&str]) -> Hostile {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("received.jsonl");
        let script = crate::support::root().join("tests/fixtures/hostile_upstream.py");
        let mut child = Command::new("python3")
            .arg(script)
            .arg("--log")
            .arg(&log)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = tx.send(line);
            }
            // Drained, so the server never blocks on a full pipe.
            for _ in lines {}
        });
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the hostile upstream did not start");
        let url = line
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("{line}"))
            .to_owned();
        Hostile {
            child,
            url,
            log,
            _dir: dir,
        }
    }

    /// Every message it received so far.
    pub fn received(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// How many requests of `method` it received.
    pub fn count(&self, method: &str) -> usize {
        self.received()
            .iter()
            .filter(|m| m["method"] == method && m["kind"] == "request")
            .count()
    }

    /// As an upstream of a config (`timeout_ms` given).
    pub fn upstream(&self, timeout_ms: u64) -> Value {
        json!({"http": {"url": self.url}, "protocol": "modelcontextprotocol", "timeout_ms": timeout_ms})
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A gateway (id `gw`, with the session secret) with the hostile upstream
/// `h` and the demo stdio upstream `s`; tenants `a` (key `ka`) and `b`
/// (`kb`) see both; `limits` and `tenants` (extra lines) as given.
pub(crate) async fn gateway(hostile: &Hostile, limits: Value, tenants: Value) -> Gateway {
    let both = json!({"a": tenant("ka", &["h", "s"]), "b": tenant("kb", &["h", "s"])});
    let yaml = json!({
        "gateway": {"id": "gw", "session_secret": SECRET, "limits": limits},
        "upstreams": {"h": hostile.upstream(5000), "s": stdio_upstream("s", &[])},
        "tenants": with_keys(both, tenants),
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["h", "s"]).await;
    gw
}

/// The namespaced uri of the hostile upstream's `file:///data/{name}`.
pub(crate) fn data_uri(name: &str) -> String {
    format!("mcp://gw/h/resource/file%3A%2F%2F%2Fdata%2F{name}")
}

/// A request with optional headers; the status, headers and body.
pub(crate) async fn request(
    gw: &Gateway,
    method: reqwest::Method,
    key: &str,
    headers: &[(&str, &str)],
    body: Option<String>,
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut r = gw
        .client
        .request(method, &gw.url)
        .bearer_auth(key)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json");
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    if let Some(b) = body {
        r = r.body(b);
    }
    let resp = within(r.send()).await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    (status, headers, within(resp.text()).await.unwrap())
}

/// A handshake-era session of `key`'s tenant: its id.
pub(crate) async fn session(gw: &Gateway, key: &str) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}});
    let (status, headers, body) =
        request(gw, reqwest::Method::POST, key, &[], Some(init.to_string())).await;
    assert_eq!(status, 200, "{body}");
    headers["mcp-session-id"].to_str().unwrap().to_owned()
}

/// One request in a handshake-era session: the status and the answer.
pub(crate) async fn in_session(
    gw: &Gateway,
    key: &str,
    session: &str,
    method: &str,
    params: Value,
) -> (u16, Value) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let (status, _, text) = request(
        gw,
        reqwest::Method::POST,
        key,
        &[
            ("mcp-session-id", session),
            ("mcp-protocol-version", "2025-11-25"),
        ],
        Some(body.to_string()),
    )
    .await;
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// `params._meta` of a stateless-era request.
pub(crate) fn stateless_meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": STATELESS,
           "io.modelcontextprotocol/clientCapabilities": {}})
}

/// Resident memory of a process, and its peak, in KiB.
pub(crate) fn memory_of(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Polls `f` until it returns `Some`, within the test's bound.
pub(crate) async fn until<T>(mut f: impl AsyncFnMut() -> Option<T>) -> T {
    within(async {
        loop {
            if let Some(v) = f().await {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    })
    .await
}
