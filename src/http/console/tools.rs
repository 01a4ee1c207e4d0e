//! A tenant's tools as the console shows them: every tool of its
//! upstreams' catalogs (quarantined ones too), where each stands for the
//! tenant and why, and the name the Model Context Protocol's face gives it.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::dispatch::Dispatcher;
use crate::dispatch::mcp::ModelContext;
use crate::protocol::Kind;
use crate::tenant::Tenant;

/// A tool as `/ui/api/tenants/{tenant}` shows it.
#[derive(serde::Serialize)]
pub struct ToolView {
    #[serde(serialize_with = "text")]
    pub id: Arc<str>,
    #[serde(serialize_with = "text")]
    pub upstream: Arc<str>,
    /// `listed`, `hidden`, `denied`, `not_allowed` or `quarantined`.
    pub state: &'static str,
    pub reason: Option<String>,
    pub faces: Faces,
}

#[derive(serde::Serialize)]
pub struct Faces {
    pub modelcontextprotocol: Face,
    pub v1: Face,
}

#[derive(serde::Serialize)]
pub struct Face {
    #[serde(serialize_with = "text")]
    pub name: Arc<str>,
    pub listed: bool,
}

fn text<S: serde::Serializer>(s: &Arc<str>, to: S) -> Result<S::Ok, S::Error> {
    to.serialize_str(s)
}

fn view(
    id: Arc<str>,
    upstream: Arc<str>,
    state: &'static str,
    reason: Option<String>,
    mcp: String,
) -> ToolView {
    let listed = state == "listed";
    ToolView {
        faces: Faces {
            modelcontextprotocol: Face {
                name: mcp.into(),
                listed,
            },
            v1: Face {
                name: id.clone(),
                listed,
            },
        },
        id,
        upstream,
        state,
        reason,
    }
}

pub fn of(d: &Dispatcher, tenant: &Tenant) -> Vec<ToolView> {
    let names = ModelContext::new(d).tool_names(tenant);
    let budget = d.name_budget();
    let mut out = Vec::new();
    for up in tenant.upstreams.iter().filter_map(|u| d.upstream(u)) {
        let catalog = up.catalog();
        for (id, _) in &catalog.listing(Kind::Tool).items {
            let (state, reason) = tenant.tool_standing(id);
            let mcp = names.get(id.as_str()).map(|n| n.to_string());
            let mcp = mcp.unwrap_or_else(|| default_name(d, id, budget));
            out.push(view(
                id.as_str().into(),
                up.name.clone(),
                state,
                reason,
                mcp,
            ));
        }
        for (_, id) in catalog.quarantined() {
            let reason = Some("quarantined: changed".to_owned());
            let mcp = default_name(d, id, budget);
            out.push(view(id.into(), up.name.clone(), "quarantined", reason, mcp));
        }
    }
    out
}

/// How many of the tenant's tools stand in each state (no names made).
pub fn counts(d: &Dispatcher, tenant: &Tenant) -> BTreeMap<&'static str, u64> {
    let mut out = BTreeMap::new();
    for up in tenant.upstreams.iter().filter_map(|u| d.upstream(u)) {
        let catalog = up.catalog();
        for (id, _) in &catalog.listing(Kind::Tool).items {
            *out.entry(tenant.tool_standing(id).0).or_default() += 1;
        }
        let quarantined = catalog.quarantined_count() as u64;
        if quarantined > 0 {
            *out.entry("quarantined").or_default() += quarantined;
        }
    }
    out
}

/// The name the face would list a tool it has not indexed under.
fn default_name(d: &Dispatcher, id: &str, budget: usize) -> String {
    match crate::protocol::mcpid::parse(d.gateway_id(), id) {
        Some((upstream, original)) => {
            crate::modelcontext::names::tool_name(upstream, &original, budget)
        }
        None => id.to_owned(),
    }
}
