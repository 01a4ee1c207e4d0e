//! Progressive discovery over a catalog the size of a large deployment's
//! (`tests/fixtures/catalog_server.py`, on the official Python SDK, about
//! three hundred tools of nineteen services): a search listing a few
//! percent of the direct one, task-worded queries that find their tool,
//! and `call_tool`, which answers what a direct call answers.

use serde_json::{Value, json};

use crate::support::*;

/// The catalog as an upstream `cat`, and tenants with `tools` sections:
/// `direct` (none), `search` (key `ks`), `auto` (key `ka`, this threshold)
/// and `denied` (key `kd`: search, without the GitHub tools).
fn config(threshold: usize) -> String {
    let python = venv().join("bin/python");
    let server = root().join("tests/fixtures/catalog_server.py");
    json!({
        "gateway": {"id": "gw"},
        "upstreams": {
            "cat": {
                "stdio": {"command": python, "args": [server]},
                "protocol": "modelcontextprotocol",
                "timeout_ms": 20000,
            },
        },
        "tenants": {
            "direct": {"api_keys": ["kx"], "upstreams": ["cat"]},
            "search": {
                "api_keys": ["ks"],
                "upstreams": ["cat"],
                "tools": {
                    "discovery": {
                        "mode": "search",
                        "always": ["mcp://gw/cat/tool/weather_*"],
                        "max_loaded": 2,
                    },
                },
            },
            "auto": {
                "api_keys": ["ka"],
                "upstreams": ["cat"],
                "tools": {"discovery": {"mode": "auto", "threshold": threshold}},
            },
            "denied": {
                "api_keys": ["kd"],
                "upstreams": ["cat"],
                "tools": {"deny": ["mcp://gw/cat/tool/github_*"], "discovery": {"mode": "search"}},
            },
        },
    })
    .to_string()
}

async fn mcp(gw: &Gateway, key: &str, method: &str, params: Value) -> Value {
    mcp_request(gw, key, method, params).await
}

async fn search(gw: &Gateway, key: &str, query: &str) -> Value {
    let args = json!({"query": query, "limit": 3});
    let r = mcp(
        gw,
        key,
        "tools/call",
        json!({"name": "search_tools", "arguments": args}),
    )
    .await;
    r["result"]["structuredContent"].clone()
}

fn names(found: &Value) -> Vec<String> {
    found["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{found}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_listing_is_a_few_percent_of_the_direct_one() {
    let gw = Gateway::start(&config(40)).await;
    gw.wait_ready(&["cat"]).await;
    let direct = mcp(&gw, "kx", "tools/list", json!({})).await;
    let searched = mcp(&gw, "ks", "tools/list", json!({})).await;
    let all = direct["result"]["tools"].as_array().unwrap().len();
    assert!(all > 250, "{all}");
    let listed: Vec<&str> = searched["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        listed,
        ["search_tools", "call_tool", "cat__weather_get_forecast"],
        "the meta-tools and what `always` names"
    );
    let meta = &searched["result"]["_meta"]["dev.mcp-gateway/discovery"];
    assert_eq!(meta["mode"], "search");
    assert_eq!(meta["visible"], all);
    let (small, large) = (searched.to_string().len(), direct.to_string().len());
    assert!(small * 100 < large * 5, "{small} bytes against {large}");
    assert!(
        direct["result"].get("_meta").is_none(),
        "without discovery, nothing changes"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_worded_queries_find_their_tool_in_the_top_three() {
    let gw = Gateway::start(&config(40)).await;
    gw.wait_ready(&["cat"]).await;
    for (query, tool) in [
        (
            "post a message in a slack channel",
            "cat__slack_send_message",
        ),
        (
            "what will the weather be tomorrow in Paris",
            "cat__weather_get_forecast",
        ),
        (
            "merge a pull request on GitHub",
            "cat__github_merge_pull_request",
        ),
        (
            "restart the pods of a kubernetes deployment",
            "cat__kubernetes_restart_deployment",
        ),
        (
            "give a customer their money back for an invoice",
            "cat__billing_refund_invoice",
        ),
        (
            "directions from the station to the office",
            "cat__maps_get_directions",
        ),
        ("delete a Jira issue", "cat__jira_delete_issue"),
        (
            "list the open pull requests",
            "cat__github_list_pull_requests",
        ),
        (
            "when is everyone free for a meeting",
            "cat__calendar_find_free_time",
        ),
        ("run a SQL query", "cat__database_run_query"),
    ] {
        let found = names(&search(&gw, "ks", query).await);
        assert!(
            found.iter().any(|n| n == tool),
            "{query:?}: {tool} not in {found:?}"
        );
    }
    let found = search(&gw, "ks", "the of and").await;
    assert_eq!(found["tools"], json!([]), "stop words alone find nothing");
    let bad = mcp(
        &gw,
        "ks",
        "tools/call",
        json!({"name": "search_tools", "arguments": {"query": ""}}),
    )
    .await;
    assert_eq!(bad["result"]["isError"], true, "{bad}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_tool_answers_what_a_direct_call_answers() {
    let gw = Gateway::start(&config(40)).await;
    gw.wait_ready(&["cat"]).await;
    let args = json!({"city": "Paris", "day": "tomorrow"});
    let direct = mcp(
        &gw,
        "ks",
        "tools/call",
        json!({"name": "cat__weather_get_forecast", "arguments": args}),
    )
    .await;
    let through = mcp(&gw, "ks", "tools/call", json!({"name": "call_tool", "arguments": {"name": "cat__weather_get_forecast", "arguments": args}})).await;
    let by_id = mcp(&gw, "ks", "tools/call", json!({"name": "call_tool", "arguments": {"name": "mcp://gw/cat/tool/weather_get_forecast", "arguments": args}})).await;
    assert_eq!(
        through["result"]["content"], direct["result"]["content"],
        "{through}"
    );
    assert_eq!(
        by_id["result"]["content"], direct["result"]["content"],
        "{by_id}"
    );
    assert_eq!(
        through["result"]["_meta"]["dev.mcp-gateway/mcpId"],
        "mcp://gw/cat/tool/weather_get_forecast"
    );
    // An unknown tool is the same error either way.
    let unknown = mcp(
        &gw,
        "ks",
        "tools/call",
        json!({"name": "cat__nope", "arguments": {}}),
    )
    .await;
    let unknown_through = mcp(
        &gw,
        "ks",
        "tools/call",
        json!({"name": "call_tool", "arguments": {"name": "cat__nope"}}),
    )
    .await;
    assert_eq!(
        unknown_through["error"], unknown["error"],
        "{unknown_through}"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_tools_never_surface() {
    let gw = Gateway::start(&config(40)).await;
    gw.wait_ready(&["cat"]).await;
    let found = names(&search(&gw, "kd", "merge a github pull request").await);
    assert!(found.iter().all(|n| !n.contains("github")), "{found:?}");
    let direct = mcp(
        &gw,
        "kd",
        "tools/call",
        json!({"name": "cat__github_merge_pull_request", "arguments": {}}),
    )
    .await;
    let through = mcp(&gw, "kd", "tools/call", json!({"name": "call_tool", "arguments": {"name": "mcp://gw/cat/tool/github_merge_pull_request"}})).await;
    assert!(direct.get("error").is_some(), "{direct}");
    assert_eq!(through["error"], direct["error"], "{through}");
    let listed = mcp(&gw, "kd", "tools/list", json!({})).await;
    let visible = listed["result"]["_meta"]["dev.mcp-gateway/discovery"]["visible"]
        .as_u64()
        .unwrap();
    let all = mcp(&gw, "kx", "tools/list", json!({})).await["result"]["tools"]
        .as_array()
        .unwrap()
        .len() as u64;
    assert!(visible < all, "the denied tools are not counted visible");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_lists_search_past_its_threshold() {
    let gw = Gateway::start(&config(1000)).await;
    gw.wait_ready(&["cat"]).await;
    let under = mcp(&gw, "ka", "tools/list", json!({})).await;
    assert_eq!(
        under["result"]["_meta"]["dev.mcp-gateway/discovery"]["mode"],
        "direct"
    );
    assert!(under["result"]["tools"].as_array().unwrap().len() > 250);
    assert!(
        under["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["name"] != "search_tools"),
        "no meta-tools in a direct listing"
    );
    gw.stop().await;
    let gw = Gateway::start(&config(10)).await;
    gw.wait_ready(&["cat"]).await;
    let over = mcp(&gw, "ka", "tools/list", json!({})).await;
    assert_eq!(
        over["result"]["_meta"]["dev.mcp-gateway/discovery"]["mode"],
        "search"
    );
    assert_eq!(over["result"]["tools"].as_array().unwrap().len(), 2);
    // Search changes what is listed, never what is callable.
    let direct = mcp(
        &gw,
        "ka",
        "tools/call",
        json!({"name": "cat__weather_get_forecast", "arguments": {}}),
    )
    .await;
    assert!(direct["result"]["content"].is_array(), "{direct}");
    gw.stop().await;
}

#[test]
fn check_refuses_bad_discovery() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.yaml");
    let yaml = "gateway: {id: gw}\nupstreams:\n  u: {stdio: {command: x}}\ntenants:\n  a:\n    api_keys: [k]\n    upstreams: [u]\n    tools:\n      discovery: {mode: sometimes}\n  b:\n    api_keys: [k2]\n    upstreams: [u]\n    tools:\n      discovery: {mode: search, threshold: 5, limit: 60, max_limit: 300, max_loaded: 0, always: [\"mcp://other/*\"]}\n      overrides: {\"mcp://gw/u/tool/x\": {name: call_tool}}\n";
    std::fs::write(&path, yaml).unwrap();
    let said = check_refused(&path);
    for path in [
        "tenants.a.tools.discovery.mode",
        "tenants.b.tools.discovery.threshold",
        "tenants.b.tools.discovery.max_limit",
        "tenants.b.tools.discovery.max_loaded",
        "tenants.b.tools.discovery.always[0]",
        "tenants.b.tools.overrides.mcp://gw/u/tool/x.name",
    ] {
        assert!(said.contains(path), "{path} not in: {said}");
    }
}

/// MCP v1.0 agents get search and call: a search listing, `search_tools`'
/// answer as `output`, and `call_tool`'s output what executing gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_v1_agents_search_and_call() {
    let gw = Gateway::start(&config(40)).await;
    gw.wait_ready(&["cat"]).await;
    let listed = gw.list("ks", "mcp/listTools").await;
    let ids: Vec<&str> = listed
        .iter()
        .map(|t| t["mcpId"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "mcp://gw/~discovery/tool/search_tools",
            "mcp://gw/~discovery/tool/call_tool",
            "mcp://gw/cat/tool/weather_get_forecast"
        ]
    );
    let search = "mcp://gw/~discovery/tool/search_tools";
    let found = gw
        .execute(
            "ks",
            search,
            json!({"query": "merge a pull request", "limit": 3}),
        )
        .await;
    let tools = found["result"]["output"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{found}"));
    assert_eq!(
        tools[0]["mcpId"],
        "mcp://gw/cat/tool/github_merge_pull_request"
    );
    assert_eq!(tools[0]["name"], "github_merge_pull_request", "{found}");
    let args = json!({"city": "Oslo"});
    let direct = gw
        .execute("ks", "mcp://gw/cat/tool/weather_get_forecast", args.clone())
        .await;
    let call = "mcp://gw/~discovery/tool/call_tool";
    let through = gw
        .execute(
            "ks",
            call,
            json!({"name": "mcp://gw/cat/tool/weather_get_forecast", "arguments": args}),
        )
        .await;
    assert_eq!(through["result"], direct["result"], "{through}");
    let denied = gw
        .execute(
            "kd",
            call,
            json!({"name": "mcp://gw/cat/tool/github_merge_pull_request"}),
        )
        .await;
    let direct_denied = gw
        .execute(
            "kd",
            "mcp://gw/cat/tool/github_merge_pull_request",
            json!({}),
        )
        .await;
    assert_eq!(
        denied["error"]["code"], direct_denied["error"]["code"],
        "{denied}"
    );
    gw.stop().await;
}

/// The official Python SDK's client, in each era, lists the search
/// listing, searches, and calls what it found through call_tool; the
/// search's structured answer satisfies the listed outputSchema (the SDK
/// checks it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_clients_of_both_eras_search_and_call() {
    let gw = Gateway::start(&config(40)).await;
    gw.wait_ready(&["cat"]).await;
    let steps = json!([
        {"op": "tools"},
        {"op": "call", "name": "search_tools", "arguments": {"query": "send an email", "limit": 2}},
        {"op": "call", "name": "call_tool", "arguments": {"name": "cat__email_send_message", "arguments": {"to": "a@b"}}},
    ]);
    for mode in ["legacy", "auto"] {
        let (era, answers) = sdk_client(&gw, "ks", mode, steps.clone()).await;
        let listed: Vec<&str> = answers[0]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{era}: {answers:?}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(listed[..2], ["search_tools", "call_tool"], "{era}");
        let found = &answers[1]["structuredContent"]["tools"][0];
        assert_eq!(
            found["name"], "cat__email_send_message",
            "{era}: {:?}",
            answers[1]
        );
        let text = answers[2]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{era}: {:?}", answers[2]));
        let said: Value = serde_json::from_str(text).unwrap();
        assert_eq!(said["tool"], "email_send_message", "{era}");
        assert_eq!(said["arguments"]["to"], "a@b");
    }
    gw.stop().await;
}

/// The config with handshake-era sessions over HTTP (`session_secret`).
fn with_sessions(threshold: usize) -> String {
    Doc::parse(&config(threshold))
        .set("gateway.session_secret", "s".repeat(40))
        .yaml()
}

fn listed_names(listing: &Value) -> Vec<String> {
    listing["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{listing}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// What a session does with load_tools: listed with the other meta-tools;
/// a load adds found tools to its listing (by name or mcpId), the
/// earliest dropped past `max_loaded` (2), and the client hears the
/// listing change; a name it cannot call refuses the whole load; `[]`
/// with `replace` clears.
const LOADING: &str = r#"[
    {"op": "tools"},
    {"op": "notified", "method": "notifications/tools/list_changed", "then": [
        {"op": "call", "name": "load_tools", "arguments": {"names": ["cat__email_send_message", "mcp://gw/cat/tool/github_merge_pull_request"]}}]},
    {"op": "tools"},
    {"op": "call", "name": "load_tools", "arguments": {"names": ["cat__calendar_find_free_time"]}},
    {"op": "call", "name": "load_tools", "arguments": {"names": ["cat__slack_send_message", "cat__made_up"]}},
    {"op": "tools"},
    {"op": "call", "name": "load_tools", "arguments": {"names": [], "replace": true}},
    {"op": "tools"}
]"#;

fn check_loading(how: &str, answers: &[Value]) {
    let first = listed_names(&answers[0]);
    assert_eq!(
        first[..3],
        ["search_tools", "call_tool", "load_tools"],
        "{how}"
    );
    assert!(
        !first.iter().any(|n| n == "cat__email_send_message"),
        "{how}"
    );
    assert_eq!(
        answers[1]["notified"], "notifications/tools/list_changed",
        "{how}"
    );
    let loaded = listed_names(&answers[2]);
    for name in ["cat__email_send_message", "cat__github_merge_pull_request"] {
        assert!(
            loaded.iter().any(|n| n == name),
            "{how}: {name} in {loaded:?}"
        );
    }
    // The loaded tool is listed as the direct listing lists it.
    assert_eq!(
        answers[3]["structuredContent"]["loaded"],
        json!([
            "cat__github_merge_pull_request",
            "cat__calendar_find_free_time"
        ]),
        "{how}: {:?}",
        answers[3]
    );
    assert_eq!(answers[4]["isError"], true, "{how}: {:?}", answers[4]);
    assert_eq!(
        answers[4]["content"][0]["text"], "unknown tool: cat__made_up",
        "{how}"
    );
    let after = listed_names(&answers[5]);
    assert!(
        !after.iter().any(|n| n == "cat__slack_send_message"),
        "{how}: all or nothing"
    );
    assert!(
        !after.iter().any(|n| n == "cat__email_send_message"),
        "{how}: past max_loaded"
    );
    assert!(
        after.iter().any(|n| n == "cat__calendar_find_free_time"),
        "{how}"
    );
    assert_eq!(
        answers[6]["structuredContent"]["loaded"],
        json!([]),
        "{how}"
    );
    let cleared = listed_names(&answers[7]);
    assert!(
        !cleared.iter().any(|n| n.starts_with("cat__calendar")),
        "{how}"
    );
}

/// A handshake-era session over HTTP and `mcp-gateway stdio`, each with
/// the official Python SDK's client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_load_found_tools_into_their_listing() {
    let yaml = with_sessions(40);
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["cat"]).await;
    let steps: Value = serde_json::from_str(LOADING).unwrap();
    let (_, answers) = sdk_client(&gw, "ks", "legacy", steps.clone()).await;
    check_loading("http session", &answers);
    let loaded = metric(
        &gw.metrics().await,
        "mcp_gateway_discovery_loaded_total{tenant=\"search\"}",
    );
    assert_eq!(
        loaded,
        Some(3.0),
        "two, then one: the refused load counts none"
    );

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gateway.yaml");
    std::fs::write(&file, &yaml).unwrap();
    let args = vec![
        "legacy".to_owned(),
        "stdio".to_owned(),
        BIN.to_owned(),
        file.display().to_string(),
        "search".to_owned(),
    ];
    let (_, answers) = sdk_client_with(args, json!({"steps": steps})).await;
    check_loading("stdio", &answers);
    gw.stop().await;
}

/// Without a session there is nowhere to keep what a load adds:
/// load_tools is neither listed nor callable (-32602, as an unknown tool),
/// and a denied tool cannot be loaded in a session either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_tools_needs_a_session_and_a_visible_tool() {
    let gw = Gateway::start(&with_sessions(40)).await;
    gw.wait_ready(&["cat"]).await;
    let listing = mcp(&gw, "ks", "tools/list", json!({})).await;
    let names = listed_names(&listing["result"]);
    assert_eq!(names[..2], ["search_tools", "call_tool"]);
    assert!(!names.iter().any(|n| n == "load_tools"), "{names:?}");
    let refused = mcp(
        &gw,
        "ks",
        "tools/call",
        json!({"name": "load_tools", "arguments": {"names": ["cat__email_send_message"]}}),
    )
    .await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let steps = json!([
        {"op": "call", "name": "load_tools", "arguments": {"names": ["cat__github_merge_pull_request"]}},
        {"op": "call", "name": "load_tools", "arguments": {"names": ["mcp://gw/cat/tool/github_merge_pull_request"]}},
        {"op": "call", "name": "load_tools", "arguments": {"names": "cat__email_send_message"}},
    ]);
    let (_, answers) = sdk_client(&gw, "kd", "legacy", steps).await;
    for (answer, text) in answers.iter().zip([
        "unknown tool: cat__github_merge_pull_request",
        "unknown tool: mcp://gw/cat/tool/github_merge_pull_request",
    ]) {
        assert_eq!(answer["isError"], true, "{answer}");
        assert_eq!(answer["content"][0]["text"], text);
    }
    assert_eq!(
        answers[2]["isError"], true,
        "bad arguments are a tool error: {:?}",
        answers[2]
    );
    gw.stop().await;
}

/// The JSON-RPC answer in a body that is JSON or an event stream.
async fn answer_of(response: reqwest::Response) -> Value {
    let text = response.text().await.unwrap();
    if let Some(answer) = sse::messages(&text)
        .into_iter()
        .find(|m| m.get("id").is_some())
    {
        return answer;
    }
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// With a store, what a session loaded on one replica is in its listing
/// on another: replicas behind one Service act as one gateway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_lists_what_it_loaded_on_any_replica() {
    let redis = Redis::start();
    let yaml = Doc::parse(&with_sessions(40))
        .set("gateway.store", json!({"url": redis.url()}))
        .yaml();
    let (one, two) = (Gateway::start(&yaml).await, Gateway::start(&yaml).await);
    one.wait_ready(&["cat"]).await;
    two.wait_ready(&["cat"]).await;
    let version = "2025-11-25";
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let opened = session_request(&one, reqwest::Method::POST, "ks", None, Some(init)).await;
    let session = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let at = Some((session.as_str(), Some(version)));
    let load = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "load_tools", "arguments": {"names": ["cat__maps_get_directions"]}}});
    let loaded =
        answer_of(session_request(&one, reqwest::Method::POST, "ks", at, Some(load)).await).await;
    assert_eq!(
        loaded["result"]["structuredContent"]["loaded"],
        json!(["cat__maps_get_directions"]),
        "{loaded}"
    );
    let list = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"});
    for gw in [&one, &two] {
        let listing = answer_of(
            session_request(gw, reqwest::Method::POST, "ks", at, Some(list.clone())).await,
        )
        .await;
        let names = listed_names(&listing["result"]);
        assert!(
            names.iter().any(|n| n == "cat__maps_get_directions"),
            "{names:?}"
        );
    }
    one.stop().await;
    two.stop().await;
}

/// `auto` decides at every listing: a reload that takes the catalog past
/// the threshold is announced to open streams, and the next listing is a
/// search listing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crossing_the_threshold_is_announced() {
    let python = venv().join("bin/python");
    let server = root().join("tests/fixtures/catalog_server.py");
    let yaml = |tools: usize| {
        json!({
            "gateway": {"id": "gw"},
            "upstreams": {
                "cat": {
                    "stdio": {"command": python, "args": [server, tools]},
                    "protocol": "modelcontextprotocol",
                    "timeout_ms": 20000,
                },
            },
            "tenants": {
                "auto": {
                    "api_keys": ["ka"],
                    "upstreams": ["cat"],
                    "tools": {"discovery": {"mode": "auto", "threshold": 10}},
                },
            },
        })
        .to_string()
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.yaml");
    std::fs::write(&path, yaml(5)).unwrap();
    let gw = start_watching(&path).await;
    gw.wait_ready(&["cat"]).await;
    let mode = |listing: &Value| listing["result"]["_meta"]["dev.mcp-gateway/discovery"].clone();
    let under = mcp(&gw, "ka", "tools/list", json!({})).await;
    assert_eq!(
        mode(&under),
        json!({"mode": "direct", "visible": 5}),
        "{under}"
    );
    let mut stream = listen_for_tools(&gw, "ka").await;
    std::fs::write(&path, yaml(30)).unwrap();
    wait_reloads(&gw, "applied", 1.0).await;
    let changed = "notifications/tools/list_changed";
    assert!(
        heard(&mut stream, changed)
            .await
            .contains(&changed.to_owned())
    );
    gw.wait_ready(&["cat"]).await;
    let over = mcp(&gw, "ka", "tools/list", json!({})).await;
    assert_eq!(
        mode(&over),
        json!({"mode": "search", "visible": 30}),
        "{over}"
    );
    gw.stop().await;
}
