//! Unit tests of `subscriptions`.

use super::*;

#[test]
fn subscriptions_are_bounded_in_bytes_per_session_and_per_tenant() {
    let budget = SubscriptionBudget::new(100, 150);
    let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
    let uri = |i: usize| format!("mcp://gw/x/resource/{i:020}"); // 40 bytes
    let mut one = Subscribed::default();
    assert!(one.add(&budget, &a, &uri(1)).is_ok());
    assert!(one.add(&budget, &a, &uri(2)).is_ok());
    // Subscribing again costs nothing.
    assert!(one.add(&budget, &a, &uri(2)).is_ok());
    assert_eq!(one.add(&budget, &a, &uri(3)), Err(Refused::Session(100)));
    let mut two = Subscribed::default();
    assert!(two.add(&budget, &a, &uri(4)).is_ok());
    assert_eq!(
        two.add(&budget, &a, &uri(5)),
        Err(Refused::Tenant(150)),
        "80 + 40 + 40 is past the tenant's 150"
    );
    // Another tenant has its own budget.
    let mut other = Subscribed::default();
    assert!(other.add(&budget, &b, &uri(6)).is_ok());
    // Removing, clearing and dropping give bytes back.
    one.remove(&uri(1));
    assert!(!one.contains(&uri(1)));
    assert!(two.add(&budget, &a, &uri(5)).is_ok());
    assert_eq!(budget.held("a"), 120);
    two.clear();
    assert_eq!(budget.held("a"), 40);
    drop(one);
    assert_eq!(budget.held("a"), 0);
    assert_eq!(budget.held("b"), 40);
}
