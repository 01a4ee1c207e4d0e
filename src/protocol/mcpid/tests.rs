//! Unit tests of `mcpid`.

use super::*;
use proptest::prelude::*;

#[test]
fn the_documented_example() {
    let ns = namespace("gateway", "files", "mcp://acme-corp/tools/file-writer:v1");
    assert_eq!(ns, "mcp://gateway/files/acme-corp/tools/file-writer:v1");
    let (up, id) = parse("gateway", &ns).unwrap();
    assert_eq!(
        (up, id.as_ref()),
        ("files", "mcp://acme-corp/tools/file-writer:v1")
    );
}

#[test]
fn other_forms_are_encoded() {
    assert_eq!(
        namespace("g", "u", "urn:x:tool 1"),
        "mcp://g/u//urn%3Ax%3Atool%201"
    );
    assert_eq!(
        namespace("g", "u", "mcp:///odd"),
        "mcp://g/u//mcp%3A%2F%2F%2Fodd"
    );
    assert_eq!(namespace("g", "u", ""), "mcp://g/u//");
    assert_eq!(parse("g", "mcp://g/u//").unwrap().1, "");
    assert_eq!(namespace("g", "u", "mcp://"), "mcp://g/u/");
}

#[test]
fn foreign_and_non_canonical_ids_are_rejected() {
    for bad in [
        "mcp://other/u/x",
        "mcp://g/u",
        "mcp://g//x",
        "mcp://gx/u/x",
        "mcp://g/u//%7e", // lower-case or needless escapes are not canonical
        "mcp://g/u//a%2", // truncated escape
        "mcp://g/u//%FF", // not UTF-8
        "mcp://g/u//mcp%3A%2F%2Fx", // a direct-form id spelled the other way
        "http://g/u/x",
    ] {
        assert!(parse("g", bad).is_none(), "{bad}");
    }
}

fn upstream_name() -> impl Strategy<Value = String> {
    "[a-z0-9][a-z0-9_-]{0,12}"
}

proptest! {
    #[test]
    fn round_trips(up in upstream_name(), id in any::<String>()) {
        let ns = namespace("gw", &up, &id);
        let (u, back) = parse("gw", &ns).expect("parses");
        prop_assert_eq!(u, up.as_str());
        prop_assert_eq!(upstream_of("gw", &ns), Some(up.as_str()));
        prop_assert_eq!(back.as_ref(), id.as_str());
    }

    #[test]
    fn round_trips_mcp_ids(up in upstream_name(), rest in "[^/][ -~]{0,40}") {
        let id = format!("mcp://{rest}");
        let ns = namespace("gw", &up, &id);
        prop_assert_eq!(&ns, &format!("mcp://gw/{up}/{rest}"));
        let back = parse("gw", &ns).unwrap().1;
        prop_assert_eq!(back.as_ref(), id.as_str());
    }

    #[test]
    fn injective(a in (upstream_name(), any::<String>()), b in (upstream_name(), any::<String>())) {
        prop_assume!(a != b);
        prop_assert_ne!(namespace("gw", &a.0, &a.1), namespace("gw", &b.0, &b.1));
    }

    #[test]
    fn injective_across_forms(up in upstream_name(), rest in "[ -~]{0,20}") {
        // The same text as a direct mcp:// id and as an opaque id never share a namespaced id.
        let direct = format!("mcp://{rest}");
        prop_assert_ne!(namespace("gw", &up, &direct), namespace("gw", &up, &rest));
    }

    #[test]
    fn parse_only_accepts_what_namespace_makes(s in "mcp://gw/[a-z]{1,3}/[ -~]{0,20}") {
        if let Some((up, id)) = parse("gw", &s) {
            prop_assert_eq!(&namespace("gw", up, &id), &s);
            // Routing by the id as sent finds the same upstream.
            prop_assert_eq!(upstream_of("gw", &s), Some(up));
        }
    }
}
