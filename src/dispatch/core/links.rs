//! Links in tool results, for the Model Context Protocol's face (see
//! `modelcontext::links`): rewritten into uris the gateway serves as they
//! go out, read from their upstream for the tenant they were given to.

use serde_json::Value;

use super::Dispatcher;
use crate::error::GatewayError;
use crate::modelcontext::{self as mc, links};
use crate::protocol::{Kind, mcpid};
use crate::tenant::Tenant;
use crate::upstream::Upstream;

impl Dispatcher {
    /// The uri the gateway serves for `uri` of `upstream`, for `tenant`: its
    /// namespaced id when the tenant can read that anyway, else a link
    /// sealed to the tenant and the upstream.
    pub(in crate::dispatch) fn link_for(
        &self,
        tenant: &Tenant,
        upstream: &Upstream,
        uri: &str,
    ) -> String {
        let gateway = &self.inner.gateway_id;
        let id = mcpid::namespace(
            gateway,
            &upstream.name,
            &mc::original_id(Kind::Resource, uri),
        );
        if self.readable(tenant, &id) {
            return id;
        }
        let tag = self
            .sealer()
            .tag(links::PURPOSE, &[&tenant.name, &upstream.name, uri]);
        mcpid::namespace(gateway, &upstream.name, &links::link_original(&tag, uri))
    }

    /// Rewrites the uris of the `resource_link` and embedded `resource`
    /// blocks of a list of content blocks; whether any was.
    pub(in crate::dispatch) fn rewrite_links(
        &self,
        tenant: &Tenant,
        upstream: &Upstream,
        content: &mut Value,
    ) -> bool {
        let Value::Array(blocks) = content else {
            return false;
        };
        let mut rewritten = false;
        for block in blocks {
            let uri = match block.get("type").and_then(Value::as_str) {
                Some("resource_link") => block.get_mut("uri"),
                Some("resource") => block.get_mut("resource").and_then(|r| r.get_mut("uri")),
                _ => None,
            };
            if let Some(Value::String(uri)) = uri {
                *uri = self.link_for(tenant, upstream, uri);
                rewritten = true;
            }
        }
        rewritten
    }

    /// The upstream and its own uri that a link id names, when it was
    /// sealed for this tenant; `None` for anything else (another tenant's
    /// link is no link).
    pub(in crate::dispatch) fn link_target(
        &self,
        tenant: &Tenant,
        uri: &str,
    ) -> Option<(std::sync::Arc<Upstream>, String)> {
        let (name, original) = mcpid::parse(&self.inner.gateway_id, uri)?;
        let (tag, own) = links::parse_link(&original)?;
        if !tenant.sees(name) {
            return None;
        }
        let sealed = self
            .sealer()
            .verify(links::PURPOSE, &[&tenant.name, name, &own], tag);
        let upstream = self.upstream(name).filter(|_| sealed)?;
        Some((upstream, own))
    }

    /// `resources/read` of `own` from `upstream`, now: its result as the
    /// upstream gave it, the uris of its contents rewritten as links are.
    pub(in crate::dispatch) async fn read_upstream(
        &self,
        tenant: &Tenant,
        upstream: &Upstream,
        own: &str,
    ) -> Result<Value, GatewayError> {
        let upstream_error = |error| GatewayError::Upstream {
            upstream: upstream.name.clone(),
            error,
        };
        let answer = upstream
            .instance(&tenant.name, tenant.user.as_ref(), None)
            .map_err(upstream_error)?
            .read_resource(own)
            .await
            .map_err(upstream_error)?;
        let mut result: Value = match serde_json::from_str(answer.get()) {
            Ok(v @ Value::Object(_)) => v,
            _ => {
                return Err(GatewayError::InvalidOutput {
                    upstream: upstream.name.clone(),
                    detail: "resources/read answered something that is not an object".into(),
                });
            }
        };
        if let Some(Value::Array(contents)) = result.get_mut("contents") {
            for c in contents.iter_mut() {
                if let Some(Value::String(u)) = c.get_mut("uri") {
                    *u = self.link_for(tenant, upstream, u);
                }
            }
        }
        Ok(result)
    }
}
