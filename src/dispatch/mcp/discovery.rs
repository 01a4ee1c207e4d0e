//! Progressive discovery in this face (see `crate::dispatch::discovery`):
//! a search listing (the meta-tools, the `always` tools), `search_tools`
//! over the tenant's tools as this face names and describes them, and
//! `call_tool`, which runs the tool found exactly as a call by its name.

use std::sync::Arc;

use super::curated::Names;
use super::face_index::FaceTool;
use super::*;
use crate::config::curation::Discovery;
use crate::dispatch::discovery::index::{Document, Index};
use crate::dispatch::discovery::{Meta, SearchArgs};

/// A tenant's tools as they are searched: each one's listing entry as this
/// face shows it, and the index over them; made from the catalogs it
/// names, kept until one of them changes.
pub struct Searchable {
    catalogs: Vec<Catalog>,
    tools: Vec<(Arc<FaceTool>, Map<String, Value>)>,
    index: Index,
}

impl ModelContext<'_> {
    /// The tenant's discovery, when its meta-tools exist.
    pub(crate) fn searches<'t>(&self, tenant: &'t Tenant) -> Option<&'t Discovery> {
        let d = tenant.curation.as_ref()?.discovery.as_ref()?;
        d.searches().then_some(d)
    }

    /// The tenant's search index, made again when a catalog has changed.
    fn searchable(&self, tenant: &Tenant) -> Option<Arc<Searchable>> {
        let curated = tenant.curation.as_ref()?;
        let catalogs: Vec<Catalog> = self
            .core
            .visit_upstreams_of(tenant, |ups| ups.map(|u| u.catalog()).collect());
        let names = self.curated_names(tenant, curated);
        let current = |s: &Searchable| {
            s.catalogs.len() == catalogs.len()
                && s.catalogs.iter().zip(&catalogs).all(|(a, b)| a.same(b))
        };
        let made_from = catalogs.clone();
        let searchable = curated.search(current, || {
            self.make_searchable(tenant, curated, &names, made_from)
        });
        self.core
            .metrics()
            .discovery
            .indexed
            .with_label_values(&[&tenant.name])
            .set(searchable.tools.len() as i64);
        Some(searchable)
    }

    /// Every tool the tenant lists (its scopes aside), as this face
    /// shows it, and the index over them.
    fn make_searchable(
        &self,
        tenant: &Tenant,
        curation: &crate::config::curation::Curation,
        names: &Names,
        catalogs: Vec<Catalog>,
    ) -> Searchable {
        let mut tools = Vec::new();
        for catalog in &catalogs {
            let Some(index) = catalog.face_cache(|c| self.index(c)) else {
                continue;
            };
            for listed in index.listed.iter().filter(|l| tenant.lists(&l.tool.id)) {
                let mut text = String::new();
                names.write(&mut text, curation, &listed.tool, &listed.handshake);
                if let Ok(entry) = serde_json::from_str::<Map<String, Value>>(&text) {
                    tools.push((listed.tool.clone(), entry));
                }
            }
        }
        let text =
            |e: &Map<String, Value>, k: &str| e.get(k).and_then(Value::as_str).map(str::to_owned);
        let fields: Vec<_> = tools
            .iter()
            .map(|(_, e)| {
                let properties: Vec<String> = e
                    .get("inputSchema")
                    .and_then(|s| s.get("properties"))
                    .and_then(Value::as_object)
                    .map(|p| p.keys().cloned().collect())
                    .unwrap_or_default();
                (
                    text(e, "name").unwrap_or_default(),
                    text(e, "title"),
                    text(e, "description"),
                    properties,
                )
            })
            .collect();
        let index =
            Index::build(
                fields
                    .iter()
                    .map(|(name, title, description, properties)| Document {
                        name,
                        title: title.as_deref(),
                        description: description.as_deref(),
                        properties: properties.iter().map(String::as_str).collect(),
                    }),
            );
        Searchable {
            catalogs,
            tools,
            index,
        }
    }

    /// How many tools this caller sees (after its policy, hiding and scopes).
    pub(crate) async fn visible_tools(&self, tenant: &Tenant) -> usize {
        let mut visible = 0;
        self.each_index(tenant, Kind::Tool, |_, index| {
            visible += index
                .listed
                .iter()
                .filter(|l| tenant.may_use(&l.tool.id))
                .count();
        })
        .await;
        visible
    }

    /// The meta-tools' entries of a search listing (`load_tools` only in a
    /// session, which can hold what it loads).
    pub(super) fn meta_entries(&self, d: &Discovery, session: bool) -> String {
        let gateway = self.core.gateway_id();
        let metas: &[Meta] = match session {
            true => &[Meta::Search, Meta::Call, Meta::Load],
            false => &[Meta::Search, Meta::Call],
        };
        metas
            .iter()
            .map(|m| m.modelcontext_entry(gateway, d).to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `search_tools`: the caller's visible tools that fit the query, best
    /// first; bad arguments are a tool error, as any tool's.
    pub(super) async fn search_tools(
        &self,
        tenant: &Tenant,
        d: &Discovery,
        arguments: &Value,
    ) -> Out {
        let args = match SearchArgs::read(arguments, d) {
            Ok(args) => args,
            Err(why) => {
                return Out::ToolError(
                    json!({"content": [{"type": "text", "text": why}], "isError": true}),
                );
            }
        };
        let (found, visible) = self.found(tenant, &args).await;
        let tools: Vec<Value> = found
            .iter()
            .map(|(tool, entry, score)| found_entry(tool, entry, *score, args.schemas))
            .collect();
        let answer = json!({"tools": tools, "visible": visible});
        Out::Value(json!({
            "content": [{"type": "text", "text": answer.to_string()}],
            "structuredContent": answer,
        }))
    }

    /// The caller's visible tools that fit the query, best first (ties by
    /// name), at most `args.limit`, each with its listing entry in this
    /// face and its score; and how many tools the caller sees.
    pub(crate) async fn found(
        &self,
        tenant: &Tenant,
        args: &SearchArgs,
    ) -> (Vec<(Arc<FaceTool>, Map<String, Value>, f64)>, usize) {
        let started = std::time::Instant::now();
        let visible = self.visible_tools(tenant).await;
        let Some(searchable) = self.searchable(tenant) else {
            return (Vec::new(), visible);
        };
        let mut found: Vec<(usize, f64)> = searchable
            .index
            .scores(&args.query)
            .into_iter()
            .filter(|(doc, _)| tenant.may_use(&searchable.tools[*doc].0.id))
            .collect();
        let name_of = |doc: usize| {
            searchable.tools[doc]
                .1
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
        };
        found.sort_by(|a, b| {
            b.1.total_cmp(&a.1)
                .then_with(|| name_of(a.0).cmp(name_of(b.0)))
        });
        found.truncate(args.limit);
        let metrics = &self.core.metrics().discovery;
        let outcome = if found.is_empty() { "empty" } else { "hits" };
        metrics
            .searches
            .with_label_values(&[&tenant.name, outcome])
            .inc();
        metrics
            .search_seconds
            .observe(started.elapsed().as_secs_f64());
        let found = found
            .into_iter()
            .map(|(doc, score)| {
                let (tool, entry) = &searchable.tools[doc];
                (tool.clone(), entry.clone(), score)
            })
            .collect();
        (found, visible)
    }
}

/// One tool found, as `search_tools` answers it.
fn found_entry(tool: &FaceTool, entry: &Map<String, Value>, score: f64, schemas: bool) -> Value {
    let mut out = Map::new();
    out.insert(
        "name".into(),
        entry.get("name").cloned().unwrap_or(Value::Null),
    );
    out.insert("mcpId".into(), Value::from(&*tool.id));
    if let Some(title) = entry.get("title") {
        out.insert("title".into(), title.clone());
    }
    out.insert(
        "description".into(),
        entry
            .get("description")
            .cloned()
            .unwrap_or_else(|| "".into()),
    );
    out.insert("score".into(), json!(score));
    if schemas {
        for key in ["inputSchema", "outputSchema"] {
            if let Some(schema) = entry.get(key) {
                out.insert(key.into(), schema.clone());
            }
        }
    }
    Value::Object(out)
}

impl ModelContext<'_> {
    /// A `tools/call` of a meta-tool, where the tenant's meta-tools exist:
    /// its answer; `None` for any other call.
    pub(super) async fn meta_call(
        &self,
        tenant: &Tenant,
        call: Call<'_>,
        era: Era,
        via: Via<'_>,
        started: std::time::Instant,
    ) -> Option<Built> {
        let d = self.searches(tenant)?;
        let name = call.name.and_then(string_of)?;
        let meta = Meta::of(&name).or_else(|| Meta::of_id(self.core.gateway_id(), &name))?;
        let arguments: Value = match call.arguments {
            Some(a) => serde_json::from_str(a.get()).unwrap_or(Value::Null),
            None => json!({}),
        };
        let mut audit = Audit::new(crate::dispatch::PROTOCOL_MCP);
        if meta != Meta::Call {
            let built = match meta {
                Meta::Search => Ok(self.search_tools(tenant, d, &arguments).await),
                _ => self.load_tools(tenant, d, &arguments, via).await,
            };
            if audit.enabled() {
                audit.refused(Some(&meta.id(self.core.gateway_id())), call.arguments);
                let outcome = match &built {
                    Ok(Out::ToolError(_)) => "tool_error",
                    Ok(_) => "ok",
                    Err(e) => e.outcome(),
                };
                audit.log_outcome(tenant, outcome, started.elapsed());
            }
            return Some(built);
        }
        let (inner, inner_args) = match crate::dispatch::discovery::call_args(&arguments) {
            Ok(found) => found,
            Err(why) => {
                return Some(Ok(Out::ToolError(
                    json!({"content": [{"type": "text", "text": why}], "isError": true}),
                )));
            }
        };
        // An mcpId names the tool the face lists under its own name.
        let tool = match self.tool_named(tenant, &inner).await {
            Some(tool) => Some(tool),
            None => self.tool_of_id(tenant, &inner).await,
        };
        let inner = tool.as_ref().map_or(inner, |t| self.listed_name(tenant, t));
        // The call as the client would have made it by the tool's name: its
        // other params (`_meta`, `task`, a round's state) as they were.
        let mut params: Map<String, Value> = call
            .params
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_default();
        params.insert("name".into(), inner.into());
        params.insert("arguments".into(), inner_args);
        let raw = serde_json::value::to_raw_value(&params).ok()?;
        let scanned = Scanned::of("tools/call", Some(Json::from(&*raw)));
        let built =
            Box::pin(self.call_named(tenant, scanned.call, era, via, started, Some("call_tool")))
                .await;
        let outcome = match &built {
            Ok(Out::ToolError(_)) => "tool_error",
            Ok(_) => "ok",
            Err(e) => e.outcome(),
        };
        self.core
            .metrics()
            .discovery
            .calls
            .with_label_values(&[&tenant.name, outcome])
            .inc();
        Some(match (built, tool) {
            (Ok(out), Some(tool)) => {
                let id = serde_json::to_string(&*tool.id).unwrap_or_default();
                Ok(out.with_meta(MCPID_META, &id))
            }
            (built, _) => built,
        })
    }

    /// The tool this caller sees with this mcpId.
    pub(super) async fn tool_of_id(&self, tenant: &Tenant, id: &str) -> Option<Arc<FaceTool>> {
        let mut found = None;
        self.each_index(tenant, Kind::Tool, |_, index| {
            if found.is_none() {
                found = index
                    .listed
                    .iter()
                    .find(|l| &*l.tool.id == id)
                    .map(|l| l.tool.clone());
            }
        })
        .await;
        found
    }

    /// The name the tenant's listing gives `tool`.
    pub(super) fn listed_name(&self, tenant: &Tenant, tool: &FaceTool) -> String {
        match &tenant.curation {
            Some(curated) => {
                let names = self.curated_names(tenant, curated);
                names.name_of(tool).unwrap_or(&tool.name).to_owned()
            }
            None => tool.name.to_string(),
        }
    }
}
