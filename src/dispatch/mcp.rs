//! The Model Context Protocol's face of the dispatcher, for agents that speak
//! it (the official SDKs' clients and the hosts built on them): the handshake
//! era (`initialize` with `protocolVersion`, `ping`, `tools/*`,
//! `resources/*`, `prompts/*`) answered statelessly over the same neutral
//! operations as MCP v1.0's face, so any replica serves any request. Tool
//! and prompt names follow `modelcontext::names`; the namespaced mcpId
//! travels in `_meta` under [`MCPID_META`].

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{Dispatcher, Payload, execute};
use crate::error::GatewayError;
use crate::jsonrpc::{Json, JsonBuf};
use crate::modelcontext::{self as mc, names};
use crate::protocol::catalog::Route;
use crate::protocol::{Kind, mcpid};
use crate::tenant::Tenant;
use crate::upstream::{CallError, Dialect};

/// Where a definition's namespaced mcpId travels in `_meta` (outside the
/// protocol's reserved `io.modelcontextprotocol/` prefix).
pub const MCPID_META: &str = "dev.mcp-gateway/mcpId";
/// The handshake-era revisions the face negotiates (a client's own is
/// echoed when it is one of them, the newest otherwise).
pub const REVISIONS: [&str; 3] = ["2025-03-26", "2025-06-18", "2025-11-25"];

/// The protocol's methods that the face answers or knows (a closed set, also
/// the `method` label of its metrics).
const METHODS: [&str; 12] = [
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "prompts/list",
    "prompts/get",
    "logging/setLevel",
    "server/discover",
    "completion/complete",
];

/// Whether a request or notification is in the Model Context Protocol: one
/// of its methods, a `notifications/...`, or an `initialize` whose params
/// carry `protocolVersion` (MCP v1.0's carry `clientCapabilities`).
pub fn speaks(method: &str, params: Option<Json<'_>>) -> bool {
    if method == "initialize" {
        return params
            .and_then(|p| crate::jsonrpc::scan::members_of(p, ["protocolVersion"]))
            .is_some_and(|[v]| v.is_some());
    }
    METHODS.contains(&method) || method.starts_with("notifications/")
}

/// A face's answer: a result, or an error in the gateway's terms.
type Answer = Result<Payload, GatewayError>;

fn text(value: Value) -> Payload {
    Payload::Text(value.to_string())
}

/// The definitions of one kind the tenant sees, as the MCP v1.0 face lists them.
fn definitions(parts: Vec<bytes::Bytes>) -> Vec<Map<String, Value>> {
    let mut joined = Vec::with_capacity(parts.iter().map(bytes::Bytes::len).sum::<usize>() + 2);
    joined.push(b'[');
    for p in &parts {
        joined.extend_from_slice(p);
    }
    joined.push(b']');
    serde_json::from_slice::<Vec<Value>>(&joined)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|v| match v {
            Value::Object(def) => Some(def),
            _ => None,
        })
        .collect()
}

#[derive(Deserialize)]
struct Named<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(borrow, default)]
    arguments: Option<&'a serde_json::value::RawValue>,
}

#[derive(Deserialize)]
struct ByUri<'a> {
    #[serde(borrow)]
    uri: Cow<'a, str>,
}

fn invalid(why: &str) -> GatewayError {
    GatewayError::InvalidParams(why.into())
}

/// A tool's result as the protocol carries it: a text block and, where a
/// schema was listed, `structuredContent`; an error of the tool itself, or
/// arguments the tool's schema refuses, as `isError`.
fn call_result(
    result: Result<JsonBuf, GatewayError>,
    passthrough: bool,
    structured: bool,
) -> Answer {
    let tool_error =
        |why: &str| text(json!({"content": [{"type": "text", "text": why}], "isError": true}));
    let result = match result {
        Ok(result) => result,
        Err(GatewayError::InvalidArguments(why)) => return Ok(tool_error(&why)),
        Err(GatewayError::Upstream {
            error: CallError::Tool(why),
            ..
        }) => return Ok(tool_error(&why)),
        Err(e) => return Err(e),
    };
    #[derive(Deserialize)]
    struct Output<'a> {
        #[serde(borrow)]
        output: &'a serde_json::value::RawValue,
    }
    // The dispatcher checked that the result holds an output.
    let Ok(Output { output }) = serde_json::from_str::<Output<'_>>(result.get()) else {
        return Ok(tool_error("the tool's result has no output"));
    };
    if passthrough {
        // The upstream's own content blocks, as it sent them.
        if let Ok(envelope) = serde_json::from_str::<Map<String, Value>>(output.get()) {
            if let Some(content) = envelope.get("content") {
                return Ok(text(json!({ "content": content })));
            }
        }
    }
    let block = json!({"type": "text", "text": output.get()});
    let structured_content: Option<Value> = structured
        .then(|| serde_json::from_str(output.get()).ok())
        .flatten();
    Ok(text(match structured_content {
        Some(s) => json!({"content": [block], "structuredContent": s}),
        None => json!({ "content": [block] }),
    }))
}

impl Dispatcher {
    /// The tool or prompt name of a definition the tenant sees.
    fn name_of(&self, kind: Kind, id: &str) -> Option<String> {
        let (upstream, original) = mcpid::parse(&self.inner.gateway_id, id)?;
        let key = match self.upstream(upstream).map(|u| u.dialect) {
            Some(Dialect::ModelContext) => mc::key_of(kind, &original)?,
            _ => original.into_owned(),
        };
        Some(names::tool_name(upstream, &key, names::DEFAULT_BUDGET))
    }

    /// The definition of `kind` listed under `name` for this tenant, with its mcpId.
    async fn find(
        &self,
        tenant: &Tenant,
        kind: Kind,
        name: &str,
    ) -> Option<(String, Map<String, Value>)> {
        let defs = definitions(self.listing_when_started(tenant, kind).await);
        defs.into_iter().find_map(|def| {
            let id = def.get("mcpId")?.as_str()?.to_owned();
            (self.name_of(kind, &id).as_deref() == Some(name)).then_some((id, def))
        })
    }

    /// Whether the tool's upstream speaks the Model Context Protocol and the
    /// tool has no outputSchema of its own (its content blocks pass through).
    fn passes_content_through(&self, id: &str) -> bool {
        let Some(upstream) = mcpid::upstream_of(&self.inner.gateway_id, id) else {
            return false;
        };
        self.upstream(upstream).is_some_and(|u| {
            u.catalog().tool(id).is_some_and(|t| {
                matches!(
                    t.route,
                    Route::ByName {
                        structured: false,
                        ..
                    }
                )
            })
        })
    }

    /// Answers one request of the Model Context Protocol for `tenant`, counting it.
    pub async fn request_mcp(
        &self,
        tenant: &Tenant,
        method: &str,
        params: Option<Json<'_>>,
    ) -> Answer {
        let started = std::time::Instant::now();
        let result = self.answer_mcp(tenant, method, params, started).await;
        let label = METHODS
            .iter()
            .find(|m| **m == method)
            .copied()
            .unwrap_or("other");
        let outcome = result.as_ref().map_or_else(GatewayError::outcome, |_| "ok");
        let metrics = &self.inner.metrics;
        metrics
            .requests
            .with_label_values(&[&tenant.name, label, outcome])
            .inc();
        metrics
            .request_seconds
            .with_label_values(&[label])
            .observe(started.elapsed().as_secs_f64());
        result
    }

    async fn answer_mcp(
        &self,
        tenant: &Tenant,
        method: &str,
        params: Option<Json<'_>>,
        started: std::time::Instant,
    ) -> Answer {
        match method {
            "initialize" => {
                #[derive(Deserialize)]
                #[serde(rename_all = "camelCase")]
                struct Init {
                    protocol_version: String,
                }
                let asked = params
                    .and_then(|p| serde_json::from_str::<Init>(p.get()).ok())
                    .map(|i| i.protocol_version);
                let revision = asked
                    .as_deref()
                    .filter(|r| REVISIONS.contains(r))
                    .unwrap_or(REVISIONS[REVISIONS.len() - 1]);
                let caps = self.hello(tenant).await;
                let mut capabilities = Map::new();
                if caps.list_tools_provider {
                    capabilities.insert("tools".into(), json!({"listChanged": false}));
                }
                if caps.list_resources_provider {
                    capabilities.insert("resources".into(), json!({}));
                }
                if caps.list_prompts_provider {
                    capabilities.insert("prompts".into(), json!({}));
                }
                capabilities.insert("logging".into(), json!({}));
                Ok(text(json!({
                    "protocolVersion": revision,
                    "capabilities": capabilities,
                    "serverInfo": {"name": "mcp-gateway", "version": env!("CARGO_PKG_VERSION")},
                })))
            }
            "ping" | "logging/setLevel" => Ok(text(json!({}))),
            "tools/list" => {
                let defs = definitions(self.listing_when_started(tenant, Kind::Tool).await);
                let tools: Vec<Value> = defs
                    .into_iter()
                    .filter_map(|def| {
                        let id = def.get("mcpId")?.as_str()?.to_owned();
                        let name = self.name_of(Kind::Tool, &id)?;
                        let mut tool = Map::new();
                        tool.insert("name".into(), name.into());
                        if let Some(title) = def.get("name") {
                            tool.insert("title".into(), title.clone());
                        }
                        tool.insert(
                            "description".into(),
                            def.get("description").cloned().unwrap_or_default(),
                        );
                        tool.insert(
                            "inputSchema".into(),
                            def.get("inputSchema")
                                .cloned()
                                .unwrap_or(json!({"type": "object"})),
                        );
                        let object_root = def
                            .get("outputSchema")
                            .and_then(|s| s.get("type"))
                            .and_then(Value::as_str)
                            == Some("object");
                        if object_root && !self.passes_content_through(&id) {
                            tool.insert("outputSchema".into(), def["outputSchema"].clone());
                        }
                        tool.insert("_meta".into(), json!({ MCPID_META: id }));
                        Some(Value::Object(tool))
                    })
                    .collect();
                Ok(text(json!({ "tools": tools })))
            }
            "tools/call" => {
                let call = params
                    .and_then(|p| serde_json::from_str::<Named<'_>>(p.get()).ok())
                    .ok_or_else(|| {
                        invalid(
                            "params must be an object {\"name\": string, \"arguments\"?: object}",
                        )
                    })?;
                let Some((id, def)) = self.find(tenant, Kind::Tool, &call.name).await else {
                    return Err(GatewayError::UnknownTool(call.name.into_owned()));
                };
                let empty: &serde_json::value::RawValue =
                    serde_json::from_str("{}").unwrap_or_else(|_| unreachable!("literal JSON"));
                let arguments = Json::from(call.arguments.unwrap_or(empty));
                if !arguments.get().starts_with('{') {
                    return Err(invalid("params.arguments must be an object"));
                }
                let passthrough = self.passes_content_through(&id);
                let structured = !passthrough
                    && def
                        .get("outputSchema")
                        .and_then(|s| s.get("type"))
                        .and_then(Value::as_str)
                        == Some("object");
                let mut audit = execute::Audit::new(super::PROTOCOL_MCP);
                let result = self
                    .call_tool(tenant, Cow::Borrowed(id.as_str()), arguments, &mut audit)
                    .await;
                if audit.enabled() {
                    audit.log(tenant, &result, started.elapsed());
                }
                call_result(result, passthrough, structured)
            }
            "resources/list" => {
                let defs = definitions(self.listing_when_started(tenant, Kind::Resource).await);
                let resources: Vec<Value> = defs
                    .into_iter()
                    .map(|def| {
                        json!({
                            "uri": def.get("mcpId"),
                            "name": def.get("name"),
                            "description": def.get("description"),
                            "mimeType": def.get("mediaType"),
                        })
                    })
                    .collect();
                Ok(text(json!({ "resources": resources })))
            }
            "resources/templates/list" => Ok(text(json!({"resourceTemplates": []}))),
            "resources/read" => {
                let read = params
                    .and_then(|p| serde_json::from_str::<ByUri<'_>>(p.get()).ok())
                    .ok_or_else(|| invalid("params must be an object {\"uri\": string}"))?;
                let defs = definitions(self.listing_when_started(tenant, Kind::Resource).await);
                let def = defs
                    .into_iter()
                    .find(|d| d.get("mcpId").and_then(Value::as_str) == Some(&read.uri))
                    .ok_or_else(|| GatewayError::ResourceNotFound(read.uri.clone().into_owned()))?;
                Ok(text(json!({"contents": [{
                    "uri": read.uri,
                    "mimeType": def.get("mediaType"),
                    "text": def.get("content"),
                }]})))
            }
            "prompts/list" => {
                let defs = definitions(self.listing_when_started(tenant, Kind::Prompt).await);
                let prompts: Vec<Value> = defs
                    .into_iter()
                    .filter_map(|def| {
                        let id = def.get("mcpId")?.as_str()?.to_owned();
                        let mut prompt = Map::new();
                        prompt.insert("name".into(), self.name_of(Kind::Prompt, &id)?.into());
                        if let Some(title) = def.get("name") {
                            prompt.insert("title".into(), title.clone());
                        }
                        if let Some(d) = def.get("description") {
                            prompt.insert("description".into(), d.clone());
                        }
                        prompt.insert("_meta".into(), json!({ MCPID_META: id }));
                        Some(Value::Object(prompt))
                    })
                    .collect();
                Ok(text(json!({ "prompts": prompts })))
            }
            "prompts/get" => {
                let get = params
                    .and_then(|p| serde_json::from_str::<Named<'_>>(p.get()).ok())
                    .ok_or_else(|| invalid("params must be an object {\"name\": string}"))?;
                let (_, def) = self
                    .find(tenant, Kind::Prompt, &get.name)
                    .await
                    .ok_or_else(|| invalid(&format!("Unknown prompt: {}", get.name)))?;
                let role = def.get("role").and_then(Value::as_str).unwrap_or("user");
                // The protocol has no system role: a system prompt is carried
                // as the user's, and says what it was in `_meta`.
                let message = match role {
                    "assistant" => {
                        json!({"role": "assistant", "content": {"type": "text", "text": def.get("content")}})
                    }
                    "user" => {
                        json!({"role": "user", "content": {"type": "text", "text": def.get("content")}})
                    }
                    _ => {
                        json!({"role": "user", "content": {"type": "text", "text": def.get("content")}, "_meta": {"dev.mcp-gateway/role": role}})
                    }
                };
                let mut result = json!({ "messages": [message] });
                if let Some(d) = def.get("description") {
                    result["description"] = d.clone();
                }
                Ok(text(result))
            }
            _ => Err(GatewayError::MethodNotFound),
        }
    }
}
