//! One upstream's definitions as agents see them: checked, namespaced,
//! pre-serialized for listings, with tool schemas compiled once.
//!
//! Longer than most files: one catalog, built, checked and served; about 80 of
//! its lines are its tests.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::definitions::{self, Kind};
pub use super::fingerprint::{Seen, fingerprint};
use super::mcpid;
use super::schema::{self, Validator};
use crate::jsonrpc::Json;

/// How a call reaches the tool in its upstream's protocol.
#[derive(Debug, Clone, PartialEq)]
pub enum Route {
    /// MCP v1.0: by its original mcpId.
    ById,
    /// The Model Context Protocol: by its `name`; `structured` when the tool
    /// has an `outputSchema` of its own (its output is `structuredContent`).
    ByName { name: String, structured: bool },
}

impl ToolEntry {
    /// Whether the tool produces content blocks rather than a value of an
    /// output schema of its own.
    pub fn produces_blocks(&self) -> bool {
        matches!(
            self.route,
            Route::ByName {
                structured: false,
                ..
            }
        )
    }
}

/// A tool the gateway can route to, with its compiled schemas.
pub struct ToolEntry {
    /// The id the upstream gave it (MCP v1.0), or the one the gateway gave it
    /// (for an upstream of the Model Context Protocol).
    pub original_id: String,
    pub route: Route,
    /// `sha256:` of the canonical JSON of the definition as the upstream
    /// wrote it, less its name (see `fingerprint`).
    pub fingerprint: String,
    /// What the upstream's own definition (the Model Context Protocol's)
    /// carries that MCP v1.0 has no place for: its `title`, `annotations`,
    /// `icons`, `execution` and `_meta`, as a JSON object, for that face.
    pub kept: Option<Box<str>>,
    /// The upstream runs it only as a task (`execution.taskSupport:
    /// "required"`): a call that does not ask for one is refused.
    pub task_only: bool,
    /// The upstream runs it as a task when asked (`execution.taskSupport`
    /// "optional" or "required").
    pub as_task: bool,
    input: LazyValidator,
    output: LazyValidator,
}

impl ToolEntry {
    /// The compiled `inputSchema`.
    pub fn input(&self) -> Result<&Validator, String> {
        self.input.get()
    }

    /// The compiled `outputSchema`.
    pub fn output(&self) -> Result<&Validator, String> {
        self.output.get()
    }

    /// The `inputSchema`'s JSON text.
    pub fn input_schema(&self) -> &str {
        &self.input.schema
    }
}

/// A schema known to compile (it did when the catalog was built), compiled
/// again on first use and kept. A compiled schema takes a few KiB; an upstream
/// may list thousands of tools of which few are called, so until then only
/// the schema's JSON text is kept.
struct LazyValidator {
    schema: Box<str>,
    compiled: std::sync::OnceLock<Result<Validator, String>>,
}

impl LazyValidator {
    fn checked(schema: &Value) -> Result<LazyValidator, String> {
        schema::compile(schema)?;
        Ok(LazyValidator {
            schema: serde_json::to_string(schema)
                .map_err(|e| e.to_string())?
                .into_boxed_str(),
            compiled: std::sync::OnceLock::new(),
        })
    }

    fn get(&self) -> Result<&Validator, String> {
        self.compiled
            .get_or_init(|| {
                let schema: Value =
                    serde_json::from_str(&self.schema).map_err(|e| e.to_string())?;
                schema::compile(&schema)
            })
            .as_ref()
            .map_err(Clone::clone)
    }
}

/// A definition left out of a listing, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Dropped {
    pub kind: Kind,
    /// The upstream's own id, when it had a string one.
    pub id: Option<String>,
    pub reason: String,
    /// Left out of MCP v1.0's listings only: the Model Context Protocol's
    /// clients get it all the same (a template, a prompt with arguments).
    pub v1_only: bool,
}

/// One kind's definitions: the namespaced JSON objects joined by commas, ready
/// to be written inside a listing's `[...]` without re-serializing.
#[derive(Debug, Default)]
pub struct Listing {
    pub json: String,
    pub count: usize,
    /// Each definition's namespaced id and its place in `json`, for filtered listings.
    pub items: Vec<(String, std::ops::Range<usize>)>,
}

/// Tools by the namespaced id agents call them by, looked up on every call
/// (as the agent sent it: no decoding, no allocation).
type ToolMap = HashMap<String, Arc<ToolEntry>, foldhash::fast::RandomState>;

/// The upstream's catalog. Cheap to clone; replaced whole on refresh.
#[derive(Clone, Default)]
pub struct Catalog {
    tools: Arc<ToolMap>,
    listings: [Arc<Listing>; 3],
    /// What the last listing of each kind left out, and why (for `$/logTrace`).
    dropped: [Arc<Vec<Dropped>>; 3],
    /// Tools left out because their pinned definition changed: original id → namespaced id.
    quarantined: Arc<HashMap<String, String>>,
    /// Whether this catalog came from a real listing (false before the first handshake).
    pub loaded: bool,
    /// A face's own view of these tools (its names, its listing entries),
    /// made on first use by the face and kept as long as this catalog is.
    face: Arc<std::sync::OnceLock<Box<dyn std::any::Any + Send + Sync>>>,
}

/// The result of building one kind from an upstream's listing.
pub struct Built {
    listing: Listing,
    tools: ToolMap,
    quarantined: HashMap<String, String>,
    pub dropped: Vec<Dropped>,
    /// Each tool admitted as pins see it (its definition as the upstream
    /// wrote it), for this build only.
    pub seen: Vec<Seen>,
}

impl Built {
    /// Takes these tools (by original id) out of the listing and the routing
    /// table, remembering them as quarantined.
    pub fn quarantine(&mut self, ids: &std::collections::HashSet<String>) {
        if ids.is_empty() {
            return;
        }
        let mut out = Listing::default();
        let mut namespaced = std::collections::HashSet::new();
        self.tools.retain(|id, t| {
            let keep = !ids.contains(&t.original_id);
            if !keep {
                self.quarantined.insert(t.original_id.clone(), id.clone());
                namespaced.insert(id.clone());
            }
            keep
        });
        for (id, range) in &self.listing.items {
            if namespaced.contains(id) {
                continue;
            }
            if !out.json.is_empty() {
                out.json.push(',');
            }
            let start = out.json.len();
            out.json.push_str(&self.listing.json[range.clone()]);
            out.items.push((id.clone(), start..out.json.len()));
            out.count += 1;
        }
        self.listing = out;
    }
}

impl Catalog {
    /// The tool an agent calls by this namespaced id.
    pub fn tool(&self, namespaced_id: &str) -> Option<&Arc<ToolEntry>> {
        self.tools.get(namespaced_id)
    }

    /// A face's own view of this catalog's tools, made by `make` the first
    /// time. One face keeps one here (the Model Context Protocol's: MCP
    /// v1.0's listing is the catalog's own), so it is a `T` whenever asked.
    pub fn face_cache<T: std::any::Any + Send + Sync>(
        &self,
        make: impl FnOnce(&Catalog) -> T,
    ) -> Option<&T> {
        self.face
            .get_or_init(|| Box::new(make(self)))
            .downcast_ref::<T>()
    }

    /// Whether `other` is this very catalog (a share of it), not one built since.
    pub fn same(&self, other: &Catalog) -> bool {
        Arc::ptr_eq(&self.face, &other.face)
    }

    /// The face's view made by [`Catalog::face_cache`], if it is made already.
    pub fn face_cached<T: std::any::Any + Send + Sync>(&self) -> Option<&T> {
        self.face.get()?.downcast_ref::<T>()
    }

    pub fn listing(&self, kind: Kind) -> &Listing {
        &self.listings[kind.index()]
    }

    /// The listing's JSON as shared bytes: no copy, the catalog's buffer itself.
    pub fn listing_bytes(&self, kind: Kind) -> bytes::Bytes {
        struct Shared(Arc<Listing>);
        impl AsRef<[u8]> for Shared {
            fn as_ref(&self) -> &[u8] {
                self.0.json.as_bytes()
            }
        }
        bytes::Bytes::from_owner(Shared(self.listings[kind.index()].clone()))
    }

    pub fn is_quarantined(&self, original_id: &str) -> bool {
        self.quarantined.contains_key(original_id)
    }

    pub fn quarantined_count(&self) -> usize {
        self.quarantined.len()
    }

    /// The tools left out because their pinned definition changed: each
    /// one's original id and namespaced id.
    pub fn quarantined(&self) -> impl Iterator<Item = (&str, &str)> {
        self.quarantined
            .iter()
            .map(|(o, n)| (o.as_str(), n.as_str()))
    }

    pub fn dropped(&self, kind: Kind) -> &[Dropped] {
        &self.dropped[kind.index()]
    }

    /// A new catalog: `fresh` kinds replaced, the others kept from `self`.
    pub fn with(&self, fresh: Vec<(Kind, Built)>) -> Catalog {
        let mut next = self.clone();
        next.loaded = true;
        next.face = Arc::default();
        for (kind, built) in fresh {
            if kind == Kind::Tool {
                next.tools = Arc::new(built.tools);
                next.quarantined = Arc::new(built.quarantined);
            }
            next.listings[kind.index()] = Arc::new(built.listing);
            next.dropped[kind.index()] = Arc::new(built.dropped);
        }
        next
    }
}

/// One definition in the gateway's own shape (MCP v1.0's), before it is
/// checked and namespaced: as an MCP v1.0 upstream listed it, or as the
/// Model Context Protocol's mapping made it.
pub struct Candidate {
    pub definition: Value,
    /// The definition a tool's fingerprint is taken of, when it is not
    /// `definition` itself (the upstream's own, for a mapped one).
    pub source: Option<Value>,
    pub route: Route,
}

impl Candidate {
    /// A definition as an MCP v1.0 upstream listed it.
    pub fn native(definition: Value) -> Self {
        Candidate {
            definition,
            source: None,
            route: Route::ById,
        }
    }
}

/// Checks, namespaces and (for tools) compiles every definition of one
/// MCP v1.0 listing result, within the bounds (what is past them is dropped, with why).
pub fn build(
    gateway: &str,
    upstream: &str,
    kind: Kind,
    result: Json<'_>,
    bounds: super::bounds::ListingBounds,
) -> Built {
    match serde_json::from_str::<Vec<&serde_json::value::RawValue>>(result.get()) {
        Ok(items) => {
            let mut taker = super::bounds::Taker::new(bounds);
            let candidates = taker
                .take(items)
                .into_iter()
                .filter_map(|raw| serde_json::from_str(raw.get()).ok())
                .map(Candidate::native)
                .collect();
            let mut built = build_from(gateway, upstream, kind, candidates);
            built
                .dropped
                .extend(taker.left.into_iter().map(|o| Dropped {
                    kind,
                    id: o.id,
                    reason: o.why,
                    v1_only: false,
                }));
            built
        }
        Err(_) => {
            let mut built = build_from(gateway, upstream, kind, Vec::new());
            built.dropped.push(Dropped {
                kind,
                id: None,
                reason: "the listing result is not an array".into(),
                v1_only: false,
            });
            built
        }
    }
}

/// Checks, namespaces and (for tools) compiles every candidate of one kind.
pub fn build_from(gateway: &str, upstream: &str, kind: Kind, items: Vec<Candidate>) -> Built {
    let mut built = Built {
        listing: Listing::default(),
        tools: ToolMap::default(),
        quarantined: HashMap::new(),
        dropped: Vec::new(),
        seen: Vec::new(),
    };
    let mut seen = std::collections::HashSet::new();
    for item in items {
        match admit(gateway, upstream, kind, item, &mut seen) {
            Ok((namespaced, json, tool)) => {
                if !built.listing.json.is_empty() {
                    built.listing.json.push(',');
                }
                let start = built.listing.json.len();
                built.listing.json.push_str(&json);
                built
                    .listing
                    .items
                    .push((namespaced, start..built.listing.json.len()));
                built.listing.count += 1;
                if let Some((namespaced, entry, pinned)) = tool {
                    built.tools.insert(namespaced, Arc::new(entry));
                    built.seen.push(pinned);
                }
            }
            Err(dropped) => built.dropped.push(dropped),
        }
    }
    // Kept until the next refresh: no room to grow.
    built.listing.json.shrink_to_fit();
    built.listing.items.shrink_to_fit();
    built
}

type Admitted = (String, String, Option<(String, ToolEntry, Seen)>);

fn admit(
    gateway: &str,
    upstream: &str,
    kind: Kind,
    item: Candidate,
    seen: &mut std::collections::HashSet<String>,
) -> Result<Admitted, Dropped> {
    let Candidate {
        definition: item,
        source,
        route,
    } = item;
    let Value::Object(mut def) = item else {
        return Err(Dropped {
            kind,
            id: None,
            reason: "the definition is not an object".into(),
            v1_only: false,
        });
    };
    let id = def.get("mcpId").and_then(Value::as_str).map(str::to_owned);
    let drop = |reason: String| Dropped {
        kind,
        id: id.clone(),
        reason,
        v1_only: false,
    };
    definitions::check(kind, &def).map_err(drop)?;
    let original = id.clone().unwrap_or_default();
    if !seen.insert(original.clone()) {
        return Err(drop("duplicate mcpId".into()));
    }
    let namespaced = mcpid::namespace(gateway, upstream, &original);
    let tool = match kind {
        Kind::Tool => {
            let pinned = Seen::of(
                &original,
                source.clone().unwrap_or_else(|| def.clone().into()),
            );
            let print = pinned.fingerprint.clone();
            let mut entry = compile_tool(&def, &original, route, print).map_err(drop)?;
            entry.kept = source.as_ref().and_then(kept_members);
            entry.task_only = source.as_ref().is_some_and(task_only);
            entry.as_task = source.as_ref().is_some_and(as_task);
            Some((entry, pinned))
        }
        _ => None,
    };
    def.insert("mcpId".into(), Value::String(namespaced.clone()));
    let json = serde_json::to_string(&def).map_err(|e| drop(e.to_string()))?;
    Ok((
        namespaced.clone(),
        json,
        tool.map(|(entry, pinned)| (namespaced, entry, pinned)),
    ))
}

/// Whether an upstream's own tool definition runs only as a task.
pub fn task_only(source: &Value) -> bool {
    source
        .pointer("/execution/taskSupport")
        .and_then(Value::as_str)
        == Some("required")
}

/// Whether an upstream's own tool definition runs as a task when asked.
pub fn as_task(source: &Value) -> bool {
    matches!(
        source
            .pointer("/execution/taskSupport")
            .and_then(Value::as_str),
        Some("optional" | "required")
    )
}

/// The members of an upstream's own tool definition that MCP v1.0 has no
/// place for, as a JSON object (`None` when it has none of them); a
/// task-only tool's own description too (the core's says it is task-only).
fn kept_members(source: &Value) -> Option<Box<str>> {
    let description = task_only(source).then_some("description");
    let source = source.as_object()?;
    let kept: Map<String, Value> = ["title", "annotations", "icons", "execution", "_meta"]
        .into_iter()
        .chain(description)
        .filter_map(|k| source.get(k).map(|v| (k.to_owned(), v.clone())))
        .collect();
    (!kept.is_empty()).then(|| Value::Object(kept).to_string().into_boxed_str())
}

fn compile_tool(
    def: &Map<String, Value>,
    original: &str,
    route: Route,
    fingerprint: String,
) -> Result<ToolEntry, String> {
    let compile = |field: &str| {
        let schema = def.get(field).unwrap_or(&Value::Null);
        LazyValidator::checked(schema)
            .map_err(|e| format!("{field} is not a valid JSON Schema: {e}"))
    };
    Ok(ToolEntry {
        original_id: original.to_owned(),
        route,
        fingerprint,
        kept: None,
        task_only: false,
        as_task: false,
        input: compile("inputSchema")?,
        output: compile("outputSchema")?,
    })
}

#[cfg(test)]
mod tests;
