//! What a tenant's agents see of its tools (`tools.hide`, `tools.bare_names`,
//! `tools.overrides`), compiled from the file. The tools keep their true
//! identity (the namespaced id) for everything the gateway decides: policy,
//! scopes, limits, pins, metrics and the audit line all read the id.

use std::collections::HashMap;

/// One tenant's curation; `None` in a `TenantSpec` when it asks for none,
/// so that an uncurated tenant's paths stay as they are.
#[derive(Debug, Clone, Default)]
pub struct Curation {
    /// Tools out of the tenant's listings, called as if they did not exist.
    pub hide: Option<globset::GlobSet>,
    /// The Model Context Protocol face lists a tool under its own name where
    /// no other visible tool of the tenant has that name.
    pub bare_names: bool,
    /// By exact namespaced id.
    pub overrides: HashMap<String, Override, foldhash::fast::RandomState>,
    /// A digest of the settings as written: equal for equal settings, so a
    /// reload that changes them tells the tenant's sessions its listing changed.
    pub digest: u64,
}

/// What the tenant's agents see of one tool in place of the upstream's.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Override {
    /// Its name in both faces.
    pub name: Option<String>,
    /// Its title in the Model Context Protocol face.
    pub title: Option<String>,
    /// Its description in both faces.
    pub description: Option<String>,
}

impl Curation {
    /// Whether the tool with this namespaced id is hidden from the tenant.
    pub fn hides(&self, id: &str) -> bool {
        self.hide.as_ref().is_some_and(|h| h.is_match(id))
    }

    /// What the tenant sees of this tool in place of the upstream's, if anything.
    pub fn over(&self, id: &str) -> Option<&Override> {
        self.overrides.get(id)
    }

    /// Whether the tool's listing entry differs from the upstream's in the
    /// MCP v1.0 face (its name or description).
    pub fn renders_v1(&self, id: &str) -> bool {
        self.over(id)
            .is_some_and(|o| o.name.is_some() || o.description.is_some())
    }
}
