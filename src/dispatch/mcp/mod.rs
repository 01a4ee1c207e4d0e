//! The Model Context Protocol's face, [`ModelContext`], for agents that speak
//! it (the official SDKs' clients and the hosts built on them): the handshake
//! era (`initialize` with `protocolVersion`, `ping`, `tools/*`,
//! `resources/*`, `prompts/*`) answered statelessly over the same neutral
//! operations as MCP v1.0's face, so any replica serves any request. Tool
//! and prompt names follow `modelcontext::names`; the namespaced mcpId
//! travels in `_meta` under [`MCPID_META`].
//!
//! Here: the protocol's constants, how a request is told to be of it, and
//! which era it is in. `answer` routes a request; `stateless` holds the
//! 2026-07-28 revision's rules; `tools`, `prompts`, `resources` and `listen`
//! answer their methods.

use std::borrow::Cow;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::Standing;
use super::watch::Change;
use super::{Audit, Dispatcher, Payload};
use crate::error::GatewayError;
use crate::jsonrpc::{Json, JsonBuf};
use crate::modelcontext::{self as mc, names, param_headers};
use crate::protocol::catalog::Catalog;
use crate::protocol::tool_result::{Cut, Output, ToolResult};
use crate::protocol::{Kind, mcpid};
use crate::tenant::Tenant;
use crate::tenant::subscriptions::{self, Subscribed};
use crate::upstream::progress::Report;
use crate::upstream::{CallError, Status, Upstream};
use face_index::{FaceIndex, FaceTool, Listed};

/// Whether `text` holds `needle`, by a searcher made once for it (a request's
/// hot path asks the same few questions of every request).
macro_rules! holds {
    ($text:expr, $needle:expr) => {{
        static FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
            std::sync::LazyLock::new(|| memchr::memmem::Finder::new($needle));
        FINDER.find($text.as_bytes()).is_some()
    }};
}

mod answer;
mod asking;
mod curated;
mod discovery;
mod face_index;
mod face_names;
mod listen;
mod loading;
mod prompts;
mod resources;
mod stateless;
mod tasks;
mod tools;

pub use asking::{Asking, ClientCan};
pub use listen::*;
pub use stateless::*;
use tasks::*;
use tools::*;

/// Where a definition's namespaced mcpId travels in `_meta` (outside the
/// protocol's reserved `io.modelcontextprotocol/` prefix).
pub const MCPID_META: &str = "dev.mcp-gateway/mcpId";
/// The handshake-era revisions the face negotiates (a client's own is
/// echoed when it is one of them, the newest otherwise).
pub const REVISIONS: [&str; 3] = ["2025-03-26", "2025-06-18", "2025-11-25"];
/// The stateless era's revision: no handshake, `_meta` on every request.
pub const STATELESS: &str = crate::modelcontext::STATELESS_REVISION;
/// Every revision the face serves, newest first: what `server/discover` and
/// an unsupported version's error name.
pub const SUPPORTED: [&str; 4] = [STATELESS, "2025-11-25", "2025-06-18", "2025-03-26"];

use crate::modelcontext::{CAPABILITIES_META, VERSION_META};
const SERVER_INFO_META: &str = "io.modelcontextprotocol/serverInfo";
use crate::modelcontext::LOG_LEVEL_META;
/// Where a resource template's own `uriTemplate` (the upstream's) travels in `_meta`.
pub const TEMPLATE_META: &str = "dev.mcp-gateway/uriTemplate";
/// Tags every message of a `subscriptions/listen` stream.
pub const SUBSCRIPTION_META: &str = "io.modelcontextprotocol/subscriptionId";

/// The protocol's methods that the face answers or knows (a closed set, also
/// the `method` label of its metrics).
const METHODS: [&str; 21] = [
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
    "tasks/get",
    "tasks/result",
    "tasks/list",
    "tasks/cancel",
    "tasks/update",
];

/// Methods that exist only in the stateless era (`tasks/update`: the tasks
/// extension's).
const STATELESS_ONLY: [&str; 3] = ["server/discover", "subscriptions/listen", "tasks/update"];
/// Methods the stateless era removed.
const HANDSHAKE_ONLY: [&str; 7] = [
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
    // The tasks extension has neither (a task's result comes with `tasks/get`).
    "tasks/result",
    "tasks/list",
];
/// Requests whose name (or uri, or task id) the `Mcp-Name` header mirrors.
const NAMED: [&str; 6] = [
    "tools/call",
    "prompts/get",
    "resources/read",
    "tasks/get",
    "tasks/cancel",
    "tasks/update",
];
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
    // Text without the key, and without an escape that could spell it, has none.
    let text = params?.get();
    if !holds!(text, "\"_meta\"") && memchr::memchr(b'\\', text.as_bytes()).is_none() {
        return None;
    }
    let [meta] = members(params, ["_meta"]);
    meta
}

/// What a request's `params._meta` carries of trace context
/// (`traceparent`, `tracestate`, `baggage`), read only when its text
/// names a `traceparent` at all.
pub fn trace_meta(params: Option<Json<'_>>) -> [Option<Cow<'_, str>>; 3] {
    if params.is_none_or(|p| !holds!(p.get(), "traceparent")) {
        return [None, None, None];
    }
    members(meta_of(params), ["traceparent", "tracestate", "baggage"])
        .map(|v| v.and_then(string_of))
}

/// What a request names (a tool's or prompt's name, an MCP v1.0 tool's
/// id), for the span that answers it.
pub fn target_of(params: Option<Json<'_>>) -> Option<Cow<'_, str>> {
    let [name, id] = members(params, ["name", "id"]);
    name.or(id).and_then(string_of)
}

/// The protocol version a request's `_meta` names (the 2026-07-28 revision's).
pub fn meta_version(params: Option<Json<'_>>) -> Option<Cow<'_, str>> {
    let [version] = members(meta_of(params), [VERSION_META]);
    version.and_then(string_of)
}

use crate::jsonrpc::scan::members;

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
    /// Where messages to the client go before its answer (each one JSON-RPC
    /// message): a call's progress, when the client asked for it. `None`:
    /// the transport has nowhere to put them, and the call reports none.
    pub progress: Option<Outlet<'a>>,
    /// The level a handshake-era client set with `logging/setLevel` on its
    /// session; `None`: none set (every level), or no session.
    pub log_level: Option<LogLevel>,
    /// Where the client can be asked by an upstream during its calls (a
    /// handshake-era client with a stream back to it); `None`: it cannot.
    pub asks: Option<&'a Asking<'a>>,
    /// The request's params as the face reads them, when whoever looked at
    /// the request first scanned them already (for this request: a `Via`
    /// shared by several messages carries none).
    pub scanned: Option<&'a Scanned<'a>>,
    /// The request's place among its tenant's calls in flight, which a
    /// call held across its client's rounds takes (see `Place`).
    pub place: Option<&'a crate::dispatch::Place>,
    /// Where the client's session keeps the tools it loaded (`load_tools`);
    /// `None`: no session, and no loading.
    pub tools: Option<&'a dyn crate::dispatch::discovery::loaded::SessionTools>,
}

/// Where messages for a client go before its answer (its call's progress
/// and log lines, requests of the upstream's it is asked).
#[derive(Clone, Copy)]
pub enum Outlet<'a> {
    /// A session's own outgoing channel, bounded by its backlog.
    Session(&'a tokio::sync::mpsc::Sender<Vec<u8>>),
    /// One call's stream, bounded in bytes per call and per tenant (see
    /// `crate::tenant::reports`).
    Call(&'a crate::tenant::reports::ReportSender<Vec<u8>>),
}

impl Outlet<'_> {
    /// Puts `message` out, never waiting: a report (`droppable`) may be
    /// lost to a client that does not read; a request for the client is
    /// handed back when there is no room, for its sender to refuse.
    pub fn try_send(&self, message: Vec<u8>, droppable: bool) -> Result<(), Vec<u8>> {
        match self {
            Outlet::Session(out) => out.try_send(message).map_err(|e| e.into_inner()),
            Outlet::Call(out) => {
                let bytes = message.len();
                out.push(message, bytes, droppable)
            }
        }
    }
}

/// What the face reads of every request's params (its `_meta`, the
/// members that name its target and its arguments, the 2026-07-28
/// revision's envelope and rounds, what asks for reports and traces):
/// scanned once, one pass over the params and one over `_meta`, where the
/// request is first looked at, and handed on.
#[derive(Clone, Copy)]
pub struct Scanned<'a> {
    call: Call<'a>,
    /// What names the request's target: `uri` for `resources/read`, `taskId`
    /// for a task's requests, `name` otherwise.
    named: Option<Json<'a>>,
    /// The version and the client capabilities `_meta` names.
    envelope: [Option<Json<'a>>; 2],
    /// `_meta.progressToken`.
    progress_token: Option<Json<'a>>,
    /// Whether `_meta` carries a `traceparent`.
    traced: bool,
}

impl<'a> Scanned<'a> {
    /// Scans a request's params.
    pub fn of(method: &str, params: Option<Json<'a>>) -> Self {
        // One pass over params, `_meta` read where it stands.
        let (
            [_, name, uri, arguments, task, responses, state],
            [
                version,
                capabilities,
                progress_token,
                log_level,
                traceparent,
            ],
        ) = crate::jsonrpc::scan::members_nested(
            params,
            [
                "_meta",
                "name",
                "uri",
                "arguments",
                "task",
                "inputResponses",
                "requestState",
            ],
            0,
            [
                VERSION_META,
                CAPABILITIES_META,
                "progressToken",
                LOG_LEVEL_META,
                "traceparent",
            ],
        );
        let named = match method {
            "resources/read" => uri,
            "tasks/get" | "tasks/cancel" | "tasks/update" => members(params, ["taskId"])[0],
            _ => name,
        };
        Scanned {
            call: Call {
                params,
                name,
                arguments,
                task,
                answers: [responses, state],
                capabilities,
                log_level,
            },
            named,
            envelope: [version, capabilities],
            progress_token,
            traced: traceparent.is_some(),
        }
    }

    /// Whether it continues an `input_required` round: a `tools/call`
    /// carrying `requestState` (see `crate::dispatch::continues_round`).
    pub fn continues_round(&self, method: &str) -> bool {
        method == "tools/call" && self.call.answers[1].is_some()
    }

    /// Whether `_meta` carries trace context (what [`trace_meta`] reads).
    pub fn traced(&self) -> bool {
        self.traced
    }

    /// The era the request is in: [`Era::of_request`], from what was scanned.
    pub fn era(&self, method: &str, http: Option<&Mirrored<'_>>) -> Era {
        Era::given(method, self.envelope[0].is_some(), http)
    }

    /// Whether a call may report before its answer (its `_meta` carries a
    /// `progressToken` or a 2026-07-28 log level that can be read): its
    /// transport then gives it somewhere to put the reports.
    pub fn may_report(&self, method: &str) -> bool {
        method == "tools/call"
            && (self.progress_token.is_some() || self.call.log_level.is_some())
            && matches!(asked_reports(self.call.params), (Some(_), _) | (_, Some(_)))
    }
}

/// The protocol's log levels, least severe first (RFC 5424's, as the
/// protocol names them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

impl LogLevel {
    pub fn parse(name: &str) -> Option<LogLevel> {
        Some(match name {
            "debug" => LogLevel::Debug,
            "info" => LogLevel::Info,
            "notice" => LogLevel::Notice,
            "warning" => LogLevel::Warning,
            "error" => LogLevel::Error,
            "critical" => LogLevel::Critical,
            "alert" => LogLevel::Alert,
            "emergency" => LogLevel::Emergency,
            _ => return None,
        })
    }

    /// Its name in the protocol.
    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Notice => "notice",
            LogLevel::Warning => "warning",
            LogLevel::Error => "error",
            LogLevel::Critical => "critical",
            LogLevel::Alert => "alert",
            LogLevel::Emergency => "emergency",
        }
    }

    /// The level a JSON value names (a string), if it is one.
    fn of(value: Option<Json<'_>>) -> Option<LogLevel> {
        LogLevel::parse(&string_of(value?)?)
    }
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

    /// [`Era::of`] a request's params, whose `_meta` is read only when its
    /// headers and method leave the era open.
    pub fn of_request(method: &str, params: Option<Json<'_>>, http: Option<&Mirrored<'_>>) -> Era {
        if header_says(http) || STATELESS_ONLY.contains(&method) {
            return Era::Stateless;
        }
        Era::of(method, meta_of(params), http)
    }

    /// [`Era::of`], once it is known whether `_meta` names a version.
    fn given(method: &str, meta_says: bool, http: Option<&Mirrored<'_>>) -> Era {
        if header_says(http) || meta_says || STATELESS_ONLY.contains(&method) {
            Era::Stateless
        } else {
            Era::Handshake
        }
    }
}

/// Whether an `MCP-Protocol-Version` header names a revision that is not of the handshake era.
fn header_says(http: Option<&Mirrored<'_>>) -> bool {
    http.and_then(|h| h.protocol_version)
        .is_some_and(|v| !REVISIONS.iter().any(|r| r.as_bytes() == v))
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

/// A face's answer: a result, or an error in the gateway's terms.
type Answer = Result<Payload, GatewayError>;
/// A result before the era's fields are added.
type Built = Result<Out, GatewayError>;

/// The Model Context Protocol's face over the core, both eras.
#[derive(Clone, Copy)]
pub struct ModelContext<'a> {
    core: &'a Dispatcher,
}

impl<'a> ModelContext<'a> {
    pub fn new(core: &'a Dispatcher) -> Self {
        ModelContext { core }
    }
}

/// A request's params, and the members of them the face reads on every call.
#[derive(Clone, Copy)]
struct Call<'a> {
    params: Option<Json<'a>>,
    name: Option<Json<'a>>,
    arguments: Option<Json<'a>>,
    /// `params.task`: a call made a task.
    task: Option<Json<'a>>,
    /// The 2026-07-28 revision's `inputResponses` and `requestState`.
    answers: [Option<Json<'a>>; 2],
    /// The 2026-07-28 revision's client capabilities and log level, in `_meta`.
    capabilities: Option<Json<'a>>,
    log_level: Option<Json<'a>>,
}

/// A result object, as a value or already written (JSON object text).
enum Out {
    Value(Value),
    Written(String),
    /// A written result (without `_meta`, as the face writes them) and the
    /// members of the `_meta` it carries, written in when it goes out.
    Meta(String, String),
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
            Out::Meta(mut t, meta) => {
                if t.ends_with('}') {
                    t.pop();
                    if !t.ends_with('{') {
                        t.push(',');
                    }
                    t.push_str(r#""_meta":{"#);
                    t.push_str(&meta);
                    t.push_str("}}");
                }
                t
            }
        }
    }

    /// The result with `_meta[key]` set to `value` (valid JSON text).
    fn with_meta(self, key: &str, value: &str) -> Out {
        let member = format!("{}:{value}", serde_json::Value::from(key));
        match self {
            Out::Written(text) => Out::Meta(text, member),
            Out::Meta(text, mut meta) => {
                meta.push(',');
                meta.push_str(&member);
                Out::Meta(text, meta)
            }
            Out::Value(mut v) => {
                if let (Value::Object(m), Ok(value)) = (&mut v, serde_json::from_str(value)) {
                    let meta = m.entry("_meta").or_insert_with(|| json!({}));
                    if let Value::Object(meta) = meta {
                        meta.insert(key.to_owned(), value);
                    }
                }
                Out::Value(v)
            }
            other => other,
        }
    }
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

impl ModelContext<'_> {
    /// The tool or prompt name of a definition the tenant sees.
    fn name_of(&self, kind: Kind, id: &str) -> Option<String> {
        let (upstream, original) = mcpid::parse(self.core.gateway_id(), id)?;
        let key = match self.core.upstream(upstream) {
            Some(up) => up.own_key(kind, &original)?,
            None => original.into_owned(),
        };
        Some(names::tool_name(upstream, &key, self.core.name_budget()))
    }

    /// Runs `f` over the face's view of each catalog the tenant's listing
    /// of `kind` draws on (its ready upstreams that list that kind), once
    /// those still on their first start have finished it.
    async fn each_index(
        &self,
        tenant: &Tenant,
        kind: Kind,
        mut f: impl FnMut(&Catalog, &FaceIndex),
    ) {
        self.core.wait_for_starting(tenant).await;
        self.core.visit_upstreams_of(tenant, |upstreams| {
            for u in upstreams {
                let lists = u.status() == Status::Ready
                    && u.capabilities()
                        .is_some_and(|c| c.allows(kind.list_method()));
                if !lists {
                    continue;
                }
                let catalog = u.catalog();
                if let Some(index) = catalog.face_cache(|c| self.index(c)) {
                    f(&catalog, index);
                }
            }
        });
    }

    /// The definition of `kind` with this namespaced id that the tenant's
    /// listing shows: read from its catalog alone.
    async fn listed_definition(
        &self,
        tenant: &Tenant,
        kind: Kind,
        id: &str,
    ) -> Option<Map<String, Value>> {
        self.core.wait_for_starting(tenant).await;
        let upstream = self
            .core
            .upstream(mcpid::upstream_of(self.core.gateway_id(), id)?)?;
        let lists = tenant.sees(&upstream.name)
            && upstream.status() == Status::Ready
            && upstream
                .capabilities()
                .is_some_and(|c| c.allows(kind.list_method()));
        if !lists {
            return None;
        }
        let catalog = upstream.catalog();
        let listing = catalog.listing(kind);
        let (_, range) = listing.items.iter().find(|(listed, _)| listed == id)?;
        serde_json::from_str(&listing.json[range.clone()]).ok()
    }

    /// The catalog prompt the tenant's listing names `name`.
    async fn prompt_named(&self, tenant: &Tenant, name: &str) -> Option<Map<String, Value>> {
        let mut found = None;
        self.each_index(tenant, Kind::Prompt, |catalog, index| {
            if found.is_none()
                && let Some(range) = index.prompt_at.get(name)
            {
                let listing = catalog.listing(Kind::Prompt);
                found = serde_json::from_str(&listing.json[range.clone()]).ok();
            }
        })
        .await;
        found
    }
}

/// Whether a 2026-07-28 request's client declared the tasks extension (its
/// task requests, and a listen for its tasks, need it).
fn declares_tasks(params: Option<Json<'_>>) -> bool {
    let [meta] = members(params, ["_meta"]);
    let [capabilities] = members(meta, [CAPABILITIES_META]);
    let [extensions] = members(capabilities, ["extensions"]);
    let [tasks] = members(extensions, [tasks::TASKS_EXTENSION]);
    tasks.is_some_and(|t| t.first_byte() == b'{')
}

/// What `logging/setLevel` takes, for the error that refuses other params.
pub const LEVEL_PARAMS: &str = "params must be an object {\"level\": one of debug, info, notice, warning, error, critical, alert, emergency}";

/// The level of a `logging/setLevel` request's params.
pub fn level_of(params: Option<Json<'_>>) -> Option<LogLevel> {
    let [level] = members(params, ["level"]);
    LogLevel::of(level)
}

/// The log level a 2026-07-28 request asks for in its `_meta` (without it,
/// it hears no log lines).
#[cfg(test)]
fn requested_level(params: Option<Json<'_>>) -> Option<LogLevel> {
    asked_reports(params).1
}

/// A call's log line (its `notifications/message` params, as the upstream
/// sent them) for a client at `level`: the notification, or `None` when
/// the line is less severe (or names no level).
fn message_notification(params: &JsonBuf, level: LogLevel) -> Option<Vec<u8>> {
    let [own] = members(Some(params.as_json()), ["level"]);
    if LogLevel::of(own)? < level {
        return None;
    }
    let mut out = Vec::with_capacity(params.get().len() + 64);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","method":"notifications/message","params":"#);
    out.extend_from_slice(params.get().as_bytes());
    out.push(b'}');
    Some(out)
}

/// The progress token a request's `_meta` carries (a string or an integer,
/// as the protocol allows).
#[cfg(test)]
fn progress_token(params: Option<Json<'_>>) -> Option<Value> {
    asked_reports(params).0
}

/// What a request's `_meta` asks to hear before its result, read in one
/// pass: its progress token (a string or an integer, as the protocol
/// allows) and the log level of the 2026-07-28 revision.
fn asked_reports(params: Option<Json<'_>>) -> (Option<Value>, Option<LogLevel>) {
    let [token, level] = members(meta_of(params), ["progressToken", LOG_LEVEL_META]);
    let token = token
        .and_then(|t| serde_json::from_str::<Value>(t.get()).ok())
        .filter(|t| t.is_string() || t.is_i64() || t.is_u64());
    (token, LogLevel::of(level))
}

/// An upstream's progress report as the client's `notifications/progress`:
/// the client's own token in place of the gateway's.
fn progress_notification(report: &JsonBuf, token: &Value) -> Option<Vec<u8>> {
    let mut params: Map<String, Value> = serde_json::from_str(report.get()).ok()?;
    params.insert("progressToken".into(), token.clone());
    serde_json::to_vec(&json!({
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": params,
    }))
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::value::RawValue;

    fn json(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap()
    }

    #[test]
    fn a_request_is_of_the_protocol_by_its_method_or_its_handshake() {
        let official = json(r#"{"protocolVersion":"2025-11-25","capabilities":{}}"#);
        let v1 = json(r#"{"clientCapabilities":{}}"#);
        let stateless =
            json(r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#);
        assert!(speaks("initialize", Some(Json::from(&*official))));
        assert!(speaks("initialize", Some(Json::from(&*stateless))));
        assert!(!speaks("initialize", Some(Json::from(&*v1))));
        assert!(!speaks("initialize", None));
        assert!(speaks("tools/call", None));
        assert!(speaks("notifications/initialized", None));
        assert!(!speaks("mcp/executeTool", None));
        assert!(!speaks("tools/unknown", None));
    }

    #[test]
    fn the_handshake_settles_on_the_clients_revision_or_the_newest() {
        // The stateless revision has no handshake; an unknown one gets the newest.
        for (asked, settled) in [
            ("2025-03-26", "2025-03-26"),
            ("2025-06-18", "2025-06-18"),
            ("2026-07-28", "2025-11-25"),
            ("1999-01-01", "2025-11-25"),
        ] {
            let params = json(&format!(r#"{{"protocolVersion":"{asked}"}}"#));
            assert_eq!(negotiated(Some(Json::from(&*params))), settled, "{asked}");
        }
        assert_eq!(negotiated(None), "2025-11-25");
    }

    #[test]
    fn the_era_follows_meta_the_version_header_or_the_method() {
        let meta = json(r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}"#);
        assert_eq!(
            Era::of("tools/list", Some(Json::from(&*meta)), None),
            Era::Stateless
        );
        assert_eq!(Era::of("tools/list", None, None), Era::Handshake);
        assert_eq!(Era::of("server/discover", None, None), Era::Stateless);
        let header = |v: &'static [u8]| Mirrored {
            protocol_version: Some(v),
            ..Mirrored::default()
        };
        assert_eq!(
            Era::of("tools/list", None, Some(&header(b"2025-06-18"))),
            Era::Handshake
        );
        assert_eq!(
            Era::of("tools/list", None, Some(&header(b"2026-07-28"))),
            Era::Stateless
        );
        // A version the handshake era does not know is not of that era.
        assert_eq!(
            Era::of("tools/list", None, Some(&header(b"2099-01-01"))),
            Era::Stateless
        );
        assert!(header(b"2025-06-18").say_modelcontext());
        assert!(!Mirrored::default().say_modelcontext());
    }

    #[test]
    fn members_are_read_past_what_the_fast_scan_declines() {
        // An escaped key, and a key named twice (the last counts), as serde reads them.
        let escaped = json(r#"{"_m\u0065ta":{"a":1}}"#);
        assert_eq!(
            meta_of(Some(Json::from(&*escaped))).map(Json::get),
            Some(r#"{"a":1}"#)
        );
        let twice = json(r#"{"_meta":1,"_meta":2}"#);
        assert_eq!(meta_of(Some(Json::from(&*twice))).map(Json::get), Some("2"));
        let array = json("[1]");
        assert_eq!(meta_of(Some(Json::from(&*array))), None);
        let escaped_string = json(r#""a\"b""#);
        assert_eq!(
            string_of(Json::from(&*escaped_string)).as_deref(),
            Some("a\"b")
        );
        let number = json("1");
        assert_eq!(string_of(Json::from(&*number)), None);
    }

    #[test]
    fn progress_goes_out_under_the_clients_own_token() {
        let params = json(r#"{"name":"t","_meta":{"progressToken":"client-7"}}"#);
        let token = progress_token(Some(Json::from(&*params))).unwrap();
        assert_eq!(token, "client-7");
        let number = json(r#"{"_meta":{"progressToken":7}}"#);
        assert_eq!(progress_token(Some(Json::from(&*number))), Some(json!(7)));
        for none in [
            r#"{"_meta":{"progressToken":null}}"#,
            r#"{"_meta":{}}"#,
            r#"{}"#,
        ] {
            assert_eq!(
                progress_token(Some(Json::from(&*json(none)))),
                None,
                "{none}"
            );
        }
        let report: JsonBuf = Json::from(&*json(
            r#"{"progressToken":"mcp-gateway/3","progress":1,"total":2,"message":"half"}"#,
        ))
        .to_buf();
        let sent: Value =
            serde_json::from_slice(&progress_notification(&report, &token).unwrap()).unwrap();
        assert_eq!(
            sent,
            json!({"jsonrpc": "2.0", "method": "notifications/progress",
                   "params": {"progressToken": "client-7", "progress": 1, "total": 2, "message": "half"}})
        );
    }

    #[test]
    fn a_calls_log_lines_reach_a_client_at_its_level() {
        let line = |level: &str| -> JsonBuf {
            Json::from(&*json(&format!(
                r#"{{"level":"{level}","logger":"l","data":{{"a":1}}}}"#
            )))
            .to_buf()
        };
        assert_eq!(
            message_notification(&line("debug"), LogLevel::Warning),
            None
        );
        let sent: Value = serde_json::from_slice(
            &message_notification(&line("error"), LogLevel::Warning).unwrap(),
        )
        .unwrap();
        assert_eq!(
            sent,
            json!({"jsonrpc": "2.0", "method": "notifications/message",
                   "params": {"level": "error", "logger": "l", "data": {"a": 1}}})
        );
        assert!(message_notification(&line("warning"), LogLevel::Warning).is_some());
        assert_eq!(message_notification(&line("loud"), LogLevel::Debug), None);
        let asks = json(r#"{"name":"t","_meta":{"io.modelcontextprotocol/logLevel":"notice"}}"#);
        assert_eq!(
            requested_level(Some(Json::from(&*asks))),
            Some(LogLevel::Notice)
        );
        let may_report = |method: &str, params: &RawValue| {
            Scanned::of(method, Some(Json::from(params))).may_report(method)
        };
        assert!(may_report("tools/call", &asks));
        assert!(!may_report("tools/list", &asks));
        let plain = json(r#"{"name":"t","arguments":{"progressToken":1}}"#);
        assert!(!may_report("tools/call", &plain));
        let token = json(r#"{"name":"t","_meta":{"progressToken":"p"}}"#);
        assert!(may_report("tools/call", &token));
    }
}
