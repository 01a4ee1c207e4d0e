//! Tasks through the gateway: server-everything's `simulate-research-query`
//! (which runs only as a task, about four seconds) called as a task by the
//! official TypeScript SDK's client in the handshake era, and by raw
//! 2026-07-28 requests with the tasks extension; task ids sealed to their
//! tenant, and `tasks/list` showing a tenant only its own tasks on an
//! upstream that every tenant shares.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

const RESEARCH: &str = "ev__simulate-research-query";

fn config(upstream: impl serde::Serialize) -> String {
    json!({
        "gateway": {"id": "gw", "session_secret": "s".repeat(40)},
        "upstreams": {"ev": upstream},
        "tenants": {"a": tenant("ka", &["ev"]), "b": tenant("kb", &["ev"])},
    })
    .to_string()
}

/// The TypeScript SDK's client against the gateway as `key`, with `steps`.
async fn ts_client(gw: &Gateway, key: &str, steps: Value) -> Vec<Value> {
    servers();
    let script = root().join("target/mcp-node/mcp_ts_client_tasks.mjs");
    std::fs::copy(root().join("tests/fixtures/mcp_ts_client.mjs"), &script).unwrap();
    let mut client = Command::new("node");
    client.arg(&script).args([gw.url.as_str(), key]);
    run_client(client, steps).await
}

/// A JSON-RPC request of the handshake era, posted without a session.
async fn post(gw: &Gateway, key: &str, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    let response = within(
        gw.client
            .post(&gw.url)
            .bearer_auth(key)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .body(body.to_string())
            .send(),
    )
    .await
    .unwrap();
    let text = within(response.text()).await.unwrap();
    serde_json::from_str(&text).unwrap_or_else(|_| panic!("{text}"))
}

/// A 2026-07-28 request, its mirrored headers as they should be (`name`:
/// what `Mcp-Name` carries), its client declaring `extensions`.
async fn post_stateless(
    gw: &Gateway,
    method: &str,
    params: Value,
    name: Option<&str>,
    extensions: Value,
) -> (u16, Value) {
    post_declaring(gw, method, params, name, json!({"extensions": extensions})).await
}

/// [`post_stateless`], its client declaring `capabilities`.
async fn post_declaring(
    gw: &Gateway,
    method: &str,
    mut params: Value,
    name: Option<&str>,
    capabilities: Value,
) -> (u16, Value) {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    });
    let body = json!({"jsonrpc": "2.0", "id": "s1", "method": method, "params": params});
    post_2026(gw, "ka", &body, name).await
}

fn tasks_extension() -> Value {
    json!({"io.modelcontextprotocol/tasks": {}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_runs_through_the_gateway_for_the_typescript_sdks_client() {
    let server = everything_http(0);
    let gw = Gateway::start(&config(http(&server.url))).await;
    gw.wait_ready(&["ev"]).await;
    let steps = json!([
        {"op": "tools"},
        {"op": "task", "name": RESEARCH, "arguments": {"topic": "gateways"}},
        {"op": "get_task", "id": "$last"},
        {"op": "task_result", "id": "$last"},
        {"op": "list_tasks"},
        {"op": "call", "name": RESEARCH, "arguments": {"topic": "gateways"}},
        {"op": "create_task", "name": "ev__echo", "arguments": {"message": "hi"}},
        {"op": "task_status", "id": "$last", "status": "completed"},
    ]);
    let answers = ts_client(&gw, "ka", steps).await;
    // The gateway declares the revision's task capability for this tenant.
    assert_eq!(
        answers[0]["protocolVersion"], "2025-11-25",
        "{}",
        answers[0]
    );
    let ran = &answers[2];
    assert_eq!(ran["seen"][0], "taskCreated", "{ran}");
    assert_eq!(
        ran["seen"].as_array().unwrap().last().unwrap(),
        "result",
        "{ran}"
    );
    assert!(
        ran["statuses"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s == "completed"),
        "{ran}"
    );
    let text = ran["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("gateways"), "{ran}");
    let id = ran["taskId"].as_str().unwrap();
    // The id the client holds is the gateway's: sealed, in five parts
    // (tag, upstream, incarnation, task, tool).
    assert_eq!(id.split('.').count(), 5, "{id}");
    assert_eq!(answers[3]["taskId"], id, "{}", answers[3]);
    assert_eq!(answers[3]["status"], "completed", "{}", answers[3]);
    assert_eq!(
        answers[4]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], id,
        "{}",
        answers[4]
    );
    let listed = answers[5]["tasks"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["taskId"], id);
    // A call of a tool that runs only as a task, not made as one: the
    // client's own SDK refuses it (the listing said so).
    assert!(answers[6]["error"].is_object(), "{}", answers[6]);
    // A tool that does not run as a task, asked to: -32601.
    assert_eq!(answers[7]["error"]["code"], -32601, "{}", answers[7]);
    // The upstream's status notification reached the session's stream,
    // naming the task by the id the client holds.
    assert_eq!(answers[8]["taskId"], id, "{}", answers[8]);
    assert_eq!(answers[8]["status"], "completed", "{}", answers[8]);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_waiting_for_input_asks_the_client_that_waits_for_its_result() {
    let server = everything_http(0);
    let gw = Gateway::start(&config(http(&server.url))).await;
    gw.wait_ready(&["ev"]).await;
    // An ambiguous topic: at its third stage the task asks (elicitation)
    // for a clarification, which its upstream sends while a `tasks/result`
    // is open; the client's answer ends up in the report.
    let steps = json!({
        "elicit": {"action": "accept", "content": {"interpretation": "historical"}},
        "steps": [
            {"op": "tools"},
            {"op": "task", "name": RESEARCH, "arguments": {"topic": "tides", "ambiguous": true}},
        ],
    });
    let answers = ts_client(&gw, "ka", steps).await;
    let ran = &answers[2];
    assert!(
        ran["statuses"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s == "input_required"),
        "{ran}"
    );
    let text = ran["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.contains("After receiving clarification (\"historical\")"),
        "{ran}"
    );
    let elicited = answers[3]["elicited"].as_array().unwrap();
    assert_eq!(elicited.len(), 1, "{}", answers[3]);
    assert!(
        elicited[0].as_str().unwrap().contains("tides"),
        "{}",
        answers[3]
    );
    until(|| async { counted(&gw, "forwarded").await == 1.0 }).await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_ids_are_sealed_to_their_tenant_and_listed_per_tenant() {
    // One stdio child shared by both tenants (shared: true): the upstream
    // lists every task it runs, whoever created it.
    let shared = Doc::of(everything_stdio()).set("shared", true);
    let gw = Gateway::start(&config(shared)).await;
    gw.wait_ready(&["ev"]).await;
    let create = |topic: &str| json!({"name": RESEARCH, "arguments": {"topic": topic}, "task": {"ttl": 60000}});
    let a = post(&gw, "ka", "tools/call", create("a's")).await;
    let a_id = a["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{a}"))
        .to_owned();
    assert_eq!(a["result"]["task"]["status"], "working", "{a}");
    let b = post(&gw, "kb", "tools/call", create("b's")).await;
    let b_id = b["result"]["task"]["taskId"].as_str().unwrap().to_owned();

    // Each tenant lists its own task only.
    let listed = |v: &Value| -> Vec<String> {
        v["result"]["tasks"]
            .as_array()
            .unwrap_or_else(|| panic!("{v}"))
            .iter()
            .map(|t| t["taskId"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        listed(&post(&gw, "ka", "tasks/list", json!({})).await),
        std::slice::from_ref(&a_id)
    );
    assert_eq!(
        listed(&post(&gw, "kb", "tasks/list", json!({})).await),
        std::slice::from_ref(&b_id)
    );

    // Another tenant's id, an altered one and a made-up one read alike.
    let not_found = post(&gw, "kb", "tasks/get", json!({"taskId": "made-up"})).await;
    assert_eq!(not_found["error"]["code"], -32602, "{not_found}");
    let mut altered = a_id.clone().into_bytes();
    let last = altered.len() - 1;
    altered[last] = if altered[last] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).unwrap();
    for (key, id, method) in [
        ("kb", a_id.as_str(), "tasks/get"),
        ("kb", a_id.as_str(), "tasks/result"),
        ("kb", a_id.as_str(), "tasks/cancel"),
        ("ka", altered.as_str(), "tasks/get"),
        ("ka", b_id.as_str(), "tasks/get"),
    ] {
        let answer = post(&gw, key, method, json!({"taskId": id})).await;
        assert_eq!(
            answer["error"], not_found["error"],
            "{key} {method}: {answer}"
        );
    }

    // Its own tenant gets it, cancels it, and cannot cancel it twice.
    let got = post(&gw, "ka", "tasks/get", json!({"taskId": a_id})).await;
    assert_eq!(got["result"]["taskId"], a_id, "{got}");
    let cancelled = post(&gw, "ka", "tasks/cancel", json!({"taskId": a_id})).await;
    assert_eq!(cancelled["result"]["status"], "cancelled", "{cancelled}");
    assert_eq!(cancelled["result"]["taskId"], a_id, "{cancelled}");
    let again = post(&gw, "ka", "tasks/cancel", json!({"taskId": a_id})).await;
    assert_eq!(again["error"]["code"], -32602, "{again}");
    // An upstream's error that names the task names it as the client knows it.
    let no_result = within(post(&gw, "ka", "tasks/result", json!({"taskId": a_id}))).await;
    let message = no_result["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(&a_id), "{no_result}");

    // b's task runs to its end: its result, for b alone.
    let result = within(post(&gw, "kb", "tasks/result", json!({"taskId": b_id}))).await;
    let text = result["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("b's"), "{result}");
    assert_eq!(
        result["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], b_id,
        "{result}"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_client_with_the_tasks_extension_gets_a_task_and_its_result() {
    let server = everything_http(0);
    let gw = Gateway::start(&config(http(&server.url))).await;
    gw.wait_ready(&["ev"]).await;
    let (_, discovered) = post_stateless(&gw, "server/discover", json!({}), None, json!({})).await;
    assert_eq!(
        discovered["result"]["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"],
        json!({}),
        "{discovered}"
    );
    let call = json!({"name": RESEARCH, "arguments": {"topic": "eras"}});
    // Without the extension, a tool that runs only as a task cannot run.
    let (_, refused) =
        post_stateless(&gw, "tools/call", call.clone(), Some(RESEARCH), json!({})).await;
    assert_eq!(refused["error"]["code"], -32021, "{refused}");
    assert_eq!(
        refused["error"]["data"]["requiredCapabilities"]["extensions"]["io.modelcontextprotocol/tasks"],
        json!({}),
        "{refused}"
    );
    let (status, created) =
        post_stateless(&gw, "tools/call", call, Some(RESEARCH), tasks_extension()).await;
    assert_eq!(status, 200, "{created}");
    let task = &created["result"];
    assert_eq!(task["resultType"], "task", "{created}");
    assert_eq!(task["status"], "working", "{created}");
    assert!(
        task.get("ttlMs").is_some() && task.get("ttl").is_none(),
        "{created}"
    );
    let id = task["taskId"].as_str().unwrap().to_owned();
    // tasks/get names the task in Mcp-Name, and declares the extension.
    let (_, mismatch) = post_stateless(
        &gw,
        "tasks/get",
        json!({"taskId": id}),
        Some("another"),
        tasks_extension(),
    )
    .await;
    assert_eq!(mismatch["error"]["code"], -32020, "{mismatch}");
    let (_, undeclared) = post_stateless(
        &gw,
        "tasks/get",
        json!({"taskId": id}),
        Some(&id),
        json!({}),
    )
    .await;
    assert_eq!(undeclared["error"]["code"], -32021, "{undeclared}");
    // The revision has no tasks/result or tasks/list.
    let (_, removed) = post_stateless(
        &gw,
        "tasks/result",
        json!({"taskId": id}),
        None,
        tasks_extension(),
    )
    .await;
    assert_eq!(removed["error"]["code"], -32601, "{removed}");
    // Polled until done: the result comes with the task.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let done = loop {
        let (_, got) = post_stateless(
            &gw,
            "tasks/get",
            json!({"taskId": id}),
            Some(&id),
            tasks_extension(),
        )
        .await;
        let result = &got["result"];
        assert_eq!(result["resultType"], "complete", "{got}");
        assert_eq!(result["taskId"], id, "{got}");
        if result["status"] != "working" {
            break got;
        }
        assert!(std::time::Instant::now() < deadline, "{got}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let result = &done["result"];
    assert_eq!(result["status"], "completed", "{done}");
    let text = result["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("eras"), "{done}");
    assert!(
        result["result"]["_meta"]
            .get("io.modelcontextprotocol/related-task")
            .is_none(),
        "{done}"
    );
    gw.stop().await;
}

/// A task of a handshake-era upstream that needs input, for a 2026-07-28
/// client: its poll says `input_required` with what the upstream asks, and
/// `tasks/update` takes the answer back to the waiting upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_client_answers_its_tasks_question_with_tasks_update() {
    let server = everything_http(0);
    let gw = Gateway::start(&config(http(&server.url))).await;
    gw.wait_ready(&["ev"]).await;
    let caps = json!({"extensions": tasks_extension(), "elicitation": {"form": {}}});
    let call = json!({"name": RESEARCH, "arguments": {"topic": "tides", "ambiguous": true}});
    let (_, created) = post_declaring(&gw, "tools/call", call, Some(RESEARCH), caps.clone()).await;
    let id = created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    let get = || {
        post_declaring(
            &gw,
            "tasks/get",
            json!({"taskId": id}),
            Some(&id),
            caps.clone(),
        )
    };
    let poll_until = |status: &'static str| async move {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let (_, got) = get().await;
            if got["result"]["status"] == status {
                return got;
            }
            assert!(std::time::Instant::now() < deadline, "{got}");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    };
    let asking = poll_until("input_required").await;
    let requests = asking["result"]["inputRequests"]
        .as_object()
        .unwrap_or_else(|| panic!("{asking}"));
    assert_eq!(requests.len(), 1, "{asking}");
    let (key, request) = requests.iter().next().unwrap();
    assert_eq!(request["method"], "elicitation/create", "{asking}");
    assert!(
        request["params"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("tides"),
        "{asking}"
    );
    // Polled again before the answer: the same question, under the same key.
    let (_, again) = get().await;
    assert_eq!(
        again["result"]["inputRequests"],
        asking["result"]["inputRequests"]
    );
    // Another tenant cannot answer it: the task is not found for it.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/update", "params": {
        "taskId": id, "inputResponses": {key.as_str(): {"action": "decline"}},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": caps.clone()}}});
    let foreign = gw
        .client
        .post(&gw.url)
        .bearer_auth("kb")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tasks/update")
        .header("mcp-name", &id)
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let foreign: Value = serde_json::from_str(&foreign.text().await.unwrap()).unwrap();
    assert_eq!(foreign["error"]["code"], -32602, "{foreign}");
    let answer = json!({"taskId": id, "inputResponses": {key.as_str(): {
        "action": "accept", "content": {"interpretation": "historical"}}}});
    // The extension names the task in Mcp-Name, on updates too.
    let (_, unnamed) =
        post_declaring(&gw, "tasks/update", answer.clone(), None, caps.clone()).await;
    assert_eq!(unnamed["error"]["code"], -32020, "{unnamed}");
    let (_, ack) = post_declaring(&gw, "tasks/update", answer, Some(&id), caps.clone()).await;
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    let done = poll_until("completed").await;
    let text = done["result"]["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.contains("After receiving clarification (\"historical\")"),
        "{done}"
    );
    gw.stop().await;
}

/// A 2026-07-28 client that listens for its task (`taskIds` on
/// `subscriptions/listen`) hears `notifications/tasks` as the upstream's
/// status changes, the task as `tasks/get` answers it (its result once it
/// completed); another tenant's task id is not honoured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_client_listening_for_its_task_hears_its_status() {
    let server = everything_http(0);
    let gw = Gateway::start(&config(http(&server.url))).await;
    gw.wait_ready(&["ev"]).await;
    let call = json!({"name": RESEARCH, "arguments": {"topic": "listening"}});
    let (_, created) = post_stateless(
        &gw,
        "tools/call",
        call.clone(),
        Some(RESEARCH),
        tasks_extension(),
    )
    .await;
    let id = created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    // Another tenant's task, by its own id.
    let theirs = {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": RESEARCH, "arguments": {"topic": "theirs"}, "task": {"ttl": 60000}}});
        let r = gw
            .client
            .post(&gw.url)
            .bearer_auth("kb")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let v: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
        v["result"]["task"]["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("{v}"))
            .to_owned()
    };
    let listen = |extensions: Value| {
        json!({"jsonrpc": "2.0", "id": "l1", "method": "subscriptions/listen", "params": {
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientCapabilities": {"extensions": extensions}},
            "notifications": {"taskIds": [id, theirs]}}})
    };
    let open = |body: Value| {
        gw.client
            .post(&gw.url)
            .bearer_auth("ka")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "subscriptions/listen")
            .body(body.to_string())
            .send()
    };
    // Without the extension declared, task notifications are refused.
    let refused = within(open(listen(json!({})))).await.unwrap();
    let refused: Value = serde_json::from_str(&refused.text().await.unwrap()).unwrap();
    assert_eq!(refused["error"]["code"], -32021, "{refused}");
    let mut stream = within(open(listen(tasks_extension()))).await.unwrap();
    assert_eq!(stream.status(), 200);
    let heard = sse::read_until(&mut stream, |ms| {
        ms.iter()
            .any(|m| m["method"] == "notifications/tasks" && m["params"]["status"] == "completed")
    })
    .await;
    let ack = &heard[0];
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["notifications"]["taskIds"],
        json!([id]),
        "{ack}"
    );
    let done = heard
        .iter()
        .find(|m| m["method"] == "notifications/tasks" && m["params"]["status"] == "completed")
        .unwrap();
    assert_eq!(done["params"]["taskId"], id, "{done}");
    assert_eq!(
        done["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "l1",
        "{done}"
    );
    assert!(done["params"].get("ttlMs").is_some(), "{done}");
    let text = done["params"]["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("listening"), "{done}");
    // Nothing of the other tenant's task reached this listen.
    let seen = Value::from(heard.clone()).to_string();
    assert!(!seen.contains(&theirs), "{seen}");
    drop(stream);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_client_cancels_a_task() {
    let server = everything_http(0);
    let gw = Gateway::start(&config(http(&server.url))).await;
    gw.wait_ready(&["ev"]).await;
    let call = json!({"name": RESEARCH, "arguments": {"topic": "cancelled"}});
    let (_, created) =
        post_stateless(&gw, "tools/call", call, Some(RESEARCH), tasks_extension()).await;
    let id = created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    let (_, ack) = post_stateless(
        &gw,
        "tasks/cancel",
        json!({"taskId": id}),
        Some(&id),
        tasks_extension(),
    )
    .await;
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    let (_, got) = post_stateless(
        &gw,
        "tasks/get",
        json!({"taskId": id}),
        Some(&id),
        tasks_extension(),
    )
    .await;
    assert_eq!(got["result"]["status"], "cancelled", "{got}");
    gw.stop().await;
}

#[test]
fn a_client_of_the_stdio_mode_runs_a_task() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gw.yaml");
    std::fs::write(&config, config_yaml()).unwrap();
    let mut child = Command::new(BIN)
        .args([
            "stdio",
            "--config",
            config.to_str().unwrap(),
            "--tenant",
            "a",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Ok(v) = serde_json::from_str(&line) {
                let _ = tx.send(v);
            }
        }
    });
    let mut ask = |id: u32, method: &str, params: Value| -> Value {
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(stdin, "{line}").unwrap();
        loop {
            let v = rx.recv_timeout(Duration::from_secs(30)).expect("an answer");
            if v["id"] == id {
                return v;
            }
        }
    };
    let hello = ask(
        1,
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
    );
    assert!(
        hello["result"]["capabilities"]["tasks"]["requests"]["tools"]["call"].is_object(),
        "{hello}"
    );
    let created = ask(
        2,
        "tools/call",
        json!({"name": RESEARCH, "arguments": {"topic": "pipes"}, "task": {"ttl": 60000}}),
    );
    let id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    let got = ask(3, "tasks/get", json!({"taskId": id}));
    assert_eq!(got["result"]["taskId"], id, "{got}");
    let result = ask(4, "tasks/result", json!({"taskId": id}));
    let text = result["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("pipes"), "{result}");
    let listed = ask(5, "tasks/list", json!({}));
    assert_eq!(listed["result"]["tasks"][0]["taskId"], id, "{listed}");
    assert_eq!(
        listed["result"]["tasks"][0]["status"], "completed",
        "{listed}"
    );
    drop(stdin);
    let _ = child.wait();
}

fn config_yaml() -> String {
    config(everything_stdio())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_creation_and_its_final_outcome_are_audited() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.yaml");
    std::fs::write(&path, config_yaml()).unwrap();
    let mut p = Process::spawn(&["serve", "--config", path.to_str().unwrap()]);
    let agent = p.addr("agent listener bound");
    p.wait_log("ready", |v| v["message"] == "upstream ready");
    let gw = Gateway::at(&agent);
    let secret = "secret-topic-51c";
    let created = post(
        &gw,
        "ka",
        "tools/call",
        json!({"name": RESEARCH, "arguments": {"topic": secret}, "task": {"ttl": 60000}}),
    )
    .await;
    let id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    let result = within(post(&gw, "ka", "tasks/result", json!({"taskId": id}))).await;
    assert!(result["result"]["content"].is_array(), "{result}");
    let audit = |outcome: &'static str| {
        move |v: &Value| v["target"] == "mcp_gateway::audit" && v["outcome"] == outcome
    };
    let created = p.wait_log("task created", audit("task_created"));
    assert_eq!(created["tenant"], "a", "{created}");
    assert_eq!(created["upstream"], "ev", "{created}");
    assert!(
        created["tool"]
            .as_str()
            .unwrap()
            .contains("simulate-research-query"),
        "{created}"
    );
    assert_eq!(
        created["args_hmac"].as_str().map(str::len),
        Some(32),
        "{created}"
    );
    let done = p.wait_log("task done", audit("ok"));
    assert_eq!(done["tool"], created["tool"], "{done}");
    assert_eq!(done["upstream"], "ev", "{done}");
    // Neither line holds the arguments.
    assert!(!p.seen_text().contains(secret));
    assert!(p.terminate().success());
}

/// An upstream that restarted numbers its tasks anew: an id the gateway
/// handed out for its last process is unknown, never the new task that took
/// its number (here another tenant's, the upstream shared by both).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_of_an_upstream_that_restarted_is_unknown() {
    servers();
    let upstream = json!({
        "stdio": {
            "command": venv().join("bin/python"),
            "args": [root().join("tests/fixtures/numbered_tasks_server.py")],
        },
        "protocol": "modelcontextprotocol",
        "shared": true,
    });
    let gw = Gateway::start(&config(upstream)).await;
    gw.wait_ready(&["ev"]).await;
    let remember = |text: &str| json!({"name": "ev__remember", "arguments": {"text": text}, "task": {"ttl": 60000}});
    let created = post(&gw, "ka", "tools/call", remember("a's secret")).await;
    let a_id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    let result = post(&gw, "ka", "tasks/result", json!({"taskId": a_id})).await;
    assert_eq!(text_of(&result["result"]), "a's secret", "{result}");

    // The upstream's process ends; its supervisor starts another.
    let pid = || async {
        let call = post(
            &gw,
            "ka",
            "tools/call",
            json!({"name": "ev__pid", "arguments": {}}),
        );
        call.await["result"]["content"][0]["text"]
            .as_str()
            .map(str::to_owned)
    };
    let first = pid().await.expect("its pid");
    let exited = post(
        &gw,
        "ka",
        "tools/call",
        json!({"name": "ev__exit", "arguments": {}}),
    )
    .await;
    assert!(exited.get("error").is_some(), "{exited}");
    let now = within(async {
        loop {
            if let Some(now) = pid().await {
                break now;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_ne!(now, first);

    // b's first task there is t1 again, as a's was.
    let created = post(&gw, "kb", "tools/call", remember("b's secret")).await;
    let b_id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(a_id, b_id);
    let unknown = post(&gw, "ka", "tasks/get", json!({"taskId": "made-up"})).await;
    for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let answer = post(&gw, "ka", method, json!({"taskId": a_id})).await;
        assert!(
            !answer.to_string().contains("b's secret"),
            "{method}: {answer}"
        );
        assert_eq!(answer["error"], unknown["error"], "{method}: {answer}");
    }
    let listed = |v: Value| v["result"]["tasks"].as_array().unwrap().len();
    assert_eq!(listed(post(&gw, "ka", "tasks/list", json!({})).await), 0);
    assert_eq!(listed(post(&gw, "kb", "tasks/list", json!({})).await), 1);
    let result = post(&gw, "kb", "tasks/result", json!({"taskId": b_id})).await;
    assert_eq!(text_of(&result["result"]), "b's secret", "{result}");
    gw.stop().await;
}
