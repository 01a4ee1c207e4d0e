//! The official SDKs and reference servers the tests run (installed by
//! tests/run.sh): where they are, starting them, and driving an SDK client
//! through a list of steps.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Once;
use std::time::Duration;

use serde_json::{Value, json};

use super::*;

pub(crate) fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub(crate) fn venv() -> PathBuf {
    root().join("target/mcp-venv")
}

pub(crate) fn everything_js() -> PathBuf {
    root()
        .join("target/mcp-node/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
}

/// The pinned servers and clients, installed once (before any test that
/// needs them uses them) unless every pin is installed already, as
/// `tests/run.sh` leaves them.
pub(crate) fn servers() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let pins = std::fs::read_to_string(root().join("tests/fixtures/mcp-servers.txt")).unwrap();
        let pinned = |tool: &str| -> Vec<String> {
            pins.lines()
                .filter_map(|l| l.strip_prefix(tool))
                .map(|p| p.trim().to_owned())
                .collect()
        };
        let pip_ok = Command::new(venv().join("bin/pip"))
            .arg("freeze")
            .output()
            .is_ok_and(|out| {
                // Compared as pip normalizes names: case, `-` and `_`.
                let norm = |s: &str| s.to_lowercase().replace('_', "-");
                let frozen = norm(&String::from_utf8_lossy(&out.stdout));
                pinned("pip ")
                    .iter()
                    .all(|pin| frozen.lines().any(|l| l == norm(pin)))
            });
        if !pip_ok {
            let _ = std::fs::remove_dir_all(venv());
            let made = Command::new("python3")
                .args(["-m", "venv"])
                .arg(venv())
                .status()
                .unwrap();
            assert!(made.success(), "python3 -m venv failed (run tests/run.sh)");
            let pip = Command::new(venv().join("bin/pip"))
                .args(["install", "--quiet"])
                .args(pinned("pip "))
                .status()
                .unwrap();
            assert!(pip.success(), "pip install of the pinned servers failed");
        }
        let npm_ok = pinned("npm ").iter().all(|pin| {
            let (name, version) = pin.rsplit_once('@').unwrap();
            let manifest = root().join(format!("target/mcp-node/node_modules/{name}/package.json"));
            std::fs::read_to_string(manifest)
                .is_ok_and(|m| m.contains(&format!("\"version\": \"{version}\"")))
        });
        if !npm_ok {
            let npm = Command::new("npm")
                .args(["install", "--silent", "--no-audit", "--no-fund", "--prefix"])
                .arg(root().join("target/mcp-node"))
                .args(pinned("npm "))
                .status()
                .unwrap();
            assert!(npm.success(), "npm install of the pinned servers failed");
        }
    });
}

/// A server process this test started; killed (by its pid) when dropped.
pub(crate) struct Server {
    child: Child,
    pub(crate) url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `cmd` and waits for the line on `stderr` (or stdout) that names
/// its port, after `marker`.
pub(crate) fn start_server(mut cmd: Command, marker: &str, from_stderr: bool) -> Server {
    if from_stderr {
        cmd.stderr(Stdio::piped()).stdout(Stdio::null());
    } else {
        cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
    }
    let mut child = cmd.spawn().unwrap();
    let pipe: Box<dyn std::io::Read + Send> = if from_stderr {
        Box::new(child.stderr.take().unwrap())
    } else {
        Box::new(child.stdout.take().unwrap())
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let marker = marker.to_owned();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            if !sent {
                if let Some(port) = line.strip_prefix(&marker) {
                    let _ = tx.send(port.trim().to_owned());
                    sent = true;
                }
            }
        }
    });
    let port = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the server did not say its port");
    Server {
        child,
        url: format!("http://127.0.0.1:{port}/mcp"),
    }
}

/// server-everything over Streamable HTTP on 127.0.0.1 (`port` 0: a free one).
pub(crate) fn everything_http(port: u16) -> Server {
    servers();
    let mut cmd = Command::new("node");
    cmd.arg("--require")
        .arg(root().join("tests/fixtures/loopback.cjs"))
        .arg(everything_js())
        .arg("streamableHttp")
        .env("PORT", port.to_string());
    start_server(cmd, "LOOPBACK_PORT ", true)
}

/// Our Python SDK server over Streamable HTTP on a free port of 127.0.0.1.
pub(crate) fn sdk_server() -> Server {
    servers();
    let mut cmd = Command::new(venv().join("bin/python"));
    cmd.arg(root().join("tests/fixtures/mcp_sdk_server.py"));
    start_server(cmd, "PORT ", false)
}

/// The Python SDK server whose tools ask the SDK's own way (`Resolve`),
/// over Streamable HTTP on a free port of 127.0.0.1: it takes both eras.
pub(crate) fn resolve_server() -> Server {
    servers();
    let mut cmd = Command::new(venv().join("bin/python"));
    cmd.arg(root().join("tests/fixtures/mcp_resolve_server.py"));
    start_server(cmd, "PORT ", false)
}

/// The same server speaking only the 2026-07-28 revision: anything else
/// (an `initialize` above all) is refused as such a server refuses it.
pub(crate) fn resolve_server_modern() -> Server {
    servers();
    let mut cmd = Command::new(venv().join("bin/python"));
    cmd.arg(root().join("tests/fixtures/mcp_resolve_server.py"))
        .arg("modern");
    start_server(cmd, "PORT ", false)
}

pub(crate) fn everything_stdio() -> Value {
    servers();
    json!({
        "stdio": {"command": "node", "args": [everything_js(), "stdio"]},
        "protocol": "modelcontextprotocol",
    })
}

pub(crate) fn time_stdio() -> Value {
    servers();
    json!({
        "stdio": {
            "command": venv().join("bin/mcp-server-time"),
            "args": ["--local-timezone", "UTC"],
        },
        "protocol": "modelcontextprotocol",
    })
}

pub(crate) fn http(url: &str) -> Value {
    json!({"http": {"url": url}, "protocol": "modelcontextprotocol", "timeout_ms": 10000})
}

pub(crate) fn sdk_stdio() -> Value {
    servers();
    json!({
        "stdio": {
            "command": venv().join("bin/python"),
            "args": [root().join("tests/fixtures/mcp_sdk_server.py"), "stdio"],
        },
        "protocol": "modelcontextprotocol",
        "timeout_ms": 1000,
    })
}

/// Runs the Python SDK's client (`tests/fixtures/mcp_sdk_client.py`) against
/// the gateway with `steps`; the negotiated revision, then one answer per step.
pub(crate) async fn sdk_client(
    gw: &Gateway,
    key: &str,
    mode: &str,
    steps: Value,
) -> (String, Vec<Value>) {
    sdk_client_with(
        vec![mode.into(), "http".into(), gw.url.clone(), key.into()],
        steps,
    )
    .await
}

/// The Python SDK's client spawning `mcp-gateway stdio` on `config` as
/// `tenant`, in `mode` (`legacy` or `auto`), with `steps`.
pub(crate) async fn sdk_stdio_client(
    mode: &str,
    config: &Path,
    tenant: &str,
    steps: Value,
) -> (String, Vec<Value>) {
    let args = vec![
        mode.to_owned(),
        "stdio".to_owned(),
        super::BIN.to_owned(),
        config.display().to_string(),
        tenant.to_owned(),
    ];
    sdk_client_with(args, steps).await
}

/// The same, with the client's own arguments (a transport and its settings).
pub(crate) async fn sdk_client_with(args: Vec<String>, steps: Value) -> (String, Vec<Value>) {
    servers();
    let mut client = Command::new(venv().join("bin/python"));
    client
        .arg(root().join("tests/fixtures/mcp_sdk_client.py"))
        .args(&args);
    let mut lines = run_client(client, steps).await.into_iter();
    let hello = lines.next().unwrap();
    (
        hello["protocolVersion"].as_str().unwrap().to_owned(),
        lines.collect(),
    )
}

/// Runs a client process with `steps` on its stdin; the JSON lines it printed.
pub(crate) async fn run_client(mut client: Command, steps: Value) -> Vec<Value> {
    let out = tokio::task::spawn_blocking(move || {
        let mut child = client
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(steps.to_string().as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    });
    let out = within(out).await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the client failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .collect()
}
