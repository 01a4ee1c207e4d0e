//! Unit tests of `rendering`.

use super::*;
use crate::jsonrpc::JsonBuf;
use crate::jsonrpc::scan::members_of;

#[test]
fn json_text_is_written_as_a_string_as_serde_would() {
    for text in [
        r#"{"text":"hello"}"#,
        "{\n  \"a\" :\t[1, 2.5e3, null]\r\n}",
        r#"{"q":"say \"hi\"\\ \u00e9 \n","é ✓":"𝄞","s":"a/b"}"#,
        r#""\u0000\b\f""#,
        "[]",
        "42",
    ] {
        let mut out = String::new();
        push_as_string(&mut out, text);
        assert_eq!(out, serde_json::to_string(text).unwrap(), "{text}");
        let back: String = serde_json::from_str(&out).unwrap();
        assert_eq!(back, text);
    }
}

/// A result whose output is the member `key` of `text`.
fn result(text: &str, key: &str, output: Output) -> ToolResult {
    let raw: &serde_json::value::RawValue = serde_json::from_str(text).unwrap();
    let answer: JsonBuf = Json::from(raw).to_buf();
    let at = answer.range_of(members_of(answer.as_json(), [key]).unwrap()[0].unwrap());
    ToolResult::new(answer, at, output, key == "output")
}

fn written(built: Built) -> Value {
    match built {
        Ok(Out::Written(text)) => serde_json::from_str(&text).unwrap(),
        Ok(Out::ToolError(v)) => json!({"toolError": v}),
        Ok(Out::Value(_) | Out::Meta(..)) => panic!("a tool's result is written, not built"),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn a_tools_result_is_rendered_once_from_what_the_tool_produced() {
    // Blocks pass through as the upstream sent them, links and all.
    let blocks = r#"{"content":[{"type":"resource_link","uri":"file:///a","name":"a"}],"extra":1}"#;
    assert_eq!(
        written(call_result(
            Ok(result(blocks, "content", Output::Blocks)),
            false
        )),
        json!({"content": [{"type": "resource_link", "uri": "file:///a", "name": "a"}]})
    );
    // A value: a text block holding it, and `structuredContent` where a schema was listed.
    let value = r#"{"output":{"t":"\"q\""}}"#;
    assert_eq!(
        written(call_result(
            Ok(result(value, "output", Output::Value)),
            true
        )),
        json!({"content": [{"type": "text", "text": r#"{"t":"\"q\""}"#}], "structuredContent": {"t": "\"q\""}})
    );
    let structured = r#"{"content":[{"type":"text","text":"ignored"}],"structuredContent":[1,2]}"#;
    assert_eq!(
        written(call_result(
            Ok(result(structured, "structuredContent", Output::Value)),
            false
        )),
        json!({"content": [{"type": "text", "text": "[1,2]"}]})
    );
    // The tool's own failure, and arguments its schema refuses, are tool errors.
    let failed = GatewayError::Upstream {
        upstream: "u".into(),
        error: CallError::Tool("boom".into()),
    };
    assert_eq!(
        written(call_result(Err(failed), false)),
        json!({"toolError": {"content": [{"type": "text", "text": "boom"}], "isError": true}})
    );
    assert!(matches!(
        call_result(Err(GatewayError::ToolDenied("t".into())), false),
        Err(GatewayError::ToolDenied(_))
    ));
}
