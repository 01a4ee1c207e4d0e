//! The gateway as a client of an independent, strict stdio server (Python):
//! exact framing, the handshake in order, only declared methods, UTF-8 lengths.

use serde_json::json;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_and_handshake_toward_an_independent_strict_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("strict.log");
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/strict_upstream.py"
    );
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {
            "py": {
                "stdio": {"command": "python3", "args": [script, log.to_str().unwrap()]},
                "protocol": "v1",
            },
        },
        "tenants": {"a": tenant("ka", &["py"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["py"]).await;
    let tools = gw.list("ka", "mcp/listTools").await;
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0]["mcpId"], "mcp://gw/py//urn%3Apy%3Aecho");
    // Multi-byte UTF-8 both ways: Content-Length counts bytes, not characters.
    let r = gw
        .execute(
            "ka",
            "mcp://gw/py//urn%3Apy%3Aecho",
            json!({"text": "héllo — 日本"}),
        )
        .await;
    assert_eq!(r["result"]["output"]["text"], "héllo — 日本 ✓", "{r}");
    // Undeclared listings are answered empty, without calling the upstream.
    assert!(gw.list("ka", "mcp/listResources").await.is_empty());
    assert!(gw.list("ka", "mcp/listPrompts").await.is_empty());
    gw.stop().await;
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("VIOLATION"), "{text}");
    assert_eq!(
        text.lines().filter(|l| l.starts_with("MSG")).count(),
        4,
        "{text}"
    );
}
