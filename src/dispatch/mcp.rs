//! The Model Context Protocol's face of the dispatcher, for agents that speak
//! it (the official SDKs' clients and the hosts built on them): the handshake
//! era (`initialize` with `protocolVersion`, `ping`, `tools/*`,
//! `resources/*`, `prompts/*`) answered statelessly over the same neutral
//! operations as MCP v1.0's face, so any replica serves any request. Tool
//! and prompt names follow `modelcontext::names`; the namespaced mcpId
//! travels in `_meta` under [`MCPID_META`].

use std::borrow::Cow;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::face_index::{FaceIndex, FaceTool};
use super::rpc::Standing;
use super::watch::Change;
use super::{Dispatcher, Payload, execute};
use crate::error::GatewayError;
use crate::jsonrpc::Json;
use crate::modelcontext::{self as mc, names, param_headers};
use crate::protocol::catalog::Catalog;
use crate::protocol::tool_result::{Output, ToolResult};
use crate::protocol::{Kind, mcpid};
use crate::tenant::Tenant;
use crate::tenant::subscriptions::{self, Subscribed};
use crate::upstream::{CallError, Status, Upstream};

/// Where a definition's namespaced mcpId travels in `_meta` (outside the
/// protocol's reserved `io.modelcontextprotocol/` prefix).
pub const MCPID_META: &str = "dev.mcp-gateway/mcpId";
/// The handshake-era revisions the face negotiates (a client's own is
/// echoed when it is one of them, the newest otherwise).
pub const REVISIONS: [&str; 3] = ["2025-03-26", "2025-06-18", "2025-11-25"];
/// The stateless era's revision: no handshake, `_meta` on every request.
pub const STATELESS: &str = "2026-07-28";
/// Every revision the face serves, newest first: what `server/discover` and
/// an unsupported version's error name.
pub const SUPPORTED: [&str; 4] = [STATELESS, "2025-11-25", "2025-06-18", "2025-03-26"];

const VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";
const CAPABILITIES_META: &str = "io.modelcontextprotocol/clientCapabilities";
const SERVER_INFO_META: &str = "io.modelcontextprotocol/serverInfo";
/// Where a resource template's own `uriTemplate` (the upstream's) travels in `_meta`.
pub const TEMPLATE_META: &str = "dev.mcp-gateway/uriTemplate";
/// Tags every message of a `subscriptions/listen` stream.
pub const SUBSCRIPTION_META: &str = "io.modelcontextprotocol/subscriptionId";

/// The protocol's methods that the face answers or knows (a closed set, also
/// the `method` label of its metrics).
const METHODS: [&str; 16] = [
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "logging/setLevel",
    "server/discover",
    "subscriptions/listen",
    "completion/complete",
    "notifications/cancelled",
];

/// Methods that exist only in the stateless era.
const STATELESS_ONLY: [&str; 2] = ["server/discover", "subscriptions/listen"];
/// Methods the stateless era removed.
const HANDSHAKE_ONLY: [&str; 5] = [
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
];
/// Requests whose name (or uri) the `Mcp-Name` header mirrors.
const NAMED: [&str; 3] = ["tools/call", "prompts/get", "resources/read"];
/// Results that carry `ttlMs` and `cacheScope` in the stateless era.
const CACHEABLE: [&str; 6] = [
    "server/discover",
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];

/// Whether a request or notification is in the Model Context Protocol: one
/// of its methods, a `notifications/...`, or an `initialize` whose params
/// carry `protocolVersion` (MCP v1.0's carry `clientCapabilities`).
pub fn speaks(method: &str, params: Option<Json<'_>>) -> bool {
    if method == "initialize" {
        let [version, meta] = members(params, ["protocolVersion", "_meta"]);
        let [stateless] = members(meta, [VERSION_META]);
        return version.is_some() || stateless.is_some();
    }
    METHODS.contains(&method) || method.starts_with("notifications/")
}

/// The revision an `initialize` settles on: the client's own when the face
/// serves it, the newest of the handshake era otherwise.
pub fn negotiated(params: Option<Json<'_>>) -> &'static str {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Init<'a> {
        #[serde(borrow)]
        protocol_version: Cow<'a, str>,
    }
    let asked = params.and_then(|p| serde_json::from_str::<Init<'_>>(p.get()).ok());
    asked
        .and_then(|i| REVISIONS.iter().find(|r| **r == i.protocol_version))
        .copied()
        .unwrap_or(REVISIONS[REVISIONS.len() - 1])
}

/// A request's `params._meta`, if it has one.
pub fn meta_of(params: Option<Json<'_>>) -> Option<Json<'_>> {
    let [meta] = members(params, ["_meta"]);
    meta
}

/// The members named `keys` of an object (`None` for those absent or when
/// it is not an object), read by serde where the fast scan declines (a key
/// with an escape, a member named twice: the last counts).
fn members<'a, const N: usize>(value: Option<Json<'a>>, keys: [&str; N]) -> [Option<Json<'a>>; N] {
    let Some(v) = value else {
        return [None; N];
    };
    if let Some(found) = crate::jsonrpc::scan::members_of(v, keys) {
        return found;
    }
    type Members<'a> = std::collections::HashMap<Cow<'a, str>, &'a serde_json::value::RawValue>;
    match serde_json::from_str::<Members<'a>>(v.get()) {
        Ok(map) => keys.map(|k| map.get(k).map(|raw| Json::from(*raw))),
        Err(_) => [None; N],
    }
}

/// The headers of an HTTP request that mirror its body (`MCP-Protocol-Version`,
/// `Mcp-Method`, `Mcp-Name`), and `Mcp-Session-Id`. Empty off HTTP.
#[derive(Default, Clone, Copy, Debug)]
pub struct Mirrored<'a> {
    pub protocol_version: Option<&'a [u8]>,
    pub method: Option<&'a [u8]>,
    pub name: Option<&'a [u8]>,
    pub session: Option<&'a [u8]>,
    /// One of them was sent more than once (readers would disagree on which counts).
    pub repeated: bool,
    /// Every header, where the request may carry `Mcp-Param-*` ones (hyper's
    /// path; the edge's own hands such requests to it).
    pub all: Option<&'a dyn Headers>,
}

/// A request's headers as the face reads them, whatever carried them (the
/// HTTP edge's header map implements it).
pub trait Headers: Sync + std::fmt::Debug {
    /// Every value of the header `name` (lower case), in the order sent.
    fn values(&self, name: &str) -> Vec<&[u8]>;
    /// Whether the name of any header starts with `prefix` (lower case).
    fn any_named(&self, prefix: &str) -> bool;
}

impl Mirrored<'_> {
    /// Whether the headers alone put the request in the Model Context Protocol.
    pub fn say_modelcontext(&self) -> bool {
        self.protocol_version.is_some() || self.session.is_some()
    }
}

/// How a request reached the face.
#[derive(Clone, Copy, Default)]
pub struct Via<'a> {
    /// Its HTTP headers; `None` off HTTP (stdio carries no mirrored headers).
    pub http: Option<Mirrored<'a>>,
    /// Whether change notifications can reach the client (a stream exists for them).
    pub notifies: bool,
}

/// The era a request is in.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Era {
    Handshake,
    Stateless,
}

impl Era {
    /// The era of a request: stateless when its `_meta` names a protocol
    /// version, when its `MCP-Protocol-Version` header names one that is not
    /// of the handshake era, or when its method exists only in that era.
    pub fn of(method: &str, meta: Option<Json<'_>>, http: Option<&Mirrored<'_>>) -> Era {
        let [version] = members(meta, [VERSION_META]);
        Era::given(method, version.is_some(), http)
    }

    /// [`Era::of`], once it is known whether `_meta` names a version.
    fn given(method: &str, meta_says: bool, http: Option<&Mirrored<'_>>) -> Era {
        let header_says = http
            .and_then(|h| h.protocol_version)
            .is_some_and(|v| !REVISIONS.iter().any(|r| r.as_bytes() == v));
        if header_says || meta_says || STATELESS_ONLY.contains(&method) {
            Era::Stateless
        } else {
            Era::Handshake
        }
    }
}

/// Whether a JSON-RPC batch may be served: MCP v1.0 takes batches, and so
/// did the handshake era's first revision (2025-03-26); the revisions after
/// it removed them, so a batch that names one of those (in its headers or
/// in a message's `_meta`) is refused as a whole: its messages would skip
/// the checks a lone request gets (`Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`).
pub fn batch_allowed<'a>(
    http: &Mirrored<'_>,
    mut items: impl Iterator<Item = crate::jsonrpc::Incoming<'a>>,
) -> bool {
    let header_allows = http
        .protocol_version
        .is_none_or(|v| v == REVISIONS[0].as_bytes());
    let mirrors = http.method.is_some()
        || http.name.is_some()
        || http
            .all
            .is_some_and(|all| all.any_named(param_headers::PREFIX));
    if !header_allows || mirrors {
        return false;
    }
    items.all(|item| match item {
        crate::jsonrpc::Incoming::Request { method, params, .. }
        | crate::jsonrpc::Incoming::Notification { method, params } => {
            Era::of(&method, meta_of(params), Some(http)) == Era::Handshake
        }
        _ => true,
    })
}

/// A JSON string's text: borrowed when it holds no escape, else decoded;
/// `None` when the value is not a string.
fn string_of(value: Json<'_>) -> Option<Cow<'_, str>> {
    let text = value.get();
    match text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        Some(inner) if !inner.contains('\\') => Some(Cow::Borrowed(inner)),
        _ => serde_json::from_str(text).ok(),
    }
}

/// How a stateless-era error stands apart from its body, as that
/// revision's transport names it: a malformed request (and that revision's
/// own errors), an unknown method, or an answer like any other.
pub fn stateless_standing(code: Option<i64>) -> Standing {
    use crate::jsonrpc::codes::*;
    match code {
        Some(
            PARSE_ERROR
            | INVALID_REQUEST
            | INVALID_PARAMS
            | HEADER_MISMATCH
            | UNSUPPORTED_PROTOCOL_VERSION,
        ) => Standing::Malformed,
        Some(METHOD_NOT_FOUND) => Standing::UnknownMethod,
        _ => Standing::Answered,
    }
}

fn protocol_error(code: i64, message: &str, data: Option<Value>) -> GatewayError {
    let mut object = json!({ "code": code, "message": message });
    if let Some(d) = data {
        object["data"] = d;
    }
    GatewayError::Protocol {
        code,
        object: crate::jsonrpc::JsonBuf::from_written(object.to_string()),
    }
}

fn header_mismatch(why: &str) -> GatewayError {
    protocol_error(
        crate::jsonrpc::codes::HEADER_MISMATCH,
        &format!("Header mismatch: {why}"),
        None,
    )
}

/// The stateless era's checks of a request, in its SDKs' order: the `_meta`
/// envelope (-32602), the mirrored headers on HTTP (-32020), then the
/// version (-32022, naming what is served). `named` is the body's value
/// that `Mcp-Name` mirrors (`params.name` or `params.uri`).
fn check_stateless(
    method: &str,
    named: Option<Json<'_>>,
    envelope: [Option<Json<'_>>; 2],
    http: Option<&Mirrored<'_>>,
) -> Result<(), GatewayError> {
    let [Some(version), Some(_)] = envelope else {
        return Err(invalid(&format!(
            "params._meta must be an object carrying {VERSION_META:?} and {CAPABILITIES_META:?}"
        )));
    };
    let version = string_of(version);
    if let Some(h) = http {
        if h.repeated {
            return Err(header_mismatch(
                "MCP-Protocol-Version, Mcp-Method and Mcp-Name may each be sent once",
            ));
        }
        if h.protocol_version.is_none()
            || h.protocol_version != version.as_deref().map(str::as_bytes)
        {
            return Err(header_mismatch(
                "the MCP-Protocol-Version header does not match params._meta's protocol version",
            ));
        }
        if h.method != Some(method.as_bytes()) {
            return Err(header_mismatch(
                "the Mcp-Method header does not match the request's method",
            ));
        }
        if NAMED.contains(&method) {
            let body = named.and_then(string_of);
            if let Some(body) = body
                && h.name.and_then(param_headers::decode).as_deref() != Some(&*body)
            {
                return Err(header_mismatch(
                    "the Mcp-Name header does not match the request's name or uri",
                ));
            }
        }
    }
    let Some(version) = version else {
        return Err(invalid(
            "the protocol version in params._meta must be a string",
        ));
    };
    if version != STATELESS {
        return Err(protocol_error(
            crate::jsonrpc::codes::UNSUPPORTED_PROTOCOL_VERSION,
            "Unsupported protocol version",
            Some(json!({ "supported": SUPPORTED, "requested": version })),
        ));
    }
    Ok(())
}

/// A face's answer: a result, or an error in the gateway's terms.
type Answer = Result<Payload, GatewayError>;
/// A result before the era's fields are added.
type Built = Result<Out, GatewayError>;

/// The prompts an upstream of the protocol listed, as it listed them.
pub(super) type OwnPrompts = Arc<Vec<Map<String, Value>>>;

/// A request's params, and the members of them the face reads on every call.
#[derive(Clone, Copy)]
struct Call<'a> {
    params: Option<Json<'a>>,
    name: Option<Json<'a>>,
    arguments: Option<Json<'a>>,
}

/// A result object, as a value or already written (JSON object text).
enum Out {
    Value(Value),
    Written(String),
    /// A tool's own failure (`isError: true`): a result, counted as `tool_error`.
    ToolError(Value),
}

impl From<Value> for Out {
    fn from(v: Value) -> Self {
        Out::Value(v)
    }
}

impl Out {
    fn into_text(self) -> String {
        match self {
            Out::Value(v) | Out::ToolError(v) => v.to_string(),
            Out::Written(t) => t,
        }
    }
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
}

#[derive(Deserialize)]
struct ByUri<'a> {
    #[serde(borrow)]
    uri: Cow<'a, str>,
}

fn invalid(why: &str) -> GatewayError {
    GatewayError::InvalidParams(why.into())
}

/// A tool's result as the protocol carries it: the upstream's own content
/// blocks when the tool produced blocks; otherwise a text block holding the
/// output and, where a schema was listed, `structuredContent`. An error of the
/// tool itself, or arguments the tool's schema refuses, as `isError`.
fn call_result(result: Result<ToolResult, GatewayError>, structured: bool) -> Built {
    let tool_error = |why: &str| {
        Out::ToolError(json!({"content": [{"type": "text", "text": why}], "isError": true}))
    };
    let result = match result {
        Ok(result) => result,
        Err(GatewayError::InvalidArguments(why)) => return Ok(tool_error(&why)),
        Err(GatewayError::Upstream {
            error: CallError::Tool(why),
            ..
        }) => return Ok(tool_error(&why)),
        Err(e) => return Err(e),
    };
    let (kind, output) = result.output();
    if kind == Output::Blocks {
        return Ok(Out::Written(format!(r#"{{"content":{}}}"#, output.get())));
    }
    // Written straight from the output's text: a text block holding it, and
    // the output itself as `structuredContent`.
    let text = serde_json::to_string(output.get()).unwrap_or_default();
    // Room for what the stateless era adds too.
    let mut out = String::with_capacity(text.len() + output.get().len() + 64 + STATELESS_ROOM);
    out.push_str(r#"{"content":[{"type":"text","text":"#);
    out.push_str(&text);
    out.push_str("}]");
    if structured {
        out.push_str(r#","structuredContent":"#);
        out.push_str(output.get());
    }
    out.push('}');
    Ok(Out::Written(out))
}

impl Dispatcher {
    /// The tool or prompt name of a definition the tenant sees.
    fn name_of(&self, kind: Kind, id: &str) -> Option<String> {
        let (upstream, original) = mcpid::parse(&self.inner.gateway_id, id)?;
        let key = match self.upstream(upstream) {
            Some(up) => up.own_key(kind, &original)?,
            None => original.into_owned(),
        };
        let budget = self
            .inner
            .name_budget
            .load(std::sync::atomic::Ordering::Relaxed);
        Some(names::tool_name(upstream, &key, budget))
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

    /// The tool the tenant's listing names `name`: found in the name index
    /// of each of its upstreams' catalogs (made once per catalog).
    /// An upstream that is down keeps its last catalog: its tools are still
    /// found, and a call fails as MCP v1.0's does (-32001, the upstream is
    /// unavailable), not as a tool that does not exist.
    async fn tool_named(&self, tenant: &Tenant, name: &str) -> Option<Arc<FaceTool>> {
        self.wait_for_starting(tenant).await;
        let state = self.inner.state.load();
        tenant
            .upstreams
            .iter()
            .filter_map(|n| state.upstreams.get(n))
            .filter(|u| u.catalog().loaded)
            .find_map(|u| {
                let catalog = u.catalog();
                let index = catalog.face_cache(|c| self.index_tools(c))?;
                index.by_name.get(name).cloned()
            })
    }

    /// Whether the upstream of a namespaced id lists its prompts as its own.
    fn listed_as_its_own(&self, id: &str) -> bool {
        mcpid::upstream_of(&self.inner.gateway_id, id)
            .and_then(|u| self.upstream(u))
            .is_some_and(|u| u.lists_its_own())
    }

    /// The prompts of the tenant's ready upstreams of the protocol, as each listed them.
    pub(super) fn own_prompts(&self, tenant: &Tenant) -> Vec<(Arc<Upstream>, OwnPrompts)> {
        self.upstreams_of(tenant)
            .into_iter()
            .filter(|u| u.lists_its_own() && u.status() == Status::Ready)
            .map(|u| {
                let own = u.own_prompts();
                (u, own)
            })
            .collect()
    }

    /// A prompt as its upstream (of the protocol) listed it, arguments and
    /// all, under the face's name, with its namespaced id in `_meta`.
    fn own_prompt(&self, upstream: &Upstream, prompt: &Map<String, Value>) -> Option<Value> {
        let own = prompt.get("name")?.as_str()?;
        let id = mcpid::namespace(
            &self.inner.gateway_id,
            &upstream.name,
            &mc::original_id(Kind::Prompt, own),
        );
        let mut out = Map::new();
        out.insert("name".into(), self.name_of(Kind::Prompt, &id)?.into());
        out.insert(
            "title".into(),
            prompt.get("title").cloned().unwrap_or_else(|| own.into()),
        );
        copy_members(prompt, &mut out, &["description", "arguments", "icons"]);
        out.insert(
            "_meta".into(),
            meta_with(prompt.get("_meta"), MCPID_META, id.into()),
        );
        Some(Value::Object(out))
    }

    /// `prompts/get` of a prompt of an upstream of the protocol: sent on with
    /// the client's arguments, its result as the upstream gave it. `None`
    /// when no such prompt of the tenant's has this name.
    /// The upstream (of the protocol) and its own name of the prompt the
    /// tenant's listing names `name`.
    fn own_prompt_named(&self, tenant: &Tenant, name: &str) -> Option<(Arc<Upstream>, String)> {
        self.own_prompts(tenant).into_iter().find_map(|(u, own)| {
            let found = own
                .iter()
                .filter_map(|p| p.get("name")?.as_str())
                .find(|p| {
                    let id = mcpid::namespace(
                        &self.inner.gateway_id,
                        &u.name,
                        &mc::original_id(Kind::Prompt, p),
                    );
                    self.name_of(Kind::Prompt, &id).as_deref() == Some(name)
                })?
                .to_owned();
            Some((u, found))
        })
    }

    /// The upstream and its own `uriTemplate` of a template the tenant is
    /// offered as `offered` (the namespaced template, as listed).
    fn own_template_offered(
        &self,
        tenant: &Tenant,
        offered: &str,
    ) -> Option<(Arc<Upstream>, String)> {
        self.upstreams_of(tenant)
            .into_iter()
            .filter(|u| u.lists_its_own() && u.status() == Status::Ready)
            .find_map(|u| {
                let prefix = mcpid::namespace(
                    &self.inner.gateway_id,
                    &u.name,
                    &mc::original_id(Kind::Resource, ""),
                );
                let own = u.own_templates().iter().find_map(|t| {
                    let own = t.get("uriTemplate")?.as_str()?;
                    (mc::namespaced_template(&prefix, own).as_deref() == Some(offered))
                        .then(|| own.to_owned())
                })?;
                Some((u, own))
            })
    }

    /// `completion/complete` of an argument of a prompt or resource template
    /// of an upstream of the protocol: sent to that upstream with its own
    /// name or template in `ref`, its answer passed back; no values when
    /// the upstream offers no completions.
    async fn complete(
        &self,
        tenant: &Tenant,
        params: Option<Json<'_>>,
    ) -> Result<Value, GatewayError> {
        let shape = "params must be an object {\"ref\": {\"type\": \"ref/prompt\", \"name\"} or {\"type\": \"ref/resource\", \"uri\"}, \"argument\": {\"name\", \"value\"}}";
        let mut params: Map<String, Value> = params
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .ok_or_else(|| invalid(shape))?;
        self.wait_for_starting(tenant).await;
        let reference = params
            .get_mut("ref")
            .and_then(Value::as_object_mut)
            .ok_or_else(|| invalid(shape))?;
        let kind = reference.get("type").and_then(Value::as_str).unwrap_or("");
        let (field, found) = match kind {
            "ref/prompt" => {
                let name = reference
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid(shape))?;
                let found = self.own_prompt_named(tenant, name);
                if found.is_none() {
                    return Err(invalid(&format!("Unknown prompt: {name}")));
                }
                ("name", found)
            }
            "ref/resource" => {
                let uri = reference
                    .get("uri")
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid(shape))?;
                let found = self.own_template_offered(tenant, uri);
                if found.is_none() {
                    return Err(invalid(&format!("Unknown resource template: {uri}")));
                }
                ("uri", found)
            }
            _ => return Err(invalid(shape)),
        };
        let Some((upstream, own)) = found else {
            return Err(invalid(shape));
        };
        if !upstream.completes() {
            return Ok(json!({"completion": {"values": [], "hasMore": false}}));
        }
        reference.insert(field.into(), own.into());
        // The client's envelope is its own: the upstream gets its request.
        params.remove("_meta");
        let text = Value::Object(params).to_string();
        let raw: &serde_json::value::RawValue =
            serde_json::from_str(&text).map_err(|_| invalid(shape))?;
        let answer =
            upstream
                .complete(Json::from(raw))
                .await
                .map_err(|error| GatewayError::Upstream {
                    upstream: upstream.name.clone(),
                    error,
                })?;
        serde_json::from_str::<Value>(answer.get())
            .ok()
            .filter(Value::is_object)
            .ok_or_else(|| GatewayError::InvalidOutput {
                upstream: upstream.name.clone(),
                detail: "completion/complete answered something that is not an object".into(),
            })
    }

    async fn get_own_prompt(
        &self,
        tenant: &Tenant,
        name: &str,
        arguments: Option<Json<'_>>,
    ) -> Option<Result<Value, GatewayError>> {
        self.wait_for_starting(tenant).await;
        let (upstream, own) = self.own_prompt_named(tenant, name)?;
        let arguments = match object_arguments(arguments) {
            Ok(a) => a,
            Err(e) => return Some(Err(e)),
        };
        let result = upstream
            .get_prompt(&own, arguments)
            .await
            .map_err(|error| GatewayError::Upstream {
                upstream: upstream.name.clone(),
                error,
            })
            .and_then(|r| {
                serde_json::from_str::<Value>(r.get())
                    .ok()
                    .filter(Value::is_object)
                    .ok_or_else(|| GatewayError::InvalidOutput {
                        upstream: upstream.name.clone(),
                        detail: "prompts/get answered something that is not an object".into(),
                    })
            });
        Some(result)
    }

    /// The resource templates of the tenant's ready upstreams of the
    /// protocol, each as its upstream listed it but with a template whose
    /// expansions are namespaced ids (see `modelcontext::namespaced_template`;
    /// the upstream's own is in `_meta`); those it cannot offer so are left out.
    pub(super) fn templates(&self, tenant: &Tenant) -> Vec<Value> {
        let mut out = Vec::new();
        for u in self.upstreams_of(tenant) {
            if !u.lists_its_own() || u.status() != Status::Ready {
                continue;
            }
            let prefix = mcpid::namespace(
                &self.inner.gateway_id,
                &u.name,
                &mc::original_id(Kind::Resource, ""),
            );
            for t in u.own_templates().iter() {
                let Some(own) = t.get("uriTemplate").and_then(Value::as_str) else {
                    continue;
                };
                let Some(template) = mc::namespaced_template(&prefix, own) else {
                    continue;
                };
                let mut offered = Map::new();
                offered.insert("uriTemplate".into(), template.into());
                copy_members(
                    t,
                    &mut offered,
                    &[
                        "name",
                        "title",
                        "description",
                        "mimeType",
                        "annotations",
                        "icons",
                    ],
                );
                offered.insert(
                    "_meta".into(),
                    meta_with(t.get("_meta"), TEMPLATE_META, own.into()),
                );
                out.push(Value::Object(offered));
            }
        }
        out
    }

    /// The upstream and its own uri that `uri` names, when `uri` is an
    /// expansion of a template the tenant is offered (and the upstream's
    /// uri an expansion of the upstream's own template).
    pub(super) fn template_target(
        &self,
        tenant: &Tenant,
        uri: &str,
    ) -> Option<(Arc<Upstream>, String)> {
        let (name, original) = mcpid::parse(&self.inner.gateway_id, uri)?;
        if !tenant.sees(name) {
            return None;
        }
        let upstream = self
            .upstream(name)
            .filter(|u| u.lists_its_own() && u.status() == Status::Ready)?;
        let own = mc::key_of(Kind::Resource, &original)?;
        let offered = upstream.own_templates().iter().any(|t| {
            t.get("uriTemplate")
                .and_then(Value::as_str)
                .is_some_and(|t| mc::expands_to(t, &own))
        });
        offered.then_some((upstream, own))
    }

    /// Whether `uri` is a resource the tenant can read: one its listings
    /// show, or an expansion of a template it is offered. Only such uris
    /// are subscribed to.
    pub fn readable(&self, tenant: &Tenant, uri: &str) -> bool {
        let Some(name) = mcpid::upstream_of(&self.inner.gateway_id, uri) else {
            return false;
        };
        if !tenant.sees(name) {
            return false;
        }
        let Some(upstream) = self.upstream(name) else {
            return false;
        };
        let listed = upstream
            .catalog()
            .listing(Kind::Resource)
            .items
            .iter()
            .any(|(id, _)| id == uri);
        listed || self.template_target(tenant, uri).is_some()
    }

    /// `resources/read` of an expansion of one of those templates, or of a
    /// link a tool result gave this tenant: read from its upstream now.
    /// `None` when `uri` is neither.
    async fn read_by_template(
        &self,
        tenant: &Tenant,
        uri: &str,
    ) -> Option<Result<Value, GatewayError>> {
        let (upstream, own) = self
            .template_target(tenant, uri)
            .or_else(|| self.link_target(tenant, uri))?;
        Some(self.read_upstream(tenant, &upstream, &own).await)
    }

    /// `tools/list`: each tool the tenant sees, as its catalog's index wrote it.
    async fn list_tools(&self, tenant: &Tenant, era: Era) -> Out {
        self.wait_for_starting(tenant).await;
        let state = self.inner.state.load();
        let mut out = String::from(r#"{"tools":["#);
        let mut first = true;
        for u in tenant
            .upstreams
            .iter()
            .filter_map(|n| state.upstreams.get(n))
        {
            let lists = u.status() == Status::Ready
                && u.capabilities()
                    .is_some_and(|c| c.allows(Kind::Tool.list_method()));
            if !lists {
                continue;
            }
            let catalog = u.catalog();
            let Some(index) = catalog.face_cache(|c| self.index_tools(c)) else {
                continue;
            };
            for (id, handshake, stateless) in &index.listed {
                if !tenant.policy.as_ref().is_none_or(|p| p.allows(id)) {
                    continue;
                }
                if !first {
                    out.push(',');
                }
                first = false;
                let listed = match (era, stateless) {
                    (Era::Stateless, Some(s)) => s,
                    _ => handshake,
                };
                out.push_str(listed);
            }
        }
        out.push_str("]}");
        Out::Written(out)
    }

    /// A catalog's tools by the names this face gives them.
    fn index_tools(&self, catalog: &Catalog) -> FaceIndex {
        let listing = catalog.listing(Kind::Tool);
        let mut index = FaceIndex::default();
        for (id, range) in &listing.items {
            let Some(name) = self.name_of(Kind::Tool, id) else {
                continue;
            };
            // The listing shows no envelope schema for a tool whose blocks pass through.
            let passthrough = catalog.tool(id).is_some_and(|t| t.produces_blocks());
            let Ok(def) = serde_json::from_str::<Map<String, Value>>(&listing.json[range.clone()])
            else {
                continue;
            };
            let output = def.get("outputSchema").filter(|_| !passthrough);
            let object_output =
                output.and_then(|s| s.get("type")).and_then(Value::as_str) == Some("object");
            // The stateless era takes an output schema of any root; the
            // handshake era's only an object's.
            let loose_output = output.is_some() && !object_output;
            let kept = catalog.tool(id).and_then(|t| t.kept.as_deref());
            let id: Arc<str> = id.as_str().into();
            let handshake = render_tool(&name, &def, kept, &id, output.filter(|_| object_output));
            let stateless = loose_output.then(|| render_tool(&name, &def, kept, &id, output));
            index.listed.push((id.clone(), handshake, stateless));
            index.by_name.insert(
                name,
                Arc::new(FaceTool {
                    mirrors: def
                        .get("inputSchema")
                        .map(param_headers::mirrors)
                        .unwrap_or_default(),
                    id,
                    structured: object_output,
                    loose_output,
                }),
            );
        }
        index
    }

    /// Answers one request of the Model Context Protocol for `tenant`,
    /// counting it; also says which era it was in.
    pub async fn request_mcp(
        &self,
        tenant: &Tenant,
        method: &str,
        params: Option<Json<'_>>,
        via: Via<'_>,
    ) -> (Answer, Era) {
        let started = std::time::Instant::now();
        let [meta, name, uri, arguments] = members(params, ["_meta", "name", "uri", "arguments"]);
        let named = if method == "resources/read" {
            uri
        } else {
            name
        };
        let call = Call {
            params,
            name,
            arguments,
        };
        let envelope = members(meta, [VERSION_META, CAPABILITIES_META]);
        let era = Era::given(method, envelope[0].is_some(), via.http.as_ref());
        let result = match era {
            Era::Handshake => {
                self.answer_mcp(tenant, method, call, era, via, started)
                    .await
            }
            // What the revision removed does not exist in it, whatever else
            // the request carries (-32601, HTTP 404).
            Era::Stateless if HANDSHAKE_ONLY.contains(&method) => Err(GatewayError::MethodNotFound),
            Era::Stateless => match check_stateless(method, named, envelope, via.http.as_ref()) {
                Err(e) => Err(e),
                Ok(()) => self
                    .answer_mcp(tenant, method, call, era, via, started)
                    .await
                    .map(|out| stateless_result(method, out))
                    // That revision's "not found" is invalid params.
                    .map_err(|e| match e {
                        GatewayError::ResourceNotFound(uri) => {
                            invalid(&format!("Unknown resource: {uri}"))
                        }
                        e => e,
                    }),
            },
        };
        let outcome = match &result {
            Ok(Out::ToolError(_)) => "tool_error",
            Ok(_) => "ok",
            Err(e) => e.outcome(),
        };
        let result = result.map(|out| Payload::Text(out.into_text()));
        let label = METHODS
            .iter()
            .find(|m| **m == method)
            .copied()
            .unwrap_or("other");
        let metrics = &self.inner.metrics;
        metrics
            .requests
            .with_label_values(&[&tenant.name, label, outcome])
            .inc();
        metrics
            .request_seconds
            .with_label_values(&[label])
            .observe(started.elapsed().as_secs_f64());
        (result, era)
    }

    /// What the face offers `tenant`, as both eras declare it.
    async fn offers(&self, tenant: &Tenant, era: Era, notifies: bool) -> Map<String, Value> {
        let caps = self.hello(tenant).await;
        let mut capabilities = Map::new();
        if caps.list_tools_provider {
            capabilities.insert("tools".into(), json!({ "listChanged": notifies }));
        }
        if caps.list_resources_provider {
            capabilities.insert(
                "resources".into(),
                json!({ "listChanged": notifies, "subscribe": notifies }),
            );
        }
        if caps.list_prompts_provider {
            capabilities.insert("prompts".into(), json!({ "listChanged": notifies }));
        }
        if era == Era::Handshake {
            capabilities.insert("logging".into(), json!({}));
        }
        let completes = self
            .upstreams_of(tenant)
            .iter()
            .any(|u| u.status() == Status::Ready && u.completes());
        if completes {
            capabilities.insert("completions".into(), json!({}));
        }
        capabilities
    }

    /// `tools/call`: the tool the tenant's listing names, run as
    /// `mcp/executeTool` runs it; audited whether it ran or was refused.
    async fn call_named(
        &self,
        tenant: &Tenant,
        call: Call<'_>,
        era: Era,
        via: Via<'_>,
        started: std::time::Instant,
    ) -> Built {
        let mut audit = execute::Audit::new(super::PROTOCOL_MCP);
        let (tool, result) = match self.run_named(tenant, call, era, via, &mut audit).await {
            Ok(ran) => ran,
            Err(refused) => {
                if audit.enabled() {
                    let name = call.name.and_then(string_of);
                    audit.refused(name.as_deref(), call.arguments);
                    audit.log_outcome(tenant, refused.outcome(), started.elapsed());
                }
                return Err(refused);
            }
        };
        if audit.enabled() {
            audit.log(tenant, &result, started.elapsed());
        }
        let structured = tool.structured || (tool.loose_output && era == Era::Stateless);
        let blocks = matches!(&result, Ok(r) if r.output().0 == Output::Blocks);
        let out = call_result(result, structured)?;
        Ok(match out {
            // Links the upstream's own blocks carry become uris the gateway serves.
            Out::Written(text) if blocks && text.contains("\"uri\"") => {
                self.with_links(tenant, &tool.id, text)
            }
            out => out,
        })
    }

    /// A passed-through result (`{"content": [...]}`) with its links rewritten.
    fn with_links(&self, tenant: &Tenant, tool: &str, text: String) -> Out {
        let upstream =
            mcpid::upstream_of(&self.inner.gateway_id, tool).and_then(|u| self.upstream(u));
        let (Some(upstream), Ok(mut result)) = (upstream, serde_json::from_str::<Value>(&text))
        else {
            return Out::Written(text);
        };
        let rewritten = result
            .get_mut("content")
            .is_some_and(|content| self.rewrite_links(tenant, &upstream, content));
        if rewritten {
            Out::Value(result)
        } else {
            Out::Written(text)
        }
    }

    /// The checks of a `tools/call` that come before the tool runs (its
    /// name, its arguments' shape, the mirrored headers), then the call.
    async fn run_named(
        &self,
        tenant: &Tenant,
        call: Call<'_>,
        era: Era,
        via: Via<'_>,
        audit: &mut execute::Audit,
    ) -> Result<(Arc<FaceTool>, Result<ToolResult, GatewayError>), GatewayError> {
        let name = call
            .name
            .and_then(string_of)
            .filter(|_| call.params.is_some_and(|p| p.get().starts_with('{')))
            .ok_or_else(|| {
                invalid("params must be an object {\"name\": string, \"arguments\"?: object}")
            })?;
        let Some(tool) = self.tool_named(tenant, &name).await else {
            return Err(GatewayError::UnknownTool(name.into_owned()));
        };
        let arguments = object_arguments(call.arguments)?;
        if era == Era::Stateless
            && !tool.mirrors.is_empty()
            && let Some(http) = via.http
        {
            let args: Value = serde_json::from_str(arguments.get()).unwrap_or(Value::Null);
            let sent = |name: &str| -> Vec<&[u8]> {
                http.all.map_or_else(Vec::new, |all| all.values(name))
            };
            param_headers::check(&tool.mirrors, &args, sent)
                .map_err(|why| header_mismatch(&why))?;
        }
        let result = self
            .call_tool(tenant, Cow::Borrowed(&*tool.id), arguments, audit)
            .await;
        Ok((tool, result))
    }

    async fn answer_mcp(
        &self,
        tenant: &Tenant,
        method: &str,
        call: Call<'_>,
        era: Era,
        via: Via<'_>,
        started: std::time::Instant,
    ) -> Built {
        match method {
            "tools/call" => return self.call_named(tenant, call, era, via, started).await,
            "tools/list" => return Ok(self.list_tools(tenant, era).await),
            _ => {}
        }
        let params = call.params;
        let answer: Result<Value, GatewayError> = match method {
            "initialize" => Ok(json!({
                "protocolVersion": negotiated(params),
                "capabilities": self.offers(tenant, era, via.notifies).await,
                "serverInfo": server_info(),
            })),
            "server/discover" => Ok(json!({
                "supportedVersions": SUPPORTED,
                "capabilities": self.offers(tenant, era, true).await,
            })),
            "ping" | "logging/setLevel" => Ok(json!({})),
            "completion/complete" => self.complete(tenant, params).await,
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
                Ok(json!({ "resources": resources }))
            }
            "resources/templates/list" => {
                self.wait_for_starting(tenant).await;
                Ok(json!({"resourceTemplates": self.templates(tenant)}))
            }
            "resources/read" => {
                let read = params
                    .and_then(|p| serde_json::from_str::<ByUri<'_>>(p.get()).ok())
                    .ok_or_else(|| invalid("params must be an object {\"uri\": string}"))?;
                let defs = definitions(self.listing_when_started(tenant, Kind::Resource).await);
                let Some(def) = defs
                    .into_iter()
                    .find(|d| d.get("mcpId").and_then(Value::as_str) == Some(&read.uri))
                else {
                    return match self.read_by_template(tenant, &read.uri).await {
                        Some(answer) => answer.map(Out::Value),
                        None => Err(GatewayError::ResourceNotFound(read.uri.into_owned())),
                    };
                };
                Ok(json!({"contents": [{
                    "uri": read.uri,
                    "mimeType": def.get("mediaType"),
                    "text": def.get("content"),
                }]}))
            }
            "prompts/list" => {
                let defs = definitions(self.listing_when_started(tenant, Kind::Prompt).await);
                let mut prompts: Vec<Value> = defs
                    .into_iter()
                    .filter_map(|def| {
                        let id = def.get("mcpId")?.as_str()?.to_owned();
                        // An upstream of the protocol has its prompts listed as it listed them, below.
                        if self.listed_as_its_own(&id) {
                            return None;
                        }
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
                for (upstream, own) in self.own_prompts(tenant) {
                    prompts.extend(own.iter().filter_map(|p| self.own_prompt(&upstream, p)));
                }
                Ok(json!({ "prompts": prompts }))
            }
            "prompts/get" => {
                let get = params
                    .and_then(|p| serde_json::from_str::<Named<'_>>(p.get()).ok())
                    .ok_or_else(|| invalid("params must be an object {\"name\": string}"))?;
                if let Some(answer) = self.get_own_prompt(tenant, &get.name, call.arguments).await {
                    return answer.map(Out::Value);
                }
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
                Ok(result)
            }
            _ => Err(GatewayError::MethodNotFound),
        };
        answer.map(Out::Value)
    }
}

/// A tool as the face lists it: its name, the MCP v1.0 name as its title
/// (unless the upstream gave one), what the upstream's own definition kept
/// (annotations, icons, execution, `_meta`), and the namespaced id in `_meta`.
fn render_tool(
    name: &str,
    def: &Map<String, Value>,
    kept: Option<&str>,
    id: &str,
    output: Option<&Value>,
) -> Box<str> {
    let kept: Map<String, Value> = kept
        .and_then(|k| serde_json::from_str(k).ok())
        .unwrap_or_default();
    let mut tool = Map::new();
    tool.insert("name".into(), name.into());
    if let Some(title) = kept.get("title").or_else(|| def.get("name")) {
        tool.insert("title".into(), title.clone());
    }
    tool.insert(
        "description".into(),
        def.get("description").cloned().unwrap_or_default(),
    );
    // The protocol's input schemas have an object root (arguments are an
    // object); one without says so by wrapping, which accepts the same objects.
    let input = match def.get("inputSchema") {
        Some(schema) if schema.get("type").and_then(Value::as_str) == Some("object") => {
            schema.clone()
        }
        Some(schema) => json!({"type": "object", "allOf": [schema]}),
        None => json!({"type": "object"}),
    };
    tool.insert("inputSchema".into(), input);
    if let Some(output) = output {
        tool.insert("outputSchema".into(), output.clone());
    }
    copy_members(&kept, &mut tool, &["annotations", "icons", "execution"]);
    tool.insert(
        "_meta".into(),
        meta_with(kept.get("_meta"), MCPID_META, id.into()),
    );
    Value::Object(tool).to_string().into_boxed_str()
}

/// The members named `keys` that `from` has, copied into `to`.
fn copy_members(from: &Map<String, Value>, to: &mut Map<String, Value>, keys: &[&str]) {
    for key in keys {
        if let Some(v) = from.get(*key) {
            to.insert((*key).into(), v.clone());
        }
    }
}

/// An upstream's own `_meta` (if it is an object) with the gateway's `key` added.
fn meta_with(own: Option<&Value>, key: &str, value: Value) -> Value {
    let mut meta = match own {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    meta.insert(key.into(), value);
    Value::Object(meta)
}

/// A call's `arguments`: an object, `{}` when absent.
fn object_arguments(arguments: Option<Json<'_>>) -> Result<Json<'_>, GatewayError> {
    let arguments = arguments.unwrap_or(Json::EMPTY_OBJECT);
    if arguments.get().starts_with('{') {
        Ok(arguments)
    } else {
        Err(invalid("params.arguments must be an object"))
    }
}

fn server_info() -> Value {
    json!({"name": "mcp-gateway", "version": env!("CARGO_PKG_VERSION")})
}

/// A stateless-era result: `resultType`, the server's identity in `_meta`,
/// and for cacheable results `ttlMs` 0 and `cacheScope` private (listings
/// follow upstreams and reloads the gateway cannot foresee, and differ per
/// tenant; `subscriptions/listen` says when they change).
fn stateless_result(method: &str, result: Out) -> Out {
    match result {
        Out::ToolError(v) => match stateless_result(method, Out::Value(v)) {
            Out::Value(v) => Out::ToolError(v),
            other => other,
        },
        Out::Value(mut result) => {
            if let Value::Object(m) = &mut result {
                m.insert("resultType".into(), "complete".into());
                let meta = m.entry("_meta").or_insert_with(|| json!({}));
                if let Value::Object(meta) = meta {
                    meta.insert(SERVER_INFO_META.into(), server_info());
                }
                if CACHEABLE.contains(&method) {
                    m.insert("ttlMs".into(), 0.into());
                    m.insert("cacheScope".into(), "private".into());
                }
            }
            Out::Value(result)
        }
        // Written results are the face's own, without `_meta`: the fields go
        // before the closing brace.
        Out::Written(mut text) => {
            if text.ends_with('}') {
                text.pop();
                text.push_str(STATELESS_FIELDS);
                if CACHEABLE.contains(&method) {
                    text.push_str(r#","ttlMs":0,"cacheScope":"private""#);
                }
                text.push('}');
            }
            Out::Written(text)
        }
    }
}

/// What the stateless era adds to a written result, at most.
const STATELESS_ROOM: usize = STATELESS_FIELDS.len() + 40;
/// What every stateless-era result carries, as JSON members.
const STATELESS_FIELDS: &str = concat!(
    r#","resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"mcp-gateway","version":""#,
    env!("CARGO_PKG_VERSION"),
    r#""}}"#
);

/// What a `subscriptions/listen` hears: the listings it asked for, and the
/// resources it asked for that the tenant can read (their bytes held in the
/// tenant's subscription budget while the listen is open).
#[derive(Default)]
pub struct Filter {
    pub tools_list_changed: bool,
    pub prompts_list_changed: bool,
    pub resources_list_changed: bool,
    pub resources: Subscribed,
}

impl Filter {
    /// Whether a listen with this filter hears `change`.
    pub fn hears(&self, change: &Change) -> bool {
        match change {
            Change::Listing(Kind::Tool) => self.tools_list_changed,
            Change::Listing(Kind::Prompt) => self.prompts_list_changed,
            Change::Listing(Kind::Resource) => self.resources_list_changed,
            Change::Resource(uri) => self.resources.contains(uri),
        }
    }

    /// The subset honoured, as the acknowledgment states it (fields not asked for are left out).
    fn honoured(&self) -> Value {
        let mut m = Map::new();
        for (key, on) in [
            ("toolsListChanged", self.tools_list_changed),
            ("promptsListChanged", self.prompts_list_changed),
            ("resourcesListChanged", self.resources_list_changed),
        ] {
            if on {
                m.insert(key.into(), true.into());
            }
        }
        if !self.resources.is_empty() {
            let mut uris: Vec<&str> = self.resources.iter().collect();
            uris.sort_unstable();
            m.insert("resourceSubscriptions".into(), json!(uris));
        }
        Value::Object(m)
    }
}

impl Dispatcher {
    /// The checks of a `subscriptions/listen` request (those of every
    /// stateless request), then what it will hear. The uris it asks for are
    /// bounded in bytes (with its id, as a session's subscriptions are)
    /// before they are read; those the tenant cannot read are left out of
    /// what is honoured, and the rest is held in the tenant's budget.
    pub fn open_listen(
        &self,
        tenant: &Tenant,
        id: Json<'_>,
        params: Option<Json<'_>>,
        http: Option<&Mirrored<'_>>,
    ) -> Result<Filter, GatewayError> {
        let envelope = members(meta_of(params), [VERSION_META, CAPABILITIES_META]);
        check_stateless("subscriptions/listen", None, envelope, http)?;
        #[derive(Deserialize, Default)]
        #[serde(rename_all = "camelCase")]
        struct Asked<'a> {
            #[serde(default)]
            tools_list_changed: bool,
            #[serde(default)]
            prompts_list_changed: bool,
            #[serde(default)]
            resources_list_changed: bool,
            #[serde(borrow, default)]
            resource_subscriptions: Option<&'a serde_json::value::RawValue>,
        }
        #[derive(Deserialize)]
        struct Params<'a> {
            #[serde(borrow, default)]
            notifications: Option<Asked<'a>>,
        }
        let shape = "params.notifications must be an object of booleans and resourceSubscriptions, a list of uris";
        let asked = params
            .map(|p| serde_json::from_str::<Params<'_>>(p.get()))
            .transpose()
            .map_err(|_| invalid(shape))?
            .and_then(|p| p.notifications)
            .unwrap_or_default();
        let budget = self.subscription_budget();
        let mut filter = Filter {
            tools_list_changed: asked.tools_list_changed,
            prompts_list_changed: asked.prompts_list_changed,
            resources_list_changed: asked.resources_list_changed,
            resources: Subscribed::default(),
        };
        let Some(raw) = asked.resource_subscriptions else {
            return Ok(filter);
        };
        // The text bounds what reading it can cost.
        if id.get().len() + raw.get().len() > budget.per_session {
            return Err(invalid(&format!(
                "a listen's id and resourceSubscriptions take at most {} bytes",
                budget.per_session
            )));
        }
        let uris: Vec<Cow<'_, str>> =
            serde_json::from_str(raw.get()).map_err(|_| invalid(shape))?;
        for uri in uris {
            if !self.readable(tenant, &uri) {
                continue;
            }
            filter
                .resources
                .add(budget, &tenant.name, &uri)
                .map_err(|refused| match refused {
                    subscriptions::Refused::Session(_) => invalid(&refused.explain()),
                    subscriptions::Refused::Tenant(_) => GatewayError::OverCapacity {
                        reason: "subscription budget",
                        retry_after_secs: 1,
                    },
                })?;
        }
        Ok(filter)
    }
}

fn notification(method: &str, params: &str) -> Vec<u8> {
    format!(r#"{{"jsonrpc":"2.0","method":"{method}","params":{params}}}"#).into_bytes()
}

/// The `_meta` that tags every message of a listen: written once, from its id's text.
pub fn listen_tag(id: Json<'_>) -> Box<str> {
    format!(r#"{{"{SUBSCRIPTION_META}":{}}}"#, id.get()).into_boxed_str()
}

/// The first message of a listen: what it will hear, tagged with its id.
pub fn acknowledged(tag: &str, filter: &Filter) -> Vec<u8> {
    notification(
        "notifications/subscriptions/acknowledged",
        &format!(r#"{{"_meta":{tag},"notifications":{}}}"#, filter.honoured()),
    )
}

/// The answer that ends a listen gracefully (the gateway is shutting down).
pub fn listen_ended(id: Json<'_>, tag: &str) -> Vec<u8> {
    format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{"resultType":"complete","_meta":{tag}}}}}"#,
        id.get()
    )
    .into_bytes()
}

/// The notification `change` becomes; on a listen, tagged (see [`listen_tag`]).
pub fn change_notification(change: &Change, tag: Option<&str>) -> Vec<u8> {
    let (method, uri) = match change {
        Change::Listing(Kind::Tool) => ("notifications/tools/list_changed", None),
        Change::Listing(Kind::Prompt) => ("notifications/prompts/list_changed", None),
        Change::Listing(Kind::Resource) => ("notifications/resources/list_changed", None),
        Change::Resource(uri) => ("notifications/resources/updated", Some(&**uri)),
    };
    let mut params = String::from("{");
    if let Some(uri) = uri {
        params.push_str(r#""uri":"#);
        params.push_str(&serde_json::to_string(uri).unwrap_or_default());
    }
    if let Some(tag) = tag {
        if uri.is_some() {
            params.push(',');
        }
        params.push_str(r#""_meta":"#);
        params.push_str(tag);
    }
    params.push('}');
    notification(method, &params)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::JsonBuf;
    use crate::jsonrpc::scan::members_of;

    /// A result whose output is the member `key` of `text`.
    fn result(text: &str, key: &str, output: Output) -> ToolResult {
        let raw: &serde_json::value::RawValue = serde_json::from_str(text).unwrap();
        let answer: JsonBuf = Json::from(raw).to_buf();
        let at = answer.range_of(members_of(answer.as_json(), [key]).unwrap()[0].unwrap());
        ToolResult::new(answer, at, output, key == "output")
    }

    fn written(built: Built) -> Value {
        match built {
            Ok(Out::Written(text)) => serde_json::from_str(&text).unwrap(),
            Ok(Out::ToolError(v)) => json!({"toolError": v}),
            Ok(Out::Value(_)) => panic!("a tool's result is written, not built"),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn a_tools_result_is_rendered_once_from_what_the_tool_produced() {
        // Blocks pass through as the upstream sent them, links and all.
        let blocks =
            r#"{"content":[{"type":"resource_link","uri":"file:///a","name":"a"}],"extra":1}"#;
        assert_eq!(
            written(call_result(
                Ok(result(blocks, "content", Output::Blocks)),
                false
            )),
            json!({"content": [{"type": "resource_link", "uri": "file:///a", "name": "a"}]})
        );
        // A value: a text block holding it, and `structuredContent` where a schema was listed.
        let value = r#"{"output":{"t":"\"q\""}}"#;
        assert_eq!(
            written(call_result(
                Ok(result(value, "output", Output::Value)),
                true
            )),
            json!({"content": [{"type": "text", "text": r#"{"t":"\"q\""}"#}], "structuredContent": {"t": "\"q\""}})
        );
        let structured =
            r#"{"content":[{"type":"text","text":"ignored"}],"structuredContent":[1,2]}"#;
        assert_eq!(
            written(call_result(
                Ok(result(structured, "structuredContent", Output::Value)),
                false
            )),
            json!({"content": [{"type": "text", "text": "[1,2]"}]})
        );
        // The tool's own failure, and arguments its schema refuses, are tool errors.
        let failed = GatewayError::Upstream {
            upstream: "u".into(),
            error: CallError::Tool("boom".into()),
        };
        assert_eq!(
            written(call_result(Err(failed), false)),
            json!({"toolError": {"content": [{"type": "text", "text": "boom"}], "isError": true}})
        );
        assert!(matches!(
            call_result(Err(GatewayError::ToolDenied("t".into())), false),
            Err(GatewayError::ToolDenied(_))
        ));
    }
}
