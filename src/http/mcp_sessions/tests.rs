use super::ids::VERIFIED_PER_TENANT;
use super::*;

const SECRET: &[u8] = b"a secret of at least thirty-two characters";

#[test]
fn checked_ids_are_remembered_within_a_bound_per_tenant() {
    let s = sessions(8, 8, 8);
    let ids: Vec<String> = (0..VERIFIED_PER_TENANT + 10)
        .map(|_| s.issue("a", "2025-11-25"))
        .collect();
    for id in &ids {
        assert!(s.open_here(id.as_bytes(), "a").is_some());
    }
    let kept = |tenant: &str| {
        s.verified
            .get(tenant)
            .map_or(0, |v| v.lock().unwrap().len())
    };
    assert!(kept("a") <= VERIFIED_PER_TENANT, "{}", kept("a"));
    // Forgotten ones are checked again, and open as before.
    assert!(
        ids.iter()
            .all(|id| s.open_here(id.as_bytes(), "a").is_some())
    );
    // Another tenant's are its own.
    let b = s.issue("b", "2025-11-25");
    assert!(s.open_here(b.as_bytes(), "b").is_some());
    assert_eq!(kept("b"), 1);
}

#[test]
fn an_id_says_unsealed_whether_its_client_can_be_asked() {
    let s = sessions(8, 8, 8);
    for can in [1u8, 5, 15] {
        let id = s.issue_for("a", "2025-11-25", can);
        assert!(McpSessions::may_ask(id.as_bytes()), "{id}");
        assert_eq!(s.open_here(id.as_bytes(), "a").map(|o| o.can), Some(can));
    }
    let plain = s.issue("a", "2025-11-25");
    assert!(!McpSessions::may_ask(plain.as_bytes()));
    assert_eq!(s.open_here(plain.as_bytes(), "a").map(|o| o.can), Some(0));
}

fn sessions(max_records: usize, per_session: usize, per_tenant: usize) -> McpSessions {
    McpSessions::new(
        &KeyDigest::of(SECRET),
        max_records,
        SubscriptionBudget::new(per_session, per_tenant),
    )
}

#[test]
fn an_id_opens_on_any_replica_with_the_secret_and_nowhere_else() {
    let (one, two) = (sessions(16, 1024, 4096), sessions(16, 1024, 4096));
    let a = "a";
    let id = one.issue(a, "2025-11-25");
    assert!(id.bytes().all(|b| b.is_ascii_graphic()), "{id}");
    let opened = two
        .open_here(id.as_bytes(), a)
        .expect("another replica opens it");
    assert_eq!(&*opened.revision, "2025-11-25");
    // Another tenant's key, another secret, a changed byte: not a session.
    assert!(two.open_here(id.as_bytes(), "b").is_none());
    let other = McpSessions::new(
        &KeyDigest::of(b"another secret, also thirty-two chars"),
        16,
        SubscriptionBudget::new(1024, 4096),
    );
    assert!(other.open_here(id.as_bytes(), a).is_none());
    // Checked once and remembered, it still opens for its tenant alone,
    // and a changed id is checked as any other.
    assert!(one.open_here(id.as_bytes(), a).is_some());
    assert!(one.open_here(id.as_bytes(), a).is_some());
    assert!(one.open_here(id.as_bytes(), "b").is_none());
    for i in 0..id.len() {
        let mut bytes = id.clone().into_bytes();
        bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
        assert!(one.open_here(&bytes, a).is_none(), "byte {i} changed");
    }
    // Ended: refused where it was ended.
    assert!(one.end_here(&opened).is_ok());
    assert!(one.open_here(id.as_bytes(), a).is_none());
    // Two ids differ.
    assert_ne!(one.issue(a, "2025-11-25"), one.issue(a, "2025-11-25"));
}

#[test]
fn subscriptions_are_kept_within_the_budget_and_given_back_at_the_end() {
    let s = sessions(16, 100, 150);
    let a = "a";
    let open = |s: &McpSessions| s.open_here(s.issue(a, "2025-11-25").as_bytes(), a).unwrap();
    let (one, two) = (open(&s), open(&s));
    let uri = |i: usize| format!("mcp://gw/x/resource/{i:020}"); // 40 bytes
    assert!(s.subscribe_here(&one, &uri(1), true).is_ok());
    assert!(s.subscribe_here(&one, &uri(2), true).is_ok());
    assert_eq!(
        s.subscribe_here(&one, &uri(3), true),
        Err(Refused::Subscriptions(subscriptions::Refused::Session(100)))
    );
    assert!(s.subscribe_here(&two, &uri(4), true).is_ok());
    assert_eq!(
        s.subscribe_here(&two, &uri(5), true),
        Err(Refused::Subscriptions(subscriptions::Refused::Tenant(150)))
    );
    assert!(s.subscribed_here(&one, &uri(1)));
    assert!(s.subscribe_here(&one, &uri(1), false).is_ok());
    assert!(!s.subscribed_here(&one, &uri(1)));
    assert_eq!(s.budget.held(a), 80);
    assert!(s.end_here(&one).is_ok());
    assert_eq!(s.budget.held(a), 40);
    // A record that keeps nothing is not kept.
    assert!(s.subscribe_here(&two, &uri(4), false).is_ok());
    assert_eq!((s.budget.held(a), s.records_of(a)), (0, 1));
}

#[test]
fn a_tenant_that_fills_its_records_is_refused_and_others_are_not() {
    let s = sessions(3, 1024, 4096);
    let opened: Vec<Opened> = (0..4)
        .map(|_| {
            s.open_here(s.issue("a", "2025-11-25").as_bytes(), "a")
                .unwrap()
        })
        .collect();
    for o in &opened[..3] {
        assert!(s.end_here(o).is_ok());
    }
    let Err(Refused::Full { retry_after_secs }) = s.end_here(&opened[3]) else {
        panic!("a fourth record is past the bound");
    };
    assert!(retry_after_secs > LIFETIME.as_secs() - 60);
    // Not ended: the session goes on.
    assert!(s.open_here(s.issue("a", "x").as_bytes(), "a").is_some());
    assert!(!s.ended_here(&opened[3]));
    // Another tenant's DELETE is kept.
    let b = s
        .open_here(s.issue("b", "2025-11-25").as_bytes(), "b")
        .unwrap();
    assert!(s.end_here(&b).is_ok());
    assert!(s.ended_here(&b));
    assert_eq!(s.records_of("a"), 3);
    // Ending an ended session again needs no new record.
    assert!(s.end_here(&opened[0]).is_ok());
}
