//! Replicas as one gateway for what a client sends that another replica
//! must act on, through a real `redis-server`: a cancellation, a client's
//! answer to an upstream's request, a session's log level, and tasks (their
//! status on a session's stream, their results and questions) reached
//! through any replica.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::replicas::{SECRET, send};
use crate::support::*;

/// The replicas' configuration: the store at `redis` (answering within
/// `timeout_ms`), upstream `name` as given, and a tenant per key (`ka` is
/// `a`, `kb` is `b`) that sees it.
fn shared(
    redis: &Redis,
    timeout_ms: u64,
    name: &str,
    upstream: impl serde::Serialize,
    keys: &[&str],
) -> String {
    let tenants: serde_json::Map<String, Value> = keys
        .iter()
        .map(|key| (key[1..].to_string(), tenant(key, &[name])))
        .collect();
    json!({
        "gateway": {
            "id": "gw",
            "session_secret": SECRET,
            "store": {"url": redis.url(), "timeout_ms": timeout_ms},
        },
        "upstreams": {name: upstream},
        "tenants": tenants,
    })
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancellation_reaching_another_replica_ends_the_call_where_it_runs() {
    let redis = Redis::start();
    let server = sdk_server();
    // A timeout past the test's patience: only the cancellation ends the call in time.
    let yaml = shared(
        &redis,
        500,
        "web",
        Doc::of(http(&server.url)).set("timeout_ms", 60000),
        &["ka"],
    );
    let (one, two) = two_replicas(&yaml, "web").await;
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let r = send(&one, reqwest::Method::POST, None, Some(init)).await;
    let session = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    // The call runs on the first replica...
    let call = json!({"jsonrpc": "2.0", "id": "slow", "method": "tools/call",
                      "params": {"name": "web__wait", "arguments": {}}});
    let running = {
        let (session, url, client) = (session.clone(), one.url.clone(), one.client.clone());
        tokio::spawn(async move {
            let r = client
                .post(&url)
                .bearer_auth("ka")
                .header("accept", "application/json, text/event-stream")
                .header("mcp-session-id", &session)
                .header("mcp-protocol-version", "2025-11-25")
                .header("content-type", "application/json")
                .body(call.to_string())
                .send()
                .await
                .unwrap();
            serde_json::from_str::<Value>(&r.text().await.unwrap()).unwrap()
        })
    };
    until(|| async {
        metric(
            &one.metrics().await,
            r#"mcp_gateway_upstream_in_flight{upstream="web"}"#,
        ) == Some(1.0)
    })
    .await;
    // ...and its cancellation reaches the second.
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": "slow", "reason": "the user left"}});
    let r = send(&two, reqwest::Method::POST, Some(&session), Some(cancel)).await;
    assert_eq!(r.status(), 202);
    let answer = within(running).await.unwrap();
    assert_eq!(answer["id"], "slow", "{answer}");
    assert_eq!(
        answer["error"]["message"], "Request cancelled by the client",
        "{answer}"
    );
    // The upstream call was cancelled too.
    let counted = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                         "params": {"name": "web__cancelled", "arguments": {}}});
    until(|| async {
        let r = send(
            &one,
            reqwest::Method::POST,
            Some(&session),
            Some(counted.clone()),
        )
        .await;
        let v: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
        v["result"]["content"][0]["text"] == "1"
    })
    .await;
    one.stop().await;
    two.stop().await;
}

/// Two replicas of `yaml`, which shares a store: each has `upstream`
/// ready and sees the other in the store.
async fn two_replicas(yaml: &str, upstream: &str) -> (Gateway, Gateway) {
    let (one, two) = (Gateway::start(yaml).await, Gateway::start(yaml).await);
    for gw in [&one, &two] {
        gw.wait_ready(&[upstream]).await;
        until(|| async { metric(&gw.metrics().await, "mcp_gateway_store_replicas") == Some(2.0) })
            .await;
    }
    (one, two)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_answer_reaching_another_replica_reaches_the_waiting_upstream() {
    let redis = Redis::start();
    let server = everything_http(0);
    let yaml = shared(&redis, 500, "evh", http(&server.url), &["ka"]);
    let (one, two) = two_replicas(&yaml, "evh").await;
    // The call (and the request it makes) on the first replica, the
    // client's answer posted to the second.
    let steps = json!({
        "answers": {"elicit": {"action": "accept", "content": {"name": "answered elsewhere"}}},
        "steps": [{"op": "call", "name": "evh__trigger-elicitation-request", "arguments": {}}],
    });
    let args = vec![
        "legacy".into(),
        "http".into(),
        one.url.clone(),
        "ka".into(),
        format!("answers={}", two.url),
    ];
    let (_, answers) = sdk_client_with(args, steps).await;
    let text = answers[0]["content"].to_string();
    assert!(text.contains("answered elsewhere"), "{answers:?}");
    let forwarded = "mcp_gateway_server_requests_total{outcome=\"forwarded\"}";
    // Counted once the upstream has its answer, which may be after the client has its result.
    until(|| async { metric(&one.metrics().await, forwarded) == Some(1.0) }).await;
    assert_eq!(
        metric(&two.metrics().await, "mcp_gateway_stray_answers_total"),
        Some(0.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_or_a_cancellation_that_needs_the_store_while_it_is_down_is_refused() {
    let mut redis = Redis::start();
    let yaml = shared(&redis, 200, "s", stdio_upstream("s", &[]), &["ka"]);
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["s"]).await;
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let r = send(&gw, reqwest::Method::POST, None, Some(init)).await;
    let session = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    // An answer under an id no replica sent is delivered nowhere: never
    // published, whether the store is up or down (see store_counts).
    let answer = json!({"jsonrpc": "2.0", "id": "mcp-gateway-0", "result": {}});
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": "elsewhere"}});
    // With the store up, a cancellation of a call not running here is published: 202.
    for body in [&answer, &cancel] {
        let r = send(
            &gw,
            reqwest::Method::POST,
            Some(&session),
            Some(body.clone()),
        )
        .await;
        assert_eq!(r.status(), 202);
    }
    redis.kill();
    let r = send(&gw, reqwest::Method::POST, Some(&session), Some(answer)).await;
    assert_eq!(r.status(), 202);
    // Down: it cannot reach the replica holding the request, and says so.
    for body in [&cancel] {
        let started = Instant::now();
        let r = send(
            &gw,
            reqwest::Method::POST,
            Some(&session),
            Some(body.clone()),
        )
        .await;
        assert_eq!(r.status(), 503, "{body}");
        assert_eq!(r.headers()["retry-after"], "1");
        let text = r.text().await.unwrap();
        assert!(text.contains("shared store"), "{text}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}

/// The log level a handshake-era session sets through one replica filters
/// its calls' log lines on another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_log_level_set_on_one_replica_holds_on_another() {
    let redis = Redis::start();
    let server = sdk_server();
    let yaml = shared(&redis, 500, "web", http(&server.url), &["ka"]);
    let (one, two) = (Gateway::start(&yaml).await, Gateway::start(&yaml).await);
    for gw in [&one, &two] {
        gw.wait_ready(&["web"]).await;
    }
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let r = send(&one, reqwest::Method::POST, None, Some(init)).await;
    let id = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "web__chatty", "arguments": {}}});
    let heard = |text: &str| -> Vec<String> {
        sse::messages(text)
            .into_iter()
            .filter(|m| m["method"] == "notifications/message")
            .map(|m| m["params"]["level"].as_str().unwrap().to_owned())
            .collect()
    };
    // None set: every line of the call, on the call's stream.
    let r = send(&two, reqwest::Method::POST, Some(&id), Some(call.clone())).await;
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let text = r.text().await.unwrap();
    assert_eq!(heard(&text), ["debug", "warning"], "{text}");
    assert!(text.contains("chatted"), "{text}");
    // Set on the first, heard on the second.
    let set = json!({"jsonrpc": "2.0", "id": 1, "method": "logging/setLevel", "params": {"level": "warning"}});
    let r = send(&one, reqwest::Method::POST, Some(&id), Some(set)).await;
    assert_eq!(r.status(), 200);
    let r = send(&two, reqwest::Method::POST, Some(&id), Some(call)).await;
    let text = r.text().await.unwrap();
    assert_eq!(heard(&text), ["warning"], "{text}");
    assert!(text.contains("chatted"), "{text}");
    for gw in [one, two] {
        gw.stop().await;
    }
}

/// With a shared store, a task's status the upstream tells the replica that
/// created it reaches the session's stream held by another replica, named
/// by the id the client holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_status_reaches_the_sessions_stream_on_another_replica() {
    let redis = Redis::start();
    let server = everything_http(0);
    let yaml = shared(&redis, 500, "ev", http(&server.url), &["ka"]);
    let (one, two) = two_replicas(&yaml, "ev").await;
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let r = send(&one, reqwest::Method::POST, None, Some(init)).await;
    let id = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let mut stream = send(&two, reqwest::Method::GET, Some(&id), None).await;
    assert_eq!(stream.status(), 200);
    let create = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "ev__simulate-research-query", "arguments": {"topic": "replicas"}, "task": {"ttl": 60000}}});
    let r = send(&one, reqwest::Method::POST, Some(&id), Some(create)).await;
    let created: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    let task = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    let completed = |m: &Value| {
        m["method"] == "notifications/tasks/status" && m["params"]["status"] == "completed"
    };
    let messages = sse::read_until(&mut stream, |ms| ms.iter().any(completed)).await;
    let heard = messages.iter().find(|m| completed(m)).unwrap();
    assert_eq!(heard["params"]["taskId"], task, "{heard}");
    drop(stream);
    for gw in [one, two] {
        gw.stop().await;
    }
}

/// A task lives in the upstream's session with the replica that created
/// it (the TypeScript SDK keeps tasks per session). Asked about through
/// another replica, the request is carried to that one through the store:
/// `tasks/get`, `tasks/result` and `tasks/cancel` answer as if asked there,
/// and `tasks/list` on any replica lists the tenant's tasks of every replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_created_through_one_replica_is_answered_through_another() {
    let redis = Redis::start();
    let server = everything_http(0);
    let yaml = shared(&redis, 500, "ev", http(&server.url), &["ka", "kb"]);
    let (one, two) = two_replicas(&yaml, "ev").await;
    let rpc = |gw: &Gateway, key: &'static str, method: &'static str, params: Value| {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let request = gw
            .client
            .post(&gw.url)
            .bearer_auth(key)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .body(body.to_string());
        async move {
            let text = within(async { request.send().await.unwrap().text().await.unwrap() }).await;
            serde_json::from_str::<Value>(&text).unwrap_or_else(|_| panic!("{text}"))
        }
    };
    let create = |topic: &str| json!({"name": "ev__simulate-research-query", "arguments": {"topic": topic}, "task": {"ttl": 60000}});
    let created = rpc(&one, "ka", "tools/call", create("replicas")).await;
    let task = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    let got = rpc(&two, "ka", "tasks/get", json!({"taskId": task})).await;
    assert_eq!(got["result"]["taskId"], task, "{got}");
    assert!(
        matches!(
            got["result"]["status"].as_str(),
            Some("working" | "completed")
        ),
        "{got}"
    );
    // Another tenant's request for it reads as a task that does not exist.
    let foreign = rpc(&two, "kb", "tasks/get", json!({"taskId": task})).await;
    assert!(foreign.get("error").is_some(), "{foreign}");
    // A task of the other replica's, and one of this replica's own, listed together.
    let mine = rpc(&two, "ka", "tools/call", create("here")).await;
    let mine = mine["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let listed = rpc(&two, "ka", "tasks/list", json!({})).await;
    let ids: std::collections::HashSet<&str> = listed["result"]["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"))
        .iter()
        .filter_map(|t| t["taskId"].as_str())
        .collect();
    assert_eq!(ids, [task.as_str(), mine.as_str()].into(), "{listed}");
    let none = rpc(&one, "kb", "tasks/list", json!({})).await;
    assert_eq!(none["result"]["tasks"], json!([]), "{none}");
    let cancelled = rpc(&one, "ka", "tasks/cancel", json!({"taskId": mine})).await;
    assert_eq!(cancelled["result"]["status"], "cancelled", "{cancelled}");
    // The result, waited for through the replica that did not create it.
    let result = rpc(&two, "ka", "tasks/result", json!({"taskId": task})).await;
    assert!(
        result["result"]["content"].to_string().contains("replicas"),
        "{result}"
    );
    // The replica that created it gone, a request about it is answered
    // where it arrives, in a few seconds, not held.
    one.stop().await;
    let started = std::time::Instant::now();
    let orphan = rpc(&two, "ka", "tasks/get", json!({"taskId": task})).await;
    assert!(orphan.get("error").is_some(), "{orphan}");
    assert!(started.elapsed() < Duration::from_secs(8), "{orphan}");
    two.stop().await;
}

/// A 2026-07-28 client's task that waits for input, polled and answered
/// through a replica other than the one that created it: the question is
/// asked and answered there, where the upstream's session holds the task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_question_is_asked_and_answered_through_any_replica() {
    let redis = Redis::start();
    let server = everything_http(0);
    let yaml = shared(&redis, 500, "ev", http(&server.url), &["ka"]);
    let (one, two) = two_replicas(&yaml, "ev").await;
    let caps =
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {"form": {}}});
    let post = |gw: &Gateway, method: &'static str, mut params: Value, name: Option<String>| {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": caps.clone(),
        });
        let body = json!({"jsonrpc": "2.0", "id": "s1", "method": method, "params": params});
        let mut request = gw
            .client
            .post(&gw.url)
            .bearer_auth("ka")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method);
        if let Some(name) = name {
            request = request.header("mcp-name", name);
        }
        let request = request.body(body.to_string());
        async move {
            let text = within(async { request.send().await.unwrap().text().await.unwrap() }).await;
            serde_json::from_str::<Value>(&text).unwrap_or_else(|_| panic!("{text}"))
        }
    };
    const RESEARCH: &str = "ev__simulate-research-query";
    let call = json!({"name": RESEARCH, "arguments": {"topic": "tides", "ambiguous": true}});
    let created = post(&one, "tools/call", call, Some(RESEARCH.into())).await;
    let id = created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    let poll_until = |gw: &Gateway, status: &'static str| {
        let get = post(gw, "tasks/get", json!({"taskId": id}), Some(id.clone()));
        async move { (get.await, status) }
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let asking = loop {
        let (got, want) = poll_until(&two, "input_required").await;
        if got["result"]["status"] == want {
            break got;
        }
        assert!(std::time::Instant::now() < deadline, "{got}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let requests = asking["result"]["inputRequests"]
        .as_object()
        .unwrap_or_else(|| panic!("{asking}"));
    let (key, request) = requests.iter().next().unwrap();
    assert_eq!(request["method"], "elicitation/create", "{asking}");
    let answer = json!({"taskId": id, "inputResponses": {key.as_str(): {
        "action": "accept", "content": {"interpretation": "historical"}}}});
    let ack = post(&two, "tasks/update", answer, Some(id.clone())).await;
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let done = loop {
        let (got, want) = poll_until(&two, "completed").await;
        if got["result"]["status"] == want {
            break got;
        }
        assert!(std::time::Instant::now() < deadline, "{got}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let text = done["result"]["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.contains("After receiving clarification (\"historical\")"),
        "{done}"
    );
    for gw in [one, two] {
        gw.stop().await;
    }
}
