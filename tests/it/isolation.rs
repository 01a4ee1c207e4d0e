//! Tenants: each sees only its own upstreams, and cannot even detect another's.

use serde_json::{Value, json};

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_cannot_list_execute_or_detect_another_tenants_tools() {
    let yaml = format!(
        "gateway: {{id: gw}}\nupstreams:\n  a1: {}\n  b1: {}\ntenants:\n  a: {}\n  b: {}\n",
        stdio_upstream("a1", &[]),
        stdio_upstream("b1", &["--no-execute"]),
        tenant("ka", &["a1"]),
        tenant("kb", &["b1"]),
    );
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
