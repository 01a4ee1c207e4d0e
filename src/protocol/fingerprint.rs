//! What a pin holds of a tool: the fingerprint of its definition as the
//! upstream wrote it, less its name (`name`; MCP v1.0's `mcpId`), so that a
//! tool renamed but unchanged is recognised and one renamed and changed is
//! not taken for a new one. Fingerprints are of canonical JSON (object keys
//! sorted, no white space): only a real change of a definition changes one.

use serde_json::Value;

/// One tool as the pins see it in a listing.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    /// The id the upstream gave it (as the pins file keys it).
    pub id: String,
    /// Of its definition less its name.
    pub fingerprint: String,
    /// Of its whole definition: the formula of older pins files, which are
    /// rewritten silently when they match it.
    pub legacy: String,
    /// As the upstream wrote it.
    pub definition: Value,
}

impl Seen {
    pub fn of(id: &str, definition: Value) -> Seen {
        Seen {
            id: id.to_owned(),
            fingerprint: fingerprint(&nameless(&definition)),
            legacy: fingerprint(&definition),
            definition,
        }
    }
}

/// The definition without the member that names it: an MCP v1.0 tool's
/// `mcpId` (its `name` is a label, part of what is pinned), otherwise the
/// Model Context Protocol's `name`.
pub fn nameless(definition: &Value) -> Value {
    let mut def = definition.clone();
    if let Value::Object(map) = &mut def
        && map.remove("mcpId").is_none()
    {
        map.remove("name");
    }
    def
}

/// `sha256:<hex>` of `def`'s canonical JSON.
pub fn fingerprint(def: &Value) -> String {
    use sha2::{Digest, Sha256};
    use std::fmt::Write;
    let mut text = String::new();
    canonical(def, &mut text);
    let mut hex = String::from("sha256:");
    for b in Sha256::digest(text.as_bytes()) {
        let _ = write!(hex, "{b:02x}");
    }
    hex
}

/// `v` as canonical JSON: object keys sorted, no white space.
fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical(&map[k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// `v` pretty-printed with its object keys sorted: one member a line, what
/// a review's diff compares.
pub fn pretty(v: &Value) -> String {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                let mut out = serde_json::Map::new();
                for k in keys {
                    out.insert(k.clone(), sorted(&map[k]));
                }
                Value::Object(out)
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            scalar => scalar.clone(),
        }
    }
    // serde_json's map keeps the order members were inserted in only with
    // `preserve_order`; without it, it sorts them: sorted either way.
    serde_json::to_string_pretty(&sorted(v)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_rename_keeps_the_fingerprint_and_a_change_does_not() {
        let echo =
            json!({"name": "echo", "description": "Echoes.", "inputSchema": {"type": "object"}});
        let say =
            json!({"inputSchema": {"type": "object"}, "description": "Echoes.", "name": "say"});
        let changed = json!({"name": "say", "description": "Echoes, and sends it on.", "inputSchema": {"type": "object"}});
        let (a, b, c) = (
            Seen::of("echo", echo),
            Seen::of("say", say),
            Seen::of("say", changed),
        );
        assert_eq!(a.fingerprint, b.fingerprint);
        assert_ne!(a.legacy, b.legacy, "the old formula counts the name");
        assert_ne!(a.fingerprint, c.fingerprint);
        let v1 = Seen::of(
            "mcp://x/tools/a",
            json!({"mcpId": "mcp://x/tools/a", "description": "Echoes.", "inputSchema": {"type": "object"}}),
        );
        let v1_renamed = Seen::of(
            "mcp://x/tools/b",
            json!({"mcpId": "mcp://x/tools/b", "description": "Echoes.", "inputSchema": {"type": "object"}}),
        );
        assert_eq!(v1.fingerprint, v1_renamed.fingerprint);
    }

    #[test]
    fn pretty_puts_one_member_on_a_line_in_key_order() {
        let text = pretty(&json!({"b": 1, "a": {"d": [1, 2], "c": "x"}}));
        assert_eq!(
            text,
            "{\n  \"a\": {\n    \"c\": \"x\",\n    \"d\": [\n      1,\n      2\n    ]\n  },\n  \"b\": 1\n}"
        );
    }
}
