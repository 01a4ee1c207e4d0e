//! Unit tests of `execute`.

use super::*;
use crate::upstream::Params;

#[test]
fn a_results_output_is_read_as_serde_reads_it() {
    let by_serde = |text: &str| -> Option<Option<String>> {
        let r = serde_json::from_str::<ExecuteResult<'_>>(text).ok()?;
        Some(r.output.map(|o| o.get().to_owned()).filter(|o| o != "null"))
    };
    // A result is always valid JSON (it came as one).
    let json = |text| Json::from(serde_json::from_str::<&RawValue>(text).unwrap());
    for text in [
        r#"{"output":{"text":"hi"},"extra":[1]}"#,
        r#"{"output":null}"#,
        r#"{"other":1}"#,
        r#"{"output":1,"output":2}"#,
        r#"{"output":1e400}"#,
        r#"{"output":"\ud800"}"#,
        r#"{ "out\u0070ut" : [1,2,{"a":"\u00e9"}] }"#,
        r#"{"o":"}","output" :	[{"a":"]"}] , "z":"\""}"#,
    ] {
        let fast = execute_output(json(text)).map(|o| o.map(|o| o.get().to_owned()));
        assert_eq!(fast, by_serde(text), "{text}");
    }
    assert_eq!(execute_output(json("[1]")).map(|_| ()), None);
}

#[test]
fn blocks_are_typed_exactly_when_the_envelope_schema_holds() {
    let envelope: serde_json::Value =
        serde_json::from_str(crate::modelcontext::ENVELOPE_SCHEMA).unwrap();
    let envelope = schema::compile(&envelope).unwrap();
    for blocks in [
        "[]",
        r#"[{"type":"text","text":"hi"},{"type":"image","data":"AA=="}]"#,
        r#"[{"text":"no type"}]"#,
        r#"[{"type":1}]"#,
        r#"[{"type":null}]"#,
        r#"["text"]"#,
        r#"[{"type":"a"},[]]"#,
        r#"[{"typ\u0065":"escaped"}]"#,
        r#"[{"type":"a","type":"b"}]"#,
    ] {
        let raw: &RawValue = serde_json::from_str(blocks).unwrap();
        let whole = format!(r#"{{"content":{blocks}}}"#);
        let typed = blocks_typed(raw.into());
        // A member named twice cannot be read at all; the scan declines it.
        let Ok(whole) = Instance::parse(&whole) else {
            assert!(!typed, "{blocks}");
            continue;
        };
        // Where the scan declines an escaped key, the schema decides.
        if typed {
            assert!(envelope.is_valid(&whole), "{blocks}");
        } else if !blocks.contains('\\') {
            assert!(!envelope.is_valid(&whole), "{blocks}");
        }
    }
}

#[test]
fn forwarded_ids_are_json_strings_whatever_they_hold() {
    let args: &RawValue = serde_json::from_str(r#"{"a":1}"#).unwrap();
    for id in [
        "mcp://a/tools/x:v1",
        "urn:x:tool 1",
        "quote\"back\\slash",
        "tab\tnew\nline",
        "é ✓",
    ] {
        let forwarded = Params::Execute {
            tool: id,
            arguments: args.into(),
        };
        let p: serde_json::Value = serde_json::from_str(&forwarded.to_text()).unwrap();
        assert_eq!(p["id"], id);
        assert_eq!(p["arguments"]["a"], 1);
    }
}
