//! Stdio children: multiplexing, crashes mid-call, restarts, the handshake as a client.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde_json::{Value, json};

use crate::support::*;

async fn one_child(record: &std::path::Path) -> Gateway {
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {
            // The exact wire of MCP v1.0, which `auto` would precede with its question.
            "s": StdioUpstream::new("s", &["--record", record.to_str().unwrap()]).with("protocol", "v1").value(),
        },
        "tenants": {"a": tenant("ka", &["s"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["s"]).await;
    gw
}

fn received(record: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

async fn child_pid(gw: &Gateway) -> Option<u64> {
    gw.execute("ka", "mcp://gw/s/s/tools/pid", json!({})).await["result"]["output"]["pid"].as_u64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_is_a_correct_client_of_its_children() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("rec");
    let gw = one_child(&record).await;
    gw.list("ka", "mcp/listTools").await;
    let msgs = received(&record);
    // initialize with id 1 first, then the initialized notification, then listings.
    assert_eq!(
        msgs[0],
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"clientCapabilities": {}}})
    );
    assert_eq!(
        msgs[1],
        json!({"jsonrpc": "2.0", "method": "initialized", "params": {}})
    );
    let methods: Vec<&str> = msgs[2..]
        .iter()
        .map(|m| m["method"].as_str().unwrap())
        .collect();
    assert_eq!(
        methods,
        ["mcp/listTools", "mcp/listResources", "mcp/listPrompts"]
    );
    // Listings are served from the cache: no call per agent listing.
    gw.list("ka", "mcp/listTools").await;
    assert_eq!(received(&record).len(), msgs.len());
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundreds_of_interleaved_calls_with_colliding_ids_each_reach_their_caller() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("rec");
    let gw = one_child(&record).await;
    let calls = (0..400).map(|i| {
        let gw = &gw;
        async move {
            // Every agent uses id 1; half the calls sleep so answers come back out of order.
            let (tool, args) = if i % 2 == 0 { ("echo:v1", json!({"text": format!("call-{i}")})) } else { ("sleep", json!({"ms": (i * 7) % 30})) };
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": "mcp/executeTool", "params": {"id": format!("mcp://gw/s/s/tools/{tool}"), "arguments": args}});
            let (status, text) = gw.post("ka", &body.to_string()).await;
            assert_eq!(status, 200);
            let v: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v["id"], 1);
            if i % 2 == 0 {
                assert_eq!(v["result"]["output"]["text"], format!("call-{i}"), "{v}");
            } else {
                assert_eq!(v["result"]["output"]["slept"], (i * 7) % 30, "{v}");
            }
        }
    });
    within(join_all(calls)).await;
    // A batch whose members share an id: each still gets its own answer, in order.
    let batch = json!([
        {"jsonrpc": "2.0", "id": 9, "method": "mcp/executeTool", "params": {"id": "mcp://gw/s/s/tools/sleep", "arguments": {"ms": 40}}},
        {"jsonrpc": "2.0", "id": 9, "method": "mcp/executeTool", "params": {"id": "mcp://gw/s/s/tools/echo:v1", "arguments": {"text": "second"}}}
    ]);
    let (_, text) = gw.post("ka", &batch.to_string()).await;
    let v: Vec<Value> = serde_json::from_str(&text).unwrap();
    assert_eq!(v[0]["result"]["output"]["slept"], 40);
    assert_eq!(v[1]["result"]["output"]["text"], "second");
    // The child never saw two requests with one id.
    let ids: Vec<u64> = received(&record)
        .iter()
        .filter_map(|m| m["id"].as_u64())
        .collect();
    assert_eq!(ids.len(), ids.iter().collect::<HashSet<_>>().len());
    assert!(ids.len() >= 402);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_killed_mid_call_fails_its_calls_at_once_and_is_started_again() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("rec");
    let gw = one_child(&record).await;
    let pid = child_pid(&gw).await.unwrap();
    let calls: Vec<_> = (0..5)
        .map(|_| {
            let (client, url) = (gw.client.clone(), gw.url.clone());
            tokio::spawn(async move {
                let body = json!({"jsonrpc": "2.0", "id": 3, "method": "mcp/executeTool", "params": {"id": "mcp://gw/s/s/tools/sleep", "arguments": {"ms": 25000}}});
                let resp = client.post(url).bearer_auth("ka").header("content-type", "application/json").body(body.to_string()).send().await.unwrap();
                serde_json::from_str::<Value>(&resp.text().await.unwrap()).unwrap()
            })
        })
        .collect();
    // Wait until the child has received all five calls, then kill it.
    within(async {
        while received(&record)
            .iter()
            .filter(|m| m["params"]["id"] == "mcp://s/tools/sleep")
            .count()
            < 5
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let killed_at = Instant::now();
    assert!(
        std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    for call in calls {
        let v = within(call).await.unwrap();
        assert_eq!(v["error"]["code"], -32001, "{v}");
        assert_eq!(v["id"], 3);
    }
    assert!(
        killed_at.elapsed() < Duration::from_secs(5),
        "in-flight calls must fail at once"
    );
    // The child comes back with a new pid.
    let new_pid = within(async {
        loop {
            if let Some(p) = child_pid(&gw).await {
                return p;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert_ne!(new_pid, pid);
    let m = gw.metrics().await;
    assert!(metric(&m, r#"mcp_gateway_upstream_restarts_total{upstream="s"}"#).unwrap() >= 1.0);
    // The crash tool (the child exits on its own) is handled the same way.
    let r = gw
        .execute("ka", "mcp://gw/s/s/tools/crash", json!({}))
        .await;
    assert_eq!(r["error"]["code"], -32001, "{r}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_cannot_start_is_down_not_fatal() {
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {
            "ok": stdio_upstream("ok", &[]),
            "missing": {"stdio": {"command": "/nonexistent/server"}},
        },
        "tenants": {"a": tenant("ka", &["ok", "missing"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["ok"]).await;
    let tools = gw.list("ka", "mcp/listTools").await;
    assert_eq!(tools.len(), TEST_TOOL_COUNT);
    assert!(
        tools
            .iter()
            .all(|t| t["mcpId"].as_str().unwrap().starts_with("mcp://gw/ok/"))
    );
    let r = gw
        .execute("ka", "mcp://gw/missing/x/tools/y", json!({}))
        .await;
    assert_eq!(r["error"]["code"], -32001, "{r}");
    gw.stop().await;
}
