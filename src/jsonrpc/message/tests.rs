//! Unit tests of `message`.

use super::*;

fn raw(s: &str) -> &RawValue {
    serde_json::from_str(s).unwrap()
}

fn reply_to(s: &str) -> Option<String> {
    let r = raw(s);
    match classify(r) {
        Incoming::Invalid { id, error } => {
            let mut buf = Vec::new();
            write_error(&mut buf, id, &error);
            Some(String::from_utf8(buf).unwrap())
        }
        _ => None,
    }
}

#[test]
fn requests_keep_their_ids_byte_for_byte() {
    for id in [
        "1",
        "-7",
        "9007199254740993",
        "1.5",
        "\"abc\"",
        "\"\\u0041\"",
        "null",
        "1e3",
    ] {
        let text = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"m"}}"#);
        match classify(raw(&text)) {
            Incoming::Request { id: got, .. } => assert_eq!(got.get(), id),
            other => panic!("{id}: {other:?}"),
        }
    }
}

#[test]
fn notifications_are_messages_without_id() {
    assert!(matches!(
        classify(raw(
            r#"{"jsonrpc":"2.0","method":"initialized","params":{}}"#
        )),
        Incoming::Notification { .. }
    ));
    // A malformed notification is never answered.
    assert!(matches!(
        classify(raw(r#"{"jsonrpc":"1.0","method":"x"}"#)),
        Incoming::Ignored
    ));
    assert!(matches!(
        classify(raw(r#"{"jsonrpc":"2.0","method":"x","params":3}"#)),
        Incoming::Ignored
    ));
}

#[test]
fn invalid_requests_follow_the_jsonrpc_examples() {
    assert_eq!(
        reply_to(r#"{"jsonrpc":"2.0","method":1,"params":"bar"}"#).unwrap(),
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request","data":"method must be a string"}}"#
    );
    assert!(reply_to("1").unwrap().contains(r#""id":null"#));
    assert!(reply_to(r#"{"foo":"boo"}"#).unwrap().contains("-32600"));
    assert!(reply_to("[1]").unwrap().contains("-32600"));
    // The id is echoed when it could be read.
    assert!(
        reply_to(r#"{"id":"x","method":"m"}"#)
            .unwrap()
            .contains(r#""id":"x""#)
    );
    assert!(
        reply_to(r#"{"jsonrpc":"2.0","id":{},"method":"m"}"#)
            .unwrap()
            .contains(r#""id":null"#)
    );
    assert!(
        reply_to(r#"{"jsonrpc":"2.0","id":7,"method":"m","params":"s"}"#)
            .unwrap()
            .contains(r#""id":7"#)
    );
    assert!(reply_to(r#"{"jsonrpc":"2.0","id":7,"id":8,"method":"m"}"#).is_some());
}

#[test]
fn upstream_responses_are_checked() {
    let ok = parse_upstream(raw(r#"{"jsonrpc":"2.0","id":3,"result":null}"#)).unwrap();
    assert!(matches!(ok, UpstreamMessage::Response { outcome: Ok(r), .. } if r.get() == "null"));
    let err = parse_upstream(raw(
        r#"{"jsonrpc":"2.0","id":3,"error":{"code":-1,"message":"m","data":[1]}}"#,
    ))
    .unwrap();
    assert!(matches!(
        err,
        UpstreamMessage::Response {
            outcome: Err(_),
            ..
        }
    ));
    for bad in [
        r#"{"id":3,"result":1}"#,
        r#"{"jsonrpc":"2.0","id":3}"#,
        r#"{"jsonrpc":"2.0","id":3,"result":1,"error":{"code":1,"message":"m"}}"#,
        r#"{"jsonrpc":"2.0","id":3,"error":{"code":"x","message":"m"}}"#,
        r#"{"jsonrpc":"2.0","result":1}"#,
        r#"[]"#,
    ] {
        assert!(parse_upstream(raw(bad)).is_err(), "{bad}");
    }
    // A broken response names the call it answers, so that call fails now.
    for (bad, id) in [
        (
            r#"{"jsonrpc":"2.0","id":3,"result":1,"error":{"code":1,"message":"m"}}"#,
            Some("3"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":"x","error":{"code":"x","message":"m"}}"#,
            Some("\"x\""),
        ),
        (r#"{"jsonrpc":"2.0","id":3}"#, Some("3")),
        (r#"{"id":3,"result":1}"#, Some("3")),
        (r#"{"jsonrpc":"2.0","id":[3],"result":1}"#, None),
        (r#"{"jsonrpc":"2.0","result":1}"#, None),
        (r#"{"jsonrpc":"1.0","id":3,"method":"m"}"#, None),
    ] {
        let e = parse_upstream(raw(bad)).unwrap_err();
        assert_eq!(e.id.map(Json::get), id, "{bad}");
    }
    assert!(matches!(
        parse_upstream(raw(
            r#"{"jsonrpc":"2.0","method":"mcp/resourceDidChange","params":{"id":"a"}}"#
        ))
        .unwrap(),
        UpstreamMessage::Notification { .. }
    ));
}

#[test]
fn replies_are_exact() {
    let mut buf = Vec::new();
    write_reply(
        &mut buf,
        Some(raw("9007199254740993").into()),
        Reply::Result(b"[]"),
    );
    assert_eq!(
        buf,
        br#"{"jsonrpc":"2.0","id":9007199254740993,"result":[]}"#
    );
}

#[test]
fn classifying_bytes_agrees_with_classifying_a_value() {
    let cases = [
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":[1,2]}}"#,
        r#"  {"jsonrpc":"2.0","id":"x","method":"m"}  "#,
        r#"{"jsonrpc":"2.0","method":"note"}"#,
        r#"{"jsonrpc":"2.0","id":{},"method":"m"}"#,
        r#"{"jsonrpc":"1.0","id":1,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":7}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":3}"#,
        r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"m"} x"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"m"}{"a":1}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"\u006d","extra":[{"deep":null}]}"#,
        r#"[{"jsonrpc":"2.0","id":1,"method":"m"}]"#,
        r#""just a string""#,
        r#"{"jsonrpc":"2.0","id":1,"method":"m""#,
        "",
    ];
    for case in cases {
        let Some(fast) = classify_bytes(case.as_bytes()) else {
            continue;
        };
        // Whenever the one-pass path answers, the general path gives the same.
        let value: &RawValue = serde_json::from_str(case)
            .unwrap_or_else(|e| panic!("{case}: classified but not JSON: {e}"));
        assert_eq!(
            format!("{fast:?}"),
            format!("{:?}", classify(value)),
            "{case}"
        );
    }
    assert!(classify_bytes(br#"{"jsonrpc":"2.0","id":1,"method":"m"}"#).is_some());
    assert!(classify_bytes(br#"{"jsonrpc":"2.0","id":1,"method":"m"} x"#).is_none());
    assert!(classify_bytes(br#"{"jsonrpc":"2.0","id":1,"id":2,"method":"m"}"#).is_none());
    // Invalid UTF-8 in a member nobody reads is still not JSON.
    assert!(
        classify_bytes(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"x\":\"\xff\"}").is_none()
    );
}
