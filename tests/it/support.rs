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

/// A YAML flow sequence of the args that run the demo upstream as a stdio child.
pub fn stdio_upstream(name: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "demo-upstream".to_string(),
        "--name".into(),
        name.into(),
        "--test-tools".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
    format!(
        "{{stdio: {{command: {BIN:?}, args: [{}]}}}}",
        args.join(", ")
    )
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

    pub async fn start_config(config: Config) -> Gateway {
        let agent = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::wrap(app::start_with(config, agent, admin).unwrap())
    }

    /// A gateway (id `gw`) with one stdio demo upstream `s` (extra demo args
    /// allowed) and one tenant `a` (key `ka`), ready.
    pub async fn one_upstream(extra: &[&str]) -> Gateway {
        let yaml = format!(
            "gateway: {{id: gw}}\nupstreams:\n  s: {}\ntenants:\n  a: {}\n",
            stdio_upstream("s", extra),
            tenant("ka", &["s"])
        );
        let gw = Gateway::start(&yaml).await;
        gw.wait_ready(&["s"]).await;
        gw
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
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let (_, body) = self.get_admin("/readyz").await;
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
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .and_then(|v| v.trim().parse().ok())
}

/// A tenant config line.
pub fn tenant(key: &str, upstreams: &[&str]) -> String {
    format!(
        "{{api_keys: [{key}], upstreams: [{}]}}",
        upstreams.join(", ")
    )
}
