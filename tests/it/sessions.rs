//! Live sessions over HTTP, notifications from upstreams, and the stdio mode.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

fn call(id: i64, tool: &str, args: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "mcp/executeTool", "params": {"id": tool, "arguments": args}})
}

async fn gateway_with(record: &std::path::Path) -> (Gateway, tokio::task::JoinHandle<()>) {
    let (url, task) = http_upstream("h").await;
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {
            // Shared: its resources are one state that tenants a and b both see.
            "s": StdioUpstream::new("s", &["--record", record.to_str().unwrap()]).with("shared", true).value(),
            "h": {"http": {"url": url, "notifications": true}},
            "x": stdio_upstream("x", &[]),
        },
        "tenants": {
            "a": tenant("ka", &["s", "h"]),
            "b": tenant("kb", &["s"]),
            "c": tenant("kc", &["x"]),
        },
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["s", "h", "x"]).await;
    (gw, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_arrive_while_the_body_is_open_and_may_overtake_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, _h) = gateway_with(&dir.path().join("rec")).await;
    let mut live = Live::ready(&gw, "ka", false).await;
    // A slow call, then a fast one: the fast answer comes first.
    live.send(call(2, "mcp://gw/s/s/tools/sleep", json!({"ms": 400})))
        .await;
    live.send(call(
        3,
        "mcp://gw/h/h/tools/echo:v1",
        json!({"text": "fast"}),
    ))
    .await;
    let first = live.next_answer().await;
    assert_eq!(first["id"], 3, "{first}");
    assert_eq!(first["result"]["output"]["text"], "fast");
    let second = live.next_answer().await;
    assert_eq!(second["id"], 2);
    // Still open: more requests, then a clean end once the body ends.
    live.send(json!({"jsonrpc": "2.0", "id": 4, "method": "mcp/listPrompts"}))
        .await;
    assert_eq!(live.next_answer().await["id"], 4);
    live.send(json!({"jsonrpc": "2.0", "method": "some/notification"}))
        .await;
    live.send(call(5, "mcp://gw/s/s/tools/sleep", json!({"ms": 100})))
        .await;
    let rest = live.close().await;
    assert_eq!(
        rest.len(),
        1,
        "the pending answer is delivered before the session ends: {rest:?}"
    );
    assert_eq!(rest[0]["id"], 5);
    let m = gw.metrics().await;
    assert_eq!(
        metric(&m, r#"mcp_gateway_sessions_open{tenant="a"}"#),
        Some(0.0)
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_lines_cost_that_line_only() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, _h) = gateway_with(&dir.path().join("rec")).await;
    let mut live = Live::ready(&gw, "ka", false).await;
    live.tx
        .as_ref()
        .unwrap()
        .send(Ok(b"{\"jsonrpc\": nope}\n".to_vec()))
        .await
        .unwrap();
    let err = live.next().await.unwrap();
    assert_eq!(
        err,
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "Parse error"}})
    );
    live.send(json!({"jsonrpc": "2.0", "id": 9, "method": "mcp/listPrompts"}))
        .await;
    assert_eq!(live.next().await.unwrap()["id"], 9);
    live.send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}))
        .await;
    assert_eq!(live.next().await.unwrap()["error"]["code"], -32600);
    assert!(live.close().await.is_empty());
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_changes_reach_the_sessions_of_tenants_that_see_the_upstream_only() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, _h) = gateway_with(&dir.path().join("rec")).await;
    let mut a = Live::ready(&gw, "ka", false).await;
    let mut b = Live::ready(&gw, "kb", false).await;
    let c = Live::ready(&gw, "kc", false).await;
    // A session that has not sent `initialized` gets no notification.
    let mut early = Live::open(
        &gw,
        "ka",
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}),
    )
    .await;
    assert_eq!(early.next().await.unwrap()["id"], 1);
    let before = gw.list("ka", "mcp/listResources").await;
    let motd = |list: &[Value], id: &str| {
        list.iter().find(|r| r["mcpId"] == id).unwrap()["content"].clone()
    };
    assert_eq!(
        motd(&before, "mcp://gw/s/s/resources/motd"),
        "Hello from s, version 1."
    );

    // The stdio child announces a change: a and b see s; c does not.
    let r = gw
        .execute("kb", "mcp://gw/s/s/tools/touch", json!({}))
        .await;
    assert_eq!(r["result"]["output"]["version"], 2, "{r}");
    let expected = json!({"jsonrpc": "2.0", "method": "mcp/resourceDidChange", "params": {"id": "mcp://gw/s/s/resources/motd"}});
    assert_eq!(a.next().await.unwrap(), expected);
    assert_eq!(b.next().await.unwrap(), expected);
    // The gateway refreshed its cached listing before telling anyone.
    assert_eq!(
        motd(
            &gw.list("ka", "mcp/listResources").await,
            "mcp://gw/s/s/resources/motd"
        ),
        "Hello from s, version 2."
    );

    // The HTTP upstream announces one over the gateway's own long-lived session to it: only a sees h.
    gw.execute("ka", "mcp://gw/h/h/tools/touch", json!({}))
        .await;
    assert_eq!(
        a.next().await.unwrap()["params"]["id"],
        "mcp://gw/h/h/resources/motd"
    );
    assert_eq!(
        motd(
            &gw.list("ka", "mcp/listResources").await,
            "mcp://gw/h/h/resources/motd"
        ),
        "Hello from h, version 2."
    );

    // Nothing else arrived anywhere.
    b.send(json!({"jsonrpc": "2.0", "id": 5, "method": "mcp/listPrompts"}))
        .await;
    assert_eq!(b.next().await.unwrap()["id"], 5, "b must not hear about h");
    assert!(c.close().await.is_empty(), "c sees neither upstream");
    assert!(
        early.close().await.is_empty(),
        "no notification before initialized"
    );
    assert!(a.close().await.is_empty());
    assert!(b.close().await.is_empty());
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_disconnect_cancels_its_calls_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("rec");
    let (gw, _h) = gateway_with(&record).await;
    let live = Live::ready(&gw, "ka", false).await;
    live.send(call(2, "mcp://gw/s/s/tools/sleep", json!({"ms": 20000})))
        .await;
    // Wait until the call reached the child, then go away without ending the body.
    within(async {
        while !std::fs::read_to_string(&record)
            .unwrap_or_default()
            .contains(r#""ms":20000"#)
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let m = gw.metrics().await;
    assert_eq!(
        metric(&m, r#"mcp_gateway_sessions_open{tenant="a"}"#),
        Some(1.0)
    );
    assert_eq!(
        metric(&m, r#"mcp_gateway_upstream_in_flight{upstream="s"}"#),
        Some(1.0)
    );
    drop(live);
    within(async {
        loop {
            let m = gw.metrics().await;
            if metric(&m, r#"mcp_gateway_sessions_open{tenant="a"}"#) == Some(0.0)
                && metric(&m, r#"mcp_gateway_upstream_in_flight{upstream="s"}"#) == Some(0.0)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // The child is fine and answers the next caller.
    let r = gw
        .execute(
            "ka",
            "mcp://gw/s/s/tools/echo:v1",
            json!({"text": "still here"}),
        )
        .await;
    assert_eq!(r["result"]["output"]["text"], "still here");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_on_explains_who_served_and_what_was_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, _h) = gateway_with(&dir.path().join("rec")).await;
    let mut live = Live::ready(&gw, "ka", true).await;
    live.send(json!({"jsonrpc": "2.0", "id": 2, "method": "mcp/listTools"}))
        .await;
    let answer = live.next().await.unwrap();
    assert_eq!(answer["id"], 2);
    let trace = live.next().await.unwrap();
    assert_eq!(trace["method"], "$/logTrace");
    let text = trace["params"]["message"].as_str().unwrap();
    assert!(text.contains("upstream s left out tool mcp://s/tools/no-output-schema: missing required field outputSchema"), "{text}");
    assert!(
        text.contains(&format!("upstream h: {TEST_TOOL_COUNT} listed")),
        "{text}"
    );
    assert!(
        !text.contains("upstream x"),
        "another tenant's upstream leaked: {text}"
    );
    live.send(call(
        3,
        "mcp://gw/s/s/tools/echo:v1",
        json!({"text": "secret-argument"}),
    ))
    .await;
    assert_eq!(live.next().await.unwrap()["id"], 3);
    let trace = live.next().await.unwrap();
    let text = trace["params"]["message"].as_str().unwrap();
    assert!(
        text.starts_with("mcp/executeTool mcp://gw/s/s/tools/echo:v1: upstream s,"),
        "{text}"
    );
    assert!(!text.contains("secret-argument"));
    live.close().await;
    // Without trace, no $/logTrace.
    let mut quiet = Live::ready(&gw, "ka", false).await;
    quiet
        .send(json!({"jsonrpc": "2.0", "id": 2, "method": "mcp/listTools"}))
        .await;
    assert_eq!(quiet.next().await.unwrap()["id"], 2);
    assert!(quiet.close().await.is_empty());
    gw.stop().await;
}

/// The demo upstream as its own HTTP server process; returns it and its port.
fn http_upstream_process(port: u16) -> (std::process::Child, u16) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(BIN)
        .args([
            "demo-upstream",
            "--name",
            "p",
            "--test-tools",
            "--http",
            &format!("127.0.0.1:{port}"),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches("/mcp")
        .parse()
        .unwrap();
    (child, port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_notification_session_to_an_http_upstream_comes_back_after_it_restarts() {
    let (mut first, port) = http_upstream_process(0);
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {
            "p": {
                "http": {"url": format!("http://127.0.0.1:{}/mcp", port), "notifications": true},
                "timeout_ms": 2000,
            },
        },
        "tenants": {"a": tenant("ka", &["p"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["p"]).await;
    let mut live = Live::ready(&gw, "ka", false).await;
    let expected = json!({"jsonrpc": "2.0", "method": "mcp/resourceDidChange", "params": {"id": "mcp://gw/p/p/resources/motd"}});
    // The gateway's own session to the upstream may still be opening: touch until one arrives.
    let touch_until_heard = async |live: &mut Live| {
        within(async {
            loop {
                gw.execute("ka", "mcp://gw/p/p/tools/touch", json!({}))
                    .await;
                if let Ok(Some(m)) =
                    tokio::time::timeout(Duration::from_millis(300), live.next()).await
                {
                    assert_eq!(m, expected);
                    return;
                }
            }
        })
        .await
    };
    touch_until_heard(&mut live).await;
    first.kill().unwrap();
    first.wait().unwrap();
    let (mut second, again) = http_upstream_process(port);
    assert_eq!(again, port);
    touch_until_heard(&mut live).await;
    drop(live);
    gw.stop().await;
    second.kill().unwrap();
    second.wait().unwrap();
}
