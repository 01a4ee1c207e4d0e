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
mod tests;
