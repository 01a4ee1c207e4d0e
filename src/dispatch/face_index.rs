//! The Model Context Protocol face's view of one catalog's tools: the names
//! it gives them, how each era lists them, and what a call needs to know,
//! made once per catalog (kept in it by `Catalog::face_cache`).

use std::collections::HashMap;
use std::sync::Arc;

use crate::modelcontext::param_headers::Mirror;

/// A catalog's tools by the names the Model Context Protocol's face gives them.
#[derive(Default)]
pub struct FaceIndex {
    pub by_name: HashMap<String, Arc<FaceTool>, foldhash::fast::RandomState>,
    /// Each tool as the face lists it (JSON text), in listing order, by
    /// namespaced id; and where the stateless era lists it otherwise (an
    /// output schema whose root is not an object), that form.
    pub listed: Vec<Listed>,
}

/// One tool's listing entries: its namespaced id, how the handshake era
/// lists it, and how the stateless era does where that differs.
pub type Listed = (Arc<str>, Box<str>, Option<Box<str>>);

/// One tool as the face calls it.
pub struct FaceTool {
    /// Its namespaced id.
    pub id: Arc<str>,
    /// Its result carries `structuredContent` (the listing showed an outputSchema).
    pub structured: bool,
    /// Its output schema's root is not an object: the stateless era lists it
    /// and carries `structuredContent`, the handshake era neither.
    pub loose_output: bool,
    /// The arguments its input schema mirrors into `Mcp-Param-*` headers.
    pub mirrors: Vec<Mirror>,
}
