//! Unit tests of `stream`.

use super::*;
use serde_json::value::RawValue;

/// serde's stream reader on `text`: whether it can say anything yet.
fn serde_decides(text: &[u8]) -> bool {
    let mut values = serde_json::Deserializer::from_slice(text).into_iter::<&RawValue>();
    match values.next() {
        None => false,
        Some(Ok(_)) => true,
        Some(Err(e)) => !e.is_eof(),
    }
}

/// Feeds `text` in pieces of `piece` bytes; the prefix length at which
/// the scan first became decidable.
fn decided_at(text: &[u8], piece: usize) -> Option<usize> {
    let mut scan = ValueEnd::default();
    let mut len = 0;
    while len < text.len() {
        len = (len + piece).min(text.len());
        if scan.scan(&text[..len]) == Scan::Decidable {
            return Some(len);
        }
    }
    None
}

/// The shortest prefix on which serde can decide. serde reads a number
/// that the input's end cuts short (`[1.`, `[-`, `[2e+`) as an invalid
/// number rather than as the end of the input: the scan waits for the
/// byte after it, so those prefixes are not where serde decides. A
/// number that no digit could mend (`[-.`) is decided where it breaks.
fn serde_decided_at(text: &[u8]) -> Option<usize> {
    (1..=text.len()).find(|&n| {
        let p = &text[..n];
        let cut_short =
            b"-+.eE".contains(&p[n - 1]) && cut_number(p) && !serde_decides(&[p, b"0"].concat());
        serde_decides(p) && !cut_short
    })
}

fn cut_number(p: &[u8]) -> bool {
    let mut values = serde_json::Deserializer::from_slice(p).into_iter::<&RawValue>();
    matches!(values.next(), Some(Err(e)) if e.to_string().contains("number"))
}

fn agree(text: &[u8]) {
    assert_eq!(
        decided_at(text, 1),
        serde_decided_at(text),
        "{:?}",
        String::from_utf8_lossy(text)
    );
    // However the bytes arrive, the scan ends up at the same place.
    let whole = decided_at(text, 1).is_some();
    for piece in [2, 3, 7, text.len().max(1)] {
        assert_eq!(decided_at(text, piece).is_some(), whole);
    }
}

#[test]
fn agrees_with_serde_on_messages_and_garbage() {
    for text in [
            &br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"a":[1,2.5e-3,true,null,"x\"\\\u00e9"]}}"#[..],
            b"  \n {}",
            b"[]",
            b"[1, [2, {}], -0.5E+7]",
            b"{\"a\" 1}",
            b"{\"a\":}",
            b"{,}",
            b"[1,]",
            b"[01]",
            b"[1.]",
            b"[1e]",
            b"[-]",
            b"[tru]",
            b"[nul1]",
            b"\"a\nb\"",
            b"\"\\x\"",
            b"\"\\u12g4\"",
            b"}",
            b"]",
            b"x",
            b"{\"a\":1}}",
            b"{\"a\":[1}",
            b"[{\"a\":1]",
            b"\"unterminated",
            b"{\"a\":{\"b\":",
            b"{},{},{},{}",
            "[\"é\"]".as_bytes(),
        ] {
            agree(text);
        }
}

#[test]
fn deep_nesting_is_decidable_as_serde_decides() {
    for depth in [126, 127, 128, 129, 200] {
        agree(&b"[".repeat(depth));
        let mut closed = b"[".repeat(depth);
        closed.extend(b"]".repeat(depth));
        agree(&closed);
    }
}

#[test]
fn resets_for_the_next_value() {
    let text = b"{\"a\":1}\n[2]";
    let mut scan = ValueEnd::default();
    assert_eq!(scan.scan(text), Scan::Decidable);
    let rest = &text[7..];
    scan.reset();
    assert_eq!(scan.scan(&rest[..2]), Scan::Incomplete);
    assert_eq!(scan.scan(rest), Scan::Decidable);
}

#[test]
fn a_dripped_value_is_scanned_once() {
    // `[{},{},...` never ends: each piece only adds its own bytes.
    let mut text = b"[".to_vec();
    let mut scan = ValueEnd::default();
    for _ in 0..100_000 {
        text.extend_from_slice(b"{},");
        assert_eq!(scan.scan(&text), Scan::Incomplete);
    }
    assert_eq!(scan.pos, text.len());
}

#[test]
fn a_number_no_digit_could_mend_is_decided_where_it_breaks() {
    // Found by the property below: `-.` is invalid whatever follows.
    agree(b"[\n-.7lE] .n]\"e ]\\\"\\");
    agree(b"[1.e]");
    assert_eq!(decided_at(b"[-.", 1), Some(3));
    assert_eq!(decided_at(b"[1.", 1), None);
}

proptest::proptest! {
    #[test]
    fn agrees_with_serde_on_any_text(text in "[\\[\\]{}:,\" \\\\a-fnu0-9.eE+\\-tlrs\n]{0,40}") {
        // Top-level numbers end only at a delimiter here, where serde
        // takes them at the end of its input.
        let first = text.trim_start().bytes().next();
        proptest::prop_assume!(!matches!(first, Some(b'-' | b'0'..=b'9')));
        agree(text.as_bytes());
    }

    #[test]
    fn agrees_with_serde_on_any_json(value in json_value()) {
        let text = serde_json::to_vec(&value).unwrap();
        proptest::prop_assume!(!value.is_number());
        agree(&text);
        // And on every way of breaking it by one byte.
        for i in 0..text.len() {
            let mut broken = text.clone();
            broken[i] = b'}';
            let first = broken.iter().copied().find(|b| !is_ws(*b));
            if !matches!(first, Some(b'-' | b'0'..=b'9')) {
                agree(&broken);
            }
        }
    }
}

fn json_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
    use proptest::prelude::*;
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<i32>().prop_map(|n| serde_json::json!(n)),
        (-1e6f64..1e6).prop_map(|n| serde_json::json!(n)),
        "[a-z\"\\\\\u{e9}\n]{0,6}".prop_map(serde_json::Value::String),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
            proptest::collection::btree_map("[a-z]{0,3}", inner, 0..4)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}
