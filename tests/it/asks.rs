//! Requests of an upstream during a call (elicitation, sampling) reach the
//! client whose call it is, and only it; its answers go back to the
//! upstream. The official Python SDK's client, with its elicitation and
//! sampling callbacks, calls server-everything's tools that ask, over
//! Streamable HTTP, through the gateway over HTTP and through `mcp-gateway
//! stdio`. What cannot be attributed to one call, or whose client cannot
//! answer it, is answered -32601 and counted, never shown to a client.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::support::*;

const ELICIT: &str = "evh__trigger-elicitation-request";
const SAMPLE: &str = "evh__trigger-sampling-request";
const ROOTS: &str = "evh__get-roots-list";

/// The gateway's configuration, `gateway`'s keys added to its own.
fn config(server: &Server, gateway: Value) -> String {
    json!({
        "gateway": with_keys(json!({"id": "gw", "session_secret": "s".repeat(40)}), gateway),
        "upstreams": {"evh": http(&server.url)},
        "tenants": {"a": tenant("ka", &["evh"]), "b": tenant("kb", &["evh"])},
    })
    .to_string()
}

fn answering(name: &str, sample: &str) -> Value {
    json!({
        "elicit": {"action": "accept", "content": {"name": name, "check": true, "email": "x@example.com"}},
        "sample": sample,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstreams_requests_reach_the_client_of_the_call_and_its_answers_go_back() {
    let server = everything_http(0);
    let gw = Gateway::start(&config(&server, json!({}))).await;
    gw.wait_ready(&["evh"]).await;
    let steps = json!({
        "answers": answering("Ada Lovelace", "a sampled answer"),
        "steps": [
            {"op": "call", "name": ELICIT, "arguments": {}},
            {"op": "call", "name": SAMPLE, "arguments": {"prompt": "hello", "maxTokens": 10}},
            {"op": "asked"},
        ],
    });
    let (version, answers) = sdk_client(&gw, "ka", "legacy", steps).await;
    assert_eq!(version, "2025-11-25");
    let elicited = text_of(&answers[0]);
    assert!(
        elicited.contains("Ada Lovelace") && elicited.contains("accept"),
        "{answers:?}"
    );
    let sampled = text_of(&answers[1]);
    assert!(sampled.contains("a sampled answer"), "{answers:?}");
    let asked = answers[2]["asked"].as_array().unwrap();
    let methods: Vec<&str> = asked
        .iter()
        .map(|a| a["method"].as_str().unwrap())
        .collect();
    assert_eq!(
        methods,
        ["elicitation/create", "sampling/createMessage"],
        "{asked:?}"
    );
    // Counted once the upstream has its answer, which may be after the client has its result.
    until(|| async { counted(&gw, "forwarded").await == 2.0 }).await;
    let text = gw.metrics().await;
    assert_eq!(
        metric(&text, "mcp_gateway_server_requests_waiting"),
        Some(0.0)
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tenants_asked_at_once_each_answer_only_their_own() {
    let server = everything_http(0);
    let gw = Gateway::start(&config(&server, json!({}))).await;
    gw.wait_ready(&["evh"]).await;
    let steps = |name: &str| {
        json!({
            "answers": {"elicit": {"action": "accept", "content": {"name": name}, "delay": 0.5}},
            "steps": [{"op": "call", "name": ELICIT, "arguments": {}}, {"op": "asked"}],
        })
    };
    let (a, b) = tokio::join!(
        sdk_client(&gw, "ka", "legacy", steps("tenant a's user")),
        sdk_client(&gw, "kb", "legacy", steps("tenant b's user")),
    );
    for ((_, answers), own, other) in [
        (a, "tenant a's user", "tenant b's user"),
        (b, "tenant b's user", "tenant a's user"),
    ] {
        let text = text_of(&answers[0]);
        assert!(text.contains(own) && !text.contains(other), "{text}");
        assert_eq!(answers[1]["asked"].as_array().unwrap().len(), 1);
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_of_the_stdio_mode_is_asked_too() {
    let server = everything_http(0);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.yaml");
    std::fs::write(&path, config(&server, json!({}))).unwrap();
    let steps = json!({
        "answers": answering("Grace Hopper", "sampled through stdio"),
        "steps": [
            {"op": "call", "name": ELICIT, "arguments": {}},
            {"op": "call", "name": SAMPLE, "arguments": {"prompt": "hi"}},
        ],
    });
    let (_, answers) = sdk_stdio_client("legacy", &path, "a", steps).await;
    assert!(text_of(&answers[0]).contains("Grace Hopper"), "{answers:?}");
    assert!(
        text_of(&answers[1]).contains("sampled through stdio"),
        "{answers:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_client_cannot_answer_never_reaches_it_and_is_refused_upstream() {
    let server = everything_http(0);
    let gw = Gateway::start(&config(&server, json!({}))).await;
    gw.wait_ready(&["evh"]).await;
    // server-everything asks for roots when its session starts, outside
    // any call (on its session's own stream): refused. Tenant a's calls run
    // on a session of its own, whose start is asked about too: started
    // first, so that what follows counts only what the calls ask.
    until(|| async { counted(&gw, "refused").await >= 1.0 }).await;
    let echo = json!([{"op": "call", "name": "evh__echo", "arguments": {"message": "hi"}}]);
    let (_, answers) = sdk_client(&gw, "ka", "legacy", echo).await;
    assert_eq!(text_of(&answers[0]), "Echo: hi", "{answers:?}");
    until(|| async { counted(&gw, "refused").await >= 2.0 }).await;
    let before = counted(&gw, "refused").await;
    // Declares sampling only: the upstream's elicitation is refused for it.
    let steps = json!({
        "answers": {"sample": "unused"},
        "steps": [{"op": "call", "name": ELICIT, "arguments": {}}, {"op": "asked"}],
    });
    let (_, answers) = sdk_client(&gw, "ka", "legacy", steps).await;
    assert_eq!(answers[1]["asked"], json!([]), "{answers:?}");
    let refused = format!("{}", answers[0]);
    assert!(
        answers[0]["isError"] == true || answers[0].get("error").is_some(),
        "{refused}"
    );
    // Counted once the upstream has its answer, which may be after the client has its result.
    until(|| async { counted(&gw, "refused").await == before + 1.0 }).await;
    // A 2026-07-28 client is asked in rounds (see `rounds`), only what it
    // declared: one that declared sampling only is not asked to elicit.
    let steps = json!({
        "answers": {"sample": "unused"},
        "steps": [{"op": "call", "name": ELICIT, "arguments": {}}, {"op": "asked"}],
    });
    let (version, answers) = sdk_client(&gw, "ka", "auto", steps).await;
    assert_eq!(version, "2026-07-28");
    assert_eq!(answers[1]["asked"], json!([]), "{answers:?}");
    // Counted once the upstream has its answer, which may be after the client has its result.
    until(|| async { counted(&gw, "refused").await == before + 2.0 }).await;
    // roots/list that server-everything sends outside any call (on its
    // session, not the call's stream) belongs to no client: refused.
    let steps = json!({
        "answers": {"roots": [{"uri": "file:///work", "name": "work"}]},
        "steps": [{"op": "call", "name": ROOTS, "arguments": {}}, {"op": "asked"}],
    });
    let (_, answers) = sdk_client(&gw, "ka", "legacy", steps).await;
    assert_eq!(answers[1]["asked"], json!([]), "{answers:?}");
    assert!(
        !text_of(&answers[0]).contains("file:///work"),
        "{answers:?}"
    );
    assert!(counted(&gw, "refused").await >= before + 3.0);
    assert_eq!(counted(&gw, "forwarded").await, 0.0);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_answers_costs_the_call_not_the_gateway() {
    let server = everything_http(0);
    let gw = Gateway::start(&config(&server, json!({"server_request_timeout_ms": 500}))).await;
    gw.wait_ready(&["evh"]).await;
    let steps = json!({
        "answers": {"elicit": {"action": "accept", "content": {"name": "late"}, "delay": 5}},
        "steps": [{"op": "call", "name": ELICIT, "arguments": {}}],
    });
    let started = std::time::Instant::now();
    let (_, answers) = sdk_client(&gw, "ka", "legacy", steps).await;
    assert!(
        answers[0]["isError"] == true || answers[0].get("error").is_some(),
        "{answers:?}"
    );
    assert!(!format!("{}", answers[0]).contains("late"), "{answers:?}");
    assert!(started.elapsed() < Duration::from_secs(20));
    // Counted once the upstream has its answer, which may be after the client has its result.
    until(|| async { counted(&gw, "unanswered").await == 1.0 }).await;
    let text = gw.metrics().await;
    assert_eq!(
        metric(&text, "mcp_gateway_server_requests_waiting"),
        Some(0.0)
    );
    gw.stop().await;
}

/// A handshake-era session opened over plain HTTP by a client that
/// declares elicitation: its id.
async fn open_session(gw: &Gateway, key: &str) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "clientInfo": {"name": "raw", "version": "1"},
        "capabilities": {"elicitation": {}}}});
    let response = gw
        .client
        .post(&gw.url)
        .bearer_auth(key)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(init.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned()
}

async fn post_in(gw: &Gateway, key: &str, session: &str, body: Value) -> reqwest::Response {
    gw.client
        .post(&gw.url)
        .bearer_auth(key)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", "2025-11-25")
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_session_a_request_went_to_can_answer_it() {
    let server = everything_http(0);
    let gw = Gateway::start(&config(&server, json!({}))).await;
    gw.wait_ready(&["evh"]).await;
    let mine = open_session(&gw, "ka").await;
    let theirs = open_session(&gw, "kb").await;
    let same_tenant = open_session(&gw, "ka").await;
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": ELICIT, "arguments": {}}});
    let response = post_in(&gw, "ka", &mine, call).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut events = response.bytes_stream();
    let mut seen = String::new();
    let request: Value = loop {
        let chunk = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("the request in time")
            .expect("the stream open")
            .unwrap();
        seen.push_str(std::str::from_utf8(&chunk).unwrap());
        if let Some(data) = seen.lines().find_map(|l| l.strip_prefix("data: ")) {
            break serde_json::from_str(data).unwrap();
        }
    };
    assert_eq!(request["method"], "elicitation/create", "{request}");
    let id = request["id"].clone();
    assert!(
        id.as_str().is_some_and(|s| s.starts_with("mcp-gateway-")),
        "{id}"
    );
    let answer = |name: &str| json!({"jsonrpc": "2.0", "id": id, "result": {"action": "accept", "content": {"name": name}}});
    // Another tenant's session, another session of the same tenant, an id
    // never sent: each accepted (202), none delivered.
    for (key, session) in [("kb", &theirs), ("ka", &same_tenant)] {
        let r = post_in(&gw, key, session, answer("an intruder")).await;
        assert_eq!(r.status(), 202);
    }
    let r = post_in(
        &gw,
        "ka",
        &mine,
        json!({"jsonrpc": "2.0", "id": "mcp-gateway-0", "result": {}}),
    )
    .await;
    assert_eq!(r.status(), 202);
    // Another tenant's key presenting this session: not its session.
    let r = post_in(&gw, "kb", &mine, answer("an intruder")).await;
    assert_eq!(r.status(), 404);
    let r = post_in(&gw, "ka", &mine, answer("the owner")).await;
    assert_eq!(r.status(), 202);
    let rest = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(chunk) = events.next().await {
            seen.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
        }
        seen
    })
    .await
    .expect("the call's end in time");
    assert!(rest.contains("the owner"), "{rest}");
    assert!(!rest.contains("an intruder"), "{rest}");
    let text = gw.metrics().await;
    assert_eq!(metric(&text, "mcp_gateway_stray_answers_total"), Some(3.0));
    gw.stop().await;
}

/// The Python SDK's server over stdio, a child per client session.
fn per_session(max_children: u32, idle_timeout_ms: u32) -> Doc {
    Doc::of(sdk_stdio())
        .set("timeout_ms", 20000)
        .set("per_session", true)
        .set("max_children", max_children)
        .set("idle_timeout_ms", idle_timeout_ms)
}

fn children(text: &str) -> Option<f64> {
    metric(text, "mcp_gateway_session_children{upstream=\"loc\"}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_child_per_session_asks_only_its_own_client() {
    let yaml = json!({
        "gateway": {"id": "gw", "session_secret": "s".repeat(40)},
        "upstreams": {"loc": per_session(4, 60_000)},
        "tenants": {"a": tenant("ka", &["loc"]), "b": tenant("kb", &["loc"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["loc"]).await;
    let steps = |name: &str| {
        json!({
            "answers": {"elicit": {"action": "accept", "content": {"name": name}, "delay": 0.3}},
            "steps": [
                {"op": "call", "name": "loc__ask", "arguments": {}},
                {"op": "call", "name": "loc__pid", "arguments": {}},
                {"op": "asked"},
            ],
        })
    };
    let (a, b) = tokio::join!(
        sdk_client(&gw, "ka", "legacy", steps("Ada")),
        sdk_client(&gw, "kb", "legacy", steps("Grace")),
    );
    let (a, b) = (a.1, b.1);
    assert_eq!(text_of(&a[0]), "accept: Ada", "{a:?}");
    assert_eq!(text_of(&b[0]), "accept: Grace", "{b:?}");
    assert_eq!(a[2]["asked"].as_array().unwrap().len(), 1);
    // Each session's calls ran on a child of its own.
    assert_ne!(text_of(&a[1]), text_of(&b[1]));
    // The SDK's clients end their sessions (DELETE) as they close: so do
    // their children.
    until(|| async { children(&gw.metrics().await) == Some(0.0) }).await;
    // A client that cannot be asked is served by the shared child, whose
    // request belongs to no one: refused, and the client never asked.
    let steps = json!([{"op": "call", "name": "loc__ask", "arguments": {}}]);
    let (_, answers) = sdk_client(&gw, "ka", "legacy", steps).await;
    assert!(
        answers[0]["isError"] == true || answers[0].get("error").is_some(),
        "{answers:?}"
    );
    assert_eq!(children(&gw.metrics().await), Some(0.0));
    gw.stop().await;
}

/// A 2026-07-28 client has no session: a call of it that may be asked runs
/// on a child of its own request chain, whose request becomes the call's
/// `input_required` round, and the child ends with the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_child_per_request_chain_asks_a_2026_07_28_client() {
    let yaml = json!({
        "gateway": {"id": "gw", "session_secret": "s".repeat(40)},
        "upstreams": {"loc": per_session(4, 60_000)},
        "tenants": {"a": tenant("ka", &["loc"]), "b": tenant("kb", &["loc"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["loc"]).await;
    let steps = |name: &str| {
        json!({
            "answers": {"elicit": {"action": "accept", "content": {"name": name}, "delay": 0.3}},
            "steps": [
                {"op": "call", "name": "loc__ask", "arguments": {}},
                {"op": "asked"},
            ],
        })
    };
    let (a, b) = tokio::join!(
        sdk_client(&gw, "ka", "auto", steps("Ada")),
        sdk_client(&gw, "kb", "auto", steps("Grace")),
    );
    assert_eq!((a.0.as_str(), b.0.as_str()), ("2026-07-28", "2026-07-28"));
    let (a, b) = (a.1, b.1);
    assert_eq!(text_of(&a[0]), "accept: Ada", "{a:?}");
    assert_eq!(text_of(&b[0]), "accept: Grace", "{b:?}");
    assert_eq!(a[1]["asked"].as_array().unwrap().len(), 1, "{a:?}");
    // Each chain's child ended with its call.
    until(|| async { children(&gw.metrics().await) == Some(0.0) }).await;
    gw.stop().await;
}

/// The pid a session's child answers with, through a raw call in `session`.
async fn pid_in(gw: &Gateway, session: &str) -> i32 {
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "loc__pid", "arguments": {}}});
    let response = post_in(gw, "ka", session, call).await;
    let body: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    text_of(&body["result"])
        .parse()
        .unwrap_or_else(|_| panic!("{body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_per_session_are_bounded_and_end_with_their_session_or_when_idle() {
    let yaml = json!({
        "gateway": {"id": "gw", "session_secret": "s".repeat(40)},
        "upstreams": {"loc": per_session(1, 3000)},
        "tenants": {"a": tenant("ka", &["loc"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["loc"]).await;
    let (one, two) = (open_session(&gw, "ka").await, open_session(&gw, "ka").await);
    // One child at most: the second session's takes the first's place
    // (idle), and the first gets a new one when it calls again.
    let first = pid_in(&gw, &one).await;
    assert_eq!(pid_in(&gw, &one).await, first);
    let second = pid_in(&gw, &two).await;
    assert_ne!(second, first);
    until(|| async { gone(first) }).await;
    let again = pid_in(&gw, &one).await;
    assert!(again != first && again != second);
    assert_eq!(children(&gw.metrics().await), Some(1.0));
    // Idle past idle_timeout_ms: ended, its process gone.
    until(|| async { children(&gw.metrics().await) == Some(0.0) }).await;
    until(|| async { gone(again) }).await;
    // A session that ends (DELETE) ends its child at once.
    let pid = pid_in(&gw, &two).await;
    let ended = gw
        .client
        .delete(&gw.url)
        .bearer_auth("ka")
        .header("mcp-session-id", &two)
        .send()
        .await
        .unwrap();
    assert_eq!(ended.status(), 200);
    assert_eq!(children(&gw.metrics().await), Some(0.0));
    until(|| async { gone(pid) }).await;
    gw.stop().await;
}

/// Whether no process has this pid any more.
fn gone(pid: i32) -> bool {
    !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_child_per_session_asks_a_client_of_the_stdio_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.yaml");
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {"loc": per_session(2, 60_000)},
        "tenants": {"a": tenant("ka", &["loc"])},
    })
    .to_string();
    std::fs::write(&path, yaml).unwrap();
    let steps = json!({
        "answers": {"elicit": {"action": "accept", "content": {"name": "Katherine"}}},
        "steps": [{"op": "call", "name": "loc__ask", "arguments": {}}],
    });
    let (_, answers) = sdk_stdio_client("legacy", &path, "a", steps).await;
    assert_eq!(text_of(&answers[0]), "accept: Katherine", "{answers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_runs_only_as_a_task_says_so_and_fails_cleanly() {
    let server = everything_http(0);
    let gw = Gateway::start(&config(&server, json!({}))).await;
    gw.wait_ready(&["evh"]).await;
    // MCP v1.0: listed with a description that says so; calling it is
    // refused with -32603 before it reaches the upstream.
    let tools = gw.list("ka", "mcp/listTools").await;
    let task_only = tools
        .iter()
        .find(|t| t["name"] == "simulate-research-query")
        .unwrap_or_else(|| panic!("{tools:?}"));
    let description = task_only["description"].as_str().unwrap();
    assert!(
        description
            .ends_with("(Runs only as a task, which MCP v1.0 cannot ask for: calling it fails.)"),
        "{description}"
    );
    let id = task_only["mcpId"].as_str().unwrap();
    let r = gw.execute("ka", id, json!({"topic": "x"})).await;
    assert_eq!(r["error"]["code"], -32603, "{r}");
    // The official face lists the upstream's own description and execution.
    let steps = json!([{"op": "tools"}, {"op": "call", "name": "evh__simulate-research-query", "arguments": {"topic": "x"}}]);
    let (_, answers) = sdk_client(&gw, "ka", "legacy", steps).await;
    let listed = answers[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "evh__simulate-research-query")
        .unwrap()
        .clone();
    assert_eq!(listed["execution"]["taskSupport"], "required", "{listed}");
    assert!(
        !listed["description"]
            .as_str()
            .unwrap()
            .contains("Runs only as a task"),
        "{listed}"
    );
    // Called without asking for a task: -32601, as the revision says.
    assert_eq!(answers[1]["error"]["code"], -32601, "{answers:?}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_the_upstream_withdraws_is_withdrawn_from_its_client() {
    let server = sdk_server();
    let yaml = json!({
        "gateway": {"id": "gw", "session_secret": "s".repeat(40)},
        "upstreams": {"web": http(&server.url)},
        "tenants": {"a": tenant("ka", &["web"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["web"]).await;
    // The client would answer after 2 s; the server gives up after 0.5 s
    // and cancels its request. The client is told, so it never answers.
    let steps = json!({
        "answers": {"elicit": {"action": "accept", "content": {"name": "too late"}, "delay": 2}},
        "steps": [
            {"op": "call", "name": "web__ask_briefly", "arguments": {}},
            {"op": "sleep", "s": 2.5},
            {"op": "asked"},
        ],
    });
    let (_, answers) = sdk_client(&gw, "ka", "legacy", steps).await;
    assert!(text_of(&answers[0]).starts_with("gave up"), "{answers:?}");
    assert_eq!(answers[2]["asked"].as_array().unwrap().len(), 1);
    let text = gw.metrics().await;
    assert_eq!(
        metric(
            &text,
            "mcp_gateway_server_requests_total{outcome=\"withdrawn\"}"
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(metric(&text, "mcp_gateway_stray_answers_total"), Some(0.0));
    assert_eq!(
        metric(&text, "mcp_gateway_server_requests_waiting"),
        Some(0.0)
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_elicitation_and_its_prerequisite_error_reach_the_client() {
    let server = everything_http(0);
    let gw = Gateway::start(&config(&server, json!({}))).await;
    gw.wait_ready(&["evh"]).await;
    let steps = json!({
        "answers": {"elicit": {"action": "accept"}},
        "steps": [
            {"op": "call", "name": "evh__trigger-url-elicitation",
             "arguments": {"url": "https://example.com/consent", "message": "Open it"}},
            {"op": "asked"},
            {"op": "call", "name": "evh__trigger-url-elicitation",
             "arguments": {"url": "https://example.com/consent", "message": "Open it", "errorPath": true}},
        ],
    });
    let (_, answers) = sdk_client(&gw, "ka", "legacy", steps).await;
    assert!(
        text_of(&answers[0]).contains("User completed the URL elicitation flow"),
        "{answers:?}"
    );
    assert_eq!(
        answers[1]["asked"],
        json!([{"method": "elicitation/create", "message": "Open it", "mode": "url",
                "url": "https://example.com/consent"}])
    );
    // The upstream's -32042 (a URL elicitation required first) reaches the
    // client as the upstream wrote it, data and all.
    assert_eq!(answers[2]["error"]["code"], -32042, "{answers:?}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_mid_request_leaves_nothing_waiting() {
    let server = everything_http(0);
    let gw = Gateway::start(&config(&server, json!({}))).await;
    gw.wait_ready(&["evh"]).await;
    let session = open_session(&gw, "ka").await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": ELICIT, "arguments": {}}});
    let response = post_in(&gw, "ka", &session, call).await;
    let mut events = response.bytes_stream();
    let mut seen = String::new();
    while !seen.contains("elicitation/create") {
        let chunk = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("the request in time")
            .expect("the stream open")
            .unwrap();
        seen.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    let waiting = |text: &str| metric(text, "mcp_gateway_server_requests_waiting");
    until(|| async { waiting(&gw.metrics().await) == Some(1.0) }).await;
    // The client goes away: its call ends, and the upstream is answered.
    drop(events);
    until(|| async { waiting(&gw.metrics().await) == Some(0.0) }).await;
    until(|| async { counted(&gw, "unanswered").await == 1.0 }).await;
    gw.stop().await;
}

/// A 2026-07-28 `tools/call` of `name` as `key`, its client declaring it
/// can be asked to elicit; `round` holds what a retry adds to the params.
async fn call_2026(gw: &Gateway, key: &str, name: &str, round: Value) -> Value {
    let form = json!({"elicitation": {"form": {}}});
    crate::support::call_2026(gw, key, name, form, round).await
}

/// The pid of the child that serves `key`'s session `session` on `upstream`.
async fn pid_as(gw: &Gateway, key: &str, session: &str, upstream: &str) -> String {
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": format!("{upstream}__pid"), "arguments": {}}});
    let response = post_in(gw, key, session, call).await;
    let body: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    text_of(&body["result"])
}

/// Calls held across rounds their client walked away from cost only their
/// tenant: its children are bounded apart from another tenant's, whose idle
/// child stays; every call on a child holds the upstream's `max_concurrency`
/// and `max_queue`; and a held call keeps its tenant's concurrency place
/// until its retry ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_are_bounded_per_tenant_and_hold_the_upstreams_slots() {
    let child = |keys: &[(&str, u32)]| {
        let doc = Doc::of(sdk_stdio())
            .set("timeout_ms", 20000)
            .set("per_session", true);
        keys.iter().fold(doc, |doc, (key, n)| doc.set(key, n))
    };
    let yaml = json!({
        "gateway": {"id": "gw", "session_secret": "s".repeat(40)},
        "upstreams": {
            "loc": child(&[("max_children", 2)]),
            "lim": child(&[("max_concurrency", 1), ("max_queue", 0)]),
        },
        "tenants": {
            "a": tenant("ka", &["loc", "lim"]),
            "b": tenant("kb", &["loc", "lim"]),
            "c": {"api_keys": ["kc"], "upstreams": ["loc"], "max_concurrency": 1},
        },
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["loc", "lim"]).await;
    let held = |answer: &Value| answer["result"]["resultType"] == "input_required";

    // b's session has a child; a walks away from two held rounds, each on a
    // child of its own request chain: a's two children, both busy.
    let b_session = open_session(&gw, "kb").await;
    let b_pid = pid_as(&gw, "kb", &b_session, "loc").await;
    for _ in 0..2 {
        let answer = call_2026(&gw, "ka", "loc__ask", json!({})).await;
        assert!(held(&answer), "{answer}");
    }
    // Its third finds its own children busy: refused, and b's child stays.
    let refused = call_2026(&gw, "ka", "loc__ask", json!({})).await;
    assert_eq!(refused["error"]["code"], -32001, "{refused}");
    assert_eq!(pid_as(&gw, "kb", &b_session, "loc").await, b_pid);
    let m = gw.metrics().await;
    assert_eq!(
        metric(&m, r#"mcp_gateway_session_children{upstream="loc"}"#),
        Some(3.0)
    );

    // lim takes one call at once, whichever child runs it: a's held round
    // holds it, and b's call on its own child is refused at once (-32004).
    let answer = call_2026(&gw, "ka", "lim__ask", json!({})).await;
    assert!(held(&answer), "{answer}");
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                      "params": {"name": "lim__pid", "arguments": {}}});
    let over = post_in(&gw, "kb", &b_session, call).await;
    let over: Value = serde_json::from_str(&over.text().await.unwrap()).unwrap();
    assert_eq!(over["error"]["code"], -32004, "{over}");

    // c may run one call at once: its held round is that call. Another is
    // refused (429) until the retry ends the round.
    let first = call_2026(&gw, "kc", "loc__ask", json!({})).await;
    assert!(held(&first), "{first}");
    let (status, _) = gw
        .post(
            "kc",
            &json!({"jsonrpc": "2.0", "id": 3, "method": "mcp/executeTool",
                    "params": {"id": "mcp://gw/loc/tool/pid", "arguments": {}}})
            .to_string(),
        )
        .await;
    assert_eq!(status, 429);
    let (key, _) = first["result"]["inputRequests"]
        .as_object()
        .and_then(|r| r.iter().next())
        .unwrap();
    let retry = json!({
        "inputResponses": {key.as_str(): {"action": "accept", "content": {"name": "Ada"}}},
        "requestState": first["result"]["requestState"],
    });
    let done = call_2026(&gw, "kc", "loc__ask", retry).await;
    assert_eq!(text_of(&done["result"]), "accept: Ada", "{done}");
    let again = call_2026(&gw, "kc", "loc__pid", json!({})).await;
    assert!(again["result"]["content"].is_array(), "{again}");
    gw.stop().await;
}

/// Whether a 2026-07-28 call may be held, on a child of its own request
/// chain, is for the client's declared capabilities to say: words in the
/// arguments of a client that declared nothing start no process, and every
/// such call runs on the one process that serves the tenant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_word_in_the_arguments_starts_no_child() {
    let yaml = json!({
        "gateway": {"id": "gw", "session_secret": "s".repeat(40)},
        "upstreams": {"loc": per_session(4, 60_000)},
        "tenants": {"a": tenant("ka", &["loc"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["loc"]).await;
    let mut pids = std::collections::HashSet::new();
    for word in ["roots", "elicitation", "sampling", "requestState"] {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "loc__pid",
            "arguments": {"note": format!("{word}: {{}}")},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        }});
        let response = within(
            gw.client
                .post(&gw.url)
                .bearer_auth("ka")
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("mcp-protocol-version", "2026-07-28")
                .header("mcp-method", "tools/call")
                .header("mcp-name", "loc__pid")
                .body(body.to_string())
                .send(),
        )
        .await
        .unwrap();
        let answer: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
        pids.insert(text_of(&answer["result"]));
    }
    assert_eq!(pids.len(), 1, "{pids:?}");
    let m = gw.metrics().await;
    assert_eq!(children(&m), Some(0.0), "{m}");
    gw.stop().await;
}
