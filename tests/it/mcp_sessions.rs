//! The handshake era's sessions over HTTP when `gateway.session_secret` is
//! set: ids sealed with the secret that any replica accepts, 404 for an id
//! tampered with, ended or another tenant's, DELETE, and the GET stream on
//! which the official SDKs' clients hear what changed.

use std::process::Command;

use serde_json::{Value, json};

use crate::support::*;

const SECRET: &str = "a-session-secret-of-more-than-32-characters";
const COUNTER: &str = "mcp://gw/sdk/resource/memo%3A%2F%2Fcounter";

fn config(secret: bool) -> String {
    let mut gateway = json!({"id": "gw"});
    if secret {
        gateway["session_secret"] = json!(SECRET);
    }
    json!({
        "gateway": gateway,
        "upstreams": {"s": stdio_upstream("s", &[]), "sdk": sdk_stdio()},
        "tenants": {"a": tenant("ka", &["s", "sdk"]), "b": tenant("kb", &["s"])},
    })
    .to_string()
}

async fn send(
    gw: &Gateway,
    method: reqwest::Method,
    key: &str,
    session: Option<&str>,
    body: Option<Value>,
) -> reqwest::Response {
    session_request(gw, method, key, session.map(|id| (id, None)), body).await
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}})
}

fn list() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_ids_are_sealed_and_any_replica_with_the_secret_accepts_them() {
    let yaml = config(true);
    let (one, two) = (Gateway::start(&yaml).await, Gateway::start(&yaml).await);
    one.wait_ready(&["s", "sdk"]).await;
    two.wait_ready(&["s", "sdk"]).await;
    let r = send(&one, reqwest::Method::POST, "ka", None, Some(initialize())).await;
    assert_eq!(r.status(), 200);
    let id = r
        .headers()
        .get("mcp-session-id")
        .expect("a session id")
        .to_str()
        .unwrap()
        .to_owned();
    let init: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(init["result"]["capabilities"]["tools"]["listChanged"], true);

    // The other replica serves the session.
    let r = send(&two, reqwest::Method::POST, "ka", Some(&id), Some(list())).await;
    assert_eq!(r.status(), 200);
    let listed: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert!(listed["result"]["tools"].is_array(), "{listed}");
    // Tampered with, or presented with another tenant's key: 404.
    let mut tampered = id.clone().into_bytes();
    let last = tampered.len() - 1;
    tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    for (key, session) in [("ka", tampered.as_str()), ("kb", id.as_str())] {
        let r = send(
            &two,
            reqwest::Method::POST,
            key,
            Some(session),
            Some(list()),
        )
        .await;
        assert_eq!(r.status(), 404, "{key}");
        let body: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
        assert_eq!(body["id"], 1, "{body}");
        assert_eq!(body["error"]["code"], -32600, "{body}");
    }
    // A GET must accept an event stream.
    let r = within(
        two.client
            .get(&two.url)
            .bearer_auth("ka")
            .header("mcp-session-id", &id)
            .header("accept", "application/json")
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 406);
    // DELETE ends it: refused there from then on.
    let r = send(&two, reqwest::Method::DELETE, "ka", Some(&id), None).await;
    assert_eq!(r.status(), 200);
    let r = send(&two, reqwest::Method::POST, "ka", Some(&id), Some(list())).await;
    assert_eq!(r.status(), 404);
    let r = send(&two, reqwest::Method::GET, "ka", Some(&id), None).await;
    assert_eq!(r.status(), 404);
    // No session and no key: the method is refused before credentials.
    let r = within(two.client.get(&two.url).send()).await.unwrap();
    assert_eq!(r.status(), 405);
    // A session id but no key: 401, as ever.
    let r = within(
        two.client
            .get(&two.url)
            .header("mcp-session-id", &id)
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 401);
    one.stop().await;
    two.stop().await;

    // Without the secret a session is still issued, sealed with a secret of
    // that process's own: it serves its client fully (GET, DELETE), and
    // another process, which cannot open it, answers 404.
    let (one, two) = (
        Gateway::start(&config(false)).await,
        Gateway::start(&config(false)).await,
    );
    one.wait_ready(&["s"]).await;
    two.wait_ready(&["s"]).await;
    let r = send(&one, reqwest::Method::POST, "ka", None, Some(initialize())).await;
    assert_eq!(r.status(), 200);
    let own = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let r = send(&one, reqwest::Method::POST, "ka", Some(&own), Some(list())).await;
    assert_eq!(r.status(), 200);
    let r = send(&two, reqwest::Method::POST, "ka", Some(&own), Some(list())).await;
    assert_eq!(r.status(), 404);
    let r = send(&one, reqwest::Method::DELETE, "ka", Some(&own), None).await;
    assert_eq!(r.status(), 200);
    let r = send(&one, reqwest::Method::POST, "ka", Some(&own), Some(list())).await;
    assert_eq!(r.status(), 404);
    one.stop().await;
    two.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_clients_hear_changes_on_their_sessions_stream() {
    servers();
    let gw = Gateway::start(&config(true)).await;
    gw.wait_ready(&["s", "sdk"]).await;
    let steps = json!([
        {"op": "call", "name": "sdk__add", "arguments": {"a": 2, "b": 2}},
        {"op": "read", "uri": COUNTER},
        {"op": "prompt", "name": "sdk__hello"},
        {"op": "subscribe", "uri": COUNTER},
        {"op": "notified", "method": "notifications/resources/updated", "then": [
            {"op": "call", "name": "sdk__bump", "arguments": {}},
        ]},
        {"op": "notified", "method": "notifications/tools/list_changed", "then": [
            {"op": "call", "name": "sdk__evolve", "arguments": {}},
        ]},
    ]);
    let (revision, answers) = sdk_client(&gw, "ka", "legacy", steps).await;
    assert_eq!(revision, "2025-11-25");
    assert_eq!(
        answers[0]["structuredContent"],
        json!({"sum": 4}),
        "{}",
        answers[0]
    );
    assert_eq!(
        answers[1]["contents"][0]["text"], "count=0",
        "{}",
        answers[1]
    );
    assert_eq!(
        answers[2]["messages"][0]["content"]["text"], "Hello, world!",
        "{}",
        answers[2]
    );
    assert!(answers[3].get("error").is_none(), "{}", answers[3]);
    assert_eq!(answers[4]["notified"], "notifications/resources/updated");
    assert_eq!(answers[5]["notified"], "notifications/tools/list_changed");
    gw.stop().await;

    // The TypeScript SDK's client, on a gateway of its own (its upstream's
    // tool changes once).
    let gw = Gateway::start(&config(true)).await;
    gw.wait_ready(&["s", "sdk"]).await;
    let script = root().join("target/mcp-node/mcp_ts_client.mjs");
    std::fs::copy(root().join("tests/fixtures/mcp_ts_client.mjs"), &script).unwrap();
    let mut client = Command::new("node");
    client.arg(&script).args([gw.url.as_str(), "ka"]);
    let echo = mcp_gateway::modelcontext::names::tool_name("s", "mcp://s/tools/echo:v1", 48);
    let steps = json!([
        {"op": "call", "name": "sdk__add", "arguments": {"a": 1, "b": 1}},
        {"op": "call", "name": echo, "arguments": {"text": "ts"}},
        {"op": "read", "uri": COUNTER},
        {"op": "prompt", "name": "sdk__greet", "arguments": {"name": "Ada"}},
        {"op": "notified", "method": "notifications/tools/list_changed", "then": [
            {"op": "call", "name": "sdk__evolve", "arguments": {}},
        ]},
    ]);
    let answers = run_client(client, steps).await;
    assert_eq!(answers[0]["protocolVersion"], "2025-11-25");
    assert!(answers[0]["session"].is_string(), "{}", answers[0]);
    assert_eq!(
        answers[1]["structuredContent"],
        json!({"sum": 2}),
        "{}",
        answers[1]
    );
    assert_eq!(
        answers[2]["structuredContent"],
        json!({"text": "ts"}),
        "{}",
        answers[2]
    );
    assert_eq!(
        answers[3]["contents"][0]["text"], "count=0",
        "{}",
        answers[3]
    );
    assert_eq!(
        answers[4]["messages"][0]["content"]["text"], "Hello, Ada!",
        "{}",
        answers[4]
    );
    assert_eq!(
        answers[5]["notified"], "notifications/tools/list_changed",
        "{}",
        answers[5]
    );
    // Another tenant's tool is a tool that does not exist.
    let mut client = Command::new("node");
    client.arg(&script).args([gw.url.as_str(), "kb"]);
    let answers = run_client(
        client,
        json!([{"op": "call", "name": "sdk__add", "arguments": {"a": 1, "b": 1}}]),
    )
    .await;
    assert_eq!(answers[1]["error"]["code"], -32602, "{}", answers[1]);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_clients_go_on_at_another_replica_without_a_new_handshake() {
    let yaml = config(true);
    let (one, two) = (Gateway::start(&yaml).await, Gateway::start(&yaml).await);
    one.wait_ready(&["s", "sdk"]).await;
    two.wait_ready(&["s", "sdk"]).await;
    let echo = mcp_gateway::modelcontext::names::tool_name("s", "mcp://s/tools/echo:v1", 48);
    let steps = json!([
        {"op": "tools"},
        {"op": "call", "name": echo, "arguments": {"text": "there"}},
        {"op": "call", "name": "sdk__add", "arguments": {"a": 20, "b": 22}},
        {"op": "read", "uri": COUNTER},
    ]);
    // The TypeScript SDK's client, with its session.
    servers();
    let script = root().join("target/mcp-node/mcp_ts_client.mjs");
    std::fs::copy(root().join("tests/fixtures/mcp_ts_client.mjs"), &script).unwrap();
    let before = (served(&one).await, served(&two).await);
    let mut client = Command::new("node");
    client
        .arg(&script)
        .args([one.url.as_str(), "ka", two.url.as_str()]);
    let answers = run_client(client, steps.clone()).await;
    assert!(answers[0]["session"].is_string(), "{}", answers[0]);
    assert!(answers[1]["tools"].is_array(), "{}", answers[1]);
    assert_eq!(answers[2]["structuredContent"], json!({"text": "there"}));
    assert_eq!(answers[3]["structuredContent"], json!({"sum": 42}));
    assert_eq!(answers[4]["contents"][0]["text"], "count=0");
    let after = (served(&one).await, served(&two).await);
    assert!(after.0 - before.0 <= 2.0, "{before:?} {after:?}");
    assert!(after.1 - before.1 >= 4.0, "{before:?} {after:?}");
    for (mode, revision) in [("legacy", "2025-11-25"), ("auto", "2026-07-28")] {
        let before = (served(&one).await, served(&two).await);
        let args = vec![
            mode.to_owned(),
            "http".to_owned(),
            one.url.clone(),
            "ka".to_owned(),
            two.url.clone(),
        ];
        let (negotiated, answers) = sdk_client_with(args, steps.clone()).await;
        assert_eq!(negotiated, revision);
        assert!(answers[0]["tools"].is_array(), "{mode}: {}", answers[0]);
        assert_eq!(
            answers[1]["structuredContent"],
            json!({"text": "there"}),
            "{mode}"
        );
        assert_eq!(
            answers[2]["structuredContent"],
            json!({"sum": 42}),
            "{mode}"
        );
        assert_eq!(answers[3]["contents"][0]["text"], "count=0", "{mode}");
        // The first replica heard the opening only; the second served every step.
        let after = (served(&one).await, served(&two).await);
        assert!(after.0 - before.0 <= 2.0, "{mode}: {before:?} {after:?}");
        assert!(after.1 - before.1 >= 4.0, "{mode}: {before:?} {after:?}");
    }
    one.stop().await;
    two.stop().await;
}

/// Requests of the Model Context Protocol a gateway has answered so far.
async fn served(gw: &Gateway) -> f64 {
    let metrics = gw.metrics().await;
    metric(
        &metrics,
        "mcp_gateway_requests_by_protocol_total{protocol=\"modelcontextprotocol\"}",
    )
    .unwrap_or(0.0)
}
