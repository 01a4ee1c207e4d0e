//! The Model Context Protocol (modelcontextprotocol.io) as the gateway speaks
//! it to upstreams: its revisions and method names, the handshake, and how its
//! definitions and results become the gateway's own (MCP v1.0's). No I/O here;
//! `upstream::dialect` drives it. What cannot be mapped is said with a reason
//! ([`Unmapped`]) and never faked.
//!
//! Ids: a definition of such an upstream gets the original id
//! `mcp://{kind}/{key}`, where kind is `tool`, `resource` or `prompt` and key
//! is the tool's or prompt's `name`, or the resource's `uri`, percent-encoded
//! (every byte outside `A-Z a-z 0-9 - . _ ~` as `%HH`). The namespacing scheme
//! then makes it `mcp://{gateway.id}/{upstream}/{kind}/{key}`: a pure function
//! of the upstream, the kind and the name or uri, unique across kinds.

pub mod links;
pub mod names;
pub mod param_headers;
mod prompts;
mod resources;
mod templates;
mod tools;

pub use prompts::*;
pub use resources::*;
pub use tools::*;

pub use templates::{expands_to, namespaced_template};

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::jsonrpc::scan;
use crate::jsonrpc::{Json, JsonBuf};
use crate::protocol::capabilities::ExecutionProvider;
use crate::protocol::tool_result::Answer;
use crate::protocol::{Capabilities, Kind};

/// The revision the gateway offers in `initialize`.
pub const OFFERED_REVISION: &str = "2025-11-25";
/// The handshake-era revisions the gateway accepts in a server's answer.
pub const HANDSHAKE_REVISIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// The stateless revision, in which every request carries its own envelope.
pub const STATELESS_REVISION: &str = "2026-07-28";
/// Where a 2026-07-28 request's `_meta` names its revision.
pub const VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";
/// Where a 2026-07-28 request's `_meta` carries the client's capabilities.
pub const CAPABILITIES_META: &str = "io.modelcontextprotocol/clientCapabilities";

/// Where a 2026-07-28 request's `_meta` names its client.
pub const CLIENT_INFO_META: &str = "io.modelcontextprotocol/clientInfo";

/// Where a 2026-07-28 request's `_meta` names the level its log lines are wanted at.
pub const LOG_LEVEL_META: &str = "io.modelcontextprotocol/logLevel";

/// Method names of the protocol, as the gateway uses them.
pub mod method {
    pub const DISCOVER: &str = "server/discover";
    pub const INITIALIZE: &str = "initialize";
    pub const INITIALIZED: &str = "notifications/initialized";
    pub const PING: &str = "ping";
    pub const LIST_TOOLS: &str = "tools/list";
    pub const CALL_TOOL: &str = "tools/call";
    pub const LIST_RESOURCES: &str = "resources/list";
    pub const LIST_TEMPLATES: &str = "resources/templates/list";
    pub const READ_RESOURCE: &str = "resources/read";
    pub const SUBSCRIBE: &str = "resources/subscribe";
    pub const COMPLETE: &str = "completion/complete";
    pub const TASKS_GET: &str = "tasks/get";
    pub const TASKS_RESULT: &str = "tasks/result";
    pub const TASKS_LIST: &str = "tasks/list";
    pub const TASKS_CANCEL: &str = "tasks/cancel";
    pub const LIST_PROMPTS: &str = "prompts/list";
    pub const GET_PROMPT: &str = "prompts/get";
    pub const CANCELLED: &str = "notifications/cancelled";
    pub const TOOLS_CHANGED: &str = "notifications/tools/list_changed";
    pub const RESOURCES_CHANGED: &str = "notifications/resources/list_changed";
    pub const PROMPTS_CHANGED: &str = "notifications/prompts/list_changed";
    pub const RESOURCE_UPDATED: &str = "notifications/resources/updated";
    pub const MESSAGE: &str = "notifications/message";
}

/// The listing method of a kind, and the member of its result that holds the page.
pub fn list_method(kind: Kind) -> (&'static str, &'static str) {
    match kind {
        Kind::Tool => (method::LIST_TOOLS, "tools"),
        Kind::Resource => (method::LIST_RESOURCES, "resources"),
        Kind::Prompt => (method::LIST_PROMPTS, "prompts"),
    }
}

/// `initialize`'s params: the offered revision, the client capabilities the
/// gateway can honour for this upstream, and who the client is. With
/// `asks`, the upstream's requests during a call can be taken to that
/// call's client, so the gateway declares what a client may answer
/// (elicitation in both modes, sampling, roots); a client that cannot
/// answer one is not asked, and the upstream hears -32601. Without, it
/// declares none, so such a server never asks.
pub fn initialize_params(asks: bool) -> String {
    let capabilities = if asks {
        json!({"elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {}})
    } else {
        json!({})
    };
    json!({
        "protocolVersion": OFFERED_REVISION,
        "capabilities": capabilities,
        "clientInfo": {"name": "mcp-gateway", "version": env!("CARGO_PKG_VERSION")},
    })
    .to_string()
}

/// The params of a 2026-07-28 `server/discover` the gateway sends.
pub fn discover_params() -> String {
    json!({"_meta": {
        VERSION_META: STATELESS_REVISION,
        CAPABILITIES_META: {},
        CLIENT_INFO_META: {"name": "mcp-gateway", "version": env!("CARGO_PKG_VERSION")},
    }})
    .to_string()
}

/// Whether a `server/discover` result lists the 2026-07-28 revision.
pub fn discovered_stateless(result: &str) -> bool {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Discovered<'a> {
        #[serde(borrow, default)]
        supported_versions: Vec<std::borrow::Cow<'a, str>>,
    }
    serde_json::from_str::<Discovered<'_>>(result)
        .is_ok_and(|d| d.supported_versions.iter().any(|v| v == STATELESS_REVISION))
}

/// These params (a JSON object) as a server that speaks only the
/// 2026-07-28 revision takes them: with that revision's `_meta` envelope
/// merged in (the revision, the gateway as the client, and no client
/// capabilities unless the params declare some: outside a call's rounds
/// there is no client to ask); and the member the request's `Mcp-Name`
/// header mirrors, for the methods that have one.
pub fn enveloped(method_name: &str, params: &str) -> Result<(String, Option<String>), String> {
    let mut object: Map<String, Value> = serde_json::from_str(params)
        .map_err(|_| format!("the params of {method_name} are not an object"))?;
    let meta = object
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    if let Value::Object(meta) = meta {
        meta.insert(VERSION_META.into(), STATELESS_REVISION.into());
        meta.entry(CAPABILITIES_META).or_insert_with(|| json!({}));
        meta.insert(
            CLIENT_INFO_META.into(),
            json!({"name": "mcp-gateway", "version": env!("CARGO_PKG_VERSION")}),
        );
    }
    let named = match method_name {
        method::CALL_TOOL | method::GET_PROMPT => Some("name"),
        method::READ_RESOURCE => Some("uri"),
        _ => None,
    };
    let name = named
        .and_then(|member| object.get(member))
        .and_then(Value::as_str)
        .map(str::to_owned);
    Ok((Value::Object(object).to_string(), name))
}

/// Reads the `server/discover` result of a server that takes the
/// 2026-07-28 revision: what it declares, as `initialize`'s answer would
/// say it. One that does not list the revision is not such a server.
pub fn read_discover(result: &str) -> Result<Handshake, String> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Discovered {
        #[serde(default)]
        supported_versions: Vec<String>,
        #[serde(default)]
        capabilities: Map<String, Value>,
    }
    let found: Discovered = serde_json::from_str(result)
        .map_err(|e| format!("the server/discover result cannot be read: {e}"))?;
    if !found
        .supported_versions
        .iter()
        .any(|v| v == STATELESS_REVISION)
    {
        return Err(format!(
            "the server offers {:?}, none of which the gateway speaks",
            found.supported_versions
        ));
    }
    let mut handshake = handshake_of(STATELESS_REVISION.into(), &found.capabilities);
    // The revision hears of resource changes through `subscriptions/listen`;
    // it has no `resources/subscribe`.
    handshake.subscribe = false;
    Ok(handshake)
}

/// What a server's `initialize` answer says.
#[derive(Debug, Clone, PartialEq)]
pub struct Handshake {
    pub revision: String,
    /// Mapped onto the gateway's capabilities (`tools` → list and execute,
    /// `resources` → list resources, `prompts` → list prompts).
    pub capabilities: Capabilities,
    /// The server takes `resources/subscribe`.
    pub subscribe: bool,
    /// The server answers `completion/complete`.
    pub completions: bool,
    /// The server declared `logging`: it may log during calls.
    pub logging: bool,
    /// What the server declared of tasks (the 2025-11-25 revision's).
    pub tasks: TaskCaps,
}

/// What a server declared of the 2025-11-25 revision's tasks: whether it
/// runs `tools/call` as a task, and answers `tasks/list` and `tasks/cancel`
/// (`tasks/get` and `tasks/result` come with any task it creates).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskCaps {
    pub tool_calls: bool,
    pub list: bool,
    pub cancel: bool,
}

impl TaskCaps {
    fn of(tasks: Option<&Value>) -> TaskCaps {
        let has = |pointer: &str| {
            tasks
                .and_then(|t| t.pointer(pointer))
                .is_some_and(Value::is_object)
        };
        TaskCaps {
            tool_calls: has("/requests/tools/call"),
            list: has("/list"),
            cancel: has("/cancel"),
        }
    }

    /// As bits, to be kept in an atomic.
    pub fn bits(self) -> u8 {
        u8::from(self.tool_calls) | u8::from(self.list) << 1 | u8::from(self.cancel) << 2
    }

    pub fn from_bits(bits: u8) -> TaskCaps {
        TaskCaps {
            tool_calls: bits & 1 != 0,
            list: bits & 2 != 0,
            cancel: bits & 4 != 0,
        }
    }
}

/// Reads an `initialize` result.
pub fn read_initialize(result: &str) -> Result<Handshake, String> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Init {
        protocol_version: String,
        capabilities: Map<String, Value>,
    }
    let init: Init = serde_json::from_str(result)
        .map_err(|e| format!("the initialize result cannot be read: {e}"))?;
    if !HANDSHAKE_REVISIONS.contains(&init.protocol_version.as_str()) {
        return Err(format!(
            "the server answered with revision {:?}, which the gateway does not speak",
            init.protocol_version
        ));
    }
    Ok(handshake_of(init.protocol_version, &init.capabilities))
}

/// What the server capabilities a server declared (in its `initialize`
/// answer or its `server/discover` result) say.
fn handshake_of(revision: String, capabilities: &Map<String, Value>) -> Handshake {
    let has = |name: &str| capabilities.get(name).is_some_and(Value::is_object);
    let subscribe = capabilities
        .get("resources")
        .and_then(|r| r.get("subscribe"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Handshake {
        revision,
        capabilities: Capabilities {
            list_tools_provider: has("tools"),
            list_resources_provider: has("resources"),
            list_prompts_provider: has("prompts"),
            execution_provider: has("tools").then_some(ExecutionProvider { execute: true }),
        },
        subscribe,
        completions: has("completions"),
        logging: has("logging"),
        tasks: TaskCaps::of(capabilities.get("tasks")),
    }
}

/// Everything but RFC 3986's unreserved characters is escaped in ids.
pub(crate) const ESCAPED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

fn kind_segment(kind: Kind) -> &'static str {
    match kind {
        Kind::Tool => "tool",
        Kind::Resource => "resource",
        Kind::Prompt => "prompt",
    }
}

/// The original id of a definition (see the module's doc).
pub fn original_id(kind: Kind, key: &str) -> String {
    format!(
        "mcp://{}/{}",
        kind_segment(kind),
        utf8_percent_encode(key, ESCAPED)
    )
}

/// Inverts [`original_id`]: the name or uri, when `original` is one of this kind.
pub fn key_of(kind: Kind, original: &str) -> Option<String> {
    let encoded = original
        .strip_prefix("mcp://")?
        .strip_prefix(kind_segment(kind))?
        .strip_prefix('/')?;
    percent_decode_str(encoded)
        .decode_utf8()
        .ok()
        .map(|k| k.into_owned())
}

/// One page of a listing.
pub struct Page<'a> {
    pub items: Vec<&'a RawValue>,
    pub next: Option<String>,
    /// How long the server says the listing may be kept (`ttlMs`), when it
    /// says so with a whole number.
    pub ttl_ms: Option<u64>,
}

/// Reads one page of a listing result: the array under `field` (each item
/// as its text, so that it is weighed before it is read), and `nextCursor`.
pub fn read_page<'a>(field: &str, result: &'a str) -> Result<Page<'a>, String> {
    type Members<'a> = std::collections::HashMap<std::borrow::Cow<'a, str>, &'a RawValue>;
    let members: Members<'a> =
        serde_json::from_str(result).map_err(|e| format!("the listing cannot be read: {e}"))?;
    let items = members
        .get(field)
        .and_then(|raw| serde_json::from_str::<Vec<&'a RawValue>>(raw.get()).ok())
        .ok_or_else(|| format!("the listing has no array {field:?}"))?;
    let next = match members.get("nextCursor").map(|raw| raw.get()) {
        None | Some("null") => None,
        Some(text) => {
            Some(serde_json::from_str::<String>(text).map_err(|_| "nextCursor is not a string")?)
        }
    };
    let ttl_ms = members
        .get("ttlMs")
        .and_then(|raw| serde_json::from_str::<u64>(raw.get()).ok());
    Ok(Page {
        items,
        next,
        ttl_ms,
    })
}

/// The params of a listing request for one page.
pub fn page_params(cursor: Option<&str>) -> String {
    match cursor {
        None => "{}".into(),
        Some(c) => json!({ "cursor": c }).to_string(),
    }
}

/// Why a definition of such an upstream is not in the gateway's listings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unmapped {
    /// A definition without the fields the mapping needs (a name, a uri, a schema).
    Invalid,
    /// A resource whose contents are binary (a blob).
    Binary,
    /// A resource whose text is over the per-resource cap.
    TooLarge,
    /// A resource or prompt that could not be read in time, or whose read failed.
    ReadFailed,
    /// A resource read that answered more than one content (or none).
    SeveralContents,
    /// A resource template: it names many resources, none of which can be listed.
    Template,
    /// A prompt with required arguments: MCP v1.0 prompts take none.
    RequiredArguments,
    /// A prompt whose messages are not one message of text.
    UnsupportedMessages,
    /// Past the bound on pages or definitions of one listing.
    OverLimit,
}

impl Unmapped {
    pub const ALL: [Unmapped; 9] = [
        Unmapped::Invalid,
        Unmapped::Binary,
        Unmapped::TooLarge,
        Unmapped::ReadFailed,
        Unmapped::SeveralContents,
        Unmapped::Template,
        Unmapped::RequiredArguments,
        Unmapped::UnsupportedMessages,
        Unmapped::OverLimit,
    ];

    /// A closed-set metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Unmapped::Invalid => "invalid",
            Unmapped::Binary => "binary",
            Unmapped::TooLarge => "too_large",
            Unmapped::ReadFailed => "read_failed",
            Unmapped::SeveralContents => "several_contents",
            Unmapped::Template => "template",
            Unmapped::RequiredArguments => "required_arguments",
            Unmapped::UnsupportedMessages => "unsupported_messages",
            Unmapped::OverLimit => "over_limit",
        }
    }

    /// Which kinds a reason can apply to (for the metric's series).
    pub fn applies_to(self, kind: Kind) -> bool {
        match self {
            Unmapped::Invalid | Unmapped::OverLimit => true,
            Unmapped::ReadFailed => kind != Kind::Tool,
            Unmapped::Binary
            | Unmapped::TooLarge
            | Unmapped::SeveralContents
            | Unmapped::Template => kind == Kind::Resource,
            Unmapped::RequiredArguments | Unmapped::UnsupportedMessages => kind == Kind::Prompt,
        }
    }
}

/// A definition left out: its name or uri when it had one, the reason, and what happened.
#[derive(Debug, Clone, PartialEq)]
pub struct LeftOut {
    pub key: Option<String>,
    pub reason: Unmapped,
    pub detail: String,
}

fn left_out(key: Option<&str>, reason: Unmapped, detail: impl Into<String>) -> LeftOut {
    LeftOut {
        key: key.map(str::to_owned),
        reason,
        detail: detail.into(),
    }
}

/// The params of `notifications/cancelled` for a request the gateway sent.
pub fn cancelled_params(request_id: u64, reason: &str) -> String {
    json!({ "requestId": request_id, "reason": reason }).to_string()
}

#[cfg(test)]
mod tests;
