//! One schema for the configuration file, everywhere: the config types
//! make it (`mcp-gateway check --schema`); the editor schema
//! (docs/config.schema.json), the Helm chart's values schema (its
//! upstreams, tenants, limits and auth) and the reference in
//! docs/configuration.md are held equal to it here. `UPDATE_SCHEMAS=1`
//! writes the two JSON files anew from the types.

use std::path::Path;
use std::process::Command;

use serde_json::{Map, Value, json};

use crate::support::*;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn update() -> bool {
    std::env::var_os("UPDATE_SCHEMAS").is_some_and(|v| v == "1")
}

/// Compares `text` with the file at `path` (or writes it, when updating).
fn kept_equal(path: &str, text: &str) {
    let path = root().join(path);
    if update() {
        std::fs::write(&path, text).unwrap();
        return;
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == text,
        "{} differs from what the config types make: run UPDATE_SCHEMAS=1 cargo test --test it schema::",
        path.display()
    );
}

/// `schema` with every `$ref` to its `$defs` written in place and what
/// only documents a type (`format`, `$schema`, `title` of a definition)
/// left out: what any validator, old or new, reads the same way.
fn inlined(schema: &Value, defs: &Map<String, Value>) -> Value {
    match schema {
        Value::Object(o) => {
            if let Some(Value::String(r)) = o.get("$ref") {
                let name = r.trim_start_matches("#/$defs/");
                let mut target = inlined(&defs[name], defs);
                if let (Some(d), Value::Object(t)) = (o.get("description"), &mut target) {
                    t.insert("description".into(), d.clone());
                }
                return target;
            }
            let mut out = Map::new();
            for (k, v) in o {
                if matches!(k.as_str(), "$defs" | "$schema" | "format" | "title") {
                    continue;
                }
                // The names of properties are the file's keys, kept whatever
                // they are (a key may be called `title`).
                let v = match (k.as_str(), v) {
                    ("properties", Value::Object(props)) => Value::Object(
                        props
                            .iter()
                            .map(|(name, p)| (name.clone(), inlined(p, defs)))
                            .collect(),
                    ),
                    _ => inlined(v, defs),
                };
                out.insert(k.clone(), v);
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(|v| inlined(v, defs)).collect()),
        other => other.clone(),
    }
}

/// The whole file's schema, every definition in place.
fn whole() -> Value {
    let schema = mcp_gateway::config::raw::schema();
    let defs = schema["$defs"].as_object().cloned().unwrap_or_default();
    inlined(&schema, &defs)
}

#[test]
fn the_editor_schema_is_what_check_prints() {
    let out = Command::new(BIN)
        .args(["check", "--schema"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed, mcp_gateway::config::raw::schema());
    let text = serde_json::to_string_pretty(&printed).unwrap() + "\n";
    kept_equal("docs/config.schema.json", &text);
}

/// A definition of the file's schema, the object a key at `path` holds.
fn part<'a>(schema: &'a Value, path: &[&str]) -> &'a Value {
    let mut at = schema;
    for key in path {
        at = match *key {
            "*" => &at["additionalProperties"],
            key => &at["properties"][key],
        };
        // An optional object: `anyOf` of it and null.
        if let Some(any) = at["anyOf"].as_array() {
            at = any.iter().find(|v| v["type"] != "null").unwrap();
        }
    }
    at
}

#[test]
fn the_charts_values_schema_takes_every_key_of_the_file() {
    let file = whole();
    let path = "helm/mcp-gateway/values.schema.json";
    let mut values: Value =
        serde_json::from_str(&std::fs::read_to_string(root().join(path)).unwrap()).unwrap();
    let gateway = &mut values["properties"]["gateway"]["properties"];
    gateway["upstreams"] = part(&file, &["upstreams"]).clone();
    // The chart gives each tenant its key from the keys Secret.
    let mut tenants = part(&file, &["tenants"]).clone();
    let tenant = tenants["additionalProperties"]["properties"]
        .as_object_mut()
        .unwrap();
    tenant.remove("api_keys");
    tenants["propertyNames"] = json!({"pattern": "^[A-Za-z0-9_-]{1,64}$"});
    gateway["tenants"] = tenants;
    gateway["limits"] = part(&file, &["gateway", "limits"]).clone();
    gateway["auth"] = part(&file, &["gateway", "auth"]).clone();
    gateway["upstreamAuth"] = part(&file, &["gateway", "upstream_auth"]).clone();
    let text = serde_json::to_string_pretty(&values).unwrap() + "\n";
    kept_equal(path, &text);
}

/// Every key path of an instance (`a.b.c`; `*` for the names of a map).
fn keys_of(schema: &Value, at: &str, out: &mut Vec<String>) {
    let schema = match schema["anyOf"].as_array() {
        Some(any) => any.iter().find(|v| v["type"] != "null").unwrap(),
        None => schema,
    };
    if let Some(props) = schema["properties"].as_object() {
        for (k, v) in props {
            let here = format!("{at}{k}");
            out.push(here.clone());
            keys_of(v, &format!("{here}."), out);
        }
    }
    if let Some(items) = schema.get("items") {
        keys_of(items, at, out);
    }
    if let Some(map) = schema.get("additionalProperties").filter(|v| v.is_object()) {
        out.push(format!("{at}*"));
        keys_of(map, &format!("{at}*."), out);
    }
}

/// Every key path the YAML `value` holds, map names as `*` where the
/// schema says the object is a map.
fn written(value: &Value, schema: &Value, at: &str, out: &mut Vec<String>) {
    let schema = match schema["anyOf"].as_array() {
        Some(any) => any.iter().find(|v| v["type"] != "null").unwrap(),
        None => schema,
    };
    match value {
        Value::Object(o) => {
            for (k, v) in o {
                let (key, inner) = match schema["properties"].get(k) {
                    Some(s) => (k.as_str(), s),
                    None => ("*", &schema["additionalProperties"]),
                };
                let here = format!("{at}{key}");
                out.push(here.clone());
                written(v, inner, &format!("{here}."), out);
            }
        }
        Value::Array(a) => {
            for v in a {
                written(v, &schema["items"], at, out);
            }
        }
        _ => {}
    }
}

#[test]
fn the_docs_reference_names_every_key_and_no_other() {
    let docs = std::fs::read_to_string(root().join("docs/configuration.md")).unwrap();
    let block = docs
        .split("### Configuration reference")
        .nth(1)
        .and_then(|rest| rest.split("```yaml\n").nth(1))
        .and_then(|rest| rest.split("\n```").next())
        .expect("the reference's YAML block");
    let reference: Value = serde_saphyr::from_str(block).unwrap();
    let schema = whole();
    let mut known = Vec::new();
    keys_of(&schema, "", &mut known);
    let mut shown = Vec::new();
    written(&reference, &schema, "", &mut shown);
    let unknown: Vec<&String> = shown.iter().filter(|k| !known.contains(k)).collect();
    assert!(
        unknown.is_empty(),
        "the reference shows keys the file does not take: {unknown:?}"
    );
    // A key shown as an alternative in a comment (`# or jwks_file: ...`)
    // is shown too.
    let in_a_comment = |key: &str| {
        let leaf = key.rsplit('.').next().unwrap_or(key);
        block
            .lines()
            .filter_map(|l| l.split_once('#').map(|(_, c)| c))
            .any(|c| c.contains(&format!("{leaf}:")))
    };
    let missing: Vec<&String> = known
        .iter()
        .filter(|k| !shown.contains(k) && !in_a_comment(k))
        .collect();
    assert!(
        missing.is_empty(),
        "the reference does not show: {missing:?}"
    );
}
