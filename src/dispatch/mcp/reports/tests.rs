//! Unit tests of `reports`.

use super::*;
use serde_json::value::RawValue;

fn json(text: &str) -> Box<RawValue> {
    RawValue::from_string(text.to_owned()).unwrap()
}

#[test]
fn progress_goes_out_under_the_clients_own_token() {
    let params = json(r#"{"name":"t","_meta":{"progressToken":"client-7"}}"#);
    let token = progress_token(Some(Json::from(&*params))).unwrap();
    assert_eq!(token, "client-7");
    let number = json(r#"{"_meta":{"progressToken":7}}"#);
    assert_eq!(progress_token(Some(Json::from(&*number))), Some(json!(7)));
    for none in [
        r#"{"_meta":{"progressToken":null}}"#,
        r#"{"_meta":{}}"#,
        r#"{}"#,
    ] {
        assert_eq!(
            progress_token(Some(Json::from(&*json(none)))),
            None,
            "{none}"
        );
    }
    let report: JsonBuf = Json::from(&*json(
        r#"{"progressToken":"mcp-gateway/3","progress":1,"total":2,"message":"half"}"#,
    ))
    .to_buf();
    let sent: Value =
        serde_json::from_slice(&progress_notification(&report, &token).unwrap()).unwrap();
    assert_eq!(
        sent,
        json!({"jsonrpc": "2.0", "method": "notifications/progress",
               "params": {"progressToken": "client-7", "progress": 1, "total": 2, "message": "half"}})
    );
}

#[test]
fn a_calls_log_lines_reach_a_client_at_its_level() {
    let line = |level: &str| -> JsonBuf {
        Json::from(&*json(&format!(
            r#"{{"level":"{level}","logger":"l","data":{{"a":1}}}}"#
        )))
        .to_buf()
    };
    assert_eq!(
        message_notification(&line("debug"), LogLevel::Warning),
        None
    );
    let sent: Value =
        serde_json::from_slice(&message_notification(&line("error"), LogLevel::Warning).unwrap())
            .unwrap();
    assert_eq!(
        sent,
        json!({"jsonrpc": "2.0", "method": "notifications/message",
               "params": {"level": "error", "logger": "l", "data": {"a": 1}}})
    );
    assert!(message_notification(&line("warning"), LogLevel::Warning).is_some());
    assert_eq!(message_notification(&line("loud"), LogLevel::Debug), None);
    let asks = json(r#"{"name":"t","_meta":{"io.modelcontextprotocol/logLevel":"notice"}}"#);
    assert_eq!(
        requested_level(Some(Json::from(&*asks))),
        Some(LogLevel::Notice)
    );
    let may_report = |method: &str, params: &RawValue| {
        Scanned::of(method, Some(Json::from(params))).may_report(method)
    };
    assert!(may_report("tools/call", &asks));
    assert!(!may_report("tools/list", &asks));
    let plain = json(r#"{"name":"t","arguments":{"progressToken":1}}"#);
    assert!(!may_report("tools/call", &plain));
    let token = json(r#"{"name":"t","_meta":{"progressToken":"p"}}"#);
    assert!(may_report("tools/call", &token));
}
