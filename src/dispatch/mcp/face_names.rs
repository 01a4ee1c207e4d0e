//! The names this face gives a tenant's tools, for people (the admin
//! console): the name each listed tool is called by, curation's included,
//! and the name each other tool would be listed under.

use std::collections::HashMap;
use std::sync::Arc;

use super::ModelContext;
use crate::tenant::Tenant;

impl ModelContext<'_> {
    /// Each tool of the tenant's upstreams' catalogs by namespaced id: the
    /// name this face lists it under (or would, were it listed).
    pub fn tool_names(&self, tenant: &Tenant) -> HashMap<Arc<str>, Box<str>> {
        let curated = tenant
            .curation
            .as_ref()
            .map(|c| (c, self.curated_names(tenant, c)));
        let catalogs: Vec<_> = self
            .core
            .visit_upstreams_of(tenant, |ups| ups.map(|u| u.catalog()).collect());
        let mut names = HashMap::new();
        for catalog in &catalogs {
            let Some(index) = catalog.face_cache(|c| self.index(c)) else {
                continue;
            };
            for listed in &index.listed {
                let tool = &listed.tool;
                let name = match &curated {
                    Some((_, n)) if tenant.lists(&tool.id) => n.name_of(tool).unwrap_or(&tool.name),
                    _ => &tool.name,
                };
                names.insert(tool.id.clone(), name.into());
            }
        }
        names
    }
}
