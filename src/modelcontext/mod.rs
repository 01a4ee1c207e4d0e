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
mod templates;

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

/// Method names of the protocol, as the gateway uses them.
pub mod method {
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

/// `initialize`'s params: the offered revision, **no** client capabilities
/// (so a server never asks the gateway for sampling, elicitation or roots),
/// and who the client is.
pub fn initialize_params() -> String {
    json!({
        "protocolVersion": OFFERED_REVISION,
        "capabilities": {},
        "clientInfo": {"name": "mcp-gateway", "version": env!("CARGO_PKG_VERSION")},
    })
    .to_string()
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
    let has = |name: &str| init.capabilities.get(name).is_some_and(Value::is_object);
    let subscribe = init
        .capabilities
        .get("resources")
        .and_then(|r| r.get("subscribe"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok(Handshake {
        revision: init.protocol_version,
        capabilities: Capabilities {
            list_tools_provider: has("tools"),
            list_resources_provider: has("resources"),
            list_prompts_provider: has("prompts"),
            execution_provider: has("tools").then_some(ExecutionProvider { execute: true }),
        },
        subscribe,
        completions: has("completions"),
    })
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
    Ok(Page { items, next })
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

/// The `outputSchema` listed for a tool that has none of its own: the
/// envelope that carries its content blocks as they came.
pub const ENVELOPE_SCHEMA: &str = r#"{"type":"object","properties":{"content":{"type":"array","items":{"type":"object","properties":{"type":{"type":"string"}},"required":["type"]}}},"required":["content"]}"#;

/// A tool mapped onto an MCP v1.0 definition.
pub struct MappedTool {
    /// `{mcpId, name, description, inputSchema, outputSchema}`.
    pub definition: Map<String, Value>,
    /// The name a call is made by.
    pub name: String,
    /// Whether the tool has an `outputSchema` of its own (then `output` is
    /// its `structuredContent`).
    pub structured: bool,
}

fn name_of(def: &Map<String, Value>) -> Option<&str> {
    def.get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
}

/// Maps one tool of `tools/list`.
pub fn tool(def: &Map<String, Value>) -> Result<MappedTool, LeftOut> {
    let Some(name) = name_of(def) else {
        return Err(left_out(None, Unmapped::Invalid, "a tool without a name"));
    };
    let bad = |why: &str| left_out(Some(name), Unmapped::Invalid, why);
    let input = match def.get("inputSchema") {
        Some(Value::Object(schema)) => Value::Object(schema.clone()),
        _ => return Err(bad("inputSchema is not an object")),
    };
    let (output, structured) = match def.get("outputSchema") {
        None | Some(Value::Null) => (
            serde_json::from_str(ENVELOPE_SCHEMA).unwrap_or_else(|_| unreachable!("literal JSON")),
            false,
        ),
        Some(Value::Object(schema)) => (Value::Object(schema.clone()), true),
        Some(_) => return Err(bad("outputSchema is not an object")),
    };
    let description = match def.get("description") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(d)) => d.clone(),
        Some(_) => return Err(bad("description is not a string")),
    };
    let mut out = Map::new();
    out.insert("mcpId".into(), original_id(Kind::Tool, name).into());
    out.insert("name".into(), name.into());
    out.insert("description".into(), description.into());
    out.insert("inputSchema".into(), input);
    out.insert("outputSchema".into(), output);
    Ok(MappedTool {
        definition: out,
        name: name.to_owned(),
        structured,
    })
}

/// Why a `tools/call` result is not a result.
#[derive(Debug, PartialEq)]
pub enum CallFailure {
    /// `isError: true`: the tool's own failure, with the text of its content blocks.
    Tool(String),
    /// Not a result of the protocol's shape.
    Broken(String),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CallResult<'a> {
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
    #[serde(borrow, default)]
    structured_content: Option<&'a RawValue>,
    #[serde(default)]
    is_error: Option<bool>,
}

/// The text of content blocks: each text block's text, one per line, and
/// for every other block its type (an image is not text).
pub fn content_text(content: &str) -> String {
    #[derive(Deserialize)]
    struct Block {
        #[serde(rename = "type", default)]
        kind: Option<String>,
        #[serde(default)]
        text: Option<String>,
    }
    let Ok(blocks) = serde_json::from_str::<Vec<Block>>(content) else {
        return String::new();
    };
    blocks
        .into_iter()
        .map(|b| match (b.kind.as_deref(), b.text) {
            (Some("text"), Some(text)) => text,
            (kind, _) => format!("[{} content]", kind.unwrap_or("unknown")),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A `tools/call` result as the core's [`Answer`]: its `structuredContent`
/// when the tool has an `outputSchema`, its content blocks otherwise, found in
/// the answer's text and left there. Whether it satisfies the listed schema is
/// for the caller to check, as for every upstream.
pub fn tool_result(result: JsonBuf, structured: bool) -> Result<Answer, CallFailure> {
    let (content, structured_content) = {
        // One pass over the (valid) text for the usual result; serde where the
        // scan declines (a member named twice, an escaped key), which also says why.
        let (content, structured_content, is_error) = match scan::members_of(
            result.as_json(),
            ["content", "structuredContent", "isError"],
        ) {
            Some([content, structured_content, is_error]) => (
                content,
                structured_content,
                match is_error.map(Json::get) {
                    None | Some("null") => None,
                    Some("true") => Some(true),
                    Some("false") => Some(false),
                    Some(_) => {
                        return Err(CallFailure::Broken(
                            "the tools/call result's isError is not a boolean".into(),
                        ));
                    }
                },
            ),
            None => {
                let r: CallResult<'_> = serde_json::from_str(result.get()).map_err(|e| {
                    CallFailure::Broken(format!("the tools/call result cannot be read: {e}"))
                })?;
                (
                    r.content.map(Json::from),
                    r.structured_content.map(Json::from),
                    r.is_error,
                )
            }
        };
        let content = content.filter(|c| c.first_byte() == b'[').ok_or_else(|| {
            CallFailure::Broken("the tools/call result has no content array".into())
        })?;
        if is_error == Some(true) {
            return Err(CallFailure::Tool(content_text(content.get())));
        }
        (
            result.range_of(content),
            structured_content
                .filter(|s| s.get() != "null")
                .map(|s| result.range_of(s)),
        )
    };
    Ok(if structured {
        Answer::Value(result, structured_content)
    } else {
        Answer::Blocks(result, content)
    })
}

/// A resource of `resources/list`: its uri, or why it cannot be mapped.
pub fn resource_uri(def: &Map<String, Value>) -> Result<&str, LeftOut> {
    let uri = def
        .get("uri")
        .and_then(Value::as_str)
        .filter(|u| !u.is_empty());
    let Some(uri) = uri else {
        return Err(left_out(
            None,
            Unmapped::Invalid,
            "a resource without a uri",
        ));
    };
    if name_of(def).is_none() {
        return Err(left_out(
            Some(uri),
            Unmapped::Invalid,
            "a resource without a name",
        ));
    }
    Ok(uri)
}

/// A resource's text read with `resources/read`, and its media type when the read says one.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceText {
    pub text: String,
    pub mime: Option<String>,
}

/// Reads a `resources/read` result: exactly one text content, within `cap` bytes.
pub fn read_resource_text(uri: &str, result: &str, cap: usize) -> Result<ResourceText, LeftOut> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Content {
        #[serde(default)]
        text: Option<String>,
        #[serde(default)]
        blob: Option<Value>,
        #[serde(default)]
        mime_type: Option<String>,
    }
    #[derive(Deserialize)]
    struct Read {
        contents: Vec<Content>,
    }
    let read: Read = serde_json::from_str(result).map_err(|e| {
        left_out(
            Some(uri),
            Unmapped::ReadFailed,
            format!("the read result cannot be read: {e}"),
        )
    })?;
    let [content] = <[Content; 1]>::try_from(read.contents).map_err(|contents| {
        left_out(
            Some(uri),
            Unmapped::SeveralContents,
            format!("the read answered {} contents, not one", contents.len()),
        )
    })?;
    match (content.text, content.blob) {
        (Some(text), None) if text.len() <= cap => Ok(ResourceText {
            text,
            mime: content.mime_type,
        }),
        (Some(text), None) => Err(left_out(
            Some(uri),
            Unmapped::TooLarge,
            format!("{} bytes of text, over the cap of {cap}", text.len()),
        )),
        (None, Some(_)) => Err(left_out(
            Some(uri),
            Unmapped::Binary,
            "binary contents (a blob) cannot be carried as text",
        )),
        _ => Err(left_out(
            Some(uri),
            Unmapped::ReadFailed,
            "the content has neither text nor a blob (or both)",
        )),
    }
}

/// A resource mapped onto an MCP v1.0 definition, with the text read for it.
pub fn resource(def: &Map<String, Value>, uri: &str, read: &ResourceText) -> Map<String, Value> {
    let media = read
        .mime
        .as_deref()
        .or_else(|| def.get("mimeType").and_then(Value::as_str))
        .unwrap_or("text/plain");
    let mut out = Map::new();
    out.insert("mcpId".into(), original_id(Kind::Resource, uri).into());
    out.insert("name".into(), name_of(def).unwrap_or(uri).into());
    out.insert(
        "description".into(),
        def.get("description")
            .and_then(Value::as_str)
            .unwrap_or("")
            .into(),
    );
    out.insert("mediaType".into(), media.into());
    out.insert("content".into(), read.text.clone().into());
    out
}

/// A resource template of `resources/templates/list`: always left out.
pub fn template(def: &Map<String, Value>) -> LeftOut {
    let key = def.get("uriTemplate").and_then(Value::as_str);
    left_out(
        key,
        Unmapped::Template,
        "a resource template names many resources and lists none",
    )
}

/// A prompt of `prompts/list`: its name when it can be fetched without arguments.
pub fn prompt_name(def: &Map<String, Value>) -> Result<&str, LeftOut> {
    let Some(name) = name_of(def) else {
        return Err(left_out(None, Unmapped::Invalid, "a prompt without a name"));
    };
    let required = def
        .get("arguments")
        .and_then(Value::as_array)
        .is_some_and(|args| {
            args.iter()
                .any(|a| a.get("required").and_then(Value::as_bool) == Some(true))
        });
    if required {
        return Err(left_out(
            Some(name),
            Unmapped::RequiredArguments,
            "the prompt has required arguments; MCP v1.0 prompts take none",
        ));
    }
    Ok(name)
}

/// A prompt mapped onto an MCP v1.0 definition from its `prompts/get` result:
/// exactly one message whose content is text.
pub fn prompt(
    def: &Map<String, Value>,
    name: &str,
    got: &str,
) -> Result<Map<String, Value>, LeftOut> {
    #[derive(Deserialize)]
    struct Message {
        role: String,
        content: Value,
    }
    #[derive(Deserialize)]
    struct Got {
        messages: Vec<Message>,
    }
    let unsupported = |why: String| left_out(Some(name), Unmapped::UnsupportedMessages, why);
    let got: Got = serde_json::from_str(got).map_err(|e| {
        left_out(
            Some(name),
            Unmapped::ReadFailed,
            format!("the prompts/get result cannot be read: {e}"),
        )
    })?;
    let [message] = <[Message; 1]>::try_from(got.messages)
        .map_err(|m| unsupported(format!("{} messages, not one", m.len())))?;
    if !matches!(message.role.as_str(), "user" | "assistant") {
        return Err(unsupported(format!("a message of role {:?}", message.role)));
    }
    let text = match (
        message.content.get("type").and_then(Value::as_str),
        message.content.get("text").and_then(Value::as_str),
    ) {
        (Some("text"), Some(text)) => text.to_owned(),
        (kind, _) => {
            return Err(unsupported(format!(
                "a message of {} content, not text",
                kind.unwrap_or("unknown")
            )));
        }
    };
    let mut out = Map::new();
    out.insert("mcpId".into(), original_id(Kind::Prompt, name).into());
    out.insert("name".into(), name.into());
    if let Some(d) = def.get("description").and_then(Value::as_str) {
        out.insert("description".into(), d.into());
    }
    out.insert("role".into(), message.role.into());
    out.insert("content".into(), text.into());
    Ok(out)
}

/// The params of `prompts/get` for a prompt fetched without arguments.
pub fn get_prompt_params(name: &str) -> String {
    json!({ "name": name }).to_string()
}

/// The params of `resources/read` and `resources/subscribe`.
pub fn uri_params(uri: &str) -> String {
    json!({ "uri": uri }).to_string()
}

/// The params of `notifications/cancelled` for a request the gateway sent.
pub fn cancelled_params(request_id: u64, reason: &str) -> String {
    json!({ "requestId": request_id, "reason": reason }).to_string()
}

/// The uri of a `notifications/resources/updated`.
pub fn updated_uri(params: Option<&str>) -> Option<String> {
    #[derive(Deserialize)]
    struct Updated {
        uri: String,
    }
    serde_json::from_str::<Updated>(params?).ok().map(|u| u.uri)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn handshake_maps_capabilities_and_checks_the_revision() {
        let h = read_initialize(
            r#"{"protocolVersion":"2025-06-18","capabilities":{"tools":{},"resources":{"subscribe":true}},"serverInfo":{"name":"s","version":"1"}}"#,
        )
        .unwrap();
        assert!(h.capabilities.list_tools_provider && h.capabilities.can_execute());
        assert!(h.capabilities.list_resources_provider && !h.capabilities.list_prompts_provider);
        assert!(h.subscribe);
        assert!(read_initialize(r#"{"protocolVersion":"2099-01-01","capabilities":{}}"#).is_err());
        assert!(read_initialize(r#"{"capabilities":{}}"#).is_err());
    }

    #[test]
    fn ids_are_a_function_of_kind_and_key() {
        assert_eq!(original_id(Kind::Tool, "get_time"), "mcp://tool/get_time");
        let uri = "test://static/resource/1";
        let id = original_id(Kind::Resource, uri);
        assert_eq!(id, "mcp://resource/test%3A%2F%2Fstatic%2Fresource%2F1");
        assert_eq!(key_of(Kind::Resource, &id).as_deref(), Some(uri));
        assert_eq!(key_of(Kind::Tool, &id), None);
        assert_ne!(original_id(Kind::Tool, "x"), original_id(Kind::Prompt, "x"));
        let ns = crate::protocol::mcpid::namespace("g", "time", &original_id(Kind::Tool, "a b"));
        assert_eq!(ns, "mcp://g/time/tool/a%20b");
    }

    #[test]
    fn tools_get_their_own_or_the_envelope_schema() {
        let plain = tool(&obj(json!({"name":"echo","inputSchema":{"type":"object"}}))).unwrap();
        assert!(!plain.structured);
        assert_eq!(plain.definition["description"], "");
        assert_eq!(
            plain.definition["outputSchema"],
            serde_json::from_str::<Value>(ENVELOPE_SCHEMA).unwrap()
        );
        let own = tool(&obj(
            json!({"name":"w","description":"d","inputSchema":{},"outputSchema":{"type":"object"}}),
        ))
        .unwrap();
        assert!(own.structured);
        assert!(tool(&obj(json!({"name":"x"}))).is_err());
        assert!(tool(&obj(json!({"inputSchema":{}}))).is_err());
    }

    /// The answer's output, as the gateway's MCP v1.0 face would carry it.
    fn tool_result(text: &str, structured: bool) -> Result<String, CallFailure> {
        let raw: &RawValue = serde_json::from_str(text).unwrap();
        Ok(
            match super::tool_result(Json::from(raw).to_buf(), structured)? {
                Answer::Value(answer, Some(at)) => {
                    format!(r#"{{"output":{}}}"#, answer.sub(at).get())
                }
                Answer::Value(_, None) => "{}".into(),
                Answer::Blocks(answer, at) => {
                    format!(r#"{{"output":{{"content":{}}}}}"#, answer.sub(at).get())
                }
                Answer::Object(_) => unreachable!("not of this protocol"),
            },
        )
    }

    #[test]
    fn results_become_outputs_and_tool_errors() {
        let content = r#"{"content":[{"type":"text","text":"hi"},{"type":"image","data":"AA==","mimeType":"image/png"}]}"#;
        assert_eq!(
            tool_result(content, false).unwrap(),
            r#"{"output":{"content":[{"type":"text","text":"hi"},{"type":"image","data":"AA==","mimeType":"image/png"}]}}"#
        );
        let structured = r#"{"content":[{"type":"text","text":"{}"}],"structuredContent":{"t":1}}"#;
        assert_eq!(
            tool_result(structured, true).unwrap(),
            r#"{"output":{"t":1}}"#
        );
        assert_eq!(tool_result(r#"{"content":[]}"#, true).unwrap(), "{}");
        let failed = r#"{"content":[{"type":"text","text":"boom"},{"type":"text","text":"twice"}],"isError":true}"#;
        assert_eq!(
            tool_result(failed, false),
            Err(CallFailure::Tool("boom\ntwice".into()))
        );
        assert!(matches!(
            tool_result("[]", false),
            Err(CallFailure::Broken(_))
        ));
        assert!(matches!(
            tool_result(r#"{"content":1}"#, false),
            Err(CallFailure::Broken(_))
        ));
        assert!(matches!(
            tool_result(r#"{"content":[],"content":[]}"#, false),
            Err(CallFailure::Broken(_))
        ));
        assert!(matches!(
            tool_result(r#"{"content":[],"isError":"yes"}"#, false),
            Err(CallFailure::Broken(_))
        ));
        // Escaped keys are read as serde reads them.
        assert_eq!(
            tool_result(r#"{"cont\u0065nt":[],"isError":true}"#, false),
            Err(CallFailure::Tool(String::new()))
        );
    }

    #[test]
    fn resources_are_one_text_within_the_cap() {
        let ok = read_resource_text(
            "u",
            r#"{"contents":[{"uri":"u","mimeType":"text/markdown","text":"hi!"}]}"#,
            10,
        )
        .unwrap();
        assert_eq!(ok.mime.as_deref(), Some("text/markdown"));
        let reason = |r: &str, cap| read_resource_text("u", r, cap).unwrap_err().reason;
        assert_eq!(
            reason(r#"{"contents":[{"uri":"u","blob":"AA=="}]}"#, 10),
            Unmapped::Binary
        );
        assert_eq!(
            reason(r#"{"contents":[{"uri":"u","text":"12345"}]}"#, 4),
            Unmapped::TooLarge
        );
        assert_eq!(reason(r#"{"contents":[]}"#, 4), Unmapped::SeveralContents);
        let def = obj(json!({"uri":"u","name":"n","mimeType":"text/plain"}));
        let mapped = resource(&def, "u", &ok);
        assert_eq!(mapped["mediaType"], "text/markdown");
        assert_eq!(mapped["content"], "hi!");
    }

    #[test]
    fn prompts_take_no_required_arguments_and_one_text_message() {
        let required = obj(json!({"name":"p","arguments":[{"name":"city","required":true}]}));
        assert_eq!(
            prompt_name(&required).unwrap_err().reason,
            Unmapped::RequiredArguments
        );
        let optional = obj(json!({"name":"p","arguments":[{"name":"city"}]}));
        assert_eq!(prompt_name(&optional).unwrap(), "p");
        let one = r#"{"messages":[{"role":"user","content":{"type":"text","text":"Hello"}}]}"#;
        let mapped = prompt(&optional, "p", one).unwrap();
        assert_eq!(
            (mapped["role"].as_str(), mapped["content"].as_str()),
            (Some("user"), Some("Hello"))
        );
        let two = r#"{"messages":[{"role":"user","content":{"type":"text","text":"a"}},{"role":"user","content":{"type":"text","text":"b"}}]}"#;
        assert_eq!(
            prompt(&optional, "p", two).unwrap_err().reason,
            Unmapped::UnsupportedMessages
        );
        let image = r#"{"messages":[{"role":"user","content":{"type":"image","data":"","mimeType":"image/png"}}]}"#;
        assert_eq!(
            prompt(&optional, "p", image).unwrap_err().reason,
            Unmapped::UnsupportedMessages
        );
    }

    #[test]
    fn pages_carry_their_cursor() {
        let p = read_page("tools", r#"{"tools":[{"name":"a"}],"nextCursor":"2"}"#).unwrap();
        assert_eq!((p.items.len(), p.next.as_deref()), (1, Some("2")));
        assert!(read_page("tools", r#"{"tools":{}}"#).is_err());
        assert!(read_page("tools", r#"{"tools":[],"nextCursor":3}"#).is_err());
        assert_eq!(page_params(Some("c\"")), r#"{"cursor":"c\""}"#);
    }
}
