//! Clients of the Model Context Protocol through the gateway: the official
//! Python and TypeScript SDKs' clients against upstreams of both protocols
//! through one URL, the Python client spawning `mcp-gateway stdio`, a
//! second replica serving a client without a new handshake, and the edge's
//! refusals a client meets (an origin not allowed, a tenant over its rate).

use std::process::Command;

use serde_json::{Value, json};

use crate::support::*;
use mcp_gateway::config::Config;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_client_uses_upstreams_of_both_protocols_through_one_url() {
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {"s": stdio_upstream("s", &[]), "time": time_stdio()},
        "tenants": {"a": tenant("ka", &["s", "time"]), "b": tenant("kb", &["s"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["s", "time"]).await;
    let echo = mcp_gateway::modelcontext::names::tool_name("s", "mcp://s/tools/echo:v1", 48);
    let steps = json!([
        {"op": "tools"},
        {"op": "call", "name": echo, "arguments": {"text": "hi"}},
        {"op": "call", "name": "time__get_current_time", "arguments": {"timezone": "UTC"}},
        {"op": "call", "name": echo, "arguments": {"text": 5}},
        {"op": "call", "name": "nope__nothing", "arguments": {}},
        {"op": "resources"},
        {"op": "read", "uri": "mcp://gw/s/s/resources/motd"},
        {"op": "prompts"},
    ]);
    for mode in ["legacy", "auto"] {
        let (revision, answers) = sdk_client(&gw, "ka", mode, steps.clone()).await;
        // The SDK's default probes `server/discover` and stays stateless.
        let expected = if mode == "auto" {
            "2026-07-28"
        } else {
            "2025-11-25"
        };
        assert_eq!(revision, expected, "{mode}");
        let tools = answers[0]["tools"].as_array().unwrap();
        let listed = tools
            .iter()
            .find(|t| t["name"] == echo)
            .expect("echo listed");
        assert_eq!(
            listed["_meta"]["dev.mcp-gateway/mcpId"],
            "mcp://gw/s/s/tools/echo:v1"
        );
        assert_eq!(listed["title"], "echo");
        assert!(tools.iter().any(|t| t["name"] == "time__get_current_time"));
        for t in tools {
            let name = t["name"].as_str().unwrap();
            assert!(mcp_gateway::modelcontext::names::is_valid(name), "{name}");
        }
        assert_eq!(
            answers[1]["structuredContent"],
            json!({"text": "hi"}),
            "{mode}"
        );
        assert_eq!(answers[2]["structuredContent"]["timezone"], "UTC", "{mode}");
        // Arguments the schema refuses are the tool's error, said in text.
        assert_eq!(answers[3]["isError"], true, "{}", answers[3]);
        assert!(
            answers[3]["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("/text")
        );
        assert_eq!(answers[4]["error"]["code"], -32602, "{}", answers[4]);
        let resources = answers[5]["resources"].as_array().unwrap();
        assert!(
            resources
                .iter()
                .any(|r| r["uri"] == "mcp://gw/s/s/resources/motd")
        );
        assert_eq!(
            answers[6]["contents"][0]["text"],
            "Hello from s, version 1."
        );
        assert!(
            answers[7]["prompts"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["title"] == "greeting")
        );
    }
    let metrics = gw.metrics().await;
    let by = |p: &str| {
        metric(
            &metrics,
            &format!("mcp_gateway_requests_by_protocol_total{{protocol=\"{p}\"}}"),
        )
        .unwrap()
    };
    assert!(by("modelcontextprotocol") >= 16.0, "{metrics}");
    assert_eq!(by("v1"), 0.0);
    // Another tenant's tool is a tool that does not exist.
    let (_, answers) = sdk_client(
        &gw,
        "kb",
        "legacy",
        json!([{"op": "tools"}, {"op": "call", "name": "time__get_current_time", "arguments": {"timezone": "UTC"}}]),
    )
    .await;
    assert!(
        answers[0]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| !t["name"].as_str().unwrap().starts_with("time"))
    );
    assert_eq!(answers[1]["error"]["code"], -32602, "{}", answers[1]);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_client_spawns_the_stdio_mode() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gw.yaml");
    std::fs::write(
        &config,
        json!({
            "gateway": {"id": "gw"},
            "upstreams": {"s": stdio_upstream("s", &[]), "time": time_stdio()},
            "tenants": {"a": tenant("ka", &["s", "time"])},
        })
        .to_string(),
    )
    .unwrap();
    let echo = mcp_gateway::modelcontext::names::tool_name("s", "mcp://s/tools/echo:v1", 48);
    let steps = json!([
        {"op": "tools"},
        {"op": "call", "name": echo, "arguments": {"text": "over stdio"}},
        {"op": "call", "name": "time__get_current_time", "arguments": {"timezone": "UTC"}},
        {"op": "read", "uri": "mcp://gw/s/s/resources/motd"},
    ]);
    for mode in ["legacy", "auto"] {
        let (revision, answers) = sdk_stdio_client(mode, &config, "a", steps.clone()).await;
        // Over stdio too the SDK's default probes `server/discover` first.
        let expected = if mode == "auto" {
            "2026-07-28"
        } else {
            "2025-11-25"
        };
        assert_eq!(revision, expected, "{mode}");
        assert!(
            answers[0]["tools"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["name"] == echo)
        );
        assert_eq!(
            answers[1]["structuredContent"],
            json!({"text": "over stdio"}),
            "{mode}"
        );
        assert_eq!(answers[2]["structuredContent"]["timezone"], "UTC", "{mode}");
        assert_eq!(
            answers[3]["contents"][0]["text"],
            "Hello from s, version 1."
        );
    }
}

#[tokio::test]
async fn an_origin_not_allowed_is_refused_and_no_origin_is_served() {
    let yaml = json!({
        "gateway": {"id": "gw", "allowed_origins": ["http://localhost:6274"]},
        "upstreams": {"s": stdio_upstream("s", &[])},
        "tenants": {"a": tenant("ka", &["s"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["s"]).await;
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let post = |origin: Option<&'static str>| {
        let mut req = gw
            .client
            .post(&gw.url)
            .bearer_auth("ka")
            .header("content-type", "application/json")
            .body(ping);
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        req.send()
    };
    for (origin, status) in [
        (None, 200),
        (Some("http://localhost:6274"), 200),
        (Some("HTTP://LOCALHOST:6274"), 200),
        (Some("http://evil.example"), 403),
        (Some("http://localhost:6275"), 403),
        (Some("null"), 403),
    ] {
        let r = within(post(origin)).await.unwrap();
        assert_eq!(r.status(), status, "{origin:?}");
    }
    gw.stop().await;
    let bad = Config::from_yaml(
        "gateway: {allowed_origins: [\"http://x/path\", \"localhost\"]}\n",
        &mcp_gateway::config::SystemSecrets::default(),
    );
    let err = bad.expect_err("refused").to_string();
    assert!(
        err.contains("gateway.allowed_origins[0]") && err.contains("gateway.allowed_origins[1]"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_client_uses_upstreams_of_both_protocols() {
    servers();
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {"s": stdio_upstream("s", &[]), "time": time_stdio()},
        "tenants": {"a": tenant("ka", &["s", "time"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["s", "time"]).await;
    // ES modules resolve packages from their own directory: the client runs
    // from beside the installed SDK.
    let script = root().join("target/mcp-node/mcp_ts_client.mjs");
    std::fs::copy(root().join("tests/fixtures/mcp_ts_client.mjs"), &script).unwrap();
    let echo = mcp_gateway::modelcontext::names::tool_name("s", "mcp://s/tools/echo:v1", 48);
    let steps = json!([
        {"op": "tools"},
        {"op": "call", "name": echo, "arguments": {"text": "from ts"}},
        {"op": "call", "name": "time__get_current_time", "arguments": {"timezone": "UTC"}},
        {"op": "read", "uri": "mcp://gw/s/s/resources/motd"},
        {"op": "prompts"},
        {"op": "call", "name": "nope__nothing", "arguments": {}},
    ]);
    let mut client = Command::new("node");
    client.arg(&script).args([gw.url.as_str(), "ka"]);
    let answers = run_client(client, steps).await;
    assert_eq!(answers[0]["protocolVersion"], "2025-11-25");
    assert!(
        answers[1]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == echo)
    );
    assert_eq!(answers[2]["structuredContent"], json!({"text": "from ts"}));
    assert_eq!(answers[3]["structuredContent"]["timezone"], "UTC");
    assert_eq!(
        answers[4]["contents"][0]["text"],
        "Hello from s, version 1."
    );
    assert!(
        answers[5]["prompts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["title"] == "greeting")
    );
    assert_eq!(answers[6]["error"]["code"], -32602, "{}", answers[6]);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_replica_serves_a_client_without_a_new_handshake() {
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {"s": stdio_upstream("s", &[])},
        "tenants": {"a": tenant("ka", &["s"])},
    })
    .to_string();
    let (first, second) = (Gateway::start(&yaml).await, Gateway::start(&yaml).await);
    first.wait_ready(&["s"]).await;
    second.wait_ready(&["s"]).await;
    let init = first
        .rpc(
            "ka",
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
        )
        .await;
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "{init}");
    let echo = mcp_gateway::modelcontext::names::tool_name("s", "mcp://s/tools/echo:v1", 48);
    // The next request goes to the other replica, which never saw the handshake.
    let call = second
        .rpc(
            "ka",
            "tools/call",
            json!({"name": echo, "arguments": {"text": "elsewhere"}}),
        )
        .await;
    assert_eq!(
        call["result"]["structuredContent"],
        json!({"text": "elsewhere"}),
        "{call}"
    );
    // An MCP v1.0 initialize is still MCP v1.0's (id 1 or -32600).
    let (_, v1) = first
        .post(
            "ka",
            r#"{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"clientCapabilities":{}}}"#,
        )
        .await;
    assert!(v1.contains("-32600"), "{v1}");
    first.stop().await;
    second.stop().await;
}

#[tokio::test]
async fn a_client_over_its_tenants_rate_is_answered_429_with_retry_after() {
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {"s": stdio_upstream("s", &[])},
        "tenants": {
            "a": {
                "api_keys": ["ka"],
                "upstreams": ["s"],
                "rate_limit": {"per_second": 1, "burst": 1},
            },
        },
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["s"]).await;
    let echo = mcp_gateway::modelcontext::names::tool_name("s", "mcp://s/tools/echo:v1", 48);
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": echo, "arguments": {"text": "x"}}}).to_string();
    let (first, body) = gw.post("ka", &call).await;
    assert_eq!(first, 200, "{body}");
    let r = within(
        gw.client
            .post(&gw.url)
            .bearer_auth("ka")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(call)
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 429);
    assert!(r.headers().contains_key("retry-after"));
    let body: Value = serde_json::from_str(&within(r.text()).await.unwrap()).unwrap();
    assert_eq!(body["error"]["code"], -32004, "{body}");
    gw.stop().await;
}
