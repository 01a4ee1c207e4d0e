//! Curation in MCP v1.0's face: a tool's listing entry with the name and
//! description the tenant's override gives it, and with a budget an
//! outputSchema that admits the stub of a cut value. Its mcpId, which
//! agents of this protocol call it by, never changes.

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::config::curation::Override;

/// `text`, one tool's entry in the catalog's listing, as the tenant sees it.
pub(super) fn v1_entry(text: &str, over: Option<&Override>, budgeted: bool) -> Bytes {
    let Ok(mut entry) = serde_json::from_str::<Map<String, Value>>(text) else {
        return Bytes::copy_from_slice(text.as_bytes());
    };
    if let Some(name) = over.and_then(|o| o.name.as_ref()) {
        entry.insert("name".into(), name.as_str().into());
    }
    if let Some(description) = over.and_then(|o| o.description.as_ref()) {
        entry.insert("description".into(), description.as_str().into());
    }
    if budgeted {
        budget_schema(&mut entry);
    }
    Bytes::from(Value::Object(entry).to_string())
}

/// A tool entry's own outputSchema made to admit the stub of a cut value
/// too. The envelope of content blocks a tool without a schema of its own
/// is listed with needs nothing: a cut of blocks is blocks.
pub fn budget_schema(entry: &mut Map<String, Value>) {
    let Some(own) = entry.get("outputSchema").filter(|s| s.is_object()) else {
        return;
    };
    if own == envelope() {
        return;
    }
    let budgeted = crate::output::budgeted_schema(own);
    entry.insert("outputSchema".into(), budgeted);
}

/// The outputSchema MCP v1.0's face lists for a tool without one of its own.
fn envelope() -> &'static Value {
    static ENVELOPE: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| {
        serde_json::from_str(crate::modelcontext::ENVELOPE_SCHEMA).unwrap_or_default()
    });
    &ENVELOPE
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
            output: None,
            cache: None,
        };
        let entry: Value = serde_json::from_slice(&v1_entry(text, Some(&over), false)).unwrap();
        assert_eq!(entry["mcpId"], "mcp://g/ev/tool/echo");
        assert_eq!(entry["name"], "say");
        assert_eq!(entry["description"], "Echoes.");
        assert!(entry.get("title").is_none(), "MCP v1.0 tools have no title");
    }
}
