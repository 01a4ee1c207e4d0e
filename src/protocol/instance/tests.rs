//! Unit tests of `instance`.

use super::*;
use proptest::prelude::*;
use serde_json::json;

#[test]
fn meets_the_validators_contract() {
    let text = jsonschema::json::conformance::document().to_string();
    let doc = Instance::parse(&text).unwrap();
    jsonschema::json::conformance::assert_conformance::<InstanceJson>(&&doc);
}

#[test]
fn borrows_unescaped_strings_and_sorts_members() {
    let text = r#"{"b":"plain","a":"esc\u0061ped","c":[1,-2,3.5,true,null]}"#;
    let doc = Instance::parse(text).unwrap();
    let Instance::Object(members) = &doc else {
        panic!()
    };
    let keys: Vec<&str> = members.iter().map(|(k, _)| k.as_ref()).collect();
    assert_eq!(keys, ["a", "b", "c"]);
    assert_eq!(members[0].1, Instance::String(Cow::Owned("escaped".into())));
    assert!(matches!(&members[0].0, Cow::Borrowed(_)));
    assert_eq!(doc.to_value(), serde_json::from_str::<Value>(text).unwrap());
}

#[test]
fn refuses_what_value_refuses() {
    let deep = "[".repeat(200) + &"]".repeat(200);
    for text in [deep.as_str(), "{", r#"{"a" 1}"#, "[1,]", "\"\\x\"", "01"] {
        let as_value = serde_json::from_str::<Value>(text).map_err(|e| e.to_string());
        let as_instance = Instance::parse(text).map_err(|e| e.to_string());
        assert_eq!(as_value.err(), as_instance.err(), "{text:?}");
    }
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
        "[a-c\"\\\\é\n]{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(("[a-d]{0,2}", inner), 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Schemas whose verdict depends on members, order, numbers and lengths.
fn schemas() -> Vec<Value> {
    vec![
        json!({"type": "object", "required": ["a", "b"], "additionalProperties": false,
                   "properties": {"a": {"type": "integer"}, "b": {"type": "string", "maxLength": 3},
                                  "c": {"type": ["array", "null"]}, "": {}, "d": {}, "ab": {}}}),
        json!({"type": "array", "items": {"type": ["number", "object"], "minimum": 0},
                   "uniqueItems": true, "maxItems": 4}),
        json!({"anyOf": [{"type": "string", "pattern": "^a"}, {"type": "boolean"},
                             {"type": "object", "minProperties": 2, "propertyNames": {"maxLength": 1}}]}),
        json!({"enum": [null, 1, "a", [1], {"a": null}]}),
        json!({"not": {"const": {"a": 1.0}}}),
        json!({"type": "object", "patternProperties": {"^[ab]": {"type": "string"}},
                   "dependentRequired": {"c": ["d"]}}),
    ]
}

/// serde_json's own reading of the text, as the one-pass reading is held to.
fn by_serde(text: &str) -> Option<Instance<'_>> {
    serde_json::from_str(text).ok()
}

#[test]
fn the_one_pass_reading_is_serdes() {
    for text in [
        r#"{"b":"plain","a":"esc\u0061ped","c":[1,-2,3.5,true,null]}"#,
        "-0",
        "[0, -1, 18446744073709551615, 18446744073709551616, -9223372036854775808, -9223372036854775809]",
        "[1e2, 1E-2, -0.0, 0.1, 123456789012345678901234567890]",
        r#"["\ud83d\ude00", "\n\t\"\\\/", "é ✓"]"#,
        " { \"a\" : [ ] , \"b\" : { } } ",
    ] {
        assert_eq!(Instance::read(text), by_serde(text), "{text:?}");
        assert!(Instance::read(text).is_some(), "{text:?}");
    }
    // Left to serde, which refuses them or reads them its own way.
    let deep = "[".repeat(100) + &"]".repeat(100);
    for text in ["1e400", r#""\ud800""#, "[1,]", "01", "1 2", &deep] {
        assert_eq!(Instance::read(text), None, "{text:?}");
    }
}

#[test]
fn a_member_named_twice_is_refused() {
    for text in [
        r#"{"b":"plain","a":1,"b":2}"#,
        r#"{"a":{"x":1,"x":1}}"#,
        r#"[{"a":1,"\u0061":2}]"#,
        r#"{"b":1,"a":2,"b":3,"b":4,"a":5}"#,
        r#"{"a":1,"a":2}"#,
        r#"{"z":{"y":1,"y":[2]},"":0,"":{}}"#,
    ] {
        assert_eq!(Instance::read(text), None, "{text:?}");
        let e = Instance::parse(text).unwrap_err().to_string();
        assert!(e.contains("occurs twice"), "{text:?}: {e}");
    }
    // The same name in two objects is no duplicate.
    assert!(Instance::parse(r#"[{"a":1},{"a":2}]"#).is_ok());
}

proptest! {
    /// Any text: what the one pass reads, serde reads the same.
    #[test]
    fn one_pass_never_differs(text in r#"[ {}\[\]",:abc0-9.eE+\-tfnrul\\]{0,40}"#) {
        if let Some(fast) = Instance::read(&text) {
            prop_assert_eq!(Some(fast), by_serde(&text));
        }
    }

    /// Any JSON value, however written, is read in one pass as serde reads it.
    #[test]
    fn one_pass_reads_any_value(value in json_value(), n in any::<f64>(), s in any::<String>()) {
        for text in [
            serde_json::to_string(&value).unwrap(),
            serde_json::to_string_pretty(&value).unwrap(),
            serde_json::to_string(&json!([n, s, -n])).unwrap(),
        ] {
            prop_assert_eq!(Instance::read(&text), by_serde(&text));
        }
    }

    #[test]
    fn validates_like_value(value in json_value(), text_ws in prop::bool::ANY) {
        let text = if text_ws { serde_json::to_string_pretty(&value) } else { serde_json::to_string(&value) }.unwrap();
        let doc = Instance::parse(&text).unwrap();
        prop_assert_eq!(doc.to_value(), value.clone());
        for schema in schemas() {
            let by_value = jsonschema::options().build(&schema).unwrap();
            let by_instance = jsonschema::options_for::<InstanceJson>().build(&schema).unwrap();
            let a = by_value.validate(&value).map_err(|e| (e.to_string(), e.instance_path().to_string()));
            let b = by_instance.validate(&doc).map_err(|e| (e.to_string(), e.instance_path().to_string()));
            prop_assert_eq!(a, b, "schema {}", schema);
        }
    }
}
