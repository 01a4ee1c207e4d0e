//! Each connection's place in its tenant's count of connections.

use std::sync::Arc;

use super::state::AgentState;
use crate::store::limits::Pool;
use crate::tenant::{Place, Tenant};

/// The place a connection holds in its tenant's count of connections: the
/// tenant of its latest request. A connection whose tenant holds as many as
/// it may is answered 429 and closed, so one tenant cannot take the slots of
/// `max_connections` from the others. Shared by the edge's own path and
/// hyper's, which serve one connection in turn.
#[derive(Clone, Default)]
pub(crate) struct ConnPlace(Arc<std::sync::Mutex<Option<Place>>>);

impl ConnPlace {
    /// Holds a place for `tenant` (the one already held, when it is the
    /// same); `Err(limit)` when the tenant holds as many connections as it may.
    pub(super) async fn take(&self, s: &AgentState, tenant: &Tenant) -> Result<(), usize> {
        {
            let mut held = self.held();
            if held.as_ref().is_some_and(|p| p.tenant() == &*tenant.name) {
                return Ok(());
            }
            // The place of another tenant is given back before this one's is taken.
            *held = None;
        }
        let entered = super::session::enter(
            &s.connections,
            &tenant.name,
            s.max_connections_per_tenant,
            s.dispatcher.shared_limits(),
            Pool::Connections,
        )
        .await;
        match entered {
            Ok(place) => {
                *self.held() = Some(place);
                Ok(())
            }
            Err(limit) => {
                s.metrics
                    .requests_limited
                    .with_label_values(&[&tenant.name, "connections_limited"])
                    .inc();
                Err(limit)
            }
        }
    }
}

impl ConnPlace {
    fn held(&self) -> std::sync::MutexGuard<'_, Option<Place>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
