//! The test harness: a gateway in this process on 127.0.0.1:0, upstreams that
//! are real child processes (this crate's binary in `demo-upstream` mode) and
//! real HTTP servers on port 0.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use mcp_gateway::app::{self, Running};
use mcp_gateway::config::{Config, SystemSecrets};
use mcp_gateway::demo::{self, DemoOptions, DemoServer};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

pub(crate) mod browser;
mod doc;
pub(crate) mod jwt;
pub(crate) mod oidc;
mod process;
mod protected;
mod redis;
mod sdk;
pub(crate) mod sse;

pub(crate) use doc::Doc;
pub(crate) use process::{Process, children_of};
pub(crate) use protected::Protected;
pub(crate) use redis::Redis;
pub(crate) use sdk::*;

pub const BIN: &str = env!("CARGO_BIN_EXE_mcp-gateway");

/// The tools the demo upstream lists with `--test-tools` (under `mcp://{name}/tools/`),
/// besides its `urn:{name}:legacy` tool. Its two broken definitions are dropped.
pub const TEST_TOOLS: [&str; 12] = [
    "echo:v1",
    "add:v1",
    "sleep",
    "crash",
    "garbage",
    "bad_frame",
    "stderr_flood",
    "bad_output",
    "fail",
    "pid",
    "stderr",
    "touch",
];
/// How many tools a demo upstream with `--test-tools` contributes to a listing.
pub const TEST_TOOL_COUNT: usize = TEST_TOOLS.len() + 1;

/// Every await in a test is bounded.
pub async fn within<F: Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(30), f)
        .await
        .expect("timed out")
}

/// Waits until `holds` says so, asking every 10 ms, within 30 s: for a
/// state another process reaches (a metric, a log line, a count) that no
/// event announces to the test.
pub async fn until<F: Future<Output = bool>>(mut holds: impl FnMut() -> F) {
    within(async {
        while !holds().await {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

/// `mcp-gateway check` of the config at `path`, which must refuse it: what it said.
pub fn check_refused(path: &std::path::Path) -> String {
    let out = std::process::Command::new(BIN)
        .args(["check", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success(), "check accepted {}", path.display());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A request of the handshake era's HTTP session endpoint: `method` on the
/// gateway's URL with `key`, the session's id (and protocol version header)
/// when given, and a JSON body when given.
pub async fn session_request(
    gw: &Gateway,
    method: reqwest::Method,
    key: &str,
    session: Option<(&str, Option<&str>)>,
    body: Option<Value>,
) -> reqwest::Response {
    let mut r = gw
        .client
        .request(method, &gw.url)
        .bearer_auth(key)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json");
    if let Some((id, version)) = session {
        r = r.header("mcp-session-id", id);
        if let Some(v) = version {
            r = r.header("mcp-protocol-version", v);
        }
    }
    if let Some(b) = body {
        r = r.body(b.to_string());
    }
    within(r.send()).await.unwrap()
}

/// The demo upstream run as a stdio child, as an upstream of the
/// configuration: the args after its name, and keys of the upstream beside
/// `stdio:`.
pub struct StdioUpstream {
    args: Vec<String>,
    keys: Vec<(&'static str, Value)>,
}

impl StdioUpstream {
    pub fn new(name: &str, extra: &[&str]) -> Self {
        let mut args = vec![
            "demo-upstream".to_string(),
            "--name".into(),
            name.into(),
            "--test-tools".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        StdioUpstream {
            args,
            keys: Vec::new(),
        }
    }

    /// A key of the upstream (`pin`, `timeout_ms`, ...) and its value.
    pub fn with(mut self, key: &'static str, value: impl serde::Serialize) -> Self {
        self.keys.push((key, serde_json::to_value(value).unwrap()));
        self
    }

    pub fn value(&self) -> Value {
        let mut upstream = json!({"stdio": {"command": BIN, "args": self.args}});
        for (key, value) in &self.keys {
            upstream[*key] = value.clone();
        }
        upstream
    }
}

/// `base` (a mapping) with the keys of `extra` set over its own: what a
/// test adds to the configuration a builder of its file writes.
pub fn with_keys(mut base: Value, extra: Value) -> Value {
    let Value::Object(extra) = extra else {
        panic!("not a mapping: {extra}");
    };
    match &mut base {
        Value::Object(map) => map.extend(extra),
        other => panic!("not a mapping: {other}"),
    }
    base
}

/// The demo upstream as a stdio child, with these args after its name.
pub fn stdio_upstream(name: &str, extra: &[&str]) -> Value {
    StdioUpstream::new(name, extra).value()
}

/// A demo server over HTTP in this process, on a free port.
pub async fn http_upstream(name: &str) -> (String, tokio::task::JoinHandle<()>) {
    let server = DemoServer::new(DemoOptions {
        name: name.into(),
        test_tools: true,
        ..Default::default()
    })
    .unwrap();
    let (addr, task) = demo::http::start(Arc::new(server), ([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    (format!("http://{addr}/mcp"), task)
}

/// An address where nothing listens (bound, then closed).
pub async fn dead_url() -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    format!("http://{addr}/mcp")
}

pub struct Gateway {
    pub running: Option<Running>,
    pub url: String,
    pub admin: String,
    pub client: reqwest::Client,
}

impl Gateway {
    /// Starts a gateway on `yaml` (its listen addresses are ignored: port 0 is used).
    pub async fn start(yaml: &str) -> Gateway {
        let config = Config::from_yaml(yaml, &SystemSecrets::default())
            .unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        Self::start_config(config).await
    }

    /// Starts a gateway whose config names its own agent address (a
    /// public URL): `yaml_for` is handed the address it will serve at.
    pub async fn start_at(yaml_for: impl FnOnce(SocketAddr) -> String) -> Gateway {
        let agent = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let yaml = yaml_for(agent.local_addr().unwrap());
        let config = Config::from_yaml(&yaml, &SystemSecrets::default())
            .unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::wrap(app::start_with(config, agent, admin).unwrap())
    }

    pub async fn start_config(config: Config) -> Gateway {
        let agent = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::wrap(app::start_with(config, agent, admin).unwrap())
    }

    /// A gateway (id `gw`) with one stdio demo upstream `s` (extra demo args
    /// allowed) and one tenant `a` (key `ka`), ready.
    pub async fn one_upstream(extra: &[&str]) -> Gateway {
        let yaml = json!({
            "gateway": {"id": "gw"},
            "upstreams": {"s": stdio_upstream("s", extra)},
            "tenants": {"a": tenant("ka", &["s"])},
        })
        .to_string();
        let gw = Gateway::start(&yaml).await;
        gw.wait_ready(&["s"]).await;
        gw
    }

    /// A handle on a gateway process (the real binary) serving agents at `agent`.
    pub fn at(agent: &str) -> Gateway {
        Gateway {
            url: format!("http://{agent}/mcp"),
            admin: String::new(),
            running: None,
            client: {
                mcp_gateway::install_crypto_provider();
                reqwest::Client::new()
            },
        }
    }

    /// A handle on a gateway started some other way.
    pub fn wrap(running: Running) -> Gateway {
        Gateway {
            url: format!("http://{}/mcp", running.agent_addr),
            admin: format!("http://{}", running.admin_addr),
            running: Some(running),
            client: {
                mcp_gateway::install_crypto_provider();
                reqwest::Client::new()
            },
        }
    }

    pub fn agent_addr(&self) -> SocketAddr {
        self.running.as_ref().unwrap().agent_addr
    }

    /// Posts a raw body; returns status, headers and body text.
    pub async fn post_raw(
        &self,
        key: Option<&str>,
        content_type: Option<&str>,
        body: impl Into<reqwest::Body>,
    ) -> (u16, reqwest::header::HeaderMap, String) {
        let mut req = self.client.post(&self.url).body(body);
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        if let Some(ct) = content_type {
            req = req.header("content-type", ct);
        }
        let resp = within(req.send()).await.unwrap();
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        (status, headers, within(resp.text()).await.unwrap())
    }

    pub async fn post(&self, key: &str, body: &str) -> (u16, String) {
        let (status, _, text) = self
            .post_raw(Some(key), Some("application/json"), body.to_owned())
            .await;
        (status, text)
    }

    /// One request; returns the whole response object.
    pub async fn rpc(&self, key: &str, method: &str, params: Value) -> Value {
        let body =
            json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).to_string();
        let (status, text) = self.post(key, &body).await;
        assert_eq!(status, 200, "{text}");
        serde_json::from_str(&text).unwrap()
    }

    pub async fn list(&self, key: &str, method: &str) -> Vec<Value> {
        let r = self.rpc(key, method, json!({})).await;
        r["result"]
            .as_array()
            .unwrap_or_else(|| panic!("{r}"))
            .clone()
    }

    pub async fn execute(&self, key: &str, id: &str, arguments: Value) -> Value {
        self.rpc(
            key,
            "mcp/executeTool",
            json!({"id": id, "arguments": arguments}),
        )
        .await
    }

    pub async fn get_admin(&self, path: &str) -> (u16, String) {
        let resp = within(self.client.get(format!("{}{path}", self.admin)).send())
            .await
            .unwrap();
        (resp.status().as_u16(), within(resp.text()).await.unwrap())
    }

    /// Waits until every named upstream reports ready.
    pub async fn wait_ready(&self, upstreams: &[&str]) {
        self.wait_ready_as(upstreams, None).await
    }

    /// [`Self::wait_ready`], asking with the admin token (which readiness's
    /// detail needs when one is configured).
    pub async fn wait_ready_as(&self, upstreams: &[&str], admin_token: Option<&str>) {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let mut req = self.client.get(format!("{}/readyz", self.admin));
            if let Some(token) = admin_token {
                req = req.bearer_auth(token);
            }
            let resp = within(req.send()).await.unwrap();
            let body = within(resp.text()).await.unwrap();
            let v: Value = serde_json::from_str(&body).unwrap();
            if upstreams
                .iter()
                .all(|u| v["upstreams"][u]["status"] == "ready")
            {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "upstreams not ready: {body}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn metrics(&self) -> String {
        self.get_admin("/metrics").await.1
    }

    pub async fn stop(mut self) {
        if let Some(r) = self.running.take() {
            within(r.shutdown()).await;
        }
    }
}

/// The value of one metric series in Prometheus text, e.g. `name{a="b"}`.
/// `unshare`'s namespaces: a network namespace, inside a user namespace
/// of its own (where the user is root, so loopback can be brought up)
/// unless the tests already run as root.
pub fn namespaces() -> &'static str {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let root = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        == Some("0");
    if root { "-n" } else { "-rn" }
}

pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .and_then(|v| v.trim().parse().ok())
}

/// A tenant config line.
/// Every text of a result's content, joined.
pub fn text_of(answer: &Value) -> String {
    let content = answer["content"]
        .as_array()
        .unwrap_or_else(|| panic!("no content: {answer}"));
    content
        .iter()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Requests of upstreams the gateway counted with this outcome.
pub async fn counted(gw: &Gateway, outcome: &str) -> f64 {
    let series = format!("mcp_gateway_server_requests_total{{outcome=\"{outcome}\"}}");
    metric(&gw.metrics().await, &series).unwrap_or(0.0)
}

pub fn tenant(key: &str, upstreams: &[&str]) -> Value {
    json!({"api_keys": [key], "upstreams": upstreams})
}

/// A session whose body stays open: lines are sent one by one, answers read as they come.
pub struct Live {
    pub tx: Option<mpsc::Sender<Result<Vec<u8>, std::io::Error>>>,
    resp: reqwest::Response,
    buf: Vec<u8>,
}

impl Live {
    pub async fn open(gw: &Gateway, key: &str, first: Value) -> Live {
        let (tx, rx) = mpsc::channel(16);
        tx.send(Ok(format!("{first}\n").into_bytes()))
            .await
            .unwrap();
        let body =
            reqwest::Body::wrap_stream(futures_util::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|i| (i, rx))
            }));
        let resp = within(
            gw.client
                .post(&gw.url)
                .bearer_auth(key)
                .header("content-type", "application/json")
                .body(body)
                .send(),
        )
        .await
        .unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "application/json");
        assert_eq!(resp.headers()["transfer-encoding"], "chunked");
        Live {
            tx: Some(tx),
            resp,
            buf: Vec::new(),
        }
    }

    /// Opens a session and completes the handshake.
    pub async fn ready(gw: &Gateway, key: &str, trace: bool) -> Live {
        let mut params = json!({"clientCapabilities": {}});
        if trace {
            params["trace"] = json!("on");
        }
        let mut live = Live::open(
            gw,
            key,
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}),
        )
        .await;
        let init = live.next().await.unwrap();
        assert_eq!(init["id"], 1, "{init}");
        assert!(init["result"]["capabilities"].is_object());
        live.send(json!({"jsonrpc": "2.0", "method": "initialized", "params": {}}))
            .await;
        live
    }

    pub async fn send(&self, msg: Value) {
        assert!(
            self.try_send(msg).await,
            "the session's request body is closed"
        );
    }

    /// Sends a message; false when the request's body is already closed
    /// (the gateway ended the session and its response).
    pub async fn try_send(&self, msg: Value) -> bool {
        self.tx
            .as_ref()
            .unwrap()
            .send(Ok(format!("{msg}\n").into_bytes()))
            .await
            .is_ok()
    }

    /// The next message, or None when the response ended.
    pub async fn next(&mut self) -> Option<Value> {
        within(async {
            loop {
                if let Some(nl) = self.buf.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = self.buf.drain(..=nl).collect();
                    return Some(serde_json::from_slice(&line).unwrap_or_else(|_| {
                        panic!("not JSON: {}", String::from_utf8_lossy(&line))
                    }));
                }
                match self.resp.chunk().await.unwrap() {
                    Some(chunk) => self.buf.extend_from_slice(&chunk),
                    None => {
                        assert!(self.buf.is_empty(), "a partial line at the end");
                        return None;
                    }
                }
            }
        })
        .await
    }

    /// The next message that is not a `$/logTrace`.
    pub async fn next_answer(&mut self) -> Value {
        loop {
            let m = self.next().await.expect("an answer");
            if m["method"] != "$/logTrace" {
                return m;
            }
        }
    }

    /// Ends the body and returns everything still to come.
    pub async fn close(mut self) -> Vec<Value> {
        self.tx = None;
        let mut rest = Vec::new();
        while let Some(m) = self.next().await {
            rest.push(m);
        }
        rest
    }
}

/// A gateway watching the config file at `path` (reloads when it changes).
pub async fn start_watching(path: &std::path::Path) -> Gateway {
    let config = Config::load(path).unwrap();
    let agent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let running = app::start_on(config, Some(path.to_owned()), agent, admin).unwrap();
    Gateway::wrap(running)
}

/// Waits until `n` reloads ended with `outcome`.
pub async fn wait_reloads(gw: &Gateway, outcome: &str, n: f64) {
    let series = format!(r#"mcp_gateway_config_reloads_total{{outcome="{outcome}"}}"#);
    within(async {
        while metric(&gw.metrics().await, &series) != Some(n) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// Opens a 2026-07-28 `subscriptions/listen` for tool listing changes with `key`.
pub async fn listen_for_tools(gw: &Gateway, key: &str) -> reqwest::Response {
    let body = json!({"jsonrpc": "2.0", "id": "l", "method": "subscriptions/listen", "params": {
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}},
        "notifications": {"toolsListChanged": true}}});
    let r = within(
        gw.client
            .post(&gw.url)
            .bearer_auth(key)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "subscriptions/listen")
            .body(body.to_string())
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    r
}

/// The methods of the messages a stream has carried so far, until it ends
/// or carries `until`.
pub async fn heard(stream: &mut reqwest::Response, until: &str) -> Vec<String> {
    let mut seen = String::new();
    within(async {
        loop {
            let methods: Vec<String> = sse::so_far(&seen)
                .iter()
                .map(|m| m["method"].as_str().unwrap_or_default().to_owned())
                .collect();
            if methods.iter().any(|m| m == until) {
                return methods;
            }
            match stream.chunk().await {
                Ok(Some(chunk)) => seen.push_str(&String::from_utf8_lossy(&chunk)),
                _ => return methods,
            }
        }
    })
    .await
}

/// A request of the Model Context Protocol's face (handshake era, served
/// statelessly) with this bearer token: its answer whole.
pub async fn mcp_request(gw: &Gateway, key: &str, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let resp = gw
        .client
        .post(&gw.url)
        .bearer_auth(key)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    serde_json::from_str(&resp.text().await.unwrap()).unwrap()
}

/// A new P-256 key, PKCS#8 PEM (what `openssl genpkey -algorithm EC
/// -pkeyopt ec_paramgen_curve:P-256` writes).
pub fn p256_pem() -> String {
    use base64::Engine;
    let rng = ring::rand::SystemRandom::new();
    let der = ring::signature::EcdsaKeyPair::generate_pkcs8(
        &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
        &rng,
    )
    .unwrap();
    let b64 = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
    format!("-----BEGIN PRIVATE KEY-----\n{b64}\n-----END PRIVATE KEY-----\n")
}

/// A 2026-07-28 `tools/call` of `name` as `key`, its client declaring
/// `capabilities`; `round` holds what a retry adds to the params.
pub async fn call_2026(
    gw: &Gateway,
    key: &str,
    name: &str,
    capabilities: Value,
    round: Value,
) -> Value {
    let mut params = json!({
        "name": name,
        "arguments": {},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": capabilities,
        },
    });
    if let (Value::Object(params), Value::Object(round)) = (&mut params, round) {
        params.extend(round);
    }
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params});
    post_2026(gw, key, &body, Some(name)).await.1
}

/// A 2026-07-28 request `body` as `key`, with the revision's headers
/// (`Mcp-Name` when it names a tool, prompt or resource): its status and
/// its answer, which must be JSON.
pub async fn post_2026(gw: &Gateway, key: &str, body: &Value, name: Option<&str>) -> (u16, Value) {
    let mut request = gw
        .client
        .post(&gw.url)
        .bearer_auth(key)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", body["method"].as_str().unwrap_or_default());
    if let Some(name) = name {
        request = request.header("mcp-name", name);
    }
    let response = within(request.body(body.to_string()).send()).await.unwrap();
    let status = response.status().as_u16();
    let text = within(response.text()).await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("{text}")),
    )
}
