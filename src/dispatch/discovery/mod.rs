//! Progressive discovery (`tools.discovery`): a tenant whose listing would
//! hold more tools than a model should read lists meta-tools instead, which
//! search its tools (`search_tools`), call one found (`call_tool`) and,
//! in a session, add found tools to the session's listing (`load_tools`).
//! Search changes what is listed, never what is callable: every visible
//! tool still answers its own name, after the same checks as ever.
//!
//! This module holds what both faces share: the meta-tools' ids and
//! definitions, their arguments as read, the search index (`index`) and
//! what a session loaded (`loaded`).

pub mod index;
pub mod loaded;

use serde_json::{Value, json};

use crate::config::curation::Discovery;

/// `_meta` of a listing: its mode and how many tools the caller sees.
pub const DISCOVERY_META: &str = "dev.mcp-gateway/discovery";

/// The meta-tools, by the name both faces give them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Meta {
    Search,
    Call,
    /// Listed, and answering, only in sessions.
    Load,
}

impl Meta {
    pub fn of(name: &str) -> Option<Meta> {
        match name {
            "search_tools" => Some(Meta::Search),
            "call_tool" => Some(Meta::Call),
            "load_tools" => Some(Meta::Load),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Meta::Search => "search_tools",
            Meta::Call => "call_tool",
            Meta::Load => "load_tools",
        }
    }

    /// Its id: `mcp://{gateway}/~discovery/tool/{name}`.
    pub fn id(self, gateway: &str) -> String {
        format!("mcp://{gateway}/~discovery/tool/{}", self.name())
    }

    /// The meta-tool an id names, if it is one of this gateway's.
    pub fn of_id(gateway: &str, id: &str) -> Option<Meta> {
        let rest = id
            .strip_prefix("mcp://")?
            .strip_prefix(gateway)?
            .strip_prefix("/~discovery/tool/")?;
        Meta::of(rest)
    }

    fn description(self) -> &'static str {
        match self {
            Meta::Search => {
                "Finds the tools for a task among all the tools you can use, most of which are not listed: describe the task in a few words. Answers the best matches, best first, with the name to call each by (directly, or with call_tool)."
            }
            Meta::Call => {
                "Calls a tool found with search_tools, by its name (or mcpId), with its arguments: answers exactly what calling it directly answers."
            }
            Meta::Load => {
                "Adds tools found with search_tools to your tool list for the rest of this session, by their names (or mcpIds), so that you can call them directly."
            }
        }
    }

    fn input_schema(self, d: &Discovery) -> Value {
        match self {
            Meta::Search => json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "minLength": 1, "maxLength": 1000,
                              "description": "What the tool should do, in a few words"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": d.max_limit,
                              "description": format!("How many tools at most (default {})", d.limit)},
                    "schemas": {"type": "boolean",
                                "description": "Include each tool's inputSchema and outputSchema"},
                },
                "required": ["query"],
                "additionalProperties": false,
            }),
            Meta::Call => json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "minLength": 1,
                             "description": "The tool's name, as search_tools gave it, or its mcpId"},
                    "arguments": {"type": "object", "description": "The tool's arguments"},
                },
                "required": ["name"],
                "additionalProperties": false,
            }),
            Meta::Load => json!({
                "type": "object",
                "properties": {
                    "names": {"type": "array", "minItems": 1, "maxItems": loaded::MAX_NAMES,
                              "items": {"type": "string", "minLength": 1},
                              "description": "The tools' names, as search_tools gave them, or their mcpIds"},
                    "replace": {"type": "boolean",
                                "description": "Instead of the tools loaded so far ([] clears them)"},
                },
                "required": ["names"],
                "additionalProperties": false,
            }),
        }
    }

    /// search_tools' and load_tools' results, for the Model Context Protocol's face.
    fn output_schema(self) -> Option<Value> {
        match self {
            Meta::Search => Some(search_output()),
            Meta::Load => Some(json!({
                "type": "object",
                "properties": {"loaded": {"type": "array", "items": {"type": "string"}}},
                "required": ["loaded"],
            })),
            Meta::Call => None,
        }
    }

    /// Its entry in the Model Context Protocol's `tools/list`.
    pub fn modelcontext_entry(self, gateway: &str, d: &Discovery) -> Value {
        let mut entry = json!({
            "name": self.name(),
            "title": match self {
                Meta::Search => "Search tools",
                Meta::Call => "Call a tool",
                Meta::Load => "Load tools",
            },
            "description": self.description(),
            "inputSchema": self.input_schema(d),
            "_meta": {"dev.mcp-gateway/mcpId": self.id(gateway)},
        });
        if let Some(output) = self.output_schema() {
            entry["outputSchema"] = output;
        }
        entry
    }

    /// Its definition in MCP v1.0's `mcp/listTools`.
    pub fn v1_definition(self, gateway: &str, d: &Discovery) -> Value {
        json!({
            "mcpId": self.id(gateway),
            "name": self.name(),
            "description": self.description(),
            "inputSchema": self.input_schema(d),
            "outputSchema": {},
        })
    }
}

/// search_tools' result, as its `outputSchema` says it.
fn search_output() -> Value {
    json!({
        "type": "object",
        "properties": {
            "tools": {"type": "array", "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "mcpId": {"type": "string"},
                    "title": {"type": "string"},
                    "description": {"type": "string"},
                    "score": {"type": "number"},
                    "inputSchema": {"type": "object"},
                    "outputSchema": {"type": "object"},
                },
                "required": ["name", "mcpId", "description", "score"],
            }},
            "visible": {"type": "integer", "minimum": 0},
        },
        "required": ["tools", "visible"],
    })
}

/// search_tools' arguments, read and checked.
pub struct SearchArgs {
    pub query: String,
    pub limit: usize,
    pub schemas: bool,
}

impl SearchArgs {
    /// `arguments` as search_tools takes them; why not, as a tool error says it.
    pub fn read(arguments: &Value, d: &Discovery) -> Result<SearchArgs, String> {
        let Some(args) = arguments.as_object() else {
            return Err("search_tools takes an object: {\"query\": string}".into());
        };
        if let Some(key) = args
            .keys()
            .find(|k| !matches!(k.as_str(), "query" | "limit" | "schemas"))
        {
            return Err(format!("search_tools takes no argument '{key}'"));
        }
        let query = match args.get("query").and_then(Value::as_str) {
            Some(q) if !q.trim().is_empty() && q.chars().count() <= 1000 => q.to_owned(),
            _ => return Err("query must be a string of 1 to 1000 characters".into()),
        };
        let limit = match args.get("limit") {
            None => d.limit,
            Some(v) => match v.as_u64() {
                Some(n) if n >= 1 && n as usize <= d.max_limit => n as usize,
                _ => {
                    return Err(format!(
                        "limit must be an integer from 1 to {}",
                        d.max_limit
                    ));
                }
            },
        };
        let schemas = match args.get("schemas") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err("schemas must be true or false".into()),
        };
        Ok(SearchArgs {
            query,
            limit,
            schemas,
        })
    }
}

/// call_tool's arguments: the tool's name (or mcpId) and its arguments.
pub fn call_args(arguments: &Value) -> Result<(String, Value), String> {
    let Some(args) = arguments.as_object() else {
        return Err("call_tool takes an object: {\"name\": string, \"arguments\"?: object}".into());
    };
    if let Some(key) = args
        .keys()
        .find(|k| !matches!(k.as_str(), "name" | "arguments"))
    {
        return Err(format!("call_tool takes no argument '{key}'"));
    }
    let name = match args.get("name").and_then(Value::as_str) {
        Some(n) if !n.is_empty() => n.to_owned(),
        _ => return Err("name must be a tool's name or mcpId".into()),
    };
    let inner = match args.get("arguments") {
        None => json!({}),
        Some(v @ Value::Object(_)) => v.clone(),
        Some(_) => return Err("arguments must be an object".into()),
    };
    Ok((name, inner))
}
