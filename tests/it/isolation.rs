//! Tenants: each sees only its own upstreams, and cannot even detect another's.

use serde_json::{Value, json};

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_cannot_list_execute_or_detect_another_tenants_tools() {
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {
            "a1": stdio_upstream("a1", &[]),
            "b1": stdio_upstream("b1", &["--no-execute"]),
        },
        "tenants": {"a": tenant("ka", &["a1"]), "b": tenant("kb", &["b1"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["a1", "b1"]).await;
    for (key, mine, theirs) in [("ka", "a1", "b1"), ("kb", "b1", "a1")] {
        for method in ["mcp/listTools", "mcp/listResources", "mcp/listPrompts"] {
            let defs = gw.list(key, method).await;
            assert!(!defs.is_empty());
            assert!(
                defs.iter().all(|d| d["mcpId"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("mcp://gw/{mine}/"))),
                "{defs:?}"
            );
        }
        // Another tenant's real tool and a tool that never existed answer alike.
        let real = format!("mcp://gw/{theirs}/{theirs}/tools/echo:v1");
        let fake = format!("mcp://gw/{theirs}/{theirs}/tools/never-existed");
        let a = gw.execute(key, &real, json!({"text": "x"})).await;
        let b = gw.execute(key, &fake, json!({"text": "x"})).await;
        assert_eq!(a["error"]["data"], format!("Unknown tool: {real}"));
        let strip = |mut v: Value| {
            v["error"]["data"] = Value::Null;
            v
        };
        assert_eq!(strip(a), strip(b));
    }
    // Capabilities are per tenant: b's only upstream cannot execute.
    let caps = |key: &'static str| {
        let gw = &gw;
        async move {
            let (_, text) = gw
                .post(
                    key,
                    r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
                )
                .await;
            let v: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
            v["result"]["capabilities"]["executionProvider"]["execute"].clone()
        }
    };
    assert_eq!(caps("ka").await, json!(true));
    assert_eq!(caps("kb").await, json!(false));
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_policy_hides_and_refuses_denied_tools() {
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {"s": stdio_upstream("s", &[])},
        "tenants": {
            "a": {
                "api_keys": ["ka"],
                "upstreams": ["s"],
                "tools": {"allow": ["mcp://gw/s/s/tools/*"], "deny": ["*/crash", "*/bad_*"]},
            },
            "b": tenant("kb", &["s"]),
        },
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["s"]).await;
    let ids = |defs: Vec<Value>| {
        defs.into_iter()
            .map(|d| d["mcpId"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    let a = ids(gw.list("ka", "mcp/listTools").await);
    for hidden in [
        "mcp://gw/s/s/tools/crash",
        "mcp://gw/s/s/tools/bad_output",
        "mcp://gw/s/s/tools/bad_frame",
        "mcp://gw/s//urn%3As%3Alegacy",
    ] {
        assert!(!a.contains(&hidden.to_owned()), "{hidden} listed for a");
    }
    assert!(a.contains(&"mcp://gw/s/s/tools/echo:v1".to_owned()));
    assert_eq!(a.len(), TEST_TOOL_COUNT - 4);
    // Other kinds are not tools: the policy leaves them alone.
    assert_eq!(gw.list("ka", "mcp/listResources").await.len(), 1);
    // Executing a denied tool: -32007, and the upstream never sees the call.
    for denied in ["mcp://gw/s/s/tools/crash", "mcp://gw/s//urn%3As%3Alegacy"] {
        let r = gw.execute("ka", denied, json!({"text": "x"})).await;
        assert_eq!(r["error"]["code"], -32007, "{r}");
        assert_eq!(
            r["error"]["data"],
            format!("tool {denied} is not allowed for this tenant")
        );
    }
    let r = gw.execute("ka", "mcp://gw/s/s/tools/pid", json!({})).await;
    assert!(r["result"]["output"]["pid"].is_u64(), "{r}");
    // A denied pattern does not make up tools: an id that does not exist is still unknown.
    let r = gw
        .execute("ka", "mcp://gw/s/s/tools/bad_nope", json!({}))
        .await;
    assert_eq!(r["error"]["code"], -32602);
    // Another tenant on the same upstream is not affected.
    assert_eq!(gw.list("kb", "mcp/listTools").await.len(), TEST_TOOL_COUNT);
    let m = gw.metrics().await;
    assert_eq!(
        metric(
            &m,
            r#"mcp_gateway_requests_total{method="mcp/executeTool",outcome="unauthorized_tool",tenant="a"}"#
        ),
        Some(2.0)
    );
    gw.stop().await;
}

/// The pid of the process that ran `key`'s call of `upstream`'s `pid` tool.
async fn pid_of(gw: &Gateway, key: &str, upstream: &str) -> u64 {
    let id = format!("mcp://gw/{upstream}/{upstream}/tools/pid");
    let r = gw.execute(key, &id, json!({})).await;
    r["result"]["output"]["pid"]
        .as_u64()
        .unwrap_or_else(|| panic!("{r}"))
}

fn gone(pid: u64) -> bool {
    !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// A server that keeps notes in memory keeps each tenant's apart: two
/// tenants that list one stdio upstream are served by processes of their
/// own (started on first use, ended when idle), unless the upstream says it
/// may be shared. The one tenant of an upstream is served by its own process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_are_served_by_processes_of_their_own_unless_the_upstream_is_shared() {
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {
            "s": StdioUpstream::new("s", &[]).with("idle_timeout_ms", 1500).value(),
            "sh": StdioUpstream::new("sh", &[]).with("shared", true).value(),
            "solo": stdio_upstream("solo", &[]),
        },
        "tenants": {"a": tenant("ka", &["s", "sh", "solo"]), "b": tenant("kb", &["s", "sh"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["s", "sh", "solo"]).await;
    let children = |text: &str| metric(text, r#"mcp_gateway_tenant_children{upstream="s"}"#);
    assert_eq!(children(&gw.metrics().await), Some(0.0));

    let a = pid_of(&gw, "ka", "s").await;
    let b = pid_of(&gw, "kb", "s").await;
    assert_ne!(a, b, "two tenants reached one process");
    assert_eq!(pid_of(&gw, "ka", "s").await, a);
    assert_eq!(pid_of(&gw, "kb", "s").await, b);
    assert_eq!(children(&gw.metrics().await), Some(2.0));
    // Their calls are the upstream's: counted in its series.
    let m = gw.metrics().await;
    assert_eq!(
        metric(
            &m,
            r#"mcp_gateway_upstream_calls_total{method="mcp/executeTool",outcome="ok",upstream="s"}"#
        ),
        Some(4.0),
        "{m}"
    );
    assert_eq!(
        metric(&m, r#"mcp_gateway_upstream_up{upstream="s"}"#),
        Some(1.0)
    );

    // shared: true is one process for every tenant.
    assert_eq!(pid_of(&gw, "ka", "sh").await, pid_of(&gw, "kb", "sh").await);
    assert_eq!(
        metric(
            &gw.metrics().await,
            r#"mcp_gateway_tenant_children{upstream="sh"}"#
        ),
        Some(0.0)
    );
    // The only tenant of an upstream is served by the upstream's own process.
    assert_eq!(
        pid_of(&gw, "ka", "solo").await,
        pid_of(&gw, "ka", "solo").await
    );
    assert_eq!(
        metric(
            &gw.metrics().await,
            r#"mcp_gateway_tenant_children{upstream="solo"}"#
        ),
        Some(0.0)
    );

    // Idle past idle_timeout_ms: each tenant's process ends, and its next
    // call starts another.
    until(|| async { gone(a) && gone(b) }).await;
    assert_eq!(children(&gw.metrics().await), Some(0.0));
    let again = pid_of(&gw, "ka", "s").await;
    assert!(again != a && again != b);
    gw.stop().await;
}

/// A tenant's child that crashes is restarted for that tenant alone: the
/// other tenant's process, and its calls, never notice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_crashed_child_costs_another_tenant_nothing() {
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {"s": stdio_upstream("s", &[])},
        "tenants": {"a": tenant("ka", &["s"]), "b": tenant("kb", &["s"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["s"]).await;
    let (a, b) = (pid_of(&gw, "ka", "s").await, pid_of(&gw, "kb", "s").await);
    let crashed = gw
        .execute("ka", "mcp://gw/s/s/tools/crash", json!({}))
        .await;
    assert_eq!(crashed["error"]["code"], -32001, "{crashed}");
    assert_eq!(pid_of(&gw, "kb", "s").await, b);
    // a's child comes back (its supervisor restarts it), a new process.
    let again = within(async {
        loop {
            let r = gw.execute("ka", "mcp://gw/s/s/tools/pid", json!({})).await;
            if let Some(pid) = r["result"]["output"]["pid"].as_u64() {
                break pid;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_ne!(again, a);
    assert_eq!(pid_of(&gw, "kb", "s").await, b);
    // The upstream's own restarts are not the children's.
    assert_eq!(
        metric(
            &gw.metrics().await,
            r#"mcp_gateway_upstream_restarts_total{upstream="s"}"#
        ),
        Some(0.0)
    );
    gw.stop().await;
}
