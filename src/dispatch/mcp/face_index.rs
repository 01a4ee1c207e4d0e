//! The Model Context Protocol face's view of one catalog: the names it gives
//! its tools and prompts, how each era lists every definition, and what a
//! call needs to know. Made once per catalog from the catalog's definitions
//! (kept in it by `Catalog::face_cache`), so a listing writes text made
//! before and a lookup by name reads one definition, never the whole listing.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::{Kind, ModelContext};
use crate::modelcontext::param_headers::Mirror;
use crate::protocol::catalog::Catalog;

/// A catalog's definitions as the Model Context Protocol's face shows them.
#[derive(Default)]
pub struct FaceIndex {
    pub by_name: HashMap<String, Arc<FaceTool>, foldhash::fast::RandomState>,
    /// Each tool as the face lists it (JSON text), in listing order, by
    /// namespaced id; and where the stateless era lists it otherwise (an
    /// output schema whose root is not an object), that form.
    pub listed: Vec<Listed>,
    /// Each resource as `resources/list` shows it (JSON text), in listing order.
    pub resources: Vec<Box<str>>,
    /// Each prompt as `prompts/list` shows it (JSON text), in listing order;
    /// none for an upstream that lists its prompts as its own.
    pub prompts: Vec<Box<str>>,
    /// The catalog's prompts by the names the face gives them: where each
    /// one's definition is in the catalog's prompt listing.
    pub prompt_at: HashMap<String, Range<usize>, foldhash::fast::RandomState>,
}

/// One tool's listing entries: the tool, how the handshake era lists it,
/// and how the stateless era does where that differs.
pub struct Listed {
    pub tool: Arc<FaceTool>,
    pub handshake: Box<str>,
    pub stateless: Option<Box<str>>,
}

/// One tool as the face calls it.
pub struct FaceTool {
    /// Its namespaced id.
    pub id: Arc<str>,
    /// The name it is listed under (`{upstream}__{tool}`), unless curated.
    pub name: Box<str>,
    /// Its upstream's own name for it, where that may be listed bare (a
    /// valid name without `__`).
    pub own: Option<Box<str>>,
    /// Its result carries `structuredContent` (the listing showed an outputSchema).
    pub structured: bool,
    /// Its output schema's root is not an object: the stateless era lists it
    /// and carries `structuredContent`, the handshake era neither.
    pub loose_output: bool,
    /// The arguments its input schema mirrors into `Mcp-Param-*` headers.
    pub mirrors: Vec<Mirror>,
    /// Its upstream runs it as a task when asked (`execution.taskSupport`
    /// optional or required), and only then if `task_only`.
    pub as_task: bool,
    pub task_only: bool,
}

/// The definitions of one kind in a catalog, each with its namespaced id
/// and place in the listing's JSON (those that do not read as an object are
/// left out).
pub(super) fn definitions(
    catalog: &Catalog,
    kind: Kind,
) -> impl Iterator<Item = (&str, Range<usize>, Map<String, Value>)> {
    let listing = catalog.listing(kind);
    listing.items.iter().filter_map(|(id, range)| {
        let def = serde_json::from_str(&listing.json[range.clone()]).ok()?;
        Some((id.as_str(), range.clone(), def))
    })
}

impl ModelContext<'_> {
    /// The face's view of `catalog`, made once per catalog.
    pub(super) fn index(&self, catalog: &Catalog) -> FaceIndex {
        let mut index = FaceIndex::default();
        self.index_tools(catalog, &mut index);
        for (id, _, def) in definitions(catalog, Kind::Resource) {
            let listed = json!({
                "uri": id,
                "name": def.get("name"),
                "description": def.get("description"),
                "mimeType": def.get("mediaType"),
            });
            index.resources.push(listed.to_string().into_boxed_str());
        }
        for (id, range, def) in definitions(catalog, Kind::Prompt) {
            // An upstream of the protocol has its prompts listed as it listed them.
            if self.core.listed_as_its_own(id) {
                continue;
            }
            let Some(name) = self.name_of(Kind::Prompt, id) else {
                continue;
            };
            let mut prompt = Map::new();
            prompt.insert("name".into(), name.clone().into());
            if let Some(title) = def.get("name") {
                prompt.insert("title".into(), title.clone());
            }
            if let Some(d) = def.get("description") {
                prompt.insert("description".into(), d.clone());
            }
            prompt.insert("_meta".into(), json!({ super::MCPID_META: id }));
            index
                .prompts
                .push(Value::Object(prompt).to_string().into_boxed_str());
            index.prompt_at.insert(name, range);
        }
        index
    }
}
