//! A curated tenant's tools in this face: the name each is listed and
//! called under (an override's first, then its own name where `bare_names`
//! asks and nobody else of the tenant has it, else `{upstream}__{tool}`),
//! and its entry rewritten where curation changes it. Made from the
//! tenant's catalogs and kept with its curation until one of them changes.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::face_index::FaceTool;
use super::{Catalog, ModelContext};
use crate::config::curation::Curation;
use crate::tenant::{Curated, Tenant};

type ByName<V> = HashMap<Box<str>, V, foldhash::fast::RandomState>;

/// The names of one tenant's tools, for the catalogs they were made from.
pub struct Names {
    catalogs: Vec<Catalog>,
    /// Every tool the tenant lists, by the name it is called.
    by_name: ByName<Arc<FaceTool>>,
    /// The name of each tool listed under another than its default.
    renamed: HashMap<Arc<str>, Box<str>, foldhash::fast::RandomState>,
}

impl Names {
    /// The tool listed under `name`; its default name is unknown once it
    /// is listed under another.
    pub fn named(&self, name: &str) -> Option<Arc<FaceTool>> {
        self.by_name.get(name).cloned()
    }

    /// The name `tool` is listed under, where it is not its default.
    pub fn name_of(&self, tool: &FaceTool) -> Option<&str> {
        self.renamed.get(&tool.id).map(|n| &**n)
    }

    /// `text`, the tool's listing entry, as the tenant sees it.
    pub fn write(&self, out: &mut String, curation: &Curation, tool: &FaceTool, text: &str) {
        let name = self.renamed.get(&tool.id);
        let over = curation
            .over(&tool.id)
            .filter(|o| o.title.is_some() || o.description.is_some());
        let budgeted = curation.budget(&tool.id).is_some();
        if name.is_none() && over.is_none() && !budgeted {
            out.push_str(text);
            return;
        }
        let Ok(mut entry) = serde_json::from_str::<Map<String, Value>>(text) else {
            out.push_str(text);
            return;
        };
        if let Some(name) = name {
            entry.insert("name".into(), Value::from(&**name));
        }
        if let Some(over) = over {
            if let Some(title) = &over.title {
                entry.insert("title".into(), title.as_str().into());
            }
            if let Some(description) = &over.description {
                entry.insert("description".into(), description.as_str().into());
            }
        }
        if budgeted {
            crate::dispatch::core::budget_schema(&mut entry);
        }
        out.push_str(&Value::Object(entry).to_string());
    }

    fn current(&self, catalogs: &[Catalog]) -> bool {
        self.catalogs.len() == catalogs.len()
            && self.catalogs.iter().zip(catalogs).all(|(a, b)| a.same(b))
    }
}

impl ModelContext<'_> {
    /// The tenant's tool names in this face, made again only when one of
    /// its upstreams' catalogs has changed since they were made.
    pub(super) fn curated_names(&self, tenant: &Tenant, curated: &Curated) -> Arc<Names> {
        let catalogs: Vec<Catalog> = self
            .core
            .visit_upstreams_of(tenant, |ups| ups.map(|u| u.catalog()).collect());
        let made_from = catalogs.clone();
        curated.face(
            |names: &Names| names.current(&catalogs),
            || self.names(tenant, curated, made_from),
        )
    }

    /// Names are worked out over every tool the tenant's own policy and
    /// curation list (a token's scopes aside, and a down upstream's last
    /// catalog kept), so they are the same for each of its callers and do
    /// not move while an upstream restarts.
    fn names(&self, tenant: &Tenant, curation: &Curation, catalogs: Vec<Catalog>) -> Names {
        let mut tools: Vec<Arc<FaceTool>> = Vec::new();
        for catalog in &catalogs {
            if let Some(index) = catalog.face_cache(|c| self.index(c)) {
                let listed = index.listed.iter().map(|l| &l.tool);
                tools.extend(listed.filter(|t| tenant.lists(&t.id)).cloned());
            }
        }
        let mut by_name: ByName<Arc<FaceTool>> = ByName::default();
        let mut renamed = HashMap::default();
        let mut named = |tool: &Arc<FaceTool>, name: &str, by_name: &mut ByName<_>| {
            by_name.insert(name.into(), tool.clone());
            if *name != *tool.name {
                renamed.insert(tool.id.clone(), name.into());
            }
        };
        // Overrides' names first (`check` saw that no two tools share one).
        let overridden = |t: &FaceTool| curation.over(&t.id).and_then(|o| o.name.as_deref());
        for tool in &tools {
            if let Some(name) = overridden(tool)
                && !by_name.contains_key(name)
            {
                named(tool, name, &mut by_name);
            }
        }
        let rest = tools.iter().filter(|t| overridden(t).is_none());
        // A bare name is a tool's when no other tool of the tenant has it.
        let mut bare: HashMap<&str, usize> = HashMap::new();
        // A meta-tool's name keeps its prefix while the meta-tools exist.
        let searches = curation.discovery.as_ref().is_some_and(|d| d.searches());
        let meta = |own: &&str| searches && crate::config::curation::META_TOOLS.contains(own);
        if curation.bare_names {
            for own in rest
                .clone()
                .filter_map(|t| t.own.as_deref())
                .filter(|o| !meta(o))
            {
                *bare.entry(own).or_default() += 1;
            }
        }
        for tool in rest {
            let own = tool
                .own
                .as_deref()
                .filter(|own| bare.get(own) == Some(&1) && !by_name.contains_key(*own));
            named(tool, own.unwrap_or(&tool.name), &mut by_name);
        }
        Names {
            catalogs,
            by_name,
            renamed,
        }
    }

    /// The upstream's own name for the tool with this id, where it may be
    /// listed bare: a valid tool name that holds no `__` (which would
    /// read as another upstream's tool).
    pub(super) fn bare_name(&self, id: &str) -> Option<Box<str>> {
        let (upstream, original) = crate::protocol::mcpid::parse(self.core.gateway_id(), id)?;
        let own = match self.core.upstream(upstream) {
            Some(up) => up.own_key(super::Kind::Tool, &original)?,
            None => original.into_owned(),
        };
        (crate::modelcontext::names::is_valid(&own) && !own.contains("__"))
            .then(|| own.into_boxed_str())
    }
}
