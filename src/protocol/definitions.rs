//! The spec's ToolDefinition, ResourceDefinition and PromptDefinition checks.

use serde_json::{Map, Value};

use super::Method;

/// The three kinds of definitions a server lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Tool,
    Resource,
    Prompt,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Tool, Kind::Resource, Kind::Prompt];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Tool => "tool",
            Kind::Resource => "resource",
            Kind::Prompt => "prompt",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    /// The listing method for this kind.
    pub fn list_method(self) -> Method {
        match self {
            Kind::Tool => Method::ListTools,
            Kind::Resource => Method::ListResources,
            Kind::Prompt => Method::ListPrompts,
        }
    }

    pub fn of_list_method(method: Method) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.list_method() == method)
    }

    fn required_strings(self) -> &'static [&'static str] {
        match self {
            Kind::Tool => &["mcpId", "name", "description"],
            Kind::Resource => &["mcpId", "name", "description", "mediaType", "content"],
            Kind::Prompt => &["mcpId", "name", "role", "content"],
        }
    }
}

/// Checks the shape the spec's schema gives `kind` (schemas of tools are compiled separately).
pub fn check(kind: Kind, def: &Map<String, Value>) -> Result<(), String> {
    for field in kind.required_strings() {
        match def.get(*field) {
            Some(Value::String(_)) => {}
            Some(_) => return Err(format!("{field} is not a string")),
            None => return Err(format!("missing required field {field}")),
        }
    }
    match kind {
        Kind::Tool => {
            for field in ["inputSchema", "outputSchema"] {
                match def.get(field) {
                    Some(Value::Object(_)) => {}
                    Some(_) => return Err(format!("{field} is not an object")),
                    None => return Err(format!("missing required field {field}")),
                }
            }
        }
        Kind::Prompt => {
            let role = def.get("role").and_then(Value::as_str).unwrap_or_default();
            if !matches!(role, "system" | "user" | "assistant") {
                return Err("role is not one of system, user, assistant".into());
            }
            if def.get("description").is_some_and(|d| !d.is_string()) {
                return Err("description is not a string".into());
            }
        }
        Kind::Resource => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn checks_required_fields() {
        let tool = json!({"mcpId":"mcp://a/t","name":"t","description":"d","inputSchema":{},"outputSchema":{}});
        assert!(check(Kind::Tool, &obj(tool.clone())).is_ok());
        let mut missing = obj(tool.clone());
        missing.remove("outputSchema");
        assert_eq!(
            check(Kind::Tool, &missing).unwrap_err(),
            "missing required field outputSchema"
        );
        let mut typed = obj(tool);
        typed.insert("name".into(), json!(3));
        assert!(check(Kind::Tool, &typed).is_err());
        let prompt = json!({"mcpId":"p","name":"p","role":"robot","content":"c"});
        assert!(check(Kind::Prompt, &obj(prompt)).is_err());
        let prompt = json!({"mcpId":"p","name":"p","role":"user","content":"c"});
        assert!(check(Kind::Prompt, &obj(prompt)).is_ok());
        let res = json!({"mcpId":"r","name":"r","description":"d","mediaType":"text/plain"});
        assert!(check(Kind::Resource, &obj(res)).is_err());
    }
}
