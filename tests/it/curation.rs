//! Curation: what a tenant's agents see of its tools. Renamed, re-described
//! and hidden tools and bare names, in both faces, with real upstreams
//! (server-everything twice, mcp-server-time) and the official Python SDK's
//! client; reloads that change them; `check`'s errors.

use serde_json::{Value, json};

use crate::support::*;

fn curated(ev: &Value, ev2: &Value, time: &Value, say: &str) -> String {
    json!({
        "gateway": {"id": "gw", "reload_poll_ms": 50},
        "upstreams": {"ev": ev, "ev2": ev2, "time": time},
        "tenants": {
            "a": {
                "api_keys": ["ka"],
                "upstreams": ["ev", "ev2", "time"],
                "tools": {
                    "deny": ["mcp://gw/ev2/tool/get-tiny-image"],
                    "hide": ["mcp://gw/ev/tool/get-env", "mcp://gw/ev*/tool/toggle-*"],
                    "bare_names": true,
                    "overrides": {
                        "mcp://gw/ev/tool/echo": {
                            "name": say,
                            "title": "Say",
                            "description": "Repeats it.",
                        },
                        "mcp://gw/time/tool/convert_time": {"description": "Converts a time."},
                    },
                },
            },
            "b": {"api_keys": ["kb"], "upstreams": ["ev", "time"]},
        },
    })
    .to_string()
}

fn names(tools: &Value) -> Vec<String> {
    tools["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools: {tools}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

fn named<'a>(tools: &'a Value, name: &str) -> &'a Value {
    tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("{name} is not listed: {tools}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renamed_hidden_and_bare_tools_in_both_faces_and_after_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.yaml");
    let (ev, time) = (everything_stdio(), time_stdio());
    std::fs::write(&path, curated(&ev, &ev, &time, "say")).unwrap();
    let gw = start_watching(&path).await;
    gw.wait_ready(&["ev", "ev2", "time"]).await;

    let steps = json!([
        {"op": "tools"},
        {"op": "call", "name": "say", "arguments": {"message": "hi"}},
        {"op": "call", "name": "ev__echo", "arguments": {"message": "hi"}},
        {"op": "call", "name": "echo", "arguments": {"message": "two"}},
        {"op": "call", "name": "get_current_time", "arguments": {"timezone": "UTC"}},
        {"op": "call", "name": "ev__get-env", "arguments": {}},
        {"op": "call", "name": "get-env", "arguments": {}},
    ]);
    let (_, answers) = sdk_client(&gw, "ka", "legacy", steps).await;
    let tools = &answers[0];
    let listed = names(tools);
    let say = named(tools, "say");
    assert_eq!(say["title"], "Say");
    assert_eq!(say["description"], "Repeats it.");
    assert_eq!(
        say["_meta"]["dev.mcp-gateway/mcpId"],
        "mcp://gw/ev/tool/echo"
    );
    // ev2's echo is the tenant's only other echo: listed bare.
    assert_eq!(
        named(tools, "echo")["_meta"]["dev.mcp-gateway/mcpId"],
        "mcp://gw/ev2/tool/echo"
    );
    // Both servers have get-sum: each keeps its prefix.
    assert!(listed.contains(&"ev__get-sum".to_owned()), "{listed:?}");
    assert!(listed.contains(&"ev2__get-sum".to_owned()), "{listed:?}");
    assert!(!listed.contains(&"get-sum".to_owned()), "{listed:?}");
    assert!(
        listed.contains(&"get_current_time".to_owned()),
        "{listed:?}"
    );
    assert_eq!(
        named(tools, "convert_time")["description"],
        "Converts a time."
    );
    // ev's get-env is hidden: ev2's is the only one, bare.
    assert_eq!(
        named(tools, "get-env")["_meta"]["dev.mcp-gateway/mcpId"],
        "mcp://gw/ev2/tool/get-env"
    );
    assert!(
        !listed
            .iter()
            .any(|n| n.contains("toggle-") || n.contains("ev__echo")),
        "{listed:?}"
    );
    assert!(
        !listed
            .iter()
            .any(|n| n.contains("get-tiny-image") && n.starts_with("ev2"))
    );
    assert_eq!(text_of(&answers[1]), "Echo: hi", "{answers:?}");
    assert!(
        answers[2]["error"].is_object(),
        "a renamed tool's default name is unknown: {answers:?}"
    );
    assert_eq!(text_of(&answers[3]), "Echo: two", "{answers:?}");
    assert!(text_of(&answers[4]).contains("UTC"), "{answers:?}");
    assert!(
        answers[5]["error"].is_object(),
        "a hidden tool is unknown: {answers:?}"
    );
    assert!(
        answers[6]["error"].is_null() && answers[6]["content"].is_array(),
        "{answers:?}"
    );

    // MCP v1.0's face: the same tools, the mcpId unchanged.
    let v1 = gw.list("ka", "mcp/listTools").await;
    let echo = v1
        .iter()
        .find(|t| t["mcpId"] == "mcp://gw/ev/tool/echo")
        .unwrap();
    assert_eq!(echo["name"], "say");
    assert_eq!(echo["description"], "Repeats it.");
    assert!(!v1.iter().any(|t| t["mcpId"] == "mcp://gw/ev/tool/get-env"));
    let hidden = gw
        .execute("ka", "mcp://gw/ev/tool/get-env", json!({}))
        .await;
    assert_eq!(hidden["error"]["code"], -32602, "hidden: unknown, {hidden}");
    let denied = gw
        .execute("ka", "mcp://gw/ev2/tool/get-tiny-image", json!({}))
        .await;
    assert_eq!(
        denied["error"]["code"], -32007,
        "denied keeps its code: {denied}"
    );
    let said = gw
        .execute("ka", "mcp://gw/ev/tool/echo", json!({"message": "v1"}))
        .await;
    assert_eq!(
        said["result"]["output"]["content"][0]["text"], "Echo: v1",
        "{said}"
    );

    // Another tenant sees the upstreams' own.
    let (_, theirs) = sdk_client(&gw, "kb", "legacy", json!([{"op": "tools"}])).await;
    let theirs = names(&theirs[0]);
    assert!(theirs.contains(&"ev__echo".to_owned()) && theirs.contains(&"ev__get-env".to_owned()));
    assert!(!theirs.contains(&"say".to_owned()), "{theirs:?}");

    // A reload renames it again: open streams hear the listing changed,
    // and the next message sees the new name.
    let mut stream = listen_for_tools(&gw, "ka").await;
    std::fs::write(&path, curated(&ev, &ev, &time, "repeat")).unwrap();
    wait_reloads(&gw, "applied", 1.0).await;
    let changed = "notifications/tools/list_changed";
    assert!(
        heard(&mut stream, changed)
            .await
            .contains(&changed.to_owned())
    );
    let steps = json!([
        {"op": "tools"},
        {"op": "call", "name": "repeat", "arguments": {"message": "again"}},
        {"op": "call", "name": "say", "arguments": {"message": "again"}},
    ]);
    let (_, answers) = sdk_client(&gw, "ka", "legacy", steps).await;
    assert!(names(&answers[0]).contains(&"repeat".to_owned()));
    assert_eq!(text_of(&answers[1]), "Echo: again", "{answers:?}");
    assert!(answers[2]["error"].is_object(), "{answers:?}");
    gw.stop().await;
}

#[test]
fn check_refuses_curation_that_cannot_hold() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gw.yaml");
    std::fs::write(
        &config,
        json!({
            "gateway": {"id": "gw", "tool_name_budget": 24},
            "upstreams": {"ev": stdio_upstream("ev", &[])},
            "tenants": {
                "a": {
                    "api_keys": ["ka"],
                    "upstreams": ["ev"],
                    "tools": {
                        "hide": ["mcp://gw/ev/tool/[", "mcp://elsewhere/ev/*"],
                        "overrides": {
                            "mcp://gw/ev/tool/*": {"name": "all"},
                            "mcp://gw/other/tool/echo": {"name": "other"},
                            "mcp://gw/ev/tool/echo": {"name": "say"},
                            "mcp://gw/ev/tool/add": {"name": "say"},
                            "mcp://gw/ev/tool/get-sum": {"name": "has space"},
                            "mcp://gw/ev/tool/get-env": {"name": "my__env"},
                            "mcp://gw/ev/tool/get-tiny-image": {
                                "name": "a-name-much-longer-than-the-budget",
                            },
                        },
                    },
                },
            },
        })
        .to_string(),
    )
    .unwrap();
    let err = check_refused(&config);
    for expected in [
        "tenants.a.tools.hide[0]: 'mcp://gw/ev/tool/[' is not a glob",
        "tenants.a.tools.hide[1]: 'mcp://elsewhere/ev/*' can match no tool",
        "tenants.a.tools.overrides.mcp://gw/ev/tool/*: an override names one tool by its exact namespaced id, not a glob",
        "tenants.a.tools.overrides.mcp://gw/other/tool/echo: 'mcp://gw/other/tool/echo' matches no tool of this tenant",
        "'say' is given to two tools: mcp://gw/ev/tool/add and mcp://gw/ev/tool/echo",
        "tenants.a.tools.overrides.mcp://gw/ev/tool/get-sum.name: 'has space' is no tool name",
        "tenants.a.tools.overrides.mcp://gw/ev/tool/get-env.name: 'my__env' holds '__'",
        "'a-name-much-longer-than-the-budget' is longer than gateway.tool_name_budget (24)",
    ] {
        assert!(err.contains(expected), "missing {expected:?} in:\n{err}");
    }
}
