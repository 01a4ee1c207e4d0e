//! The Model Context Protocol's face, [`ModelContext`], for agents that speak
//! it (the official SDKs' clients and the hosts built on them): the handshake
//! era (`initialize` with `protocolVersion`, `ping`, `tools/*`,
//! `resources/*`, `prompts/*`) answered statelessly over the same neutral
//! operations as MCP v1.0's face, so any replica serves any request. Tool
//! and prompt names follow `modelcontext::names`; the namespaced mcpId
//! travels in `_meta` under [`MCPID_META`].
//!
//! Here: the protocol's constants, the face type and what its steps share;
//! how a request is told to be of it and its era is `request`, what a call
//! reports before its answer `reports`. `answer` routes a request; `stateless` holds the
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
use crate::jsonrpc::Json;
use crate::jsonrpc::scan::members;
use crate::modelcontext::{self as mc, names, param_headers};
use crate::protocol::catalog::Catalog;
use crate::protocol::tool_result::{Cut, Output, ToolResult};
use crate::protocol::{Kind, mcpid};
use crate::tenant::Tenant;
use crate::tenant::subscriptions::{self, Subscribed};
use crate::upstream::progress::Report;
use crate::upstream::{CallError, Status, Upstream};
use face_index::{FaceIndex, FaceTool, Listed};

/// A face's answer: a result, or an error in the gateway's terms.
type Answer = Result<Payload, GatewayError>;
/// A result before the era's fields are added.
type Built = Result<Out, GatewayError>;

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
mod consent;
mod curated;
mod discovery;
mod face_index;
mod face_names;
mod listen;
mod loading;
mod prompts;
mod rendering;
mod reports;
mod request;
mod resources;
mod stateless;
mod tasks;
mod tools;

pub use asking::{Asking, ClientCan};
pub use listen::*;
use rendering::*;
pub use reports::*;
pub use request::*;
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
