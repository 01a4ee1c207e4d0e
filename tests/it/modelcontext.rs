//! Upstreams that speak the Model Context Protocol, fronted for MCP v1.0
//! agents: real servers nobody on this project wrote (the reference server
//! `@modelcontextprotocol/server-everything` over stdio and Streamable HTTP,
//! `mcp-server-time` over stdio) and a small server of our own on the
//! official Python SDK (`tests/fixtures/mcp_sdk_server.py`) over Streamable
//! HTTP. `.ci/run` installs them at the versions `tests/fixtures/mcp-servers.txt` pins.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::*;

/// The output of a call, checked against the outputSchema the listing showed.
fn checked_output(listing: &[Value], id: &str, answer: &Value) -> Value {
    let def = listing
        .iter()
        .find(|d| d["mcpId"] == id)
        .unwrap_or_else(|| panic!("{id} is not listed"));
    let output = answer["result"]["output"].clone();
    let validator = jsonschema::validator_for(&def["outputSchema"]).unwrap();
    assert!(
        validator.is_valid(&output),
        "{id}: {output} breaks {}",
        def["outputSchema"]
    );
    output
}

/// Waits (at most `within`) until server-everything's echo answers through the gateway again.
async fn echoes_again(gw: &Gateway, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let answer = gw
            .execute(
                "ka",
                "mcp://gw/everything/tool/echo",
                json!({"message": "back"}),
            )
            .await;
        if answer["result"]["output"]["content"][0]["text"] == "Echo: back" {
            return;
        }
        assert!(Instant::now() < deadline, "{answer}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn by_id<'a>(listing: &'a [Value], id: &str) -> Option<&'a Value> {
    listing.iter().find(|d| d["mcpId"] == id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_servers_over_stdio_beside_an_mcp_v1_upstream() {
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {
            "s": stdio_upstream("s", &[]),
            "everything": everything_stdio(),
            "time": time_stdio(),
        },
        "tenants": {"a": tenant("ka", &["s", "everything", "time"]), "b": tenant("kb", &["s"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["s", "everything", "time"]).await;

    let tools = gw.list("ka", "mcp/listTools").await;
    assert!(by_id(&tools, "mcp://gw/s/s/tools/echo:v1").is_some());
    let echo = by_id(&tools, "mcp://gw/everything/tool/echo").expect("echo listed");
    assert_eq!(echo["name"], "echo");
    assert_eq!(echo["description"], "Echoes back the input string");
    assert_eq!(echo["inputSchema"]["required"], json!(["message"]));

    // A tool without an outputSchema: its content blocks in the envelope.
    let answer = gw
        .execute(
            "ka",
            "mcp://gw/everything/tool/echo",
            json!({"message": "hi"}),
        )
        .await;
    let output = checked_output(&tools, "mcp://gw/everything/tool/echo", &answer);
    assert_eq!(output["content"][0]["text"], "Echo: hi", "{answer}");
    // An image block is carried, not dropped.
    let answer = gw
        .execute("ka", "mcp://gw/everything/tool/get-tiny-image", json!({}))
        .await;
    let output = checked_output(&tools, "mcp://gw/everything/tool/get-tiny-image", &answer);
    let blocks = output["content"].as_array().unwrap();
    assert!(
        blocks
            .iter()
            .any(|b| b["type"] == "image" && b["data"].is_string()),
        "{output}"
    );
    // A tool with an outputSchema: its structuredContent.
    let answer = gw
        .execute(
            "ka",
            "mcp://gw/everything/tool/get-structured-content",
            json!({"location": "Chicago"}),
        )
        .await;
    let output = checked_output(
        &tools,
        "mcp://gw/everything/tool/get-structured-content",
        &answer,
    );
    assert!(output["temperature"].is_number(), "{answer}");
    let answer = gw
        .execute(
            "ka",
            "mcp://gw/time/tool/get_current_time",
            json!({"timezone": "UTC"}),
        )
        .await;
    let output = checked_output(&tools, "mcp://gw/time/tool/get_current_time", &answer);
    assert_eq!(output["timezone"], "UTC", "{answer}");
    // Arguments are validated before anything is forwarded.
    let bad = gw
        .execute(
            "ka",
            "mcp://gw/everything/tool/get-sum",
            json!({"a": "one", "b": 2}),
        )
        .await;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    let sum = gw
        .execute(
            "ka",
            "mcp://gw/everything/tool/get-sum",
            json!({"a": 1, "b": 2}),
        )
        .await;
    let text = sum["result"]["output"]["content"][0]["text"]
        .as_str()
        .unwrap();
    assert!(text.contains('3'), "{sum}");

    // Resources arrive with their text; prompts without required arguments too.
    let resources = gw.list("ka", "mcp/listResources").await;
    let doc = resources
        .iter()
        .find(|r| r["name"] == "architecture.md")
        .expect("a static document is listed");
    assert_eq!(doc["mediaType"], "text/markdown");
    assert!(doc["content"].as_str().unwrap().contains("Architecture"));
    assert_eq!(
        doc["mcpId"],
        "mcp://gw/everything/resource/demo%3A%2F%2Fresource%2Fstatic%2Fdocument%2Farchitecture.md"
    );
    let prompts = gw.list("ka", "mcp/listPrompts").await;
    let simple =
        by_id(&prompts, "mcp://gw/everything/prompt/simple-prompt").expect("simple-prompt");
    assert_eq!(simple["role"], "user");
    assert!(
        simple["content"]
            .as_str()
            .unwrap()
            .contains("simple prompt")
    );
    assert!(by_id(&prompts, "mcp://gw/everything/prompt/args-prompt").is_none());
    let metrics = gw.metrics().await;
    let unmapped = |kind: &str, reason: &str| {
        metric(
            &metrics,
            &format!(
                "mcp_gateway_definitions_unmapped{{kind=\"{kind}\",reason=\"{reason}\",upstream=\"everything\"}}"
            ),
        )
        .unwrap_or_else(|| panic!("no series for {kind} {reason}"))
    };
    assert!(unmapped("prompt", "required_arguments") >= 1.0);
    assert!(unmapped("resource", "template") >= 1.0);

    // Tenants stay apart: b sees none of it and cannot call it.
    let b_tools = gw.list("kb", "mcp/listTools").await;
    assert!(
        b_tools
            .iter()
            .all(|t| !t["mcpId"].as_str().unwrap().contains("/everything/"))
    );
    let denied = gw
        .execute(
            "kb",
            "mcp://gw/everything/tool/echo",
            json!({"message": "x"}),
        )
        .await;
    assert_eq!(denied["error"]["code"], -32602, "{denied}");
    gw.stop().await;
}

/// The pids of this process's children whose command line holds `marker`.
fn children_with(marker: &str) -> Vec<i32> {
    let me = std::process::id().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // The parent's pid is the second field after the command's ")".
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1));
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if ppid == Some(me.as_str()) && String::from_utf8_lossy(&cmdline).contains(marker) {
            found.push(pid);
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_stdio_server_fails_its_calls_at_once_and_comes_back() {
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {"everything": everything_stdio()},
        "tenants": {"a": tenant("ka", &["everything"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["everything"]).await;
    let pids = children_with("server-everything");
    assert_eq!(pids.len(), 1, "{pids:?}");
    // A call that would take 30 s is in flight when the server dies.
    let long = gw.execute(
        "ka",
        "mcp://gw/everything/tool/trigger-long-running-operation",
        json!({"duration": 30, "steps": 3}),
    );
    let kill = async {
        // Once the call is in flight upstream.
        until(|| async {
            metric(
                &gw.metrics().await,
                r#"mcp_gateway_upstream_in_flight{upstream="everything"}"#,
            )
            .is_some_and(|n| n >= 1.0)
        })
        .await;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pids[0]),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
    };
    let started = Instant::now();
    let (answer, ()) = tokio::join!(long, kill);
    assert_eq!(answer["error"]["code"], -32001, "{answer}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    // The supervisor starts it again.
    echoes_again(&gw, Duration::from_secs(20)).await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_server_over_streamable_http_fails_fast_and_comes_back() {
    let server = everything_http(0);
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {"everything": http(&server.url)},
        "tenants": {"a": tenant("ka", &["everything"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["everything"]).await;
    let tools = gw.list("ka", "mcp/listTools").await;
    let answer = gw
        .execute(
            "ka",
            "mcp://gw/everything/tool/echo",
            json!({"message": "over http"}),
        )
        .await;
    let output = checked_output(&tools, "mcp://gw/everything/tool/echo", &answer);
    assert_eq!(output["content"][0]["text"], "Echo: over http");
    let resources = gw.list("ka", "mcp/listResources").await;
    assert!(
        resources.iter().any(|r| r["name"] == "features.md"),
        "{resources:?}"
    );

    // Killed: calls fail at once, not at the timeout.
    let port: u16 = server
        .url
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches("/mcp")
        .parse()
        .unwrap();
    drop(server);
    let started = Instant::now();
    let answer = gw
        .execute(
            "ka",
            "mcp://gw/everything/tool/echo",
            json!({"message": "x"}),
        )
        .await;
    assert_eq!(answer["error"]["code"], -32001, "{answer}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // Back on the same address: the gateway finds it again (a new session).
    let _again = everything_http(port);
    echoes_again(&gw, Duration::from_secs(40)).await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_sdk_server_over_streamable_http() {
    let server = sdk_server();
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {"sdk": http(&server.url), "s": stdio_upstream("s", &[])},
        "tenants": {"a": tenant("ka", &["sdk", "s"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["sdk", "s"]).await;

    // Both pages of the listing.
    let tools = gw.list("ka", "mcp/listTools").await;
    for name in ["add", "explode", "bump"] {
        assert!(
            by_id(&tools, &format!("mcp://gw/sdk/tool/{name}")).is_some(),
            "{name}: {tools:?}"
        );
    }
    let add = gw
        .execute("ka", "mcp://gw/sdk/tool/add", json!({"a": 2, "b": 40}))
        .await;
    assert_eq!(
        checked_output(&tools, "mcp://gw/sdk/tool/add", &add),
        json!({"sum": 42})
    );
    // The tool's own failure.
    let failed = gw
        .execute("ka", "mcp://gw/sdk/tool/explode", json!({}))
        .await;
    assert_eq!(failed["error"]["code"], -32008, "{failed}");
    assert_eq!(failed["error"]["data"], "the tool exploded");

    // The text resource is listed with its contents; the blob is left out and counted.
    let resources = gw.list("ka", "mcp/listResources").await;
    let counter_id = "mcp://gw/sdk/resource/memo%3A%2F%2Fcounter";
    assert_eq!(by_id(&resources, counter_id).unwrap()["content"], "count=0");
    assert!(by_id(&resources, "mcp://gw/sdk/resource/memo%3A%2F%2Flogo").is_none());
    let metrics = gw.metrics().await;
    let binary = metric(
        &metrics,
        "mcp_gateway_definitions_unmapped{kind=\"resource\",reason=\"binary\",upstream=\"sdk\"}",
    );
    assert_eq!(binary, Some(1.0));
    let prompts = gw.list("ka", "mcp/listPrompts").await;
    assert_eq!(
        by_id(&prompts, "mcp://gw/sdk/prompt/hello").unwrap()["content"],
        "Hello, world!"
    );
    assert!(by_id(&prompts, "mcp://gw/sdk/prompt/greet").is_none());

    // A resource that changes and says so reaches an open MCP v1.0 session.
    let mut live = Live::ready(&gw, "ka", false).await;
    let bumped = gw.execute("ka", "mcp://gw/sdk/tool/bump", json!({})).await;
    assert!(bumped["result"].is_object(), "{bumped}");
    let heard = live.next_answer().await;
    assert_eq!(
        heard,
        json!({"jsonrpc": "2.0", "method": "mcp/resourceDidChange", "params": {"id": counter_id}})
    );
    let resources = gw.list("ka", "mcp/listResources").await;
    assert_eq!(by_id(&resources, counter_id).unwrap()["content"], "count=1");
    live.close().await;
    gw.stop().await;
}

/// How many calls the SDK server saw cancelled, once it is at least `at_least`.
async fn cancelled_at_least(gw: &Gateway, upstream: &str, at_least: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = gw
            .execute(
                "ka",
                &format!("mcp://gw/{upstream}/tool/cancelled"),
                json!({}),
            )
            .await;
        let text = answer["result"]["output"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{answer}"))
            .to_owned();
        let n: u64 = text.parse().unwrap();
        if n >= at_least || Instant::now() > deadline {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_times_out_is_cancelled_upstream_over_either_transport() {
    let server = sdk_server();
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {
            "web": Doc::of(http(&server.url)).set("timeout_ms", 1000),
            "local": sdk_stdio(),
        },
        "tenants": {"a": tenant("ka", &["web", "local"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["web", "local"]).await;
    for upstream in ["web", "local"] {
        let started = Instant::now();
        let answer = gw
            .execute("ka", &format!("mcp://gw/{upstream}/tool/wait"), json!({}))
            .await;
        assert_eq!(answer["error"]["code"], -32003, "{upstream}: {answer}");
        assert!(started.elapsed() < Duration::from_secs(5));
        // The server heard notifications/cancelled and stopped the handler.
        assert_eq!(cancelled_at_least(&gw, upstream, 1).await, 1, "{upstream}");
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinning_and_policies_hold_for_these_upstreams() {
    let server = sdk_server();
    let dir = tempfile::tempdir().unwrap();
    let pins = dir.path().join("pins.json");
    let yaml = json!({
        "gateway": {"id": "gw", "pins_file": pins.display().to_string()},
        "upstreams": {"sdk": Doc::of(http(&server.url)).set("pin", true)},
        "tenants": {
            "a": tenant("ka", &["sdk"]),
            "b": {"api_keys": ["kb"], "upstreams": ["sdk"], "tools": {"deny": ["*/tool/explode"]}},
        },
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["sdk"]).await;
    // Pinned on first sight, by the definition the server wrote.
    let pinned: Value = serde_json::from_str(&std::fs::read_to_string(&pins).unwrap()).unwrap();
    let print = pinned["sdk"]["mcp://tool/add"]["fingerprint"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(print.starts_with("sha256:"), "{pinned}");

    // A tenant's policy hides and refuses a tool of this upstream like any other.
    let b_tools = gw.list("kb", "mcp/listTools").await;
    assert!(by_id(&b_tools, "mcp://gw/sdk/tool/explode").is_none());
    assert!(by_id(&b_tools, "mcp://gw/sdk/tool/add").is_some());
    let denied = gw
        .execute("kb", "mcp://gw/sdk/tool/explode", json!({}))
        .await;
    assert_eq!(denied["error"]["code"], -32007, "{denied}");

    // The server changes a pinned tool and says so: quarantined until approved.
    let evolved = gw
        .execute("ka", "mcp://gw/sdk/tool/evolve", json!({}))
        .await;
    assert!(evolved["result"].is_object(), "{evolved}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let add = gw
            .execute("ka", "mcp://gw/sdk/tool/add", json!({"a": 1, "b": 1}))
            .await;
        if add["error"]["code"] == -32007 {
            break;
        }
        assert!(Instant::now() < deadline, "never quarantined: {add}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let tools = gw.list("ka", "mcp/listTools").await;
    assert!(by_id(&tools, "mcp://gw/sdk/tool/add").is_none());
    let pinned: Value = serde_json::from_str(&std::fs::read_to_string(&pins).unwrap()).unwrap();
    assert_eq!(pinned["sdk"]["mcp://tool/add"]["fingerprint"], print);
    assert!(
        pinned["sdk"]["mcp://tool/add"]["pending"]["fingerprint"].is_string(),
        "{pinned}"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_the_server_forgot_is_opened_again_and_the_call_retried() {
    let server = sdk_server();
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {"sdk": http(&server.url)},
        "tenants": {"a": tenant("ka", &["sdk"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["sdk"]).await;
    let sessions = |answer: Value| answer["result"]["output"]["content"][0]["text"].clone();
    let one = gw
        .execute("ka", "mcp://gw/sdk/tool/sessions", json!({}))
        .await;
    assert_eq!(sessions(one), "1");
    let forgot = gw
        .execute("ka", "mcp://gw/sdk/tool/forget", json!({}))
        .await;
    assert!(forgot["result"].is_object(), "{forgot}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The server answers the old session 404: a new one, and the call goes through.
    let add = gw
        .execute("ka", "mcp://gw/sdk/tool/add", json!({"a": 1, "b": 2}))
        .await;
    assert_eq!(add["result"]["output"], json!({"sum": 3}), "{add}");
    let two = gw
        .execute("ka", "mcp://gw/sdk/tool/sessions", json!({}))
        .await;
    assert_eq!(sessions(two), "2");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_upstream_speaks_the_protocol_to_the_official_client_and_the_gateway() {
    // The benchmarks' upstream of the protocol, over HTTP in this process
    // and over stdio as the real binary's child.
    let server = mcp_gateway::demo::DemoServer::new(mcp_gateway::demo::DemoOptions {
        name: "mh".into(),
        test_tools: true,
        modelcontext: true,
        ..Default::default()
    })
    .unwrap();
    let (addr, task) =
        mcp_gateway::demo::http::start(std::sync::Arc::new(server), ([127, 0, 0, 1], 0).into())
            .await
            .unwrap();
    let url = format!("http://{addr}/mcp");

    // The official TypeScript client, straight at it.
    let script = root().join("target/mcp-node/mcp_ts_client.mjs");
    std::fs::copy(root().join("tests/fixtures/mcp_ts_client.mjs"), &script).unwrap();
    let steps = json!([
        {"op": "tools"},
        {"op": "call", "name": "echo", "arguments": {"text": "direct"}},
        {"op": "call", "name": "fail", "arguments": {}},
        {"op": "call", "name": "nope", "arguments": {}},
        {"op": "call", "name": "calls", "arguments": {}},
    ]);
    let mut client = Command::new("node");
    client.arg(&script).args([url.as_str(), "unused"]);
    let answers = run_client(client, steps).await;
    assert_eq!(answers[0]["protocolVersion"], "2025-11-25", "{answers:?}");
    let tools = answers[1]["tools"].as_array().unwrap();
    let echo = tools.iter().find(|t| t["name"] == "echo").unwrap();
    assert_eq!(echo["inputSchema"]["required"], json!(["text"]));
    // Definitions that break the spec's schemas are not listed.
    assert!(tools.iter().all(|t| t["name"] != "broken2"), "{tools:?}");
    assert_eq!(answers[2]["structuredContent"], json!({"text": "direct"}));
    assert_eq!(answers[3]["isError"], true, "{}", answers[3]);
    assert_eq!(answers[4]["error"]["code"], -32602, "{}", answers[4]);
    // It counts the calls it was asked (the benchmarks check every one arrived).
    assert_eq!(
        answers[5]["structuredContent"],
        json!({"calls": 3}),
        "{}",
        answers[5]
    );

    // A request of the 2026-07-28 revision is answered in that revision's shape.
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientCapabilities": {}});
    mcp_gateway::install_crypto_provider();
    let http_client = reqwest::Client::new();
    let mut stateless = Vec::new();
    for (method, params) in [
        ("server/discover", json!({"_meta": meta})),
        (
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "s"}, "_meta": meta}),
        ),
        ("initialize", json!({"_meta": meta})),
    ] {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let r = http_client
            .post(&url)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        stateless.push(serde_json::from_str::<Value>(&r.text().await.unwrap()).unwrap());
    }
    assert_eq!(
        stateless[0]["result"]["supportedVersions"],
        json!(["2026-07-28"])
    );
    assert_eq!(
        stateless[1]["result"]["resultType"], "complete",
        "{}",
        stateless[1]
    );
    assert_eq!(
        stateless[1]["result"]["structuredContent"],
        json!({"text": "s"})
    );
    assert_eq!(stateless[2]["error"]["code"], -32601, "{}", stateless[2]);
    let stats = http_client
        .get(format!("http://{addr}/stats"))
        .send()
        .await
        .unwrap();
    let stats: Value = serde_json::from_str(&stats.text().await.unwrap()).unwrap();
    assert_eq!(stats, json!({"calls": 4}));

    // Through the gateway, over either transport, to an MCP v1.0 agent and
    // to a client of the protocol.
    let stdio = json!({
        "stdio": {"command": BIN, "args": ["demo-upstream", "--name", "ms", "--modelcontext"]},
        "protocol": "modelcontextprotocol",
    });
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {"mh": http(&url), "ms": stdio},
        "tenants": {"a": tenant("ka", &["mh", "ms"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["mh", "ms"]).await;
    let tools = gw.list("ka", "mcp/listTools").await;
    for up in ["mh", "ms"] {
        let id = format!("mcp://gw/{up}/tool/add");
        let sum = gw.execute("ka", &id, json!({"a": 2, "b": 40})).await;
        assert_eq!(checked_output(&tools, &id, &sum), json!({"sum": 42.0}));
        let listed = gw.rpc("ka", "tools/list", json!({})).await;
        let mcp_id = format!("mcp://gw/{up}/tool/echo");
        let name = listed["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["_meta"]["dev.mcp-gateway/mcpId"] == mcp_id.as_str())
            .unwrap_or_else(|| panic!("{listed}"))["name"]
            .clone();
        let called = gw
            .rpc(
                "ka",
                "tools/call",
                json!({"name": name, "arguments": {"text": up}}),
            )
            .await;
        assert_eq!(
            called["result"]["structuredContent"],
            json!({"text": up}),
            "{called}"
        );
    }
    gw.stop().await;
    task.abort();
}
