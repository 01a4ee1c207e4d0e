//! Curation in MCP v1.0's face: a tool's listing entry with the name and
//! description the tenant's override gives it. Its mcpId, which agents of
//! this protocol call it by, never changes.

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::config::curation::Override;

/// `text`, one tool's entry in the catalog's listing, as the tenant sees it.
pub(super) fn v1_entry(text: &str, over: &Override) -> Bytes {
    let Ok(mut entry) = serde_json::from_str::<Map<String, Value>>(text) else {
        return Bytes::copy_from_slice(text.as_bytes());
    };
    if let Some(name) = &over.name {
        entry.insert("name".into(), name.as_str().into());
    }
    if let Some(description) = &over.description {
        entry.insert("description".into(), description.as_str().into());
    }
    Bytes::from(Value::Object(entry).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_override_replaces_the_name_and_description_and_keeps_the_id() {
        let text = r#"{"mcpId":"mcp://g/ev/tool/echo","name":"echo","description":"Echoes.","inputSchema":{"type":"object"}}"#;
        let over = Override {
            name: Some("say".into()),
            title: Some("Say".into()),
            description: None,
        };
        let entry: Value = serde_json::from_slice(&v1_entry(text, &over)).unwrap();
        assert_eq!(entry["mcpId"], "mcp://g/ev/tool/echo");
        assert_eq!(entry["name"], "say");
        assert_eq!(entry["description"], "Echoes.");
        assert!(entry.get("title").is_none(), "MCP v1.0 tools have no title");
    }
}
