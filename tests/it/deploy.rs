//! The Kubernetes artifacts (Helm chart, kustomize base), the dashboard and the
//! alert rules, checked offline.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::support::*;

/// A virtualenv with the checks' Python packages (made by .ci/run; made here if missing).
fn venv_python() -> std::path::PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let venv = std::env::var_os("MCP_GATEWAY_DEPLOY_VENV")
        .map_or_else(|| root.join("target/deploy-venv"), Into::into);
    let python = venv.join("bin/python");
    if !python.exists() {
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .unwrap();
        assert!(
            made.success(),
            "python3 -m venv failed (install python3-venv, or run .ci/run)"
        );
        let installed = Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "-r"])
            .arg(root.join("deploy/checks/requirements.txt"))
            .status()
            .unwrap();
        assert!(
            installed.success(),
            "pip install -r deploy/checks/requirements.txt failed"
        );
    }
    python
}

#[test]
fn kubernetes_artifacts_pass_the_offline_checks() {
    let out = Command::new(venv_python())
        .arg("deploy/checks/run.py")
        .args(["--gateway", BIN])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("all offline deployment checks passed"),
        "{text}"
    );
}

/// Every `mcp_gateway_*` name in `text`, without the histogram suffixes.
fn metric_names(text: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("mcp_gateway_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .fold(name, |n, s| n.strip_suffix(s).unwrap_or(n));
        names.insert(base.to_owned());
        rest = &tail[end..];
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_alerts_and_readme_use_only_metrics_the_gateway_exports() {
    use serde_json::json;
    // An upstream that asks for users' consent (its series exist at once).
    let consent = json!({
        "auth": {
            "resource": "http://gw.test/mcp",
            "jwt": [{
                "issuer": "http://127.0.0.1:9",
                "jwks_url": "http://127.0.0.1:9/jwks",
                "tenant": "a",
                "login": {"client_id": "l", "client_secret": "s"},
            }],
        },
        "upstream_auth": {
            "public_url": "http://127.0.0.1:9",
            "encryption_keys": [{
                "id": "k",
                "key": "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
            }],
        },
    });
    // With a store, and limits that lease and borrow from it, so that its
    // series exist too; and an upstream with a child per session.
    let redis = crate::support::Redis::start();
    let yaml = json!({
        "gateway": with_keys(
            json!({"id": "gw", "session_secret": "s".repeat(40), "store": {"url": redis.url()}}),
            consent,
        ),
        "upstreams": {
            "s": stdio_upstream("s", &[]),
            "loc": Doc::of(crate::support::sdk_stdio())
            .remove("timeout_ms")
            .set("per_session", true),
            "cred": {
                "http": {"url": "http://127.0.0.1:9/mcp"},
                "auth": {
                    "client_credentials": {
                        "token_url": "http://127.0.0.1:9/token",
                        "client_id": "c",
                        "client_secret": "s",
                    },
                },
            },
            "con": {
                "http": {"url": "http://127.0.0.1:9/mcp"},
                "auth": {"user_consent": {"issuer": "http://127.0.0.1:9"}},
            },
        },
        "tenants": {
            "a": {
                "api_keys": ["ka"],
                "upstreams": ["s"],
                "rate_limit": {"per_second": 1000, "burst": 1000},
                "max_concurrency": 1,
            },
            "b": {
                "api_keys": ["kb"],
                "upstreams": ["s"],
                "tools": {"discovery": {"mode": "auto", "threshold": 1000}},
            },
        },
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["s"]).await;
    within(async {
        while metric(&gw.metrics().await, "mcp_gateway_store_up") != Some(1.0) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // Make every labelled series exist at least once.
    gw.execute("ka", "mcp://gw/s/s/tools/echo:v1", json!({"text": "x"}))
        .await;
    gw.post(
        "ka",
        concat!(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","method":"initialized"}"#
        ),
    )
    .await;
    // Discovery's series (tenant b: a's one call at a time is another
    // test's): a search that finds, one that does not, a call.
    for query in ["echo", "zebra"] {
        let search = "mcp://gw/~discovery/tool/search_tools";
        gw.execute("kb", search, json!({"query": query})).await;
    }
    let call = "mcp://gw/~discovery/tool/call_tool";
    gw.execute(
        "kb",
        call,
        json!({"name": "mcp://gw/s/s/tools/echo:v1", "arguments": {"text": "x"}}),
    )
    .await;
    // A load, in a handshake-era session.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let post = reqwest::Method::POST;
    let opened = crate::support::session_request(&gw, post.clone(), "kb", None, Some(init)).await;
    let session = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let load = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "load_tools", "arguments": {"names": ["mcp://gw/s/s/tools/echo:v1"]}}});
    let at = Some((session.as_str(), Some("2025-11-25")));
    let loaded = crate::support::session_request(&gw, post, "kb", at, Some(load)).await;
    let loaded = loaded.text().await.unwrap();
    assert!(
        loaded.contains(r#""structuredContent":{"loaded":["#),
        "{loaded}"
    );
    gw.execute("ka", "mcp://gw/s/s/tools/crash", json!({}))
        .await;
    gw.wait_ready(&["s"]).await;
    let exported = metric_names(&gw.metrics().await);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for file in [
        "deploy/grafana/mcp-gateway-dashboard.json",
        "deploy/prometheus/alerts.yaml",
        "docs/operations.md",
        "docs/reliability.md",
    ] {
        let used = metric_names(&std::fs::read_to_string(root.join(file)).unwrap());
        assert!(!used.is_empty(), "{file} names no metric");
        let missing: Vec<_> = used.difference(&exported).collect();
        assert!(
            missing.is_empty(),
            "{file} uses metrics the gateway does not export: {missing:?}\nexported: {exported:?}"
        );
    }
    // And the operations guide documents every metric the gateway exports.
    let documented =
        metric_names(&std::fs::read_to_string(root.join("docs/operations.md")).unwrap());
    let undocumented: Vec<_> = exported.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "docs/operations.md does not document {undocumented:?}"
    );
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("deploy/grafana/mcp-gateway-dashboard.json")).unwrap(),
    )
    .unwrap();
    assert!(dashboard["panels"].as_array().unwrap().len() >= 10);
    gw.stop().await;
}
