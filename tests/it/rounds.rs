//! The 2026-07-28 revision's multi-round-trip requests through the gateway:
//! an upstream that needs the client's input answers `input_required`, the
//! client retries with its answers and the state it was handed. The
//! upstream is the official Python SDK's server with tools that ask the
//! SDK's own way (`Resolve`: `Elicit`, `Sample`), which takes both eras;
//! the client is the official Python SDK's, which answers rounds itself.
//! The state a client is handed is sealed by the gateway: another tenant's,
//! another tool's, an altered or an expired one is refused before the
//! upstream hears of it, and any replica with the same secret takes a retry.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

/// The gateway's configuration, `gateway`'s keys added to its own.
fn config(server: &Server, gateway: Value) -> String {
    json!({
        "gateway": with_keys(json!({"id": "gw", "session_secret": "s".repeat(40)}), gateway),
        "upstreams": {"res": http(&server.url)},
        "tenants": {"a": tenant("ka", &["res"]), "b": tenant("kb", &["res"])},
    })
    .to_string()
}

fn client_answers() -> Value {
    json!({
        "elicit": {"action": "accept", "content": {"confirm": true, "note": "ok", "name": "ada"}},
        "sample": "a line from the client's model",
        "roots": [{"uri": "file:///work", "name": "work"}],
    })
}

/// A 2026-07-28 `tools/call` of `name` as `key`, posted to `url` with the
/// revision's headers; `round` holds what a retry adds to the params.
async fn call(
    client: &reqwest::Client,
    url: &str,
    key: &str,
    name: &str,
    arguments: Value,
    round: Value,
) -> (u16, Value) {
    let mut params = json!({
        "name": name,
        "arguments": arguments,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
        },
    });
    if let (Value::Object(params), Value::Object(round)) = (&mut params, round) {
        params.extend(round);
    }
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params});
    let response = within(
        client
            .post(url)
            .bearer_auth(key)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", name)
            .body(body.to_string())
            .send(),
    )
    .await
    .unwrap();
    let status = response.status().as_u16();
    let text = within(response.text()).await.unwrap();
    let answer: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{text}"));
    (status, answer)
}

/// The first round of `res__confirm`: the upstream's question and the
/// state the client is handed.
async fn first_round(gw: &Gateway, key: &str) -> (Value, String) {
    let (status, answer) = call(
        &gw.client,
        &gw.url,
        key,
        "res__confirm",
        json!({"action": "deploy"}),
        json!({}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let result = &answer["result"];
    assert_eq!(result["resultType"], "input_required", "{answer}");
    let (key, asked) = result["inputRequests"]
        .as_object()
        .and_then(|r| r.iter().next())
        .unwrap_or_else(|| panic!("no input request: {answer}"));
    assert_eq!(asked["method"], "elicitation/create", "{answer}");
    assert_eq!(asked["params"]["message"], "Really deploy?", "{answer}");
    let state = result["requestState"].as_str().unwrap().to_owned();
    (
        json!({ key: {"action": "accept", "content": {"confirm": true, "note": "yes"}} }),
        state,
    )
}

fn retry(responses: &Value, state: &str) -> Value {
    json!({"inputResponses": responses, "requestState": state})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_clients_call_is_asked_in_rounds_and_its_answers_reach_the_upstream() {
    let server = resolve_server();
    let gw = Gateway::start(&config(&server, json!({}))).await;
    gw.wait_ready(&["res"]).await;
    let steps = json!({"answers": client_answers(), "steps": [
        {"op": "call", "name": "res__confirm", "arguments": {"action": "deploy"}},
        {"op": "call", "name": "res__greet_twice", "arguments": {"action": "ship"}},
        {"op": "call", "name": "res__summarize", "arguments": {"topic": "gateways"}},
        {"op": "call", "name": "res__echo", "arguments": {"text": "plain"}},
        {"op": "call", "name": "res__where", "arguments": {}},
        {"op": "asked"},
    ]});
    let (revision, answers) = sdk_client(&gw, "ka", "auto", steps).await;
    assert_eq!(revision, "2026-07-28");
    assert!(
        text_of(&answers[0]).contains("deploy: confirmed ok"),
        "{answers:?}"
    );
    // Two questions in one round, both answered in one retry.
    assert!(
        text_of(&answers[1]).contains("ada confirmed ship"),
        "{answers:?}"
    );
    assert!(
        text_of(&answers[2]).contains("model said: a line from the client's model"),
        "{answers:?}"
    );
    assert!(text_of(&answers[3]).contains("plain"), "{answers:?}");
    assert!(
        text_of(&answers[4]).contains("roots: file:///work"),
        "{answers:?}"
    );
    let asked = answers[5]["asked"].as_array().unwrap();
    let methods: Vec<_> = asked
        .iter()
        .map(|a| a["method"].as_str().unwrap())
        .collect();
    assert_eq!(
        methods,
        [
            "elicitation/create",
            "elicitation/create",
            "elicitation/create",
            "sampling/createMessage",
            "roots/list"
        ],
        "{asked:?}"
    );
    // The same tools for a handshake-era client: asked during the call.
    let steps = json!({"answers": client_answers(), "steps": [
        {"op": "call", "name": "res__confirm", "arguments": {"action": "deploy"}},
        {"op": "asked"},
    ]});
    let (revision, answers) = sdk_client(&gw, "kb", "legacy", steps).await;
    assert_eq!(revision, "2025-11-25");
    assert!(
        text_of(&answers[0]).contains("deploy: confirmed ok"),
        "{answers:?}"
    );
    assert_eq!(answers[1]["asked"][0]["method"], "elicitation/create");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_of_the_stdio_mode_is_asked_in_rounds_too() {
    let server = resolve_server();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.yaml");
    std::fs::write(&path, config(&server, json!({}))).unwrap();
    let steps = json!({"answers": client_answers(), "steps": [
        {"op": "call", "name": "res__confirm", "arguments": {"action": "deploy"}},
    ]});
    let (revision, answers) = sdk_stdio_client("auto", &path, "a", steps).await;
    assert_eq!(revision, "2026-07-28");
    assert!(
        text_of(&answers[0]).contains("deploy: confirmed ok"),
        "{answers:?}"
    );
    // A handshake-era client of the stdio mode, in front of a server of
    // the 2026-07-28 revision alone: asked during its call.
    let modern = resolve_server_modern();
    std::fs::write(&path, config(&modern, json!({}))).unwrap();
    let steps = json!({"answers": client_answers(), "steps": [
        {"op": "call", "name": "res__summarize", "arguments": {"topic": "pipes"}},
    ]});
    let (revision, answers) = sdk_stdio_client("legacy", &path, "a", steps).await;
    assert_eq!(revision, "2025-11-25");
    assert!(
        text_of(&answers[0]).contains("model said: a line from the client's model"),
        "{answers:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_state_is_taken_back_only_from_its_tenant_for_its_tool_unaltered() {
    let server = resolve_server();
    let gw = Gateway::start(&config(&server, json!({}))).await;
    gw.wait_ready(&["res"]).await;
    let (responses, state) = first_round(&gw, "ka").await;
    let refused = |(status, answer): (u16, Value)| {
        assert_eq!(status, 400, "{answer}");
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
    };
    // Another tenant presenting it.
    refused(
        call(
            &gw.client,
            &gw.url,
            "kb",
            "res__confirm",
            json!({"action": "deploy"}),
            retry(&responses, &state),
        )
        .await,
    );
    // Another tool of the same upstream.
    refused(
        call(
            &gw.client,
            &gw.url,
            "ka",
            "res__greet_twice",
            json!({"action": "deploy"}),
            retry(&responses, &state),
        )
        .await,
    );
    // Altered: a character of its payload, or the upstream's own state
    // presented as it is.
    let mut altered = state.clone().into_bytes();
    let last = altered.len() - 2;
    altered[last] = if altered[last] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).unwrap();
    for forged in [altered.as_str(), "v1.forged", ""] {
        refused(
            call(
                &gw.client,
                &gw.url,
                "ka",
                "res__confirm",
                json!({"action": "deploy"}),
                retry(&responses, forged),
            )
            .await,
        );
    }
    // Its own tenant, its own tool: the upstream takes the answer.
    let (status, answer) = call(
        &gw.client,
        &gw.url,
        "ka",
        "res__confirm",
        json!({"action": "deploy"}),
        retry(&responses, &state),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["result"]["resultType"], "complete", "{answer}");
    assert!(
        text_of(&answer["result"]).contains("deploy: confirmed yes"),
        "{answer}"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_replica_with_the_secret_takes_the_retry_and_a_round_ends_in_time() {
    let server = resolve_server();
    // The round's lifetime is the server requests' timeout.
    let gw = Gateway::start(&config(&server, json!({"server_request_timeout_ms": 1000}))).await;
    let other = Gateway::start(&config(&server, json!({}))).await;
    let stranger = Gateway::start(
        &Doc::parse(&config(&server, json!({})))
            .set("gateway.session_secret", "t".repeat(40))
            .yaml(),
    )
    .await;
    for g in [&gw, &other, &stranger] {
        g.wait_ready(&["res"]).await;
    }
    let (responses, state) = first_round(&gw, "ka").await;
    // A replica with another secret refuses it.
    let (status, answer) = call(
        &stranger.client,
        &stranger.url,
        "ka",
        "res__confirm",
        json!({"action": "deploy"}),
        retry(&responses, &state),
    )
    .await;
    assert_eq!(
        (status, &answer["error"]["code"]),
        (400, &json!(-32602)),
        "{answer}"
    );
    // The other replica takes it on.
    let (status, answer) = call(
        &other.client,
        &other.url,
        "ka",
        "res__confirm",
        json!({"action": "deploy"}),
        retry(&responses, &state),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        text_of(&answer["result"]).contains("deploy: confirmed yes"),
        "{answer}"
    );
    // Past the round's end, nobody takes it.
    let (responses, state) = first_round(&gw, "ka").await;
    tokio::time::sleep(Duration::from_millis(2600)).await;
    let (status, answer) = call(
        &gw.client,
        &gw.url,
        "ka",
        "res__confirm",
        json!({"action": "deploy"}),
        retry(&responses, &state),
    )
    .await;
    assert_eq!(
        (status, &answer["error"]["code"]),
        (400, &json!(-32602)),
        "{answer}"
    );
    for g in [gw, other, stranger] {
        g.stop().await;
    }
}

// Between eras: server-everything speaks only the handshake era, and asks
// during its calls. A 2026-07-28 client is asked in rounds.

const ELICIT: &str = "evh__trigger-elicitation-request";
const SAMPLE: &str = "evh__trigger-sampling-request";

fn everything_config(server: &Server, gateway: Value) -> String {
    json!({
        "gateway": with_keys(json!({"id": "gw", "session_secret": "s".repeat(40)}), gateway),
        "upstreams": {"evh": http(&server.url)},
        "tenants": {"a": tenant("ka", &["evh"]), "b": tenant("kb", &["evh"])},
    })
    .to_string()
}

/// Calls the gateway holds for their clients' retries.
fn held(gw: &Gateway) -> usize {
    gw.running.as_ref().unwrap().dispatcher.held().len()
}

async fn waiting(gw: &Gateway) -> f64 {
    metric(&gw.metrics().await, "mcp_gateway_server_requests_waiting").unwrap_or(-1.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_upstreams_requests_reach_a_stateless_client_as_rounds() {
    let server = everything_http(0);
    let gw = Gateway::start(&everything_config(&server, json!({}))).await;
    gw.wait_ready(&["evh"]).await;
    let steps = json!({
        "answers": {
            "elicit": {"action": "accept", "content": {"name": "Ada Lovelace", "check": true, "email": "ada@example.com"}},
            "sample": "a sampled answer",
        },
        "steps": [
            {"op": "call", "name": ELICIT, "arguments": {}},
            {"op": "call", "name": SAMPLE, "arguments": {"prompt": "hello", "maxTokens": 10}},
            {"op": "asked"},
        ],
    });
    let (revision, answers) = sdk_client(&gw, "ka", "auto", steps).await;
    assert_eq!(revision, "2026-07-28");
    let elicited = text_of(&answers[0]);
    assert!(
        elicited.contains("Ada Lovelace") && elicited.contains("accept"),
        "{answers:?}"
    );
    assert!(
        text_of(&answers[1]).contains("a sampled answer"),
        "{answers:?}"
    );
    let asked = answers[2]["asked"].as_array().unwrap();
    let methods: Vec<_> = asked
        .iter()
        .map(|a| a["method"].as_str().unwrap())
        .collect();
    assert_eq!(
        methods,
        ["elicitation/create", "sampling/createMessage"],
        "{asked:?}"
    );
    until(|| async { counted(&gw, "forwarded").await >= 2.0 }).await;
    assert_eq!(held(&gw), 0);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_call_is_its_tenants_its_replicas_and_ends_with_its_round() {
    let server = everything_http(0);
    let gw = Gateway::start(&everything_config(
        &server,
        json!({"server_request_timeout_ms": 1500}),
    ))
    .await;
    let other = Gateway::start(&everything_config(&server, json!({}))).await;
    gw.wait_ready(&["evh"]).await;
    other.wait_ready(&["evh"]).await;
    let first = || async {
        let (status, answer) = call(&gw.client, &gw.url, "ka", ELICIT, json!({}), json!({})).await;
        assert_eq!(status, 200, "{answer}");
        let result = answer["result"].clone();
        assert_eq!(result["resultType"], "input_required", "{answer}");
        let (key, asked) = result["inputRequests"]
            .as_object()
            .and_then(|r| r.iter().next())
            .map(|(k, v)| (k.clone(), v.clone()))
            .unwrap_or_else(|| panic!("{answer}"));
        assert_eq!(asked["method"], "elicitation/create", "{answer}");
        let responses = json!({ key: {"action": "accept", "content": {"name": "Grace", "check": true, "email": "g@example.com"}} });
        (
            responses,
            result["requestState"].as_str().unwrap().to_owned(),
        )
    };
    let (responses, state) = first().await;
    assert_eq!(held(&gw), 1);
    // Counted by the link once it waits for the answer.
    until(|| async { waiting(&gw).await == 1.0 }).await;
    // Another tenant's retry, and one on another replica (no shared store):
    // refused, and the call is still held for its own client.
    let (status, answer) = call(
        &gw.client,
        &gw.url,
        "kb",
        ELICIT,
        json!({}),
        retry(&responses, &state),
    )
    .await;
    assert_eq!(
        (status, &answer["error"]["code"]),
        (400, &json!(-32602)),
        "{answer}"
    );
    let (status, answer) = call(
        &other.client,
        &other.url,
        "ka",
        ELICIT,
        json!({}),
        retry(&responses, &state),
    )
    .await;
    assert_eq!(
        (status, &answer["error"]["code"]),
        (400, &json!(-32602)),
        "{answer}"
    );
    assert!(
        answer["error"]["data"]
            .as_str()
            .unwrap()
            .contains("another replica"),
        "{answer}"
    );
    // Its own client's retry reaches the waiting upstream.
    let (status, answer) = call(
        &gw.client,
        &gw.url,
        "ka",
        ELICIT,
        json!({}),
        retry(&responses, &state),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert!(text_of(&answer["result"]).contains("Grace"), "{answer}");
    // Once taken, the same state continues nothing.
    let (status, _) = call(
        &gw.client,
        &gw.url,
        "ka",
        ELICIT,
        json!({}),
        retry(&responses, &state),
    )
    .await;
    assert_eq!(status, 400);
    // A client that never retries: the round's time runs out, the upstream
    // is answered with an error, nothing stays held.
    let unanswered = counted(&gw, "unanswered").await;
    let _ = first().await;
    assert_eq!(held(&gw), 1);
    until(|| async { held(&gw) == 0 }).await;
    until(|| async { counted(&gw, "unanswered").await > unanswered }).await;
    assert_eq!(waiting(&gw).await, 0.0);
    for g in [gw, other] {
        g.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_shared_store_a_retry_reaching_another_replica_continues_the_held_call() {
    let redis = Redis::start();
    let server = everything_http(0);
    let store = || json!({"store": {"url": redis.url(), "timeout_ms": 500}});
    let (one, two) = (
        Gateway::start(&everything_config(&server, store())).await,
        Gateway::start(&everything_config(&server, store())).await,
    );
    for gw in [&one, &two] {
        gw.wait_ready(&["evh"]).await;
        until(|| async { metric(&gw.metrics().await, "mcp_gateway_store_replicas") == Some(2.0) })
            .await;
    }
    // The official client's first round on one replica, its retries on the other.
    let steps = json!({
        "answers": {
            "elicit": {"action": "accept", "content": {"name": "answered elsewhere", "check": true, "email": "e@example.com"}},
            "sample": "sampled elsewhere",
        },
        "steps": [
            {"op": "call", "name": ELICIT, "arguments": {}},
            {"op": "call", "name": SAMPLE, "arguments": {"prompt": "hello", "maxTokens": 10}},
        ],
    });
    let args = vec![
        "auto".into(),
        "http".into(),
        one.url.clone(),
        "ka".into(),
        format!("retries={}", two.url),
    ];
    let (revision, answers) = sdk_client_with(args, steps).await;
    assert_eq!(revision, "2026-07-28");
    assert!(
        text_of(&answers[0]).contains("answered elsewhere"),
        "{answers:?}"
    );
    assert!(
        text_of(&answers[1]).contains("sampled elsewhere"),
        "{answers:?}"
    );
    assert_eq!((held(&one), held(&two)), (0, 0));
    // Another tenant's retry, sent to the other replica, continues nothing.
    let (status, answer) = call(&one.client, &one.url, "ka", ELICIT, json!({}), json!({})).await;
    assert_eq!(status, 200, "{answer}");
    let state = answer["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, answer) = call(
        &two.client,
        &two.url,
        "kb",
        ELICIT,
        json!({}),
        retry(&json!({}), &state),
    )
    .await;
    assert_eq!(
        (status, &answer["error"]["code"]),
        (400, &json!(-32602)),
        "{answer}"
    );
    assert_eq!(held(&one), 1);
    for gw in [one, two] {
        gw.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_arguments_a_tool_mirrors_reach_the_upstream_in_their_headers() {
    let server = resolve_server();
    let gw = Gateway::start(&config(&server, json!({}))).await;
    gw.wait_ready(&["res"]).await;
    let post = |region: &'static str, header: &'static str| {
        let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "res__regional",
            "arguments": {"region": region, "text": "hi"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        }});
        gw.client
            .post(&gw.url)
            .bearer_auth("ka")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "res__regional")
            .header("mcp-param-region", header)
            .body(body.to_string())
            .send()
    };
    // Plain, and a value the revision carries base64-encoded; the upstream
    // (the Python SDK) checks each header against the argument it mirrors.
    for (region, header) in [
        ("eu-west", "eu-west"),
        ("zürich", "=?base64?esO8cmljaA==?="),
    ] {
        let response = within(post(region, header)).await.unwrap();
        let status = response.status().as_u16();
        let answer: Value = serde_json::from_str(&within(response.text()).await.unwrap()).unwrap();
        assert_eq!(status, 200, "{answer}");
        assert_eq!(
            answer["result"]["structuredContent"]["result"],
            format!("{region}: hi"),
            "{answer}"
        );
    }
    gw.stop().await;
}

/// With a shared store, a round continued on the replica that holds its
/// call reports to the client through the replica its retry reached: the
/// progress and log lines the upstream sends once answered arrive there,
/// before the result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_continued_on_another_replica_reports_through_the_replica_the_retry_reached() {
    let redis = Redis::start();
    let upstream = Doc::of(sdk_stdio())
        .set("timeout_ms", 20000)
        .set("per_session", true)
        .set("max_children", 4);
    let yaml = json!({
        "gateway": {
            "id": "gw",
            "session_secret": "s".repeat(40),
            "store": {"url": redis.url(), "timeout_ms": 500},
        },
        "upstreams": {"loc": upstream},
        "tenants": {"a": tenant("ka", &["loc"])},
    })
    .to_string();
    let (one, two) = (Gateway::start(&yaml).await, Gateway::start(&yaml).await);
    for gw in [&one, &two] {
        gw.wait_ready(&["loc"]).await;
        until(|| async { metric(&gw.metrics().await, "mcp_gateway_store_replicas") == Some(2.0) })
            .await;
    }
    let steps = json!({
        "answers": {"elicit": {"action": "accept", "content": {"name": "Ada"}}},
        "steps": [{"op": "logged", "name": "loc__ask_then_report", "level": "info", "progress": true}],
    });
    let args = vec![
        "auto".into(),
        "http".into(),
        one.url.clone(),
        "ka".into(),
        format!("retries={}", two.url),
    ];
    let (revision, answers) = sdk_client_with(args, steps).await;
    assert_eq!(revision, "2026-07-28");
    let answer = &answers[0];
    assert_eq!(text_of(&answer["result"]), "accept: Ada", "{answer}");
    assert_eq!(
        answer["logs"],
        json!([{"level": "info", "data": "told Ada"}]),
        "{answer}"
    );
    assert_eq!(answer["progress"], json!([1.0]), "{answer}");
    assert_eq!((held(&one), held(&two)), (0, 0));
    for gw in [one, two] {
        gw.stop().await;
    }
}

/// A server that speaks only the 2026-07-28 revision (the Python SDK's,
/// behind what such a server answers to anything else) is sent one
/// handshake, which it refuses, and then everything in its revision. A
/// handshake-era client is asked its rounds' questions during its call,
/// as that era's requests, and the gateway calls again with the answers; a
/// 2026-07-28 client gets the rounds themselves; an MCP v1.0 agent cannot
/// be asked, and its call fails cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_of_the_2026_07_28_revision_alone_asks_clients_of_every_era() {
    let server = resolve_server_modern();
    let gw = Gateway::start(&config(&server, json!({}))).await;
    gw.wait_ready(&["res"]).await;
    let steps = json!({"answers": client_answers(), "steps": [
        {"op": "call", "name": "res__confirm", "arguments": {"action": "deploy"}},
        {"op": "call", "name": "res__greet_twice", "arguments": {"action": "ship"}},
        {"op": "call", "name": "res__summarize", "arguments": {"topic": "gateways"}},
        {"op": "call", "name": "res__where", "arguments": {}},
        {"op": "call", "name": "res__regional", "arguments": {"region": "eu-west", "text": "hi"}},
        {"op": "asked"},
    ]});
    let (revision, answers) = sdk_client(&gw, "ka", "legacy", steps).await;
    assert_eq!(revision, "2025-11-25");
    assert!(
        text_of(&answers[0]).contains("deploy: confirmed ok"),
        "{answers:?}"
    );
    // Two questions in one round, both asked during the call.
    assert!(
        text_of(&answers[1]).contains("ada confirmed ship"),
        "{answers:?}"
    );
    assert!(
        text_of(&answers[2]).contains("model said: a line from the client's model"),
        "{answers:?}"
    );
    assert!(
        text_of(&answers[3]).contains("roots: file:///work"),
        "{answers:?}"
    );
    // The argument the tool mirrors reached the server in its header.
    assert!(text_of(&answers[4]).contains("eu-west: hi"), "{answers:?}");
    let mut methods: Vec<_> = answers[5]["asked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["method"].as_str().unwrap())
        .collect();
    methods.sort_unstable();
    assert_eq!(
        methods,
        [
            "elicitation/create",
            "elicitation/create",
            "elicitation/create",
            "roots/list",
            "sampling/createMessage",
        ],
        "{answers:?}"
    );
    assert_eq!(counted(&gw, "forwarded").await, 5.0);

    // A 2026-07-28 client is handed the rounds themselves.
    let steps = json!({"answers": client_answers(), "steps": [
        {"op": "call", "name": "res__confirm", "arguments": {"action": "merge"}},
    ]});
    let (revision, answers) = sdk_client(&gw, "kb", "auto", steps).await;
    assert_eq!(revision, "2026-07-28");
    assert!(
        text_of(&answers[0]).contains("merge: confirmed ok"),
        "{answers:?}"
    );
    // Its first round, as the client sees it: the question, and a state sealed by the gateway.
    let (_, state) = first_round(&gw, "kb").await;
    assert!(state.contains('.'), "{state}");

    // An MCP v1.0 agent cannot be asked: it is declared no capabilities,
    // and its call fails with the server's own word on what it lacks.
    let refused = gw
        .execute(
            "ka",
            "mcp://gw/res/tool/confirm",
            json!({"action": "deploy"}),
        )
        .await;
    assert_eq!(refused["error"]["code"], -32021, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("elicitation")),
        "{refused}"
    );
    let plain = gw
        .execute("ka", "mcp://gw/res/tool/echo", json!({"text": "plain"}))
        .await;
    assert!(plain.to_string().contains("plain"), "{plain}");
    // One handshake was refused; everything since went in the revision.
    let refusals = gw
        .execute("ka", "mcp://gw/res/tool/handshakes", json!({}))
        .await;
    assert_eq!(refusals["result"]["output"]["result"], "1", "{refusals}");
    gw.stop().await;
}

/// A handshake-era client that does not answer a round's question in time
/// costs its call, which fails with -32603, and nothing stays waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_client_that_never_answers_a_rounds_question_costs_only_its_call() {
    let server = resolve_server_modern();
    let gw = Gateway::start(&config(&server, json!({"server_request_timeout_ms": 500}))).await;
    gw.wait_ready(&["res"]).await;
    let answers = json!({"elicit": {"action": "accept", "content": {"confirm": true}, "delay": 5}});
    let steps = json!({"answers": answers, "steps": [
        {"op": "call", "name": "res__confirm", "arguments": {"action": "deploy"}},
    ]});
    let started = std::time::Instant::now();
    let (_, answers) = sdk_client(&gw, "ka", "legacy", steps).await;
    assert!(
        answers[0]["isError"] == true || answers[0].get("error").is_some(),
        "{answers:?}"
    );
    assert!(
        !format!("{}", answers[0]).contains("confirmed"),
        "{answers:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(counted(&gw, "unanswered").await, 1.0);
    let text = gw.metrics().await;
    assert_eq!(
        metric(&text, "mcp_gateway_server_requests_waiting"),
        Some(0.0)
    );
    gw.stop().await;
}

/// A handshake-era client of a server of the 2026-07-28 revision alone is
/// sent to a page (a URL-mode elicitation): the revision's question has no
/// `elicitationId`, the handshake era's requires one, so the gateway names
/// each question it hands on, a new name each round; the official SDK's
/// client takes them and the call completes over its rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_client_sent_to_a_page_by_a_2026_server_gets_an_elicitation_id() {
    let server = resolve_server_modern();
    let gw = Gateway::start(&config(&server, json!({}))).await;
    gw.wait_ready(&["res"]).await;
    let steps = json!({
        "answers": {"elicit": {"action": "accept", "show_ids": true}},
        "steps": [
            {"op": "call", "name": "res__consent", "arguments": {"rounds": 2}},
            {"op": "asked"},
        ],
    });
    let (revision, answers) = sdk_client(&gw, "ka", "legacy", steps).await;
    assert_eq!(revision, "2025-11-25");
    assert!(
        text_of(&answers[0]).contains("consent: accept after 2 rounds"),
        "{answers:?}"
    );
    let asked = answers[1]["asked"].as_array().unwrap();
    assert_eq!(asked.len(), 2, "{asked:?}");
    let ids: Vec<&str> = asked
        .iter()
        .map(|a| {
            assert_eq!(a["mode"], "url", "{a}");
            assert_eq!(a["url"], "https://example.com/consent", "{a}");
            a["elicitationId"].as_str().unwrap_or_else(|| panic!("{a}"))
        })
        .collect();
    assert!(ids.iter().all(|id| id.len() > 16), "{ids:?}");
    assert_ne!(ids[0], ids[1]);
    gw.stop().await;
}
