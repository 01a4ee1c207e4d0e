//! What upstreams of the Model Context Protocol list as their own, beside
//! the catalogs: their prompts (with arguments) and resource templates, and
//! which uris a tenant may read through them.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::Dispatcher;
use crate::modelcontext as mc;
use crate::protocol::{Kind, mcpid};
use crate::tenant::Tenant;
use crate::upstream::{Status, Upstream};

/// The prompts an upstream of the protocol listed, as it listed them.
pub type OwnPrompts = Arc<Vec<Map<String, Value>>>;
/// The resource templates an upstream of the protocol listed, as it listed them.
pub type OwnTemplates = Arc<Vec<Map<String, Value>>>;

impl Dispatcher {
    /// Whether the upstream of a namespaced id lists its prompts as its own.
    pub(in crate::dispatch) fn listed_as_its_own(&self, id: &str) -> bool {
        mcpid::upstream_of(&self.inner.gateway_id, id)
            .and_then(|u| self.upstream(u))
            .is_some_and(|u| u.lists_its_own())
    }

    /// The prompts of the tenant's ready upstreams of the protocol, as each listed them.
    pub(in crate::dispatch) fn own_prompts(
        &self,
        tenant: &Tenant,
    ) -> Vec<(Arc<Upstream>, OwnPrompts)> {
        self.upstreams_of(tenant)
            .into_iter()
            .filter(|u| u.lists_its_own() && u.status() == Status::Ready)
            .map(|u| {
                let own = u.own_prompts();
                (u, own)
            })
            .collect()
    }

    /// The resource templates of the tenant's ready upstreams of the
    /// protocol, as each listed them.
    pub(in crate::dispatch) fn own_templates(
        &self,
        tenant: &Tenant,
    ) -> Vec<(Arc<Upstream>, OwnTemplates)> {
        self.upstreams_of(tenant)
            .into_iter()
            .filter(|u| u.lists_its_own() && u.status() == Status::Ready)
            .map(|u| {
                let own = u.own_templates();
                (u, own)
            })
            .collect()
    }

    /// The upstream and its own uri that `uri` names, when `uri` is an
    /// expansion of a template the tenant is offered (and the upstream's
    /// uri an expansion of the upstream's own template).
    pub(in crate::dispatch) fn template_target(
        &self,
        tenant: &Tenant,
        uri: &str,
    ) -> Option<(Arc<Upstream>, String)> {
        let (name, original) = mcpid::parse(&self.inner.gateway_id, uri)?;
        if !tenant.sees(name) {
            return None;
        }
        let upstream = self
            .upstream(name)
            .filter(|u| u.lists_its_own() && u.status() == Status::Ready)?;
        let own = mc::key_of(Kind::Resource, &original)?;
        let offered = upstream.own_templates().iter().any(|t| {
            t.get("uriTemplate")
                .and_then(Value::as_str)
                .is_some_and(|t| mc::expands_to(t, &own))
        });
        offered.then_some((upstream, own))
    }

    /// Whether `uri` is a resource the tenant can read: one its listings
    /// show, or an expansion of a template it is offered. Only such uris
    /// are subscribed to.
    pub fn readable(&self, tenant: &Tenant, uri: &str) -> bool {
        let Some(name) = mcpid::upstream_of(&self.inner.gateway_id, uri) else {
            return false;
        };
        if !tenant.sees(name) {
            return false;
        }
        let Some(upstream) = self.upstream(name) else {
            return false;
        };
        let listed = upstream
            .catalog()
            .listing(Kind::Resource)
            .items
            .iter()
            .any(|(id, _)| id == uri);
        listed || self.template_target(tenant, uri).is_some()
    }
}
