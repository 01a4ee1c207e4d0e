//! Hostile tenants and broken upstreams: bounded parse work, strict framing,
//! no call that waits for an answer that already came, and what is validated
//! being what is forwarded.

use std::path::Path;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::*;

const SCRIPTED_TOOL: &str = "mcp://gw/py//urn%3Ascripted%3Araw";

/// A gateway with the scripted stdio upstream `py` (its log at `log`) and a
/// demo stdio upstream `s`; tenant `a` (key `ka`) sees both, `b` (`kb`) sees `s`.
async fn gateway(log: &Path) -> Gateway {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/scripted_upstream.py"
    );
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {
            "py": {
                "stdio": {"command": "python3", "args": [script, log.to_str().unwrap()]},
                "timeout_ms": 120000,
            },
            "s": stdio_upstream("s", &[]),
        },
        "tenants": {"a": tenant("ka", &["py", "s"]), "b": tenant("kb", &["s"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["py", "s"]).await;
    gw
}

/// Executes the scripted tool with these arguments, written as they are.
async fn execute_raw(gw: &Gateway, arguments: &str) -> Value {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":5,"method":"mcp/executeTool","params":{{"id":"{SCRIPTED_TOOL}","arguments":{arguments}}}}}"#
    );
    let (status, text) = gw.post("ka", &body).await;
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).unwrap()
}

/// Has the scripted upstream answer with `body` (and `head`, its header section).
async fn answered_with(gw: &Gateway, body: &str, head: Option<&str>) -> Value {
    let mut args = json!({"body": body});
    if let Some(head) = head {
        args["head"] = json!(head);
    }
    gw.execute("ka", SCRIPTED_TOOL, args).await
}

/// The executeTool calls the scripted upstream received.
fn forwarded_calls(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("mcp/executeTool"))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_answer_to_a_call_fails_it_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(&dir.path().join("py.log")).await;
    // The upstream's timeout is two minutes: waiting for it fails `within`.
    for body in [
        r#"{"jsonrpc":"2.0","id":{id},"result":{"output":{"n":1}},"error":{"code":1,"message":"m"}}"#,
        r#"{"jsonrpc":"2.0","id":{id},"error":{"code":"x","message":"m"}}"#,
        r#"{"jsonrpc":"2.0","id":{id}}"#,
    ] {
        let r = answered_with(&gw, body, None).await;
        assert_eq!(r["error"]["code"], -32006, "{body}: {r}");
    }
    // The upstream is still fine.
    let r = gw.execute("ka", SCRIPTED_TOOL, json!({})).await;
    assert_eq!(r["result"]["output"]["n"], 1, "{r}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicting_content_lengths_from_a_child_are_a_protocol_error() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(&dir.path().join("py.log")).await;
    let r = answered_with(
        &gw,
        r#"{"jsonrpc":"2.0","id":{id},"result":{"output":{"n":1}}}"#,
        Some("Content-Length: {len}\r\nContent-Length: {len+1}\r\n"),
    )
    .await;
    assert_eq!(r["error"]["code"], -32001, "{r}");
    let m = gw.metrics().await;
    assert!(
        metric(
            &m,
            r#"mcp_gateway_upstream_protocol_errors_total{upstream="py"}"#
        )
        .unwrap()
            >= 1.0
    );
    // Started again, and serving. The broken connection may still read as
    // ready for a moment after its call failed: the first call that reaches
    // the new child answers.
    until(|| async {
        let r = gw.execute("ka", SCRIPTED_TOOL, json!({})).await;
        r["result"]["output"]["n"] == 1
    })
    .await;
    // Equal lengths twice are one length.
    let r = answered_with(
        &gw,
        r#"{"jsonrpc":"2.0","id":{id},"result":{"output":{"n":2}}}"#,
        Some("Content-Length: {len}\r\ncontent-length: {len}\r\n"),
    )
    .await;
    assert_eq!(r["result"]["output"]["n"], 2, "{r}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_named_twice_are_refused_not_forwarded() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("py.log");
    let gw = gateway(&log).await;
    for arguments in [r#"{"n":1,"n":"x"}"#, r#"{"n":1,"o":{"a":1,"a":2}}"#] {
        let r = execute_raw(&gw, arguments).await;
        assert_eq!(r["error"]["code"], -32602, "{arguments}: {r}");
        assert!(
            r["error"]["data"]
                .as_str()
                .unwrap()
                .contains("occurs twice"),
            "{r}"
        );
    }
    assert_eq!(forwarded_calls(&log), Vec::<String>::new());
    // An output that names a member twice is the upstream's protocol error.
    let r = answered_with(
        &gw,
        r#"{"jsonrpc":"2.0","id":{id},"result":{"output":{"n":1,"n":"x"}}}"#,
        None,
    )
    .await;
    assert_eq!(r["error"]["code"], -32006, "{r}");
    assert!(
        r["error"]["data"]
            .as_str()
            .unwrap()
            .contains("occurs twice"),
        "{r}"
    );
    gw.stop().await;
}

/// Sends `request` on a fresh connection and returns the status line.
async fn status_of(gw: &Gateway, request: &str) -> String {
    let mut s = TcpStream::connect(gw.agent_addr()).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = within(s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out);
    text.lines().next().unwrap_or("").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_needs_exactly_one_host_on_both_paths() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(&dir.path().join("py.log")).await;
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"mcp/listPrompts"}"#;
    let request = |hosts: &str, version: &str, chunked: bool| {
        let framing = if chunked {
            format!(
                "Transfer-Encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
                body.len()
            )
        } else {
            format!("Content-Length: {}\r\n\r\n{body}", body.len())
        };
        format!(
            "POST /mcp HTTP/{version}\r\n{hosts}Authorization: Bearer ka\r\nContent-Type: application/json\r\nConnection: close\r\n{framing}"
        )
    };
    for chunked in [false, true] {
        for hosts in ["", "Host: a\r\nHost: b\r\n", "Host: a\r\nhost: a\r\n"] {
            let status = status_of(&gw, &request(hosts, "1.1", chunked)).await;
            assert!(status.starts_with("HTTP/1.1 400"), "{hosts:?}: {status}");
        }
        let status = status_of(&gw, &request("Host: a\r\n", "1.1", chunked)).await;
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    }
    // HTTP/1.0 may leave Host out.
    let status = status_of(&gw, &request("", "1.0", false)).await;
    assert!(status.contains(" 200"), "{status}");
    gw.stop().await;
}

/// A session whose one message is an array that grows for as long as the
/// client likes, sent as many small chunks (each its own piece of the body):
/// scanning from the first byte on every piece would take minutes here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dripped_session_costs_its_bytes_once_and_others_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(&dir.path().join("py.log")).await;
    let mut s = TcpStream::connect(gw.agent_addr()).await.unwrap();
    let chunk = |text: &str| format!("{:x}\r\n{text}\r\n", text.len());
    let init =
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientCapabilities":{}}}"#;
    let mut head = format!(
        "POST /mcp HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer ka\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n{}",
        chunk(&format!("{init}\n"))
    );
    head.push_str(&chunk("["));
    s.write_all(head.as_bytes()).await.unwrap();
    let pieces = chunk("{},").repeat(1000);
    for round in 0..200 {
        within(s.write_all(pieces.as_bytes())).await.unwrap();
        if round % 50 == 0 {
            // Another tenant is answered while the drip goes on.
            let prompts = gw.list("kb", "mcp/listPrompts").await;
            assert_eq!(prompts.len(), 1);
        }
    }
    let tail = format!(
        "{}{}0\r\n\r\n",
        chunk("{}]\n"),
        chunk("{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"mcp/listPrompts\"}\n")
    );
    s.write_all(tail.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    within(s.read_to_end(&mut out)).await.unwrap();
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    // The initialize answer and the listing after the array (whose own
    // answer is not what this test is about).
    assert!(text.contains(r#""id":1,"result""#), "{text}");
    assert!(text.contains(r#""id":3,"result""#), "{text}");
    gw.stop().await;
}

mod sessions {
    use std::time::Duration;

    use mcp_gateway::config::Config;
    use serde_json::{Value, json};

    use crate::support::*;

    const SLEEP: &str = "mcp://gw/s/s/tools/sleep";
    const ECHO: &str = "mcp://gw/s/s/tools/echo:v1";

    fn call(id: i64, tool: &str, args: serde_json::Value) -> serde_json::Value {
        json!({"jsonrpc": "2.0", "id": id, "method": "mcp/executeTool", "params": {"id": tool, "arguments": args}})
    }

    fn config(limits: Value, tenants: Value) -> String {
        json!({
            "gateway": {"id": "gw", "reload_poll_ms": 50, "limits": limits},
            "upstreams": {"s": stdio_upstream("s", &[])},
            "tenants": tenants,
        })
        .to_string()
    }

    /// A gateway with these limits and one tenant, `a` (key `ka`).
    async fn only_tenant_a(limits: Value) -> Gateway {
        start(&config(
            limits,
            json!({"a": {"api_keys": ["ka"], "upstreams": ["s"]}}),
        ))
        .await
    }

    async fn start(yaml: &str) -> Gateway {
        let gw = Gateway::start(yaml).await;
        gw.wait_ready(&["s"]).await;
        gw
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reload_reaches_every_open_session_at_its_next_message() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gw.yaml");
        let before = config(
            json!({}),
            json!({"a": {"api_keys": ["ka", "ka2"], "upstreams": ["s"]}, "b": {"api_keys": ["kb"], "upstreams": ["s"]}}),
        );
        std::fs::write(&path, &before).unwrap();
        let config = Config::load(&path).unwrap();
        let agent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let gw = Gateway::wrap(
            mcp_gateway::app::start_on(config, Some(path.clone()), agent, admin).unwrap(),
        );
        gw.wait_ready(&["s"]).await;
        let mut removed_key = Live::ready(&gw, "ka2", false).await;
        let mut kept_key = Live::ready(&gw, "ka", false).await;
        let mut removed_tenant = Live::ready(&gw, "kb", false).await;
        for live in [&mut removed_key, &mut kept_key, &mut removed_tenant] {
            live.send(call(2, ECHO, json!({"text": "x"}))).await;
            assert_eq!(live.next_answer().await["result"]["output"]["text"], "x");
        }
        // ka2 is gone, b is gone, and a may no longer run echo.
        let after = Doc::parse(&before)
            .set("tenants.a.api_keys", ["ka"])
            .set("tenants.a.tools", json!({"deny": ["*/echo*"]}))
            .remove("tenants.b");
        std::fs::write(&path, after.yaml()).unwrap();
        within(async {
            let series = r#"mcp_gateway_config_reloads_total{outcome="applied"}"#;
            while metric(&gw.metrics().await, series) != Some(1.0) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        // A change of tenant a's resource reaches the session of the kept
        // key at once, and nothing of it the removed key's.
        let touched = gw
            .execute("ka", "mcp://gw/s/s/tools/touch", json!({}))
            .await;
        assert_eq!(touched["result"]["output"]["version"], 2, "{touched}");
        let heard = kept_key.next().await.unwrap();
        assert_eq!(heard["method"], "mcp/resourceDidChange", "{heard}");
        for live in [&mut removed_key, &mut removed_tenant] {
            live.send(call(3, ECHO, json!({"text": "x"}))).await;
            let r = live.next_answer().await;
            assert_eq!(r["id"], 3, "{r}");
            assert_eq!(r["error"]["code"], -32600, "{r}");
            assert_eq!(r["error"]["message"], "Unauthorized", "{r}");
            // ... and the session has ended.
            assert_eq!(live.next().await, None);
        }
        kept_key.send(call(4, ECHO, json!({"text": "x"}))).await;
        assert_eq!(kept_key.next_answer().await["error"]["code"], -32007);
        assert!(kept_key.close().await.is_empty());
        gw.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_tenant_cannot_hold_every_session() {
        let gw = start(&config(json!({"max_sessions_per_tenant": 2}), json!({"a": {"api_keys": ["ka"], "upstreams": ["s"]}, "b": {"api_keys": ["kb"], "upstreams": ["s"], "max_sessions": 3}})))
        .await;
        let first = Live::ready(&gw, "ka", false).await;
        let _second = Live::ready(&gw, "ka", false).await;
        let init =
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientCapabilities":{}}}"#;
        let (status, headers, text) = gw
            .post_raw(Some("ka"), Some("application/json"), format!("{init}\n"))
            .await;
        assert_eq!(status, 429, "{text}");
        assert_eq!(headers["retry-after"], "1");
        let r: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(r["error"]["code"], -32004, "{r}");
        // The other tenant is served, up to its own limit.
        let mut others = Vec::new();
        for _ in 0..3 {
            others.push(Live::ready(&gw, "kb", false).await);
        }
        others[2].send(call(2, ECHO, json!({"text": "b"}))).await;
        assert_eq!(
            others[2].next_answer().await["result"]["output"]["text"],
            "b"
        );
        // A session that ends gives its place back.
        assert!(first.close().await.is_empty());
        within(async {
            loop {
                let (status, _, _) = gw
                    .post_raw(Some("ka"), Some("application/json"), format!("{init}\n"))
                    .await;
                if status == 200 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        let m = gw.metrics().await;
        assert!(
            metric(
                &m,
                r#"mcp_gateway_requests_limited_total{reason="sessions_limited",tenant="a"}"#
            )
            .unwrap()
                >= 1.0
        );
        gw.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_idle_session_ends_but_one_waiting_for_an_answer_does_not() {
        let gw = only_tenant_a(json!({"session_idle_timeout_ms": 300})).await;
        let mut idle = Live::ready(&gw, "ka", false).await;
        let mut waiting = Live::ready(&gw, "ka", false).await;
        waiting.send(call(2, SLEEP, json!({"ms": 1200}))).await;
        assert_eq!(idle.next().await, None, "the idle session ends");
        let r = waiting.next_answer().await;
        assert_eq!(r["result"]["output"]["slept"], 1200, "{r}");
        gw.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_session_has_a_bounded_number_of_calls_in_flight() {
        let gw = only_tenant_a(json!({"max_session_in_flight": 2})).await;
        let mut live = Live::ready(&gw, "ka", false).await;
        live.send(call(2, SLEEP, json!({"ms": 800}))).await;
        live.send(call(3, SLEEP, json!({"ms": 800}))).await;
        live.send(call(4, SLEEP, json!({"ms": 0}))).await;
        let refused = live.next_answer().await;
        assert_eq!(refused["id"], 4, "{refused}");
        assert_eq!(refused["error"]["code"], -32004, "{refused}");
        let mut ids = vec![
            live.next_answer().await["id"].as_i64().unwrap(),
            live.next_answer().await["id"].as_i64().unwrap(),
        ];
        ids.sort();
        assert_eq!(ids, [2, 3]);
        // Answered calls give their places back.
        live.send(call(5, SLEEP, json!({"ms": 0}))).await;
        assert_eq!(live.next_answer().await["id"], 5);
        let m = gw.metrics().await;
        assert_eq!(
            metric(
                &m,
                r#"mcp_gateway_requests_limited_total{reason="session_in_flight_limited",tenant="a"}"#
            ),
            Some(1.0)
        );
        gw.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_token_guards_metrics_and_readiness_detail_but_not_probes() {
    let yaml = json!({
        "gateway": {"id": "gw", "admin_token": "adm-secret"},
        "upstreams": {"s": stdio_upstream("s", &[])},
        "tenants": {"a": tenant("ka", &["s"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    let get = |path: &str, token: Option<&str>| {
        let mut req = gw.client.get(format!("{}{path}", gw.admin));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        async move {
            let r = within(req.send()).await.unwrap();
            let status = r.status().as_u16();
            let auth = r.headers().get("www-authenticate").cloned();
            (status, auth, within(r.text()).await.unwrap())
        }
    };
    within(async {
        while !get("/readyz", Some("adm-secret"))
            .await
            .2
            .contains(r#""status":"ready""#)
        {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    let (status, auth, _) = get("/metrics", None).await;
    assert_eq!(status, 401);
    assert_eq!(auth.unwrap(), "Bearer");
    assert_eq!(get("/metrics", Some("wrong")).await.0, 401);
    let (status, _, text) = get("/metrics", Some("adm-secret")).await;
    assert_eq!(status, 200);
    assert!(text.contains("mcp_gateway_upstream_up"));
    // Probes get the status, and nothing that names an upstream or tenant.
    assert_eq!(get("/readyz", None).await.0, 200);
    assert_eq!(get("/readyz", None).await.2, r#"{"ready":true}"#);
    assert_eq!(get("/healthz", None).await.0, 200);
    gw.stop().await;
}

mod http_health {
    use std::sync::Arc;
    use std::time::Duration;

    use mcp_gateway::demo::{self, DemoOptions, DemoServer};
    use serde_json::{Value, json};

    use crate::support::*;

    /// `mcp_gateway_upstream_up` of one upstream.
    async fn up(gw: &Gateway, upstream: &str) -> Option<f64> {
        let series = format!(r#"mcp_gateway_upstream_up{{upstream="{upstream}"}}"#);
        metric(&gw.metrics().await, &series)
    }

    async fn status_of(gw: &Gateway, upstream: &str) -> String {
        let (_, body) = gw.get_admin("/readyz").await;
        let v: Value = serde_json::from_str(&body).unwrap();
        v["upstreams"][upstream]["status"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    }

    async fn wait_status(gw: &Gateway, upstream: &str, want: &str) {
        within(async {
            while status_of(gw, upstream).await != want {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_handshake_that_hangs_is_down_and_listings_do_not_wait_for_it() {
        // Accepts connections and never answers.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", silent.local_addr().unwrap());
        let hold = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = silent.accept().await {
                held.push(s);
            }
        });
        let yaml = json!({
            "gateway": {"id": "gw"},
            "upstreams": {
                "hang": {"http": {"url": url}, "timeout_ms": 60000, "required": true},
                "s": stdio_upstream("s", &[]),
            },
            "tenants": {"a": tenant("ka", &["hang", "s"])},
        })
        .to_string();
        let gw = Gateway::start(&yaml).await;
        gw.wait_ready(&["s"]).await;
        // Its handshake is abandoned at its deadline (10 s at most), not held for good.
        wait_status(&gw, "hang", "down").await;
        let (status, _) = gw.get_admin("/readyz").await;
        assert_eq!(status, 503);
        // A listing does not wait for it: `within` would fail on a 60 s wait.
        assert_eq!(gw.list("ka", "mcp/listTools").await.len(), TEST_TOOL_COUNT);
        assert_eq!(up(&gw, "hang").await, Some(0.0));
        hold.abort();
        gw.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_upstream_that_dies_after_its_handshake_is_seen_down_and_comes_back() {
        let server = Arc::new(
            DemoServer::new(DemoOptions {
                name: "h".into(),
                test_tools: true,
                ..Default::default()
            })
            .unwrap(),
        );
        let (addr, task) = demo::http::start(server.clone(), ([127, 0, 0, 1], 0).into())
            .await
            .unwrap();
        let yaml = json!({
            "gateway": {"id": "gw"},
            "upstreams": {"h": {"http": {"url": format!("http://{}/mcp", addr)}, "required": true}},
            "tenants": {"a": tenant("ka", &["h"])},
        })
        .to_string();
        let gw = Gateway::start(&yaml).await;
        gw.wait_ready(&["h"]).await;
        assert_eq!(gw.list("ka", "mcp/listTools").await.len(), TEST_TOOL_COUNT);
        task.abort();
        let _ = task.await;
        // Seen down within the probe interval: out of listings, readiness 503, up 0.
        wait_status(&gw, "h", "down").await;
        assert_eq!(gw.get_admin("/readyz").await.0, 503);
        assert!(gw.list("ka", "mcp/listTools").await.is_empty());
        assert_eq!(up(&gw, "h").await, Some(0.0));
        // The same address again: it comes back by itself.
        let (_, again) = demo::http::start(server, addr).await.unwrap();
        wait_status(&gw, "h", "ready").await;
        assert_eq!(gw.list("ka", "mcp/listTools").await.len(), TEST_TOOL_COUNT);
        assert_eq!(up(&gw, "h").await, Some(1.0));
        again.abort();
        gw.stop().await;
    }
}

/// A stateless call whose client goes away is abandoned upstream, on the
/// edge's own path (a Content-Length body) and on hyper's (chunked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_call_whose_client_leaves_is_cancelled_on_both_paths() {
    // The call's timeout is longer than `within`: only a cancellation ends it in time.
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {
            "s": StdioUpstream::new("s", &[]).with("timeout_ms", 120000).value(),
        },
        "tenants": {"a": tenant("ka", &["s"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["s"]).await;
    let in_flight = || async {
        metric(
            &gw.metrics().await,
            r#"mcp_gateway_upstream_in_flight{upstream="s"}"#,
        )
    };
    let wait_in_flight = |n: f64| async move {
        within(async {
            while in_flight().await != Some(n) {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        })
        .await
    };
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"mcp/executeTool","params":{"id":"mcp://gw/s/s/tools/sleep","arguments":{"ms":120000}}}"#;
    for chunked in [false, true] {
        let framing = if chunked {
            format!(
                "Transfer-Encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
                body.len()
            )
        } else {
            format!("Content-Length: {}\r\n\r\n{body}", body.len())
        };
        let mut s = TcpStream::connect(gw.agent_addr()).await.unwrap();
        s.write_all(
            format!("POST /mcp HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer ka\r\nContent-Type: application/json\r\n{framing}").as_bytes(),
        )
        .await
        .unwrap();
        wait_in_flight(1.0).await;
        drop(s);
        wait_in_flight(0.0).await;
    }
    gw.stop().await;
}

/// An HTTP upstream that answers one request per connection and then closes
/// it, 20 ms later, without `Connection: close`: a call that reuses the
/// connection in that time finds it closed. Counts the tool calls it reads.
async fn closes_after_each_answer() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let calls = std::sync::Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let (head_end, length) = loop {
                    let Ok(n) = s.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..i]).to_lowercase();
                        let length: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse().ok())
                            .unwrap_or(0);
                        break (i + 4, length);
                    }
                };
                while buf.len() < head_end + length {
                    let Ok(n) = s.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                }
                let msg: Value = serde_json::from_slice(&buf[head_end..head_end + length]).unwrap();
                let result = match msg["method"].as_str().unwrap_or("") {
                    "initialize" => {
                        json!({"capabilities": {"listToolsProvider": true, "executionProvider": {"execute": true}}})
                    }
                    "mcp/listTools" => {
                        json!([{"mcpId": "mcp://c/tools/echo", "name": "echo", "description": "d",
                        "inputSchema": {"type": "object"}, "outputSchema": {"type": "object"}}])
                    }
                    "mcp/executeTool" => {
                        seen.fetch_add(1, Ordering::SeqCst);
                        json!({"output": {}})
                    }
                    _ => Value::Null,
                };
                let answer = if msg.get("id").is_some() {
                    let body =
                        json!({"jsonrpc": "2.0", "id": msg["id"], "result": result}).to_string();
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    )
                } else {
                    "HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n".to_owned()
                };
                let _ = s.write_all(answer.as_bytes()).await;
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            });
        }
    });
    (url, calls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_closes_after_each_answer_costs_at_most_one_call() {
    let (url, received) = closes_after_each_answer().await;
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {"c": {"http": {"url": url}}},
        "tenants": {"a": tenant("ka", &["c"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["c"]).await;
    let mut failed = 0;
    for _ in 0..300 {
        let r = gw.execute("ka", "mcp://gw/c/c/tools/echo", json!({})).await;
        if r.get("error").is_some() {
            assert_eq!(r["error"]["code"], -32001, "{r}");
            failed += 1;
        }
    }
    // The first call that meets such a close fails; from then on connections
    // to this upstream are not reused. Nothing is ever sent twice.
    assert!(failed <= 1, "{failed} of 300 calls failed");
    let received = received.load(std::sync::atomic::Ordering::SeqCst);
    assert!(received <= 300, "{received} calls reached the upstream");
    assert!(received >= 300 - failed, "{received}");
    gw.stop().await;
}

/// A body over 256 KiB is read and validated off the runtime's threads;
/// it is answered the same, on a one-thread runtime too (the gateway's
/// `--workers 1`), and a small call beside it is answered meanwhile.
#[tokio::test(flavor = "current_thread")]
async fn a_large_call_is_answered_on_a_one_thread_runtime() {
    let gw = Gateway::one_upstream(&[]).await;
    let text = "x".repeat(1 << 20);
    let large = gw.execute("ka", "mcp://gw/s/s/tools/echo:v1", json!({ "text": text }));
    let small = gw.execute(
        "ka",
        "mcp://gw/s/s/tools/echo:v1",
        json!({ "text": "small" }),
    );
    let (large, small) = tokio::join!(large, small);
    assert_eq!(
        large["result"]["output"]["text"].as_str().map(str::len),
        Some(1 << 20)
    );
    assert_eq!(small["result"]["output"]["text"], "small");
    // An argument error in a large body is the same -32602.
    let r = gw
        .execute("ka", "mcp://gw/s/s/tools/echo:v1", json!({ "pad": text }))
        .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    gw.stop().await;
}

/// The same broken answers from an HTTP upstream fail the call at once too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_answer_from_an_http_upstream_fails_the_call_at_once() {
    use axum::routing::post;
    let app = axum::Router::new().route(
        "/mcp",
        post(|body: String| async move {
            let msg: Value = serde_json::from_str(&body).unwrap_or_default();
            let id = msg["id"].clone();
            let answer = match msg["method"].as_str().unwrap_or("") {
                "initialize" => json!({"jsonrpc": "2.0", "id": id, "result": {"capabilities": {"listToolsProvider": true, "executionProvider": {"execute": true}}}}),
                "mcp/listTools" => json!({"jsonrpc": "2.0", "id": id, "result": [{"mcpId": "mcp://b/tools/t", "name": "t", "description": "d", "inputSchema": {"type": "object"}, "outputSchema": {"type": "object"}}]}),
                "mcp/executeTool" => json!({"jsonrpc": "2.0", "id": id, "result": {"output": {}}, "error": {"code": 1, "message": "m"}}),
                _ => return (axum::http::StatusCode::ACCEPTED, String::new()),
            };
            (axum::http::StatusCode::OK, answer.to_string())
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {"b": {"http": {"url": url}, "timeout_ms": 120000}},
        "tenants": {"a": tenant("ka", &["b"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["b"]).await;
    let r = gw.execute("ka", "mcp://gw/b/b/tools/t", json!({})).await;
    assert_eq!(r["error"]["code"], -32006, "{r}");
    server.abort();
    gw.stop().await;
}
