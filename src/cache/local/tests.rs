//! Unit tests of `local`.

use super::*;
use crate::jsonrpc::JsonBuf;
use crate::protocol::tool_result::Output;
use std::time::{Duration, SystemTime};

fn slot(tenant: &str, key: &str, max_entries: usize) -> Slot {
    let identity = format!("{tenant}\0{key}");
    let mut hash = [0u8; 16];
    hash[..identity.len().min(16)].copy_from_slice(&identity.as_bytes()[..identity.len().min(16)]);
    Slot {
        tenant: tenant.into(),
        upstream: "up".into(),
        identity,
        key: hash,
        ttl: Duration::from_secs(60),
        max_entries,
    }
}

fn entry(text: &str) -> Entry {
    let raw: Box<serde_json::value::RawValue> = serde_json::from_str(text).unwrap();
    Entry {
        answer: JsonBuf::from(raw),
        at: 0..text.len(),
        output: Output::Value,
        object: false,
        stored: SystemTime::now(),
    }
}

#[test]
fn the_least_recently_used_of_a_tenant_goes_first_and_others_are_untouched() {
    let mut l = Local::new(1 << 20);
    l.put(&slot("a", "1", 2), entry("1"));
    l.put(&slot("a", "2", 2), entry("2"));
    l.put(&slot("b", "1", 2), entry("10"));
    assert!(
        l.get(&slot("a", "1", 2)).is_some(),
        "1 is now the most recent"
    );
    assert_eq!(l.put(&slot("a", "3", 2), entry("3")), 2);
    assert!(
        l.get(&slot("a", "2", 2)).is_none(),
        "2 was the least recent"
    );
    assert!(l.get(&slot("a", "1", 2)).is_some());
    assert_eq!(l.get(&slot("b", "1", 2)).unwrap().answer.get(), "10");
    assert_eq!(l.forget_upstream("up").len(), 2);
    assert!(l.get(&slot("a", "1", 2)).is_none());
    assert_eq!(l.bytes, 0);
}

#[test]
fn an_entry_answers_only_the_call_it_was_kept_for() {
    let mut l = Local::new(1 << 20);
    l.put(&slot("a", "1", 2), entry("1"));
    let mut other = slot("a", "1", 2);
    other.identity.push_str(" with other arguments");
    assert!(l.get(&other).is_none(), "the same hash, another call");
    assert!(l.get(&slot("a", "1", 2)).is_some());
}

#[test]
fn past_the_replicas_bytes_the_least_recent_of_anyone_goes() {
    let mut l = Local::new(2 * (128 + 3 + 3));
    l.put(&slot("a", "1", 10), entry("111"));
    l.put(&slot("b", "1", 10), entry("222"));
    l.put(&slot("b", "2", 10), entry("333"));
    assert!(l.get(&slot("a", "1", 10)).is_none());
    assert!(l.get(&slot("b", "1", 10)).is_some());
    assert!(l.get(&slot("b", "2", 10)).is_some());
}
