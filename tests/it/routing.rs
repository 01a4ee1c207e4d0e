//! Aggregation and routing across a stdio child and an HTTP upstream.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::*;

async fn two_upstreams(record: &std::path::Path) -> (Gateway, tokio::task::JoinHandle<()>) {
    let (url, task) = http_upstream("h").await;
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {
            "s": stdio_upstream("s", &["--record", record.to_str().unwrap()]),
            "h": {"http": {"url": url}},
        },
        "tenants": {"a": tenant("ka", &["s", "h"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["s", "h"]).await;
    (gw, task)
}

fn ids(defs: &[Value]) -> BTreeSet<String> {
    defs.iter()
        .map(|d| d["mcpId"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_merge_every_upstream_under_namespaced_ids() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, _h) = two_upstreams(&dir.path().join("rec")).await;
    let tools = gw.list("ka", "mcp/listTools").await;
    let expected: BTreeSet<String> = ["s", "h"]
        .iter()
        .flat_map(|u| {
            TEST_TOOLS
                .iter()
                .map(move |t| format!("mcp://gw/{u}/{u}/tools/{t}"))
                .chain([format!("mcp://gw/{u}//urn%3A{u}%3Alegacy")])
        })
        .collect();
    assert_eq!(ids(&tools), expected);
    // Definitions keep everything else the upstream wrote.
    let echo = tools
        .iter()
        .find(|t| t["mcpId"] == "mcp://gw/s/s/tools/echo:v1")
        .unwrap();
    assert_eq!(echo["name"], "echo");
    assert_eq!(echo["inputSchema"]["required"], json!(["text"]));
    let resources = gw.list("ka", "mcp/listResources").await;
    assert_eq!(
        ids(&resources),
        ["mcp://gw/h/h/resources/motd", "mcp://gw/s/s/resources/motd"]
            .map(String::from)
            .into()
    );
    let prompts = gw.list("ka", "mcp/listPrompts").await;
    assert_eq!(prompts.len(), 2);
    // A listing is written from the catalogs' shared parts: one exact
    // Content-Length, and the same bytes a session gets joined.
    let (status, headers, text) = gw
        .post_raw(
            Some("ka"),
            Some("application/json"),
            r#"{"jsonrpc":"2.0","id":"x","method":"mcp/listTools"}"#,
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-length"], text.len().to_string().as_str());
    assert!(headers.get("transfer-encoding").is_none());
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["id"], "x");
    assert_eq!(v["result"].as_array().unwrap().len(), tools.len());
    // Broken definitions were dropped and counted, per upstream and kind.
    let m = gw.metrics().await;
    for u in ["s", "h"] {
        assert_eq!(
            metric(
                &m,
                &format!(r#"mcp_gateway_definitions_dropped_total{{kind="tool",upstream="{u}"}}"#)
            ),
            Some(2.0),
            "{m}"
        );
        assert_eq!(
            metric(
                &m,
                &format!(
                    r#"mcp_gateway_definitions_dropped_total{{kind="resource",upstream="{u}"}}"#
                )
            ),
            Some(1.0)
        );
        assert_eq!(
            metric(
                &m,
                &format!(r#"mcp_gateway_definitions_listed{{kind="tool",upstream="{u}"}}"#)
            ),
            Some(TEST_TOOL_COUNT as f64)
        );
        assert_eq!(
            metric(&m, &format!(r#"mcp_gateway_upstream_up{{upstream="{u}"}}"#)),
            Some(1.0)
        );
    }
    // Capabilities are the union.
    let init = gw
        .rpc("ka", "initialize", json!({"clientCapabilities": {}}))
        .await;
    assert_eq!(init["id"], 7);
    assert_eq!(
        init["error"]["code"], -32600,
        "stateless initialize needs id 1"
    );
    let (_, text) = gw
        .post(
            "ka",
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientCapabilities":{}}}"#,
        )
        .await;
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines[0]["result"]["capabilities"],
        json!({"listToolsProvider": true, "listResourcesProvider": true, "listPromptsProvider": true, "executionProvider": {"execute": true}})
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_routes_to_the_owner_and_checks_both_schemas() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("rec");
    let (gw, _h) = two_upstreams(&record).await;
    // Routed by namespace: the stdio child has its own pid, the HTTP upstream runs in this process.
    let s_pid =
        gw.execute("ka", "mcp://gw/s/s/tools/pid", json!({})).await["result"]["output"]["pid"]
            .as_u64()
            .unwrap();
    let h_pid =
        gw.execute("ka", "mcp://gw/h/h/tools/pid", json!({})).await["result"]["output"]["pid"]
            .as_u64()
            .unwrap();
    assert_eq!(h_pid, u64::from(std::process::id()));
    assert_ne!(s_pid, h_pid);
    for u in ["s", "h"] {
        let r = gw
            .execute(
                "ka",
                &format!("mcp://gw/{u}/{u}/tools/echo:v1"),
                json!({"text": "héllo"}),
            )
            .await;
        assert_eq!(
            r,
            json!({"jsonrpc": "2.0", "id": 7, "result": {"output": {"text": "héllo"}}})
        );
        let r = gw
            .execute(
                "ka",
                &format!("mcp://gw/{u}//urn%3A{u}%3Alegacy"),
                json!({"text": "old"}),
            )
            .await;
        assert_eq!(r["result"]["output"]["text"], "old", "{r}");
    }
    // Invalid arguments never reach the upstream.
    let r = gw
        .execute("ka", "mcp://gw/s/s/tools/echo:v1", json!({}))
        .await;
    assert_eq!(
        r["error"],
        json!({"code": -32602, "message": "Invalid params", "data": "Missing required property: 'text' in arguments for tool mcp://gw/s/s/tools/echo:v1"})
    );
    let r = gw
        .execute(
            "ka",
            "mcp://gw/s/s/tools/add:v1",
            json!({"a": 1, "b": "two"}),
        )
        .await;
    assert_eq!(r["error"]["code"], -32602);
    assert!(r["error"]["data"].as_str().unwrap().contains("/b"), "{r}");
    let received = std::fs::read_to_string(&record).unwrap();
    let forwarded: Vec<Value> = received
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|m: &Value| m["method"] == "mcp/executeTool")
        .collect();
    assert!(
        forwarded
            .iter()
            .all(|m| m["params"]["arguments"] != json!({})
                || m["params"]["id"] != "mcp://s/tools/echo:v1"),
        "{received}"
    );
    assert!(!received.contains("two"), "{received}");
    // Output that breaks the tool's outputSchema: -32006.
    for u in ["s", "h"] {
        let r = gw
            .execute(
                "ka",
                &format!("mcp://gw/{u}/{u}/tools/bad_output"),
                json!({}),
            )
            .await;
        assert_eq!(r["error"]["code"], -32006, "{r}");
    }
    // Upstream errors pass through unchanged.
    for u in ["s", "h"] {
        let r = gw
            .execute("ka", &format!("mcp://gw/{u}/{u}/tools/fail"), json!({}))
            .await;
        assert_eq!(
            r["error"],
            json!({"code": -32050, "message": "tool failed", "data": {"reason": "requested"}})
        );
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_and_malformed_tool_ids() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, _h) = two_upstreams(&dir.path().join("rec")).await;
    for id in [
        "mcp://gw/s/s/tools/nope",
        "mcp://gw/nope/s/tools/echo:v1",
        "mcp://other/s/s/tools/echo:v1",
        "mcp://s/tools/echo:v1",
        "mcp://gw/s//%7e",
        "",
    ] {
        let r = gw.execute("ka", id, json!({"text": "x"})).await;
        assert_eq!(
            r["error"],
            json!({"code": -32602, "message": "Invalid params", "data": format!("Unknown tool: {id}")}),
            "{id}"
        );
    }
    for params in [
        json!({"arguments": {}}),
        json!({"id": 5, "arguments": {}}),
        json!({"id": "mcp://gw/s/s/tools/echo:v1"}),
        json!({"id": "mcp://gw/s/s/tools/echo:v1", "arguments": [1]}),
        json!([1, 2]),
    ] {
        let r = gw.rpc("ka", "mcp/executeTool", params.clone()).await;
        assert_eq!(r["error"]["code"], -32602, "{params}");
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undeclared_capabilities_are_never_called() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("rec");
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {
            "n": stdio_upstream("n", &["--no-execute", "--record", record.to_str().unwrap()]),
        },
        "tenants": {"a": tenant("ka", &["n"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["n"]).await;
    let r = gw
        .execute("ka", "mcp://gw/n/n/tools/echo:v1", json!({"text": "x"}))
        .await;
    assert_eq!(r["error"]["code"], -32005, "{r}");
    let received = std::fs::read_to_string(&record).unwrap();
    assert!(!received.contains("mcp/executeTool"), "{received}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_down_upstream_never_fails_a_listing() {
    let dead = dead_url().await;
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {
            "s": stdio_upstream("s", &[]),
            "d": {"http": {"url": dead}, "timeout_ms": 500},
        },
        "tenants": {"a": tenant("ka", &["s", "d"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["s"]).await;
    let tools = gw.list("ka", "mcp/listTools").await;
    assert_eq!(tools.len(), TEST_TOOL_COUNT);
    assert!(
        tools
            .iter()
            .all(|t| t["mcpId"].as_str().unwrap().starts_with("mcp://gw/s/"))
    );
    let started = Instant::now();
    let r = gw
        .execute("ka", "mcp://gw/d/d/tools/echo:v1", json!({"text": "x"}))
        .await;
    assert_eq!(r["error"]["code"], -32001, "{r}");
    assert!(started.elapsed() < Duration::from_secs(2));
    let (status, body) = gw.get_admin("/readyz").await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["upstreams"]["d"]["status"], "down");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_id_executes_on_a_fresh_gateway_without_listing() {
    let (url, _h) = http_upstream("h").await;
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {"s": stdio_upstream("s", &[]), "h": {"http": {"url": url}}},
        "tenants": {"a": tenant("ka", &["s", "h"])},
    })
    .to_string();
    for id in ["mcp://gw/s/s/tools/echo:v1", "mcp://gw/h/h/tools/echo:v1"] {
        // Straight after start: no listing, upstreams possibly still starting.
        let gw = Gateway::start(&yaml).await;
        let r = gw.execute("ka", id, json!({"text": "remembered"})).await;
        assert_eq!(r["result"]["output"]["text"], "remembered", "{r}");
        gw.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_past_the_timeout_fail_with_32003() {
    let (url, _h) = http_upstream("h").await;
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {
            "s": StdioUpstream::new("s", &[]).with("timeout_ms", 300).value(),
            "h": {"http": {"url": url}, "timeout_ms": 300},
        },
        "tenants": {"a": tenant("ka", &["s", "h"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["s", "h"]).await;
    // Each upstream twice: an answered call first, then one past the timeout.
    // The HTTP upstream's pooled connection keeps its timer, set for the first
    // call's deadline: moved on at once, or after that deadline has passed
    // while the connection was idle. Either way the next call must time out.
    for (u, idle_ms) in [("s", 0), ("h", 0), ("s", 400), ("h", 400)] {
        let r = gw
            .execute(
                "ka",
                &format!("mcp://gw/{u}/{u}/tools/echo:v1"),
                json!({"text": "before"}),
            )
            .await;
        assert_eq!(r["result"]["output"]["text"], "before", "{r}");
        tokio::time::sleep(Duration::from_millis(idle_ms)).await;
        let started = Instant::now();
        let r = gw
            .execute(
                "ka",
                &format!("mcp://gw/{u}/{u}/tools/sleep"),
                json!({"ms": 5000}),
            )
            .await;
        assert_eq!(r["error"]["code"], -32003, "{r}");
        assert!(started.elapsed() < Duration::from_secs(3));
        // The upstream is still fine afterwards.
        let r = gw
            .execute(
                "ka",
                &format!("mcp://gw/{u}/{u}/tools/echo:v1"),
                json!({"text": "after"}),
            )
            .await;
        assert_eq!(r["result"]["output"]["text"], "after");
    }
    let m = gw.metrics().await;
    assert_eq!(
        metric(
            &m,
            r#"mcp_gateway_requests_total{method="mcp/executeTool",outcome="upstream_timeout",tenant="a"}"#
        ),
        Some(4.0),
        "{m}"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_listing_of_a_fresh_gateway_waits_for_starting_upstreams() {
    let (url, _h) = http_upstream("h").await;
    let dead = dead_url().await;
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {
            "s": stdio_upstream("s", &[]),
            "h": {"http": {"url": url}},
            "d": {"http": {"url": dead}, "timeout_ms": 20000},
        },
        "tenants": {"a": tenant("ka", &["s", "h", "d"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    // No wait: the first listing and initialize must already include both live upstreams,
    // and must not wait out the dead one's 20 s timeout (it is down at once, not starting).
    let started = Instant::now();
    let tools = gw.list("ka", "mcp/listTools").await;
    assert_eq!(tools.len(), 2 * TEST_TOOL_COUNT, "{tools:?}");
    let (_, text) = gw
        .post(
            "ka",
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
        )
        .await;
    assert!(text.contains(r#""listToolsProvider":true"#), "{text}");
    assert!(started.elapsed() < Duration::from_secs(10));
    gw.stop().await;
}

/// An HTTP upstream that answers in chunked encoding and hangs up a connection
/// idle for 10 ms without saying so (a server whose keep-alive timeout is shorter
/// than the gateway's). Counts tool calls.
async fn impatient_upstream(calls: Arc<AtomicUsize>) -> String {
    use mcp_gateway::demo::{Answer, DemoOptions, DemoServer};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = Arc::new(
        DemoServer::new(DemoOptions {
            name: "o".into(),
            ..Default::default()
        })
        .unwrap(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            let (server, calls) = (server.clone(), calls.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let (head_end, length) = loop {
                        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                            let length: usize = head
                                .lines()
                                .find_map(|l| l.strip_prefix("content-length:"))
                                .unwrap()
                                .trim()
                                .parse()
                                .unwrap();
                            break (end + 4, length);
                        }
                        let idle = Duration::from_millis(if buf.is_empty() { 10 } else { 5000 });
                        match tokio::time::timeout(idle, s.read(&mut chunk)).await {
                            // Idle too long (or the gateway closed): hang up.
                            Err(_) | Ok(Ok(0)) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n.unwrap()]),
                        }
                    };
                    while buf.len() < head_end + length {
                        let n = s.read(&mut chunk).await.unwrap();
                        assert!(n > 0);
                        buf.extend_from_slice(&chunk[..n]);
                    }
                    let request: Value =
                        serde_json::from_slice(&buf[head_end..head_end + length]).unwrap();
                    buf.drain(..head_end + length);
                    let method = request["method"].as_str().unwrap();
                    if method == "mcp/executeTool" {
                        calls.fetch_add(1, Ordering::SeqCst);
                    }
                    let params = serde_json::value::to_raw_value(&request["params"]).unwrap();
                    let answer = match request.get("id") {
                        None => "HTTP/1.1 204 No Content\r\n\r\n".to_owned(),
                        Some(id) => {
                            let body = match server.call(method, Some((&*params).into())).await {
                                Answer::Result(v) => {
                                    json!({"jsonrpc": "2.0", "id": id, "result": v})
                                }
                                Answer::Error(e) => json!({"jsonrpc": "2.0", "id": id, "error": e}),
                                _ => unreachable!("no test tools here"),
                            }
                            .to_string();
                            format!(
                                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
                                body.len()
                            )
                        }
                    };
                    s.write_all(answer.as_bytes()).await.unwrap();
                }
            });
        }
    });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_an_http_upstream_closed_are_not_reused_and_no_call_is_sent_twice() {
    let calls = Arc::new(AtomicUsize::new(0));
    let url = impatient_upstream(calls.clone()).await;
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {"o": {"http": {"url": url}}},
        "tenants": {"a": tenant("ka", &["o"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["o"]).await;
    for i in 0..5 {
        let text = format!("call {i}");
        let r = gw
            .execute("ka", "mcp://gw/o/o/tools/echo:v1", json!({"text": text}))
            .await;
        assert_eq!(r["result"]["output"]["text"], text, "{r}");
        // The upstream's hang-up reaches the gateway before the next call.
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        5,
        "each call reached the upstream once"
    );
    gw.stop().await;
}
