//! Unit tests of `output`.

use super::*;

#[test]
fn page_uris_name_a_spill_and_a_page_from_1() {
    let hex = "0123456789abcdef0123456789abcdef";
    let uri = format!("{}/3", spill_uri("gw", hex));
    assert_eq!(parse_page("gw", &uri), Some((hex, 3)));
    assert!(is_spill("gw", &uri));
    for bad in [
        format!("mcp://gw/~spill/{hex}/0"),
        format!("mcp://gw/~spill/{hex}/01"),
        format!("mcp://gw/~spill/{hex}/"),
        format!("mcp://gw/~spill/{hex}"),
        format!("mcp://other/~spill/{hex}/1"),
        "mcp://gw/~spill/ABC/1".to_owned(),
    ] {
        assert_eq!(parse_page("gw", &bad), None, "{bad}");
    }
}

#[test]
fn the_mark_and_its_blocks_say_where_the_pages_are() {
    let mark = Mark {
        total_bytes: 3000,
        kept_bytes: 900,
        kept: Some(Kept {
            uri: "mcp://gw/~spill/ab".into(),
            expires_at: "2026-12-06T03:00:00.000Z".into(),
            sizes: vec![2048, 952],
            mime: "text/plain",
        }),
    };
    let v = mark.to_value();
    assert_eq!(v["pages"], 2);
    assert_eq!(v["uri"], "mcp://gw/~spill/ab");
    let blocks = mark.blocks();
    assert!(
        blocks[0]["text"]
            .as_str()
            .unwrap()
            .starts_with("[truncated]")
    );
    assert_eq!(blocks[2]["uri"], "mcp://gw/~spill/ab/2");
    assert_eq!(blocks[2]["name"], "page 2 of 2");
    let over = Mark { kept: None, ..mark };
    assert_eq!(over.to_value()["pages"], 0);
    assert!(over.to_value().get("uri").is_none());
    assert_eq!(over.blocks().len(), 1);
}
