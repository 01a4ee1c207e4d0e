//! JSON Schema compilation for schemas that come from upstreams, hence untrusted.
//!
//! `$ref`s are never retrieved (no network connection, no file read: the crate is
//! built without its resolvers and the retriever is the offline one), and
//! `pattern` uses the `regex` engine, which cannot backtrack catastrophically.

use jsonschema::error::ValidationErrorKind;
use jsonschema::{PatternOptions, ValidationError};
use serde_json::Value;

use super::instance::InstanceJson;

/// A compiled schema; it validates [`super::instance::Instance`]s.
pub type Validator = jsonschema::Validator<InstanceJson>;

/// Compiles a schema once; it is then used for every call.
pub fn compile(schema: &Value) -> Result<Validator, String> {
    jsonschema::options_for::<InstanceJson>()
        .offline()
        .with_pattern_options(PatternOptions::regex())
        .build(schema)
        .map_err(|e| e.to_string())
}

/// A one-line explanation of why `what` (e.g. "arguments") of `tool` breaks its schema,
/// in the spirit of the spec's example.
pub fn explain(err: &ValidationError<'_>, what: &str, tool: &str) -> String {
    let at = err.instance_path().as_str();
    match err.kind() {
        ValidationErrorKind::Required { property } => {
            let name = property
                .as_str()
                .map_or_else(|| property.to_string(), str::to_owned);
            let inside = if at.is_empty() {
                String::new()
            } else {
                format!(" at {at}")
            };
            format!("Missing required property: '{name}'{inside} in {what} for tool {tool}")
        }
        _ => {
            let at = if at.is_empty() { "/" } else { at };
            format!("Invalid {what} for tool {tool} at {at}: {err}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::instance::Instance;
    use serde_json::json;

    /// The instance as the gateway reads it from a request.
    fn parse(value: &Value) -> Instance<'static> {
        let text: &'static str = Box::leak(value.to_string().into_boxed_str());
        Instance::parse(text).unwrap()
    }
    use std::time::{Duration, Instant};

    #[test]
    fn explains_like_the_spec() {
        let v = compile(&json!({"type":"object","required":["path","content"]})).unwrap();
        let args = json!({"path": "/x"});
        let args = parse(&args);
        let err = v.validate(&args).unwrap_err();
        assert_eq!(
            explain(&err, "arguments", "mcp://g/f/t"),
            "Missing required property: 'content' in arguments for tool mcp://g/f/t"
        );
    }

    #[test]
    fn remote_refs_are_never_fetched() {
        // 127.0.0.1:9 is the discard port: if a fetch were attempted it would fail anyway,
        // but the offline retriever refuses before any connection.
        assert!(compile(&json!({"$ref": "http://127.0.0.1:9/schema.json"})).is_err());
        assert!(compile(&json!({"$ref": "file:///etc/passwd"})).is_err());
        // Local references work.
        let v = compile(&json!({"$defs":{"s":{"type":"string"}},"$ref":"#/$defs/s"})).unwrap();
        assert!(v.is_valid(&parse(&json!("x"))) && !v.is_valid(&parse(&json!(1))));
    }

    #[test]
    fn invalid_schemas_are_rejected() {
        assert!(compile(&json!({"type": 12})).is_err());
        assert!(compile(&json!({"pattern": "("})).is_err());
    }

    #[test]
    fn patterns_do_not_backtrack() {
        let v = compile(&json!({"type":"string","pattern":"^(a+)+$"})).unwrap();
        let evil = format!("{}!", "a".repeat(30));
        let start = Instant::now();
        assert!(!v.is_valid(&parse(&json!(evil))));
        // Generous bound: a backtracking engine takes seconds to minutes here.
        assert!(start.elapsed() < Duration::from_secs(1));
    }
}
