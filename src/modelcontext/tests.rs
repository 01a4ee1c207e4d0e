//! Unit tests of `modelcontext`.

use super::*;

fn obj(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

#[test]
fn handshake_maps_capabilities_and_checks_the_revision() {
    let h = read_initialize(
        r#"{"protocolVersion":"2025-06-18","capabilities":{"tools":{},"resources":{"subscribe":true}},"serverInfo":{"name":"s","version":"1"}}"#,
    )
    .unwrap();
    assert!(h.capabilities.list_tools_provider && h.capabilities.can_execute());
    assert!(h.capabilities.list_resources_provider && !h.capabilities.list_prompts_provider);
    assert!(h.subscribe);
    assert_eq!(h.tasks, TaskCaps::default());
    let tasks = read_initialize(
        r#"{"protocolVersion":"2025-11-25","capabilities":{"tools":{},"tasks":{"list":{},"cancel":{},"requests":{"tools":{"call":{}}}}}}"#,
    )
    .unwrap()
    .tasks;
    assert!(tasks.tool_calls && tasks.list && tasks.cancel);
    assert_eq!(TaskCaps::from_bits(tasks.bits()), tasks);
    let listed_only = read_initialize(
        r#"{"protocolVersion":"2025-11-25","capabilities":{"tasks":{"list":{},"requests":{"tools":{}}}}}"#,
    )
    .unwrap()
    .tasks;
    assert_eq!(
        TaskCaps::from_bits(listed_only.bits()),
        TaskCaps {
            list: true,
            ..TaskCaps::default()
        }
    );
    assert!(read_initialize(r#"{"protocolVersion":"2099-01-01","capabilities":{}}"#).is_err());
    assert!(read_initialize(r#"{"capabilities":{}}"#).is_err());
}

#[test]
fn ids_are_a_function_of_kind_and_key() {
    assert_eq!(original_id(Kind::Tool, "get_time"), "mcp://tool/get_time");
    let uri = "test://static/resource/1";
    let id = original_id(Kind::Resource, uri);
    assert_eq!(id, "mcp://resource/test%3A%2F%2Fstatic%2Fresource%2F1");
    assert_eq!(key_of(Kind::Resource, &id).as_deref(), Some(uri));
    assert_eq!(key_of(Kind::Tool, &id), None);
    assert_ne!(original_id(Kind::Tool, "x"), original_id(Kind::Prompt, "x"));
    let ns = crate::protocol::mcpid::namespace("g", "time", &original_id(Kind::Tool, "a b"));
    assert_eq!(ns, "mcp://g/time/tool/a%20b");
}

#[test]
fn tools_get_their_own_or_the_envelope_schema() {
    let plain = tool(&obj(json!({"name":"echo","inputSchema":{"type":"object"}}))).unwrap();
    assert!(!plain.structured);
    assert_eq!(plain.definition["description"], "");
    assert_eq!(
        plain.definition["outputSchema"],
        serde_json::from_str::<Value>(ENVELOPE_SCHEMA).unwrap()
    );
    let own = tool(&obj(
        json!({"name":"w","description":"d","inputSchema":{},"outputSchema":{"type":"object"}}),
    ))
    .unwrap();
    assert!(own.structured);
    assert!(tool(&obj(json!({"name":"x"}))).is_err());
    assert!(tool(&obj(json!({"inputSchema":{}}))).is_err());
}

/// The answer's output, as the gateway's MCP v1.0 face would carry it.
fn tool_result(text: &str, structured: bool) -> Result<String, CallFailure> {
    let raw: &RawValue = serde_json::from_str(text).unwrap();
    Ok(
        match super::tool_result(Json::from(raw).to_buf(), structured)? {
            Answer::Value(answer, Some(at)) => {
                format!(r#"{{"output":{}}}"#, answer.sub(at).get())
            }
            Answer::Value(_, None) => "{}".into(),
            Answer::Blocks(answer, at) => {
                format!(r#"{{"output":{{"content":{}}}}}"#, answer.sub(at).get())
            }
            Answer::Object(_) => unreachable!("not of this protocol"),
        },
    )
}

#[test]
fn results_become_outputs_and_tool_errors() {
    let content = r#"{"content":[{"type":"text","text":"hi"},{"type":"image","data":"AA==","mimeType":"image/png"}]}"#;
    assert_eq!(
        tool_result(content, false).unwrap(),
        r#"{"output":{"content":[{"type":"text","text":"hi"},{"type":"image","data":"AA==","mimeType":"image/png"}]}}"#
    );
    let structured = r#"{"content":[{"type":"text","text":"{}"}],"structuredContent":{"t":1}}"#;
    assert_eq!(
        tool_result(structured, true).unwrap(),
        r#"{"output":{"t":1}}"#
    );
    assert_eq!(tool_result(r#"{"content":[]}"#, true).unwrap(), "{}");
    let failed = r#"{"content":[{"type":"text","text":"boom"},{"type":"text","text":"twice"}],"isError":true}"#;
    assert_eq!(
        tool_result(failed, false),
        Err(CallFailure::Tool("boom\ntwice".into()))
    );
    assert!(matches!(
        tool_result("[]", false),
        Err(CallFailure::Broken(_))
    ));
    assert!(matches!(
        tool_result(r#"{"content":1}"#, false),
        Err(CallFailure::Broken(_))
    ));
    assert!(matches!(
        tool_result(r#"{"content":[],"content":[]}"#, false),
        Err(CallFailure::Broken(_))
    ));
    assert!(matches!(
        tool_result(r#"{"content":[],"isError":"yes"}"#, false),
        Err(CallFailure::Broken(_))
    ));
    // Escaped keys are read as serde reads them.
    assert_eq!(
        tool_result(r#"{"cont\u0065nt":[],"isError":true}"#, false),
        Err(CallFailure::Tool(String::new()))
    );
}

#[test]
fn resources_are_one_text_within_the_cap() {
    let ok = read_resource_text(
        "u",
        r#"{"contents":[{"uri":"u","mimeType":"text/markdown","text":"hi!"}]}"#,
        10,
    )
    .unwrap();
    assert_eq!(ok.mime.as_deref(), Some("text/markdown"));
    let reason = |r: &str, cap| read_resource_text("u", r, cap).unwrap_err().reason;
    assert_eq!(
        reason(r#"{"contents":[{"uri":"u","blob":"AA=="}]}"#, 10),
        Unmapped::Binary
    );
    assert_eq!(
        reason(r#"{"contents":[{"uri":"u","text":"12345"}]}"#, 4),
        Unmapped::TooLarge
    );
    assert_eq!(reason(r#"{"contents":[]}"#, 4), Unmapped::SeveralContents);
    let def = obj(json!({"uri":"u","name":"n","mimeType":"text/plain"}));
    let mapped = resource(&def, "u", &ok);
    assert_eq!(mapped["mediaType"], "text/markdown");
    assert_eq!(mapped["content"], "hi!");
}

#[test]
fn prompts_take_no_required_arguments_and_one_text_message() {
    let required = obj(json!({"name":"p","arguments":[{"name":"city","required":true}]}));
    assert_eq!(
        prompt_name(&required).unwrap_err().reason,
        Unmapped::RequiredArguments
    );
    let optional = obj(json!({"name":"p","arguments":[{"name":"city"}]}));
    assert_eq!(prompt_name(&optional).unwrap(), "p");
    let one = r#"{"messages":[{"role":"user","content":{"type":"text","text":"Hello"}}]}"#;
    let mapped = prompt(&optional, "p", one).unwrap();
    assert_eq!(
        (mapped["role"].as_str(), mapped["content"].as_str()),
        (Some("user"), Some("Hello"))
    );
    let two = r#"{"messages":[{"role":"user","content":{"type":"text","text":"a"}},{"role":"user","content":{"type":"text","text":"b"}}]}"#;
    assert_eq!(
        prompt(&optional, "p", two).unwrap_err().reason,
        Unmapped::UnsupportedMessages
    );
    let image = r#"{"messages":[{"role":"user","content":{"type":"image","data":"","mimeType":"image/png"}}]}"#;
    assert_eq!(
        prompt(&optional, "p", image).unwrap_err().reason,
        Unmapped::UnsupportedMessages
    );
}

#[test]
fn pages_carry_their_cursor() {
    let p = read_page("tools", r#"{"tools":[{"name":"a"}],"nextCursor":"2"}"#).unwrap();
    assert_eq!(
        (p.items.len(), p.next.as_deref(), p.ttl_ms),
        (1, Some("2"), None)
    );
    let p = read_page("tools", r#"{"tools":[],"ttlMs":5000}"#).unwrap();
    assert_eq!(p.ttl_ms, Some(5000));
    assert_eq!(
        read_page("tools", r#"{"tools":[],"ttlMs":-1}"#)
            .unwrap()
            .ttl_ms,
        None
    );
    assert!(read_page("tools", r#"{"tools":{}}"#).is_err());
    assert!(read_page("tools", r#"{"tools":[],"nextCursor":3}"#).is_err());
    assert_eq!(page_params(Some("c\"")), r#"{"cursor":"c\""}"#);
}
