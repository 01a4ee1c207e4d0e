//! Audit lines of refused calls: every `mcp/executeTool` and `tools/call`,
//! answered or refused at admission, leaves one, and a tenant flooding past
//! its limits costs the log no more than its share (the rest counted).

use serde_json::{Value, json};

use crate::support::*;

/// Posts `body` with the key `ka` over a fresh connection; the answer.
fn post(agent: &str, body: &Value) -> Value {
    use std::io::{Read, Write};
    let body = body.to_string();
    let mut s = std::net::TcpStream::connect(agent).unwrap();
    write!(s, "POST /mcp HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer ka\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (_, body) = out.split_once("\r\n\r\n").unwrap();
    serde_json::from_str(body).unwrap_or_else(|_| panic!("{out}"))
}

fn get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn refused_calls_are_audited_within_the_tenants_share_of_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gw.yaml");
    std::fs::write(
        &config,
        json!({
            "upstreams": {"s": stdio_upstream("s", &[])},
            "tenants": {
                "a": {
                    "api_keys": ["ka"],
                    "upstreams": ["s"],
                    "rate_limit": {"per_second": 1, "burst": 1},
                },
            },
        })
        .to_string(),
    )
    .unwrap();
    let mut p = Process::spawn(&["serve", "--config", config.to_str().unwrap()]);
    let agent = p.addr("agent listener bound");
    let admin = p.addr("admin listener bound");
    p.wait_log("ready", |v| v["message"] == "upstream ready");
    let calls = 60;
    let mut refused = 0;
    for i in 0..calls {
        let body = match i % 2 {
            0 => {
                json!({"jsonrpc": "2.0", "id": i, "method": "mcp/executeTool", "params": {"id": "mcp://gateway/s/s/tools/echo:v1", "arguments": {"text": "x"}}})
            }
            _ => {
                json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "s_echo", "arguments": {"text": "x"}}})
            }
        };
        let answer = post(&agent, &body);
        refused += usize::from(answer["error"]["code"] == -32004);
    }
    assert!(refused >= calls - 3, "{refused} of {calls} refused");
    let metrics = get(&admin, "/metrics");
    let dropped = metric(
        &metrics,
        r#"mcp_gateway_audit_lines_dropped_total{tenant="a"}"#,
    )
    .unwrap_or(0.0) as usize;
    assert!(dropped > 0, "a flood leaves out some of its lines");
    // Each refused call has its line, or was counted as left out.
    p.wait_log("a refused call's line", |v| {
        v["target"] == "mcp_gateway::audit" && v["outcome"] == "over_capacity"
    });
    assert!(p.terminate().success());
    let lines: Vec<&Value> = p
        .seen()
        .iter()
        .filter(|v| v["target"] == "mcp_gateway::audit" && v["outcome"] == "over_capacity")
        .collect();
    assert_eq!(lines.len() + dropped, refused, "{lines:?}");
    assert!(
        lines.len() <= 30,
        "{} lines: past the tenant's share",
        lines.len()
    );
    let v1 = lines.iter().find(|v| v["protocol"] == "v1").unwrap();
    assert_eq!(v1["tool"], "mcp://gateway/s/s/tools/echo:v1");
    assert_eq!(v1["tenant"], "a");
    assert_eq!(v1["args_hmac"].as_str().map(str::len), Some(32));
    assert!(
        lines
            .iter()
            .any(|v| v["protocol"] == "modelcontextprotocol" && v["tool"] == "s_echo")
    );
}

/// The audit line of a renamed tool's call names both: its id as `tool`
/// and what the agent called it as `name`.
#[test]
fn the_audit_line_of_a_renamed_tool_says_its_id_and_the_name_called() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gw.yaml");
    std::fs::write(
        &config,
        json!({
            "upstreams": {"s": stdio_upstream("s", &[])},
            "tenants": {
                "a": {
                    "api_keys": ["ka"],
                    "upstreams": ["s"],
                    "tools": {"overrides": {"mcp://gateway/s/s/tools/echo:v1": {"name": "say"}}},
                },
            },
        })
        .to_string(),
    )
    .unwrap();
    let mut p = Process::spawn(&["serve", "--config", config.to_str().unwrap()]);
    let agent = p.addr("agent listener bound");
    p.wait_log("ready", |v| v["message"] == "upstream ready");
    let call = |name: &str| {
        post(
            &agent,
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": {"text": "x"}}}),
        )
    };
    let said = call("say");
    assert_eq!(said["result"]["structuredContent"]["text"], "x", "{said}");
    assert!(
        call("s_echo")["error"].is_object(),
        "the default name is unknown"
    );
    let line = p.wait_log("the call's line", |v| {
        v["target"] == "mcp_gateway::audit" && v["outcome"] == "ok"
    });
    assert_eq!(line["tool"], "mcp://gateway/s/s/tools/echo:v1");
    assert_eq!(line["name"], "say");
    assert_eq!(line["protocol"], "modelcontextprotocol");
    assert!(p.terminate().success());
}
