//! The demo upstream: a small, strict MCP v1.0 server that ships in the binary
//! (`mcp-gateway demo-upstream`), over stdio or HTTP. The embedded demo config
//! uses it, and so do the tests and benchmarks: with `--test-tools` it also
//! offers tools that sleep, crash, fail, or break their output schema, and
//! definitions that break the spec's schemas.

pub mod http;
pub mod modelcontext;
pub mod stdio;
mod tools;

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::config::{Config, ConfigError, SystemSecrets, TransportSpec};
use crate::jsonrpc::Json;

/// The embedded demo configuration text.
pub const DEMO_CONFIG: &str = include_str!("demo.yaml");

/// The demo configuration, with `local` running this executable and `remote`
/// pointing at `remote_url`.
pub fn demo_config(remote_url: &str) -> Result<Config, ConfigError> {
    let mut config = Config::from_yaml(DEMO_CONFIG, &SystemSecrets::default())?;
    let exe =
        std::env::current_exe().map_or_else(|_| "mcp-gateway".into(), |p| p.display().to_string());
    for up in &mut config.upstreams {
        match &mut up.transport {
            TransportSpec::Stdio(s) => s.command.clone_from(&exe),
            TransportSpec::Http(h) => h.url = remote_url.to_owned(),
        }
    }
    Ok(config)
}

/// How a demo server behaves.
#[derive(Debug, Clone, Default)]
pub struct DemoOptions {
    /// Used in its mcpIds: `mcp://{name}/tools/echo:v1`.
    pub name: String,
    /// Adds the tools and broken definitions the tests need.
    pub test_tools: bool,
    /// Declares `executionProvider.execute: false`.
    pub no_execute: bool,
    /// Appends every message received to this file, one per line.
    pub record: Option<PathBuf>,
    /// Appended to every tool's description: a changed definition, for pinning tests.
    pub description_suffix: Option<String>,
    /// This many more tools, listed only (for scale benchmarks): `gen{i}:v1`.
    pub extra_tools: usize,
    /// Speaks the Model Context Protocol instead of MCP v1.0.
    pub modelcontext: bool,
    /// Its `tools/list` says the listing may be kept this long (`ttlMs`).
    pub listing_ttl_ms: Option<u64>,
}

impl DemoServer {
    /// The `touch` tool: a new motd version, announced with `mcp/resourceDidChange`.
    fn touch(&self) -> Answer {
        let version = self.version.fetch_add(1, Ordering::Relaxed) + 1;
        let _ = self
            .changes
            .send(format!("mcp://{}/resources/motd", self.opts.name));
        Answer::Result(json!({"output": {"version": version}}))
    }

    /// Resource changes, for a session that has read `initialized`.
    pub fn subscribe_changes(&self) -> broadcast::Receiver<String> {
        self.changes.subscribe()
    }
}

/// The notification a session sends when a resource changed.
pub fn change_notification(id: &str) -> Vec<u8> {
    json!({"jsonrpc": "2.0", "method": "mcp/resourceDidChange", "params": {"id": id}})
        .to_string()
        .into_bytes()
}

/// What the server answers to one request.
pub enum Answer {
    Result(Value),
    Error(Value),
    /// The `crash` tool: the process exits without answering.
    Crash,
    /// Tools that misbehave on the transport: write these bytes to stdout
    /// unframed, then answer with the value (if any). Over HTTP: just the answer.
    Raw(Vec<u8>, Option<Value>),
    /// Write this many lines to stderr as fast as possible, then answer.
    StderrFlood(u64),
}

fn error(code: i64, message: &str, data: Option<Value>) -> Answer {
    let mut e = json!({"code": code, "message": message});
    if let Some(d) = data {
        e["data"] = d;
    }
    Answer::Error(e)
}

pub struct DemoServer {
    opts: DemoOptions,
    tools: Vec<Value>,
    resources: Vec<Value>,
    prompts: Vec<Value>,
    record: Mutex<Option<std::fs::File>>,
    /// Bumped by the `touch` tool; part of the motd resource's content.
    version: AtomicU64,
    /// Ids of resources that changed, for every open session.
    changes: broadcast::Sender<String>,
    /// `tools/list`'s result in the Model Context Protocol, written once.
    mc_tools: String,
    /// Tool calls answered, in either protocol (`GET /stats` says how many,
    /// and so does the `calls` tool of `--modelcontext`: what a benchmark
    /// checks a proxy passed on).
    calls: AtomicU64,
}

impl DemoServer {
    pub fn new(opts: DemoOptions) -> std::io::Result<Self> {
        let record = match &opts.record {
            Some(path) => Some(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)?,
            ),
            None => None,
        };
        let (mut tools, resources, prompts) = tools::definitions(&opts.name, opts.test_tools);
        tools.extend((0..opts.extra_tools).map(|i| tools::generated(&opts.name, i)));
        if let Some(suffix) = &opts.description_suffix {
            for t in &mut tools {
                if let Some(Value::String(d)) = t.get_mut("description") {
                    d.push_str(suffix);
                }
            }
        }
        Ok(Self {
            mc_tools: modelcontext::tool_list(&tools, opts.listing_ttl_ms),
            calls: AtomicU64::new(0),
            opts,
            tools,
            resources,
            prompts,
            record: Mutex::new(record),
            version: AtomicU64::new(1),
            changes: broadcast::Sender::new(64),
        })
    }

    /// Whether it speaks the Model Context Protocol (else MCP v1.0).
    pub fn modelcontext(&self) -> bool {
        self.opts.modelcontext
    }

    /// Appends one received message to the record file, if any.
    pub fn record(&self, body: &[u8]) {
        use std::io::Write;
        if let Ok(mut guard) = self.record.lock() {
            if let Some(f) = guard.as_mut() {
                let _ = f.write_all(body);
                let _ = f.write_all(b"\n");
            }
        }
    }

    /// Tool calls answered so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    pub fn capabilities(&self) -> Value {
        json!({
            "listToolsProvider": true,
            "listResourcesProvider": true,
            "listPromptsProvider": true,
            "executionProvider": {"execute": !self.opts.no_execute}
        })
    }

    /// Answers one request (the handshake is the transport's business).
    pub async fn call(&self, method: &str, params: Option<Json<'_>>) -> Answer {
        match method {
            "initialize" => Answer::Result(json!({"capabilities": self.capabilities()})),
            "mcp/listTools" => Answer::Result(Value::Array(self.tools.clone())),
            "mcp/listResources" => {
                let version = self.version.load(Ordering::Relaxed);
                let mut resources = self.resources.clone();
                if let Some(content) = resources[0].get_mut("content") {
                    *content = json!(format!("Hello from {}, version {version}.", self.opts.name));
                }
                Answer::Result(Value::Array(resources))
            }
            "mcp/listPrompts" => Answer::Result(Value::Array(self.prompts.clone())),
            "mcp/executeTool" if self.opts.no_execute => error(-32601, "Method not found", None),
            "mcp/executeTool" => {
                self.calls.fetch_add(1, Ordering::Relaxed);
                let params: Value = params
                    .and_then(|p| serde_json::from_str(p.get()).ok())
                    .unwrap_or(Value::Null);
                let id = params.get("id").and_then(Value::as_str).unwrap_or_default();
                let args = params.get("arguments").cloned().unwrap_or(Value::Null);
                if self.opts.test_tools && id == format!("mcp://{}/tools/touch", self.opts.name) {
                    return self.touch();
                }
                tools::execute(&self.opts.name, self.opts.test_tools, id, &args).await
            }
            _ => error(-32601, "Method not found", None),
        }
    }
}
