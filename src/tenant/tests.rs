//! Unit tests of `tenant`.

use super::*;
use crate::config::{KeyDigest, TenantSpec};

#[test]
fn a_token_sees_the_tools_its_scopes_allow_and_shares_the_limits() {
    let mut tools = ToolGlobs::compile(&[] as &[&str], &["*/delete*"]).unwrap();
    for (glob, scope) in [("*/files/*", "files"), ("*/search/*", "search")] {
        tools.scoped.push((
            globset::Glob::new(glob).unwrap().compile_matcher(),
            scope.into(),
        ));
    }
    let store = KeyStore::new(&[TenantSpec {
        name: "a".into(),
        keys: vec![KeyDigest::of(b"ka")],
        upstreams: vec![],
        tools,
        rate_limit: None,
        max_concurrency: Some(1),
        max_sessions: None,
        curation: None,
        digest: 0,
    }]);
    let base = store.authenticate("ka").unwrap();
    assert!(
        base.may_use("mcp://g/files/f/tools/read"),
        "an API key holds every scope"
    );
    assert!(base.subject.is_none());
    let granted: std::collections::HashSet<String> = ["files".to_owned()].into();
    let user = Arc::new(User::new("acme", "https://idp", "agent-7", "t", "files"));
    let token = base.for_token(Some(user), &granted);
    assert_eq!(token.subject.as_deref(), Some("agent-7"));
    assert!(token.may_use("mcp://g/files/f/tools/read"));
    assert!(
        !token.may_use("mcp://g/search/s/tools/find"),
        "its scope is missing"
    );
    assert!(
        !token.may_use("mcp://g/files/f/tools/delete"),
        "the policy still holds"
    );
    // One tenant: the concurrency slot the token's view takes is the tenant's.
    let held = token.admit(1).unwrap();
    assert_eq!(base.admit(1).err(), Some(Refusal::Concurrency));
    drop(held);
    assert!(base.admit(1).is_ok());
}

#[test]
fn authenticates_by_key() {
    let specs = vec![
        TenantSpec {
            name: "a".into(),
            keys: vec![KeyDigest::of(b"ka"), KeyDigest::of(b"ka2")],
            upstreams: vec!["x".into()],
            tools: ToolGlobs::default(),
            rate_limit: None,
            max_concurrency: None,
            max_sessions: None,
            curation: None,
            digest: 0,
        },
        TenantSpec {
            name: "b".into(),
            keys: vec![KeyDigest::of(b"kb")],
            upstreams: vec![],
            tools: ToolGlobs::compile(&["mcp://g/x/*"], &["*/delete*"]).unwrap(),
            rate_limit: Some((1, 2)),
            max_concurrency: Some(1),
            max_sessions: None,
            curation: None,
            digest: 0,
        },
    ];
    let store = KeyStore::new(&specs);
    assert_eq!(&*store.authenticate("ka2").unwrap().name, "a");
    assert_eq!(&*store.authenticate("kb").unwrap().name, "b");
    assert!(store.authenticate("kc").is_none());
    assert!(store.authenticate("").is_none());
    assert!(store.authenticate("ka").unwrap().sees("x"));
    let b = store.authenticate("kb").unwrap();
    assert!(b.may_use("mcp://g/x/a/tools/read"));
    assert!(!b.may_use("mcp://g/x/a/tools/delete-all"));
    assert!(!b.may_use("mcp://g/y/a/tools/read"));
    assert!(store.authenticate("ka").unwrap().may_use("anything"));
    // b: 1 request/s, burst 2, one at a time.
    let held = b.admit(1).unwrap();
    assert_eq!(b.admit(1).err(), Some(Refusal::Concurrency));
    drop(held);
    assert!(b.admit(1).is_ok());
    let Err(Refusal::Rate { retry_after }) = b.admit(1) else {
        panic!("over the rate")
    };
    assert!(retry_after <= Duration::from_secs(1));
    assert_eq!(
        b.admit(5).err(),
        Some(Refusal::Concurrency),
        "more than the slots at once"
    );
    assert!(store.authenticate("ka").unwrap().admit(1000).is_ok());
}

#[test]
fn parses_bearer() {
    assert_eq!(bearer_token("Bearer abc"), Some("abc"));
    assert_eq!(bearer_token("bearer   abc "), Some("abc"));
    assert_eq!(bearer_token("Basic abc"), None);
    assert_eq!(bearer_token("Bearer"), None);
    assert_eq!(bearer_token("Bearer "), None);
}
