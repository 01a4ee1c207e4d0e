//! What each tenant holds open, counted across its sessions and connections.

use std::sync::Arc;

/// What each tenant holds open (sessions, connections, bytes of
/// subscriptions), counted by tenant name, so that the counts outlive
/// reloads (tenants are rebuilt by one). A cheap clone.
#[derive(Clone, Default)]
pub struct Places(Arc<dashmap::DashMap<Arc<str>, usize>>);

impl Places {
    /// One more place for `tenant`, or `Err(limit)` when it holds `limit` already.
    pub fn enter(&self, tenant: &Arc<str>, limit: usize) -> Result<Place, usize> {
        self.enter_n(tenant, 1, limit)
    }

    /// `n` more units for `tenant`, or `Err(limit)` when they would take it past `limit`.
    pub fn enter_n(&self, tenant: &Arc<str>, n: usize, limit: usize) -> Result<Place, usize> {
        let mut held = self.0.entry(tenant.clone()).or_insert(0);
        if held.saturating_add(n) > limit {
            return Err(limit);
        }
        *held += n;
        Ok(Place {
            places: self.clone(),
            tenant: tenant.clone(),
            n,
            also: None,
        })
    }

    /// What `tenant` holds now.
    pub fn held(&self, tenant: &str) -> usize {
        self.0.get(tenant).map_or(0, |h| *h)
    }
}

/// Units in a tenant's count (one place, or some bytes), given back when dropped.
pub struct Place {
    places: Places,
    tenant: Arc<str>,
    n: usize,
    /// Held with it and given back with it (a place in the shared store's pool).
    also: Option<Box<dyn Send + Sync>>,
}

impl Place {
    /// The place, holding `also` too until it is dropped.
    pub fn holding(mut self, also: Box<dyn Send + Sync>) -> Place {
        self.also = Some(also);
        self
    }

    /// The tenant that holds it.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// Takes `n` more units, or `Err(limit)` when they would take the tenant past `limit`.
    pub fn grow(&mut self, n: usize, limit: usize) -> Result<(), usize> {
        let mut held = self.places.0.entry(self.tenant.clone()).or_insert(0);
        if held.saturating_add(n) > limit {
            return Err(limit);
        }
        *held += n;
        self.n += n;
        Ok(())
    }

    /// Gives `n` of its units back (at most what it holds).
    pub fn shrink(&mut self, n: usize) {
        let n = n.min(self.n);
        if let Some(mut held) = self.places.0.get_mut(&self.tenant) {
            *held = held.saturating_sub(n);
        }
        self.n -= n;
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some(mut held) = self.places.0.get_mut(&self.tenant) {
            *held = held.saturating_sub(self.n);
        }
    }
}
