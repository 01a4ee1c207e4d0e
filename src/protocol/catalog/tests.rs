//! Unit tests of `catalog`.

use super::*;

fn raw(s: &str) -> Json<'_> {
    serde_json::from_str::<&serde_json::value::RawValue>(s)
        .unwrap()
        .into()
}

#[test]
fn builds_and_drops() {
    let tools = raw(r#"[
            {"mcpId":"mcp://a/tools/t","name":"t","description":"d","inputSchema":{"type":"object"},"outputSchema":{}},
            {"mcpId":"mcp://a/tools/t","name":"dup","description":"d","inputSchema":{},"outputSchema":{}},
            {"mcpId":"mcp://a/tools/bad","name":"b","description":"d","inputSchema":{"type":12},"outputSchema":{}},
            {"mcpId":"mcp://a/tools/missing","name":"m","description":"d","inputSchema":{}},
            {"mcpId":"urn:t","name":"u","description":"d","inputSchema":{},"outputSchema":{},"extra":true},
            7
        ]"#);
    let built = build("g", "up", Kind::Tool, tools, Default::default());
    assert_eq!(built.listing.count, 2);
    let reasons: Vec<_> = built.dropped.iter().map(|d| d.reason.as_str()).collect();
    assert_eq!(reasons.len(), 4, "{reasons:?}");
    assert!(reasons[0].contains("duplicate"));
    assert!(reasons[1].contains("inputSchema is not a valid JSON Schema"));
    let cat = Catalog::default().with(vec![(Kind::Tool, built)]);
    assert_eq!(
        cat.tool("mcp://g/up/a/tools/t").unwrap().original_id,
        "mcp://a/tools/t"
    );
    assert_eq!(
        cat.tool("mcp://g/up//urn%3At").unwrap().original_id,
        "urn:t"
    );
    assert!(cat.tool("mcp://a/tools/t").is_none());
    let listed: Vec<Value> =
        serde_json::from_str(&format!("[{}]", cat.listing(Kind::Tool).json)).unwrap();
    assert_eq!(listed[1]["mcpId"], "mcp://g/up//urn%3At");
    assert_eq!(listed[1]["extra"], true);
}

#[test]
fn fingerprints_ignore_key_order_and_quarantine_removes() {
    let a: Value = serde_json::from_str(r#"{"b":1,"a":{"y":[1,{"q":2,"p":3}],"x":"s"}}"#).unwrap();
    let b: Value = serde_json::from_str(r#"{"a":{"x":"s","y":[1,{"p":3,"q":2}]},"b":1}"#).unwrap();
    assert_eq!(fingerprint(&a), fingerprint(&b));
    let c: Value = serde_json::from_str(r#"{"a":{"x":"t","y":[1,{"p":3,"q":2}]},"b":1}"#).unwrap();
    assert_ne!(fingerprint(&a), fingerprint(&c));
    let tools = raw(r#"[
            {"mcpId":"mcp://a/t1","name":"t","description":"d","inputSchema":{},"outputSchema":{}},
            {"mcpId":"mcp://a/t2","name":"t","description":"d","inputSchema":{},"outputSchema":{}}]"#);
    let mut built = build("g", "up", Kind::Tool, tools, Default::default());
    assert_eq!(built.seen.len(), 2);
    assert_eq!(
        built.seen[0].fingerprint, built.seen[1].fingerprint,
        "the same definition under two ids: one fingerprint"
    );
    built.quarantine(&["mcp://a/t1".to_owned()].into());
    let cat = Catalog::default().with(vec![(Kind::Tool, built)]);
    assert!(cat.tool("mcp://g/up/a/t1").is_none() && cat.is_quarantined("mcp://a/t1"));
    assert!(cat.tool("mcp://g/up/a/t2").is_some());
    assert_eq!(cat.listing(Kind::Tool).count, 1);
    let listed: Vec<Value> =
        serde_json::from_str(&format!("[{}]", cat.listing(Kind::Tool).json)).unwrap();
    assert_eq!(listed[0]["mcpId"], "mcp://g/up/a/t2");
}

#[test]
fn non_array_listing_is_dropped_whole() {
    let built = build(
        "g",
        "up",
        Kind::Prompt,
        raw(r#"{"not":"array"}"#),
        Default::default(),
    );
    assert_eq!(built.listing.count, 0);
    assert_eq!(built.dropped.len(), 1);
}
