//! Progressive discovery for MCP v1.0 agents: a search listing holds
//! `search_tools` and `call_tool` (their outputSchema `{}`) and the
//! `always` tools; `mcp/executeTool` of `search_tools` gives the
//! structured answer as `output`, and of `call_tool` what executing the
//! tool found gives. No `load_tools`: MCP v1.0 has no listing per session.

use std::borrow::Cow;

use bytes::Bytes;
use serde_json::{Value, json};

use super::discovery::{Meta, SearchArgs};
use crate::dispatch::core::{Audit, Dispatcher};
use crate::dispatch::mcp::ModelContext;
use crate::error::GatewayError;
use crate::jsonrpc::Json;
use crate::protocol::Kind;
use crate::protocol::tool_result::{Output, ToolResult};
use crate::tenant::Tenant;

/// `mcp/listTools` for a tenant whose discovery lists search to this
/// caller: the meta-tools' definitions, then the `always` tools; `None`
/// where the listing is direct.
pub async fn listing(core: &Dispatcher, tenant: &Tenant) -> Option<Vec<Bytes>> {
    let face = ModelContext::new(core);
    let d = face.searches(tenant)?;
    core.wait_for_starting(tenant).await;
    if !d.lists_search(face.visible_tools(tenant).await) {
        return None;
    }
    let gateway = core.gateway_id();
    let mut parts: Vec<Bytes> = Vec::new();
    for meta in [Meta::Search, Meta::Call] {
        if !parts.is_empty() {
            parts.push(Bytes::from_static(b","));
        }
        parts.push(meta.v1_definition(gateway, d).to_string().into());
    }
    let always = |id: &str| d.always.as_ref().is_some_and(|a| a.is_match(id));
    let kept = core.listing_where(tenant, Kind::Tool, Some(&always));
    if !kept.is_empty() {
        parts.push(Bytes::from_static(b","));
        parts.extend(kept);
    }
    Some(parts)
}

/// `mcp/executeTool` of a meta-tool, where the tenant's meta-tools exist:
/// its result; `None` for any other id.
pub async fn execute(
    core: &Dispatcher,
    tenant: &Tenant,
    id: &str,
    arguments: Json<'_>,
    audit: &mut Audit,
) -> Option<Result<ToolResult, GatewayError>> {
    let face = ModelContext::new(core);
    let d = face.searches(tenant)?;
    let meta = Meta::of_id(core.gateway_id(), id)?;
    let args: Value = serde_json::from_str(arguments.get()).unwrap_or(Value::Null);
    let tool_error = |why: String| Err(GatewayError::InvalidArguments(why));
    match meta {
        // MCP v1.0 has no sessions that could hold loaded tools.
        Meta::Load => None,
        Meta::Search => {
            audit.refused(Some(id), Some(arguments));
            let args = match SearchArgs::read(&args, d) {
                Ok(args) => args,
                Err(why) => return Some(tool_error(why)),
            };
            let (found, visible) = face.found(tenant, &args).await;
            let tools: Vec<Value> = found
                .iter()
                .map(|(tool, entry, score)| v1_found(core, &tool.id, entry, *score, args.schemas))
                .collect();
            let output = json!({"tools": tools, "visible": visible}).to_string();
            let answer = format!(r#"{{"output":{output}}}"#);
            let at = 10..answer.len() - 1;
            let answer = crate::jsonrpc::JsonBuf::from(
                serde_json::value::RawValue::from_string(answer).ok()?,
            );
            Some(Ok(ToolResult::new(answer, at, Output::Value, true)))
        }
        Meta::Call => {
            let (name, inner) = match super::discovery::call_args(&args) {
                Ok(found) => found,
                Err(why) => return Some(tool_error(why)),
            };
            let id = v1_id(core, tenant, &name).unwrap_or(name);
            audit.via = Some("call_tool");
            let inner = serde_json::value::to_raw_value(&inner).ok()?;
            let result = core
                .call_tool(
                    tenant,
                    Cow::Owned(id),
                    Json::from(&*inner),
                    audit,
                    None,
                    None,
                    None,
                )
                .await;
            let outcome = result.as_ref().map_or_else(GatewayError::outcome, |_| "ok");
            core.metrics()
                .discovery
                .calls
                .with_label_values(&[&tenant.name, outcome])
                .inc();
            Some(result)
        }
    }
}

/// The mcpId a v1 agent's `name` stands for: itself when it is one, else
/// the one visible tool of the tenant listed under that name.
fn v1_id(core: &Dispatcher, tenant: &Tenant, name: &str) -> Option<String> {
    if name.starts_with("mcp://") {
        return Some(name.to_owned());
    }
    let mut found = None;
    for up in core.upstreams_of(tenant) {
        let catalog = up.catalog();
        let listing = catalog.listing(Kind::Tool);
        for (id, range) in &listing.items {
            let def: Value = serde_json::from_str(&listing.json[range.clone()]).ok()?;
            if def.get("name").and_then(Value::as_str) == Some(name) && tenant.may_use(id) {
                if found.is_some() {
                    return None;
                }
                found = Some(id.clone());
            }
        }
    }
    found
}

/// One tool found, as an MCP v1.0 agent reads it: its v1 `name`.
fn v1_found(
    core: &Dispatcher,
    id: &str,
    entry: &serde_json::Map<String, Value>,
    score: f64,
    schemas: bool,
) -> Value {
    let name = crate::protocol::mcpid::upstream_of(core.gateway_id(), id)
        .and_then(|u| core.upstream(u))
        .and_then(|up| {
            let catalog = up.catalog();
            let listing = catalog.listing(Kind::Tool);
            let (_, range) = listing.items.iter().find(|(i, _)| i == id)?;
            let def: Value = serde_json::from_str(&listing.json[range.clone()]).ok()?;
            def.get("name").cloned()
        })
        .unwrap_or_else(|| entry.get("name").cloned().unwrap_or(Value::Null));
    let mut out = json!({
        "name": name,
        "mcpId": id,
        "description": entry.get("description").cloned().unwrap_or_else(|| "".into()),
        "score": score,
    });
    if let Some(title) = entry.get("title") {
        out["title"] = title.clone();
    }
    if schemas {
        for key in ["inputSchema", "outputSchema"] {
            if let Some(schema) = entry.get(key) {
                out[key] = schema.clone();
            }
        }
    }
    out
}
