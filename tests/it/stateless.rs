//! The Model Context Protocol's stateless era (2026-07-28) on the gateway's
//! face: the official Python SDK's client in its default mode (it probes
//! `server/discover` and stays on that revision), its `subscriptions/listen`
//! stream, and the revision's checks and statuses, read off the wire.

use serde_json::{Value, json};

use crate::support::*;
use mcp_gateway::modelcontext::names::tool_name;

const COUNTER: &str = "mcp://gw/sdk/resource/memo%3A%2F%2Fcounter";

fn config() -> String {
    json!({
        "gateway": {"id": "gw"},
        "upstreams": {"s": stdio_upstream("s", &[]), "sdk": sdk_stdio()},
        "tenants": {"a": tenant("ka", &["s", "sdk"]), "b": tenant("kb", &["s"])},
    })
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_client_by_default_is_stateless_and_hears_changes() {
    let gw = Gateway::start(&config()).await;
    gw.wait_ready(&["s", "sdk"]).await;
    let echo = tool_name("s", "mcp://s/tools/echo:v1", 48);
    let steps = json!([
        {"op": "tools"},
        {"op": "call", "name": echo, "arguments": {"text": "stateless"}},
        {"op": "call", "name": "sdk__add", "arguments": {"a": 2, "b": 40}},
        {"op": "read", "uri": COUNTER},
        {"op": "prompt", "name": "sdk__hello"},
        {"op": "read", "uri": "mcp://gw/sdk/resource/nothing"},
        {"op": "prompts"},
        {"op": "prompt", "name": "sdk__greet", "arguments": {"name": "Ada"}},
        {"op": "listen", "uris": [COUNTER], "count": 2, "then": [
            {"op": "call", "name": "sdk__bump", "arguments": {}},
            {"op": "call", "name": "sdk__evolve", "arguments": {}},
        ]},
    ]);
    let (revision, answers) = sdk_client(&gw, "ka", "auto", steps).await;
    assert_eq!(revision, "2026-07-28");
    let tools = answers[0]["tools"].as_array().unwrap();
    assert!(tools.iter().any(|t| t["name"] == echo), "{tools:?}");
    // What the upstream's own definition says beyond MCP v1.0 is kept.
    let add = tools.iter().find(|t| t["name"] == "sdk__add").unwrap();
    assert_eq!(add["title"], "Add two numbers", "{add}");
    assert_eq!(add["annotations"]["readOnlyHint"], true, "{add}");
    assert_eq!(
        add["_meta"]["dev.mcp-gateway/mcpId"],
        "mcp://gw/sdk/tool/add"
    );
    assert_eq!(
        answers[1]["structuredContent"],
        json!({"text": "stateless"})
    );
    assert_eq!(
        answers[2]["structuredContent"],
        json!({"sum": 42}),
        "{}",
        answers[2]
    );
    assert_eq!(
        answers[3]["contents"][0]["text"], "count=0",
        "{}",
        answers[3]
    );
    assert_eq!(
        answers[4]["messages"][0]["content"]["text"], "Hello, world!",
        "{}",
        answers[4]
    );
    // That revision's "not found" is invalid params.
    assert_eq!(answers[5]["error"]["code"], -32602, "{}", answers[5]);
    // An upstream's prompt that takes arguments is offered with them, and
    // got through it with the client's.
    let prompts = answers[6]["prompts"].as_array().unwrap();
    let greet = prompts.iter().find(|p| p["name"] == "sdk__greet").unwrap();
    assert_eq!(greet["arguments"][0]["name"], "name", "{greet}");
    assert_eq!(greet["arguments"][0]["required"], true, "{greet}");
    assert_eq!(
        greet["_meta"]["dev.mcp-gateway/mcpId"],
        "mcp://gw/sdk/prompt/greet"
    );
    assert!(prompts.iter().any(|p| p["name"] == "sdk__hello"));
    assert!(
        prompts.iter().any(|p| p["title"] == "greeting"),
        "{prompts:?}"
    );
    assert_eq!(
        answers[7]["messages"][0]["content"]["text"], "Hello, Ada!",
        "{}",
        answers[7]
    );
    let mut events: Vec<String> = answers[8]["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{} {}",
                e["type"].as_str().unwrap(),
                e["uri"].as_str().unwrap_or("")
            )
        })
        .collect();
    events.sort();
    assert_eq!(
        events,
        vec![
            "ResourceUpdated mcp://gw/sdk/resource/memo%3A%2F%2Fcounter".to_owned(),
            "ToolsListChanged ".to_owned(),
        ],
        "{}",
        answers[8]
    );
    // Another tenant's tool is a tool that does not exist, in this era too.
    let (_, refused) = sdk_client(
        &gw,
        "kb",
        "auto",
        json!([{"op": "call", "name": "sdk__add", "arguments": {"a": 1, "b": 1}}]),
    )
    .await;
    assert_eq!(refused[0]["error"]["code"], -32602, "{}", refused[0]);
    gw.stop().await;
}

/// POSTs `body` with the stateless era's headers (`headers` may drop or
/// change them); the status and the body as JSON.
async fn post(gw: &Gateway, headers: &[(&str, &str)], body: &Value) -> (u16, Value) {
    let mut r = gw
        .client
        .post(&gw.url)
        .bearer_auth("ka")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    let r = within(r.body(body.to_string()).send()).await.unwrap();
    let status = r.status().as_u16();
    let text = within(r.text()).await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn request(method: &str, mut params: Value, version: &str) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    json!({"jsonrpc": "2.0", "id": "r1", "method": method, "params": params})
}

#[tokio::test]
async fn the_stateless_era_checks_its_headers_and_answers_its_statuses() {
    let gw = Gateway::start(
        &json!({
            "gateway": {"id": "gw"},
            "upstreams": {"s": stdio_upstream("s", &[])},
            "tenants": {"a": tenant("ka", &["s"])},
        })
        .to_string(),
    )
    .await;
    gw.wait_ready(&["s"]).await;
    let echo = tool_name("s", "mcp://s/tools/echo:v1", 48);
    let v = "2026-07-28";
    let call = request(
        "tools/call",
        json!({"name": echo, "arguments": {"text": "x"}}),
        v,
    );
    let mirrored = [
        ("mcp-protocol-version", v),
        ("mcp-method", "tools/call"),
        ("mcp-name", echo.as_str()),
    ];

    let (status, ok) = post(&gw, &mirrored, &call).await;
    assert_eq!(status, 200, "{ok}");
    assert_eq!(ok["result"]["resultType"], "complete");
    assert_eq!(ok["result"]["structuredContent"], json!({"text": "x"}));
    assert_eq!(
        ok["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mcp-gateway"
    );
    // The name may come base64-encoded.
    let encoded = format!("=?base64?{}?=", base64_of(&echo));
    let (status, ok) = post(
        &gw,
        &[mirrored[0], mirrored[1], ("mcp-name", &encoded)],
        &call,
    )
    .await;
    assert_eq!(status, 200, "{ok}");

    // Headers that disagree with the body, or are missing: 400, -32020.
    for headers in [
        vec![mirrored[0], mirrored[1], ("mcp-name", "other")],
        vec![mirrored[0], ("mcp-method", "tools/list"), mirrored[2]],
        vec![
            ("mcp-protocol-version", "2025-11-25"),
            mirrored[1],
            mirrored[2],
        ],
        vec![mirrored[0], mirrored[2]],
        vec![mirrored[1], mirrored[2]],
    ] {
        let (status, err) = post(&gw, &headers, &call).await;
        assert_eq!(status, 400, "{headers:?}: {err}");
        assert_eq!(err["error"]["code"], -32020, "{headers:?}: {err}");
        assert_eq!(err["id"], "r1");
    }

    // A version it does not serve: 400, -32022, naming those it does.
    let old = request("tools/list", json!({}), "2099-01-01");
    let (status, err) = post(
        &gw,
        &[
            ("mcp-protocol-version", "2099-01-01"),
            ("mcp-method", "tools/list"),
        ],
        &old,
    )
    .await;
    assert_eq!(status, 400, "{err}");
    assert_eq!(err["error"]["code"], -32022);
    assert_eq!(err["error"]["data"]["requested"], "2099-01-01");
    assert_eq!(
        err["error"]["data"]["supported"],
        json!(["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"])
    );

    // No `_meta` envelope: 400, -32602.
    let bare = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}});
    let (status, err) = post(
        &gw,
        &[("mcp-protocol-version", v), ("mcp-method", "tools/list")],
        &bare,
    )
    .await;
    assert_eq!(
        (status, &err["error"]["code"]),
        (400, &json!(-32602)),
        "{err}"
    );

    // What the revision removed is not found: 404, -32601.
    let ping = request("ping", json!({}), v);
    let (status, err) = post(
        &gw,
        &[("mcp-protocol-version", v), ("mcp-method", "ping")],
        &ping,
    )
    .await;
    assert_eq!(
        (status, &err["error"]["code"]),
        (404, &json!(-32601)),
        "{err}"
    );

    // Listings and discovery carry their caching hints.
    let list = request("tools/list", json!({}), v);
    let (status, listed) = post(
        &gw,
        &[("mcp-protocol-version", v), ("mcp-method", "tools/list")],
        &list,
    )
    .await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["result"]["ttlMs"], 0);
    assert_eq!(listed["result"]["cacheScope"], "private");
    let discover = request("server/discover", json!({}), v);
    let (status, found) = post(
        &gw,
        &[
            ("mcp-protocol-version", v),
            ("mcp-method", "server/discover"),
        ],
        &discover,
    )
    .await;
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["result"]["supportedVersions"][0], "2026-07-28");
    assert_eq!(
        found["result"]["capabilities"]["tools"]["listChanged"],
        true
    );
    assert_eq!(found["result"]["cacheScope"], "private");

    // An unknown tool: 400, -32602.
    let unknown = request("tools/call", json!({"name": "nope__x", "arguments": {}}), v);
    let (status, err) = post(
        &gw,
        &[
            ("mcp-protocol-version", v),
            ("mcp-method", "tools/call"),
            ("mcp-name", "nope__x"),
        ],
        &unknown,
    )
    .await;
    assert_eq!(
        (status, &err["error"]["code"]),
        (400, &json!(-32602)),
        "{err}"
    );

    // The handshake era on the same URL is unchanged: errors in a 200.
    let (status, body) = gw
        .post(
            "ka",
            &json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "nope__x"}})
                .to_string(),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("-32602"), "{body}");
    gw.stop().await;
}

fn base64_of(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stdio_mode_tells_clients_of_either_era_what_changed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.yaml");
    std::fs::write(&path, config()).unwrap();
    let steps = json!([
        {"op": "call", "name": "sdk__add", "arguments": {"a": 1, "b": 2}},
        {"op": "prompt", "name": "sdk__hello"},
        {"op": "listen", "uris": [COUNTER], "count": 2, "then": [
            {"op": "call", "name": "sdk__bump", "arguments": {}},
            {"op": "call", "name": "sdk__evolve", "arguments": {}},
        ]},
        {"op": "tools"},
        {"op": "abandon", "name": "sdk__wait", "after": 1.0},
        // The upstream counts the cancellation once it has handled it.
        {"op": "call", "name": "sdk__cancelled", "arguments": {}, "until": "1"},
    ]);
    let (revision, answers) = sdk_stdio_client("auto", &path, "a", steps).await;
    assert_eq!(revision, "2026-07-28");
    assert_eq!(
        answers[0]["structuredContent"],
        json!({"sum": 3}),
        "{}",
        answers[0]
    );
    assert_eq!(
        answers[1]["messages"][0]["content"]["text"], "Hello, world!",
        "{}",
        answers[1]
    );
    let events = answers[2]["events"].as_array().unwrap();
    assert_eq!(events.len(), 2, "{}", answers[2]);
    assert!(events.iter().any(|e| e["type"] == "ToolsListChanged"));
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "ResourceUpdated" && e["uri"] == COUNTER)
    );
    // The session goes on after its listen: the changed definition is listed.
    let add = answers[3]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "sdk__add")
        .cloned()
        .unwrap();
    assert_eq!(add["description"], "Adds two numbers, now differently");
    // A call the client gave up on (`notifications/cancelled`) is cancelled upstream.
    assert!(answers[4].get("error").is_none(), "{}", answers[4]);
    assert_eq!(answers[5]["content"][0]["text"], "1", "{}", answers[5]);

    // The handshake era hears changes after `notifications/initialized`,
    // resources once subscribed to.
    let steps = json!([
        {"op": "prompt", "name": "sdk__hello"},
        {"op": "subscribe", "uri": COUNTER},
        {"op": "notified", "method": "notifications/resources/updated", "then": [
            {"op": "call", "name": "sdk__bump", "arguments": {}},
        ]},
        {"op": "notified", "method": "notifications/tools/list_changed", "then": [
            {"op": "call", "name": "sdk__evolve", "arguments": {}},
        ]},
    ]);
    let (revision, answers) = sdk_stdio_client("legacy", &path, "a", steps).await;
    assert_eq!(revision, "2025-11-25");
    assert_eq!(
        answers[0]["messages"][0]["content"]["text"], "Hello, world!",
        "{}",
        answers[0]
    );
    assert!(answers[1].get("error").is_none(), "{}", answers[1]);
    assert_eq!(answers[2]["notified"], "notifications/resources/updated");
    assert_eq!(answers[3]["notified"], "notifications/tools/list_changed");
}

#[tokio::test]
async fn tool_names_keep_within_the_configured_budget() {
    let yaml = |budget: u32| {
        json!({
            "gateway": {"id": "gw", "tool_name_budget": budget},
            "upstreams": {"a-rather-long-upstream-name": stdio_upstream("a-rather-long-upstream-name", &[])},
            "tenants": {"a": tenant("ka", &["a-rather-long-upstream-name"])},
        })
        .to_string()
    };
    let gw = Gateway::start(&yaml(24)).await;
    gw.wait_ready(&["a-rather-long-upstream-name"]).await;
    let listed = gw.rpc("ka", "tools/list", json!({})).await;
    let tools = listed["result"]["tools"].as_array().unwrap();
    assert!(!tools.is_empty(), "{listed}");
    for t in tools {
        let name = t["name"].as_str().unwrap();
        assert!(
            name.len() <= 24 && mcp_gateway::modelcontext::names::is_valid(name),
            "{name}"
        );
    }
    let u = "a-rather-long-upstream-name";
    let echo = tools
        .iter()
        .find(|t| t["_meta"]["dev.mcp-gateway/mcpId"] == format!("mcp://gw/{u}/{u}/tools/echo:v1"))
        .unwrap();
    assert_eq!(
        echo["name"],
        tool_name(u, &format!("mcp://{u}/tools/echo:v1"), 24)
    );
    gw.stop().await;
    // Outside 20..=64 the config is refused, with its path.
    let refused = mcp_gateway::config::Config::from_yaml(
        &yaml(65),
        &mcp_gateway::config::SystemSecrets::default(),
    );
    let text = format!("{:?}", refused.map(|_| ()).expect_err("refused"));
    assert!(text.contains("gateway.tool_name_budget"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstreams_resource_templates_expand_to_ids_that_read_through_the_gateway() {
    let gw = Gateway::start(
        &json!({
            "gateway": {"id": "gw"},
            "upstreams": {"ev": crate::support::everything_stdio()},
            "tenants": {"a": tenant("ka", &["ev"]), "b": tenant("kb", &[])},
        })
        .to_string(),
    )
    .await;
    gw.wait_ready(&["ev"]).await;
    let own = "demo://resource/dynamic/text/{resourceId}";
    let template = "mcp://gw/ev/resource/demo%3A%2F%2Fresource%2Fdynamic%2Ftext%2F{resourceId}";
    let expanded = template.replace("{resourceId}", "3");
    let steps = json!([
        {"op": "templates"},
        {"op": "read", "uri": expanded},
        {"op": "read", "uri": "mcp://gw/ev/resource/demo%3A%2F%2Fnowhere%2F3"},
    ]);
    for mode in ["legacy", "auto"] {
        let (_, answers) = sdk_client(&gw, "ka", mode, steps.clone()).await;
        let templates = answers[0]["resourceTemplates"].as_array().unwrap();
        let offered = templates
            .iter()
            .find(|t| t["_meta"]["dev.mcp-gateway/uriTemplate"] == own)
            .unwrap_or_else(|| panic!("{mode}: {templates:?}"));
        assert_eq!(offered["uriTemplate"], template, "{mode}");
        let content = &answers[1]["contents"][0];
        assert_eq!(content["uri"], expanded.as_str(), "{mode}: {}", answers[1]);
        assert!(
            content["text"].as_str().unwrap().starts_with("Resource 3"),
            "{mode}: {content}"
        );
        // A uri that no template of the tenant's expands to is not found.
        assert!(answers[2]["error"].is_object(), "{mode}: {}", answers[2]);
    }
    // Another tenant is offered none, and reads nothing through them.
    let (_, answers) = sdk_client(&gw, "kb", "auto", steps).await;
    assert_eq!(answers[0]["resourceTemplates"], json!([]));
    assert_eq!(answers[1]["error"]["code"], -32602, "{}", answers[1]);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_a_tool_mirrors_into_headers_are_checked_against_them() {
    let gw = Gateway::start(&config()).await;
    gw.wait_ready(&["s", "sdk"]).await;
    // The SDK's client mirrors the argument itself, as the listing asks.
    let (revision, answers) = sdk_client(
        &gw,
        "ka",
        "auto",
        json!([{"op": "call", "name": "sdk__region", "arguments": {"region": "eu-west1"}}]),
    )
    .await;
    assert_eq!(revision, "2026-07-28");
    assert_eq!(
        answers[0]["content"][0]["text"], "eu-west1",
        "{}",
        answers[0]
    );

    let v = "2026-07-28";
    let call = request(
        "tools/call",
        json!({"name": "sdk__region", "arguments": {"region": "eu-west1"}}),
        v,
    );
    let base = [
        ("mcp-protocol-version", v),
        ("mcp-method", "tools/call"),
        ("mcp-name", "sdk__region"),
    ];
    let with = |param: Option<&'static str>| {
        let mut h = base.to_vec();
        if let Some(p) = param {
            h.push(("mcp-param-region", p));
        }
        h
    };
    let (status, ok) = post(&gw, &with(Some("=?base64?ZXUtd2VzdDE=?=")), &call).await;
    assert_eq!(status, 200, "{ok}");
    assert_eq!(ok["result"]["content"][0]["text"], "eu-west1");
    for param in [Some("us-east1"), None, Some("=?base64?!!?=")] {
        let (status, err) = post(&gw, &with(param), &call).await;
        assert_eq!(status, 400, "{param:?}: {err}");
        assert_eq!(err["error"]["code"], -32020, "{param:?}: {err}");
    }
    gw.stop().await;
}
