//! Tools of the protocol: a `tools/list` entry mapped onto a definition the
//! gateway routes, and a `tools/call` result read as the core's answer.

use super::*;

/// The `outputSchema` listed for a tool that has none of its own: the
/// envelope that carries its content blocks as they came.
pub const ENVELOPE_SCHEMA: &str = r#"{"type":"object","properties":{"content":{"type":"array","items":{"type":"object","properties":{"type":{"type":"string"}},"required":["type"]}}},"required":["content"]}"#;

/// What the description of a tool that runs only as a task says, where the
/// gateway lists it to MCP v1.0 agents (which have no way to ask for a task).
pub const TASK_ONLY_NOTE: &str =
    "(Runs only as a task, which MCP v1.0 cannot ask for: calling it fails.)";

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

pub(super) fn name_of(def: &Map<String, Value>) -> Option<&str> {
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
    let mut description = match def.get("description") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(d)) => d.clone(),
        Some(_) => return Err(bad("description is not a string")),
    };
    if crate::protocol::catalog::task_only(&Value::Object(def.clone())) {
        if !description.is_empty() {
            description.push(' ');
        }
        description.push_str(TASK_ONLY_NOTE);
    }
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
pub(super) struct CallResult<'a> {
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
