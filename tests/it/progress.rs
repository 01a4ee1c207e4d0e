//! A call's progress reaches its caller, and only its caller: the official
//! Python SDK's client asks for progress of server-everything's
//! long-running tool through the gateway, over HTTP (either era) and
//! through `mcp-gateway stdio`, with the server over stdio and over
//! Streamable HTTP.

use serde_json::{Value, json};

use crate::support::*;

const TOOL: &str = "trigger-long-running-operation";

/// The reports a client heard, as (progress, total).
fn reports(answer: &Value) -> Vec<(f64, f64)> {
    answer["progress"]
        .as_array()
        .unwrap_or_else(|| panic!("{answer}"))
        .iter()
        .map(|r| {
            (
                r["progress"].as_f64().unwrap(),
                r["total"].as_f64().unwrap(),
            )
        })
        .collect()
}

fn completed(answer: &Value) -> bool {
    answer["result"]["content"][0]["text"]
        .as_str()
        .is_some_and(|t| t.starts_with("Long running operation completed"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_calls_progress_reaches_its_caller_in_either_era_from_either_transport() {
    let server = everything_http(0);
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {"ev": everything_stdio(), "evh": http(&server.url)},
        "tenants": {"a": tenant("ka", &["ev", "evh"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["ev", "evh"]).await;
    let expected = vec![(1.0, 3.0), (2.0, 3.0), (3.0, 3.0)];
    for upstream in ["ev", "evh"] {
        let steps = json!([{"op": "progress", "name": format!("{upstream}__{TOOL}"),
                            "arguments": {"duration": 0.3, "steps": 3}}]);
        for mode in ["legacy", "auto"] {
            // Two clients at once through the same upstream: the SDK gives
            // each call a token of its own choosing (they may be equal); each
            // hears its own three reports, not the other's.
            let (one, two) = tokio::join!(
                sdk_client(&gw, "ka", mode, steps.clone()),
                sdk_client(&gw, "ka", mode, steps.clone()),
            );
            for (_, answers) in [one, two] {
                assert!(completed(&answers[0]), "{upstream} {mode}: {}", answers[0]);
                assert_eq!(reports(&answers[0]), expected, "{upstream} {mode}");
            }
        }
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_reaches_a_client_of_the_stdio_mode() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gw.yaml");
    std::fs::write(
        &config,
        json!({
            "gateway": {"id": "gw"},
            "upstreams": {"ev": everything_stdio()},
            "tenants": {"a": tenant("ka", &["ev"])},
        })
        .to_string(),
    )
    .unwrap();
    let steps = json!([{"op": "progress", "name": format!("ev__{TOOL}"),
                        "arguments": {"duration": 0.3, "steps": 3}}]);
    for mode in ["legacy", "auto"] {
        let (_, answers) = sdk_stdio_client(mode, &config, "a", steps.clone()).await;
        assert!(completed(&answers[0]), "{mode}: {}", answers[0]);
        assert_eq!(
            reports(&answers[0]),
            vec![(1.0, 3.0), (2.0, 3.0), (3.0, 3.0)],
            "{mode}"
        );
    }
}

/// A tools/call asking for progress, posted as it is.
fn call(name: &str, arguments: Value) -> String {
    json!({"jsonrpc": "2.0", "id": "call-1", "method": "tools/call", "params": {
        "name": name, "arguments": arguments, "_meta": {"progressToken": "mine"}}})
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_answer_is_a_stream_only_when_something_came_before_the_result() {
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {"ev": everything_stdio()},
        "tenants": {"a": tenant("ka", &["ev"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["ev"]).await;
    // Reports: an event stream, each report under the client's own token,
    // the result last.
    let body = call(&format!("ev__{TOOL}"), json!({"duration": 0.2, "steps": 2}));
    let (status, headers, text) = gw
        .post_raw(Some("ka"), Some("application/json"), body)
        .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(headers["content-type"], "text/event-stream", "{text}");
    let messages = sse::messages(&text);
    assert_eq!(messages.len(), 3, "{text}");
    for (i, report) in messages[..2].iter().enumerate() {
        assert_eq!(report["method"], "notifications/progress", "{text}");
        assert_eq!(report["params"]["progressToken"], "mine", "{text}");
        assert_eq!(report["params"]["progress"], json!(i + 1), "{text}");
    }
    assert_eq!(messages[2]["id"], "call-1", "{text}");
    assert!(messages[2]["result"]["content"].is_array(), "{text}");
    // Nothing before the result: plain JSON, as without a token.
    let body = call("ev__echo", json!({"message": "hi"}));
    let (status, headers, text) = gw
        .post_raw(Some("ka"), Some("application/json"), body)
        .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(headers["content-type"], "application/json", "{text}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["result"]["content"][0]["text"], "Echo: hi", "{text}");
    // A refusal before the call is plain JSON too.
    let body = call("ev__nope", json!({}));
    let (_, headers, text) = gw
        .post_raw(Some("ka"), Some("application/json"), body)
        .await;
    assert_eq!(headers["content-type"], "application/json", "{text}");
    gw.stop().await;
}

/// The log lines a client heard, as (level, data).
fn logs(answer: &Value) -> Vec<(String, String)> {
    answer["logs"]
        .as_array()
        .unwrap_or_else(|| panic!("{answer}"))
        .iter()
        .map(|l| {
            (
                l["level"].as_str().unwrap().to_owned(),
                l["data"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_calls_log_lines_reach_its_caller_at_the_level_it_set() {
    let server = sdk_server();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gw.yaml");
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {"web": http(&server.url), "local": sdk_stdio()},
        "tenants": {"a": tenant("ka", &["web", "local"])},
    })
    .to_string();
    std::fs::write(&config, &yaml).unwrap();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["web", "local"]).await;
    let loud = vec![("warning".to_owned(), "loud".to_owned())];
    let chatted = |answer: &Value| answer["result"]["content"][0]["text"] == "chatted";

    // 2026-07-28 over HTTP: the lines at the request's level and above, on
    // the call's stream; none without a level. The upstream takes that
    // revision, so the call reaches it in it, where a request's stream
    // carries only what is that request's: the line the server logs
    // outside any request goes there too, and is the call's.
    let steps = json!([
        {"op": "logged", "name": "web__chatty", "level": "warning"},
        {"op": "logged", "name": "web__chatty", "level": "debug"},
        {"op": "logged", "name": "web__chatty"},
    ]);
    let (revision, answers) = sdk_client(&gw, "ka", "auto", steps).await;
    assert_eq!(revision, "2026-07-28");
    assert!(answers.iter().all(chatted), "{answers:?}");
    assert_eq!(logs(&answers[0]), loud);
    let all = vec![
        ("debug".to_owned(), "quiet".to_owned()),
        ("warning".to_owned(), "loud".to_owned()),
    ];
    let unrelated = ("info".to_owned(), "not about any call".to_owned());
    assert_eq!(logs(&answers[1]), [vec![unrelated], all.clone()].concat());
    assert_eq!(logs(&answers[2]), vec![]);
    // The handshake era over HTTP: the answer of a call whose upstream
    // logs (it declared `logging`) is a stream, asked for progress or not,
    // and the level is the session's (`logging/setLevel`), kept for its
    // later calls. A line outside any call reaches no client.
    let steps = json!([
        {"op": "logged", "name": "web__chatty", "level": "debug", "progress": true},
        {"op": "logged", "name": "web__chatty", "level": "warning"},
        {"op": "logged", "name": "web__chatty"},
        {"op": "logged", "name": "web__chatty", "level": "debug"},
    ]);
    let (revision, answers) = sdk_client(&gw, "ka", "legacy", steps).await;
    assert_eq!(revision, "2025-11-25");
    assert!(answers.iter().all(chatted), "{answers:?}");
    assert_eq!(logs(&answers[0]), all);
    assert_eq!(logs(&answers[1]), loud);
    assert_eq!(logs(&answers[2]), loud);
    assert_eq!(logs(&answers[3]), all);
    // A level the protocol does not name is refused, and changes nothing.
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let r = session_request(&gw, reqwest::Method::POST, "ka", None, Some(init)).await;
    let id = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let session = Some((id.as_str(), Some("2025-11-25")));
    let set = |level: &str| json!({"jsonrpc": "2.0", "id": 1, "method": "logging/setLevel", "params": {"level": level}});
    let r = session_request(&gw, reqwest::Method::POST, "ka", session, Some(set("loud"))).await;
    let refused: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let r = session_request(
        &gw,
        reqwest::Method::POST,
        "ka",
        session,
        Some(set("error")),
    )
    .await;
    let kept: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(kept["result"], json!({}), "{kept}");
    // At `error`, the call's lines are all below it: nothing comes before
    // the result, which is then plain JSON.
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "web__chatty", "arguments": {}}});
    let r = session_request(&gw, reqwest::Method::POST, "ka", session, Some(call)).await;
    assert_eq!(r.headers()["content-type"], "application/json");
    let answer: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(
        answer["result"]["content"][0]["text"], "chatted",
        "{answer}"
    );

    // Through `mcp-gateway stdio`, either era: the handshake era's level is
    // the session's (`logging/setLevel`).
    let steps = json!([{"op": "logged", "name": "web__chatty", "level": "warning"}]);
    for mode in ["legacy", "auto"] {
        let (_, answers) = sdk_stdio_client(mode, &config, "a", steps.clone()).await;
        assert!(chatted(&answers[0]), "{mode}: {}", answers[0]);
        assert_eq!(logs(&answers[0]), loud, "{mode}");
    }

    // A stdio child is shared by every client: its lines belong to no one
    // call, and reach no client.
    let steps =
        json!([{"op": "logged", "name": "local__chatty", "level": "debug", "progress": true}]);
    let (_, answers) = sdk_client(&gw, "ka", "auto", steps).await;
    assert!(chatted(&answers[0]), "{}", answers[0]);
    assert_eq!(logs(&answers[0]), vec![]);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_cancels_its_call_over_http_cancels_it_upstream() {
    let server = sdk_server();
    let yaml = json!({
        "gateway": {"id": "gw", "session_secret": "s".repeat(40)},
        "upstreams": {
            // A timeout past the client's patience: only the client's own
            // cancellation can end the upstream call in time.
            "web": Doc::of(http(&server.url)).set("timeout_ms", 60000),
        },
        "tenants": {"a": tenant("ka", &["web"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["web"]).await;
    for (mode, cancelled) in [("legacy", "1"), ("auto", "2")] {
        let steps = json!([
            {"op": "abandon", "name": "web__wait", "after": 1.0},
            // The upstream counts the cancellation once it has handled it.
            {"op": "call", "name": "web__cancelled", "arguments": {}, "until": cancelled},
        ]);
        let (_, answers) = sdk_client(&gw, "ka", mode, steps).await;
        assert_eq!(
            answers[1]["content"][0]["text"], cancelled,
            "{mode}: {answers:?}"
        );
    }
    gw.stop().await;
}

/// A client that stops reading its call's stream costs the gateway at most
/// a call's bytes of reports: the oldest progress is dropped (and counted),
/// never the result, which comes last once the client reads again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_loses_its_oldest_progress_not_its_result() {
    let server = sdk_server();
    // The upstream's answer (its reports and its result, on one event
    // stream) is allowed more than the socket buffers between the gateway
    // and the client hold.
    let yaml = json!({
        "gateway": {"id": "gw", "limits": {"max_frame_bytes": 67108864}},
        "upstreams": {"h": http(&server.url)},
        "tenants": {"a": tenant("ka", &["h"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["h"]).await;
    let (count, size) = (64, 256 << 10);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "h__flood", "arguments": {"count": count, "size": size},
        "_meta": {"progressToken": "p"}}});
    let response = within(
        gw.client
            .post(&gw.url)
            .bearer_auth("ka")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .body(body.to_string())
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    // Not read: the gateway drops the oldest reports past the call's bytes.
    let dropped = || async {
        metric(&gw.metrics().await, "mcp_gateway_reports_dropped_total").unwrap_or(0.0)
    };
    until(|| async { dropped().await > 0.0 }).await;
    let text = within(response.text()).await.unwrap();
    let events = sse::messages(&text);
    let last = events.last().unwrap();
    let result = &last["result"];
    assert!(
        result.is_object(),
        "{}",
        &last.to_string()[..last.to_string().len().min(400)]
    );
    assert_eq!(text_of(result), "flooded");
    let heard: Vec<u64> = events
        .iter()
        .filter(|e| e["method"] == "notifications/progress")
        .map(|e| e["params"]["progress"].as_f64().unwrap() as u64)
        .collect();
    assert!(heard.len() < count, "{} heard", heard.len());
    // What was kept came in order, and the newest is among it.
    assert!(heard.windows(2).all(|w| w[0] < w[1]), "{heard:?}");
    assert_eq!(heard.last(), Some(&(count as u64)));
    assert_eq!(
        dropped().await as usize + heard.len(),
        count,
        "every report was either heard or counted"
    );
    gw.stop().await;
}
