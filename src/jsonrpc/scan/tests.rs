//! Unit tests of `scan`.

use super::*;

#[test]
fn an_arrays_elements_are_what_serde_reads_and_lie_in_its_text() {
    for text in [
        "[]",
        "[ ]",
        "[1]",
        r#"[ {"type":"text","text":"a,]}"} , [1,[2]],"\"]",null ,-1.5e3]"#,
        "[\n\t{}\r\n]",
    ] {
        let raw: &RawValue = serde_json::from_str(text).unwrap();
        let buf = Json::from(raw).to_buf();
        let ours: Vec<&str> = elements_of(buf.as_json()).unwrap().map(Json::get).collect();
        let serde: Vec<&RawValue> = serde_json::from_str(text).unwrap();
        let serde: Vec<&str> = serde.iter().map(|v| v.get()).collect();
        assert_eq!(ours, serde, "{text}");
        for element in elements_of(buf.as_json()).unwrap() {
            assert_eq!(buf.sub(buf.range_of(element)).get(), element.get());
        }
    }
    assert!(elements_of(Json(r#"{"a":[]}"#)).is_none());
}

const KEYS: [&str; 3] = ["a", "b", "c"];

fn scan(text: &str) -> Option<Vec<Option<String>>> {
    object(text, KEYS).map(|f| f.iter().map(|v| v.map(|v| v.get().to_owned())).collect())
}

/// What serde_json reads for the same members, as raw values (`None` when it refuses).
fn serde(text: &str) -> Option<Vec<Option<String>>> {
    // A member present as `null` is `Some`, as the envelope reads it.
    fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
        serde::Deserialize::deserialize(d).map(Some)
    }
    #[derive(serde::Deserialize)]
    struct Three<'a> {
        #[serde(borrow, default, deserialize_with = "present")]
        a: Option<&'a RawValue>,
        #[serde(borrow, default, deserialize_with = "present")]
        b: Option<&'a RawValue>,
        #[serde(borrow, default, deserialize_with = "present")]
        c: Option<&'a RawValue>,
    }
    let text = text.trim_start_matches([' ', '\t', '\n', '\r']);
    if !text.starts_with('{') {
        return None;
    }
    let t: Three<'_> = serde_json::from_str(text).ok()?;
    Some(
        [t.a, t.b, t.c]
            .iter()
            .map(|v| v.map(|v| v.get().to_owned()))
            .collect(),
    )
}

#[test]
fn members_of_skips_values_to_their_end() {
    let text = r#"{ "z" : "}\",]" , "a":[{"b":"]"},[]] ,"b" :-1.5e3 ,"c":true}"#;
    let raw: &RawValue = serde_json::from_str(text).unwrap();
    let got = members_of(Json::from(raw), KEYS)
        .unwrap()
        .map(|v| v.map(Json::get));
    assert_eq!(
        got,
        [Some(r#"[{"b":"]"},[]]"#), Some("-1.5e3"), Some("true")]
    );
    let empty: &RawValue = serde_json::from_str("{ }").unwrap();
    assert_eq!(members_of(Json::from(empty), KEYS), Some([None; 3]));
    let array: &RawValue = serde_json::from_str(r#"[{"a":1}]"#).unwrap();
    assert_eq!(members_of(Json::from(array), KEYS), None);
}

#[test]
fn members_are_found_as_their_text() {
    let got = scan(r#" { "a" : 1 , "x": [1, {"a": 2}], "c": {"k": "v\"}"} } "#).unwrap();
    assert_eq!(
        got,
        vec![Some("1".into()), None, Some(r#"{"k": "v\"}"}"#.into())]
    );
    assert_eq!(scan("{}").unwrap(), vec![None, None, None]);
    assert_eq!(scan(r#"{"b":null}"#).unwrap()[1].as_deref(), Some("null"));
}

#[test]
fn agrees_with_serde_on_what_it_accepts() {
    for text in [
        r#"{"a":-0.5e+3,"b":"\u00e9\n","c":[true,false,null,[],{}]}"#,
        r#"{"a":"é ✓","b":1E9}"#,
        "{\"a\":1}\n",
        r#"{"a":1,}"#,
        r#"{"a":01}"#,
        r#"{"a":1.}"#,
        r#"{"a":.5}"#,
        r#"{"a":-}"#,
        r#"{"a":1e}"#,
        r#"{"a":[1,]}"#,
        r#"{"a":[1 2]}"#,
        r#"{"a":{"k" 1}}"#,
        r#"{"a":{"k":1,}}"#,
        r#"{"a":tru}"#,
        r#"{"a":nul}"#,
        r#"{"a":"\x"}"#,
        r#"{"a":"\u12G4"}"#,
        "{\"a\":\"tab\tin\"}",
        r#"{"a":1}{}"#,
        r#"{"a":1} x"#,
        r#"{"a":[}]}"#,
        r#"{"a":{]}"#,
        r#"{"a":1"#,
        r#"{"a""#,
        "{\"a\":1}\u{c}",
        r#"[{"a":1}]"#,
        r#""a""#,
        r#"{"a":1e400}"#,
        r#"{"a":"\ud800"}"#,
    ] {
        let got = scan(text);
        let want = serde(text);
        assert!(
            got.is_none() || got == want,
            "{text:?}: {got:?} vs {want:?}"
        );
        if want.is_none() {
            assert!(got.is_none(), "{text:?} accepted");
        }
    }
}

#[test]
fn declines_what_serde_reads_differently() {
    // A duplicate member (serde refuses it), an escaped key (serde reads it as
    // `a`), deep nesting: serde decides these.
    assert_eq!(scan(r#"{"a":1,"a":2}"#), None);
    assert_eq!(scan(r#"{"\u0061":1}"#), None);
    let deep = format!(r#"{{"a":{}1{}}}"#, "[".repeat(200), "]".repeat(200));
    assert_eq!(scan(&deep), None);
    let ok = format!(r#"{{"a":{}1{}}}"#, "[".repeat(128), "]".repeat(128));
    assert_eq!(scan(&ok), serde(&ok));
    // Unnamed members may repeat (serde ignores them).
    assert_eq!(scan(r#"{"x":1,"x":2}"#), serde(r#"{"x":1,"x":2}"#));
}

proptest::proptest! {
    /// Eight bytes at a time, the same first stop as the table byte by byte.
    #[test]
    fn first_stop_is_the_table_for_eight_bytes(
        bytes in proptest::collection::vec(
            proptest::prop_oneof![
                proptest::prelude::any::<u8>(),
                proptest::sample::select(vec![0u8, 0x1f, 0x20, b'"', b'\\', 0x21, 0x5b, 0x5d, 0x7f, 0x80, 0xff]),
            ],
            8,
        )
    ) {
        let word = u64::from_le_bytes(bytes.clone().try_into().unwrap());
        let want = bytes.iter().position(|&b| STRING_STOP[usize::from(b)]);
        proptest::prop_assert_eq!(first_stop(word), want);
    }

    /// Whatever the text, what the scanner accepts serde accepts, with the same members.
    #[test]
    fn never_accepts_what_serde_refuses(text in r#"[ {}\[\]",:abc0-9.eE+\-tfnrul\\]{0,40}"#) {
        if let Some(got) = scan(&text) {
            proptest::prop_assert_eq!(Some(got), serde(&text));
        }
    }

    /// On valid JSON (what every `Json` holds), the reading that trusts the
    /// grammar finds what the validating one finds, and declines what it
    /// declines (a named member twice, an escaped key).
    #[test]
    fn members_of_finds_what_object_finds(
        members in proptest::collection::vec(
            (
                proptest::sample::select(vec!["a", "b", "c", "x", "\\u0061", "a\\n", ""]),
                json_value(),
                "[ \t\n\r]{0,2}",
            ),
            0..5,
        ),
        end in "[ \t\n\r]{0,2}",
    ) {
        let body: Vec<String> = members
            .iter()
            .map(|(k, v, w)| format!("{w}\"{k}\"{w}:{w}{v}{w}"))
            .collect();
        let text = format!("{{{}{end}}}", body.join(","));
        let raw: &RawValue = serde_json::from_str(&text).unwrap();
        proptest::prop_assert_eq!(members_of(Json::from(raw), KEYS), object(&text, KEYS));
    }

    /// One pass over an object and its nested member finds what reading
    /// the object, then that member, finds: also when the member is
    /// named twice, is not an object, or holds an escaped key.
    #[test]
    fn members_nested_finds_what_members_finds_twice(
        outer in proptest::collection::vec(
            (proptest::sample::select(vec!["a", "b", "m", "x", "\\u0061"]), json_value()),
            0..4,
        ),
        inner in proptest::collection::vec(
            (proptest::sample::select(vec!["a", "b", "c", "x", "a\\n"]), json_value(), "[ \t\n\r]{0,2}"),
            0..4,
        ),
        nested_at in 0usize..4,
        nested_kind in 0u8..3,
    ) {
        let inner: Vec<String> =
            inner.iter().map(|(k, v, w)| format!("{w}\"{k}\"{w}:{w}{v}{w}")).collect();
        let nested = match nested_kind {
            0 => format!("{{{}}}", inner.join(",")),
            1 => format!("[{{{}}}]", inner.join(",")),
            _ => "\"m\"".to_owned(),
        };
        let mut body: Vec<String> = outer.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
        body.insert(nested_at.min(body.len()), format!("\"m\" : {nested}"));
        let text = format!("{{{}}}", body.join(","));
        let raw: &RawValue = serde_json::from_str(&text).unwrap();
        let value = Some(Json::from(raw));
        let keys = ["m", "a", "b"];
        let found = members(value, keys);
        let got = members_nested(value, keys, 0, KEYS);
        proptest::prop_assert_eq!(got, (found, members(found[0], KEYS)));
    }

    /// Any JSON value under a named member is found, whatever it holds.
    #[test]
    fn finds_any_value(v in json_value()) {
        let text = format!(r#"{{"x":[{v}],"b":{v}}}"#);
        proptest::prop_assert_eq!(scan(&text), serde(&text));
        proptest::prop_assert!(scan(&text).is_some());
    }
}

fn json_value() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let leaf = prop_oneof![
        Just("null".to_owned()),
        any::<bool>().prop_map(|b| b.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|n| serde_json::to_string(&n).unwrap()),
        any::<String>().prop_map(|s| serde_json::to_string(&s).unwrap()),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5)
                .prop_map(|v| format!("[{}]", v.join(" , "))),
            proptest::collection::vec((any::<String>(), inner), 0..5).prop_map(|v| {
                let members: Vec<String> = v
                    .iter()
                    .map(|(k, v)| format!("{}:{v}", serde_json::to_string(k).unwrap()))
                    .collect();
                format!("{{ {} }}", members.join(","))
            }),
        ]
    })
}
