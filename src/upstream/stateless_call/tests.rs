//! Unit tests of `stateless_call`.

use super::*;
use serde_json::{Value, json};

fn raw(v: Value) -> Box<RawValue> {
    RawValue::from_string(v.to_string()).unwrap()
}

#[test]
fn a_stateless_call_carries_the_round_and_only_the_capabilities_a_round_may_use() {
    let arguments = raw(json!({"a": "x\"y"}));
    let capabilities = raw(json!({
        "elicitation": {"form": {}},
        "roots": {},
        "extensions": {"io.modelcontextprotocol/tasks": {}},
    }));
    let responses = raw(json!({"k": {"action": "accept"}}));
    let level = raw(json!("warning"));
    let call = StatelessCall {
        arguments: Json::from(&*arguments),
        capabilities: Some(Json::from(&*capabilities)),
        log_level: Some(Json::from(&*level)),
        input_responses: Some(Json::from(&*responses)),
        request_state: Some("own \"state\""),
        mirrored: &[],
    };
    let written = |call: &StatelessCall<'_>, name: &str, token: Option<&str>| {
        let mut out = Vec::new();
        call.write(&mut out, name, token, None);
        serde_json::from_slice::<Value>(&out).unwrap()
    };
    let params = written(&call, "tool \"one\"", Some("\"mcp-gateway/7\""));
    assert_eq!(
        params,
        json!({
            "name": "tool \"one\"",
            "arguments": {"a": "x\"y"},
            "inputResponses": {"k": {"action": "accept"}},
            "requestState": "own \"state\"",
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}, "roots": {}},
                "io.modelcontextprotocol/logLevel": "warning",
                "progressToken": "mcp-gateway/7",
            },
        })
    );
    let bare = StatelessCall {
        capabilities: None,
        log_level: None,
        input_responses: None,
        request_state: None,
        ..call
    };
    let params = written(&bare, "t", None);
    assert_eq!(
        params["_meta"],
        json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        })
    );
}
