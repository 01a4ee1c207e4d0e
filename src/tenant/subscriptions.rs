//! Resource subscriptions, bounded: what a session (or a listen) subscribes
//! to is counted in bytes of uris against a bound per session and a budget
//! per tenant that all of the tenant's sessions and listens share, so that
//! subscribing costs a tenant at most its own budget, whatever it sends.
//! Callers admit only uris the tenant can read; this counts what they admit.

use std::collections::HashSet;
use std::sync::Arc;

use super::{Place, Places};

/// The bytes of subscribed resource uris a session (or a listen) and a
/// tenant may hold, and what each tenant holds. A cheap clone.
#[derive(Clone)]
pub struct SubscriptionBudget {
    pub per_session: usize,
    pub per_tenant: usize,
    held: Places,
}

/// Why a subscription was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The session would hold more than this many bytes of uris.
    Session(usize),
    /// The tenant's sessions and listens would hold more than this many bytes of uris.
    Tenant(usize),
}

impl Refused {
    /// What the client is told.
    pub fn explain(self) -> String {
        match self {
            Refused::Session(n) => {
                format!("a session subscribes to at most {n} bytes of resource uris")
            }
            Refused::Tenant(n) => format!(
                "this tenant's sessions subscribe to at most {n} bytes of resource uris together"
            ),
        }
    }
}

impl SubscriptionBudget {
    pub fn new(per_session: usize, per_tenant: usize) -> Self {
        SubscriptionBudget {
            per_session,
            per_tenant,
            held: Places::default(),
        }
    }

    /// What `tenant` holds now.
    pub fn held(&self, tenant: &str) -> usize {
        self.held.held(tenant)
    }
}

impl Default for SubscriptionBudget {
    fn default() -> Self {
        let limits = crate::config::Limits::default();
        Self::new(
            limits.max_subscription_bytes_per_session,
            limits.max_subscription_bytes_per_tenant,
        )
    }
}

/// The uris one session or listen subscribed to, their bytes held in its
/// tenant's budget until they are removed or this is dropped.
#[derive(Default)]
pub struct Subscribed {
    uris: HashSet<Box<str>>,
    bytes: Option<Place>,
    used: usize,
}

impl Subscribed {
    /// Adds `uri` (a no-op when it is there already), within the bounds.
    pub fn add(
        &mut self,
        budget: &SubscriptionBudget,
        tenant: &Arc<str>,
        uri: &str,
    ) -> Result<(), Refused> {
        if self.uris.contains(uri) {
            return Ok(());
        }
        if self.used + uri.len() > budget.per_session {
            return Err(Refused::Session(budget.per_session));
        }
        match &mut self.bytes {
            Some(bytes) => bytes.grow(uri.len(), budget.per_tenant),
            None => budget
                .held
                .enter_n(tenant, uri.len(), budget.per_tenant)
                .map(|b| self.bytes = Some(b)),
        }
        .map_err(Refused::Tenant)?;
        self.used += uri.len();
        self.uris.insert(uri.into());
        Ok(())
    }

    pub fn remove(&mut self, uri: &str) {
        if self.uris.remove(uri) {
            self.used -= uri.len();
            if let Some(bytes) = &mut self.bytes {
                bytes.shrink(uri.len());
            }
        }
    }

    pub fn contains(&self, uri: &str) -> bool {
        self.uris.contains(uri)
    }

    pub fn is_empty(&self) -> bool {
        self.uris.is_empty()
    }

    /// Every uri, and the bytes held.
    pub fn clear(&mut self) {
        self.uris.clear();
        self.bytes = None;
        self.used = 0;
    }

    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.uris.iter().map(|u| &**u)
    }
}

#[cfg(test)]
mod tests {
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
}
