//! `x-mcp-header` (2026-07-28): a tool's input schema may designate
//! arguments that clients mirror into `Mcp-Param-{Name}` headers, and a
//! server that reads the body must check that each header matches the
//! argument it mirrors. The rules are the revision's, in the order the
//! official Python SDK checks them: an annotation counts only on a property
//! reached from the root through `properties` alone, of type string, integer
//! or boolean, named by an RFC 9110 token unique (case-insensitively) in the
//! schema; a schema with any annotation that breaks them mirrors nothing
//! (conforming clients leave such a tool out).

use serde_json::Value;

/// The lowercase prefix of every mirrored argument's header name.
pub const PREFIX: &str = "mcp-param-";

/// One argument a tool mirrors into a header.
#[derive(Debug, Clone, PartialEq)]
pub struct Mirror {
    /// The chain of `properties` keys from the schema's root.
    pub path: Vec<String>,
    /// `{Name}` of `Mcp-Param-{Name}`.
    pub token: String,
    /// Its schema's `type`: `string`, `integer` or `boolean`.
    pub kind: String,
}

fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// The arguments `schema` mirrors; empty when it has none or any of its
/// annotations breaks the rules.
pub fn mirrors(schema: &Value) -> Vec<Mirror> {
    let mut found = Vec::new();
    if !walk(schema, Some(Vec::new()), &mut found) {
        return Vec::new();
    }
    let mut seen = std::collections::HashSet::new();
    if found
        .iter()
        .any(|m| !seen.insert(m.token.to_ascii_lowercase()))
    {
        return Vec::new();
    }
    found
}

/// Walks every schema position; `path` is `None` once a keyword other than
/// `properties` was crossed. False when an annotation breaks the rules.
fn walk(schema: &Value, path: Option<Vec<String>>, found: &mut Vec<Mirror>) -> bool {
    let Value::Object(s) = schema else {
        return true;
    };
    if let Some(header) = s.get("x-mcp-header") {
        let Some(path) = path.clone().filter(|p| !p.is_empty()) else {
            return false;
        };
        let (Some(token), Some(kind)) = (header.as_str(), s.get("type").and_then(Value::as_str))
        else {
            return false;
        };
        if !is_token(token) || !matches!(kind, "string" | "integer" | "boolean") {
            return false;
        }
        found.push(Mirror {
            path,
            token: token.to_owned(),
            kind: kind.to_owned(),
        });
    }
    for (keyword, value) in s {
        let ok = match keyword.as_str() {
            "properties" => match value {
                Value::Object(props) => props.iter().all(|(name, sub)| {
                    let deeper = path.clone().map(|mut p| {
                        p.push(name.clone());
                        p
                    });
                    walk(sub, deeper, found)
                }),
                _ => true,
            },
            "items"
            | "contains"
            | "unevaluatedItems"
            | "additionalProperties"
            | "propertyNames"
            | "unevaluatedProperties"
            | "not"
            | "if"
            | "then"
            | "else"
            | "contentSchema" => walk(value, None, found),
            "allOf" | "anyOf" | "oneOf" | "prefixItems" => match value {
                Value::Array(subs) => subs.iter().all(|sub| walk(sub, None, found)),
                _ => true,
            },
            "patternProperties" | "dependentSchemas" | "$defs" | "definitions" => match value {
                Value::Object(subs) => subs.values().all(|sub| walk(sub, None, found)),
                _ => true,
            },
            _ => true,
        };
        if !ok {
            return false;
        }
    }
    true
}

/// A header value with the `=?base64?...?=` sentinel decoded; `None` when
/// the sentinel is malformed or the value is not UTF-8.
pub fn decode(value: &[u8]) -> Option<std::borrow::Cow<'_, str>> {
    use base64::Engine as _;
    let text = std::str::from_utf8(value).ok()?;
    let Some(payload) = text
        .strip_prefix("=?base64?")
        .and_then(|t| t.strip_suffix("?="))
    else {
        return Some(std::borrow::Cow::Borrowed(text));
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(payload)
        .ok()?;
    String::from_utf8(bytes).ok().map(std::borrow::Cow::Owned)
}

/// A header value for `text` as a client writes it: as it is when it is
/// visible ASCII (spaces inside) with no space at either end, otherwise
/// base64 inside the `=?base64?...?=` sentinel.
pub fn encode(text: &str) -> std::borrow::Cow<'_, str> {
    use base64::Engine as _;
    let visible = text.bytes().all(|b| (0x20..0x7f).contains(&b));
    let padded = text.starts_with(' ') || text.ends_with(' ');
    let sentinel = text.starts_with("=?") && text.ends_with("?=");
    let plain = visible && !padded && !sentinel;
    if plain {
        return std::borrow::Cow::Borrowed(text);
    }
    std::borrow::Cow::Owned(format!(
        "=?base64?{}?=",
        base64::engine::general_purpose::STANDARD.encode(text)
    ))
}

/// The `Mcp-Param-{Name}` headers a client sends with a call of these
/// arguments (each mirrored argument present with a value it can render).
pub fn headers_for(mirrors: &[Mirror], arguments: &Value) -> Vec<(String, String)> {
    mirrors
        .iter()
        .filter_map(|m| {
            let value = m.path.iter().try_fold(arguments, |at, key| at.get(key))?;
            let text = rendered(value)?;
            Some((format!("{PREFIX}{}", m.token), encode(&text).into_owned()))
        })
        .collect()
}

/// How a client mirrors an argument's value; `None` for values it cannot.
fn rendered(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Whether a decoded header matches the argument: integers compare as
/// numbers (`42` matches `42.0`), everything else as the client renders it.
fn matches(kind: &str, value: &Value, decoded: &str) -> bool {
    if kind == "integer"
        && let Some(n) = value.as_f64().filter(|f| f.fract() == 0.0)
    {
        let canonical = decoded
            .strip_prefix('-')
            .unwrap_or(decoded)
            .split_once('.')
            .map_or(!decoded.is_empty(), |(w, f)| {
                !w.is_empty()
                    && w.bytes().all(|b| b.is_ascii_digit())
                    && f.bytes().all(|b| b == b'0')
            });
        if canonical && let Ok(h) = decoded.parse::<f64>() {
            return h == n;
        }
    }
    rendered(value).as_deref() == Some(decoded)
}

/// Checks the `Mcp-Param-*` headers (`header(name)` gives every value sent
/// under a lowercase name) against the call's arguments; the first
/// mismatch, said in words.
pub fn check<'h>(
    mirrors: &[Mirror],
    arguments: &Value,
    header: impl Fn(&str) -> Vec<&'h [u8]>,
) -> Result<(), String> {
    for m in mirrors {
        let name = format!("{PREFIX}{}", m.token.to_ascii_lowercase());
        let sent = header(&name);
        if sent.len() > 1 {
            return Err(format!("Mcp-Param-{} is sent more than once", m.token));
        }
        let value = m
            .path
            .iter()
            .try_fold(arguments, |v, k| v.get(k))
            .filter(|v| !v.is_null());
        let argument = m.path.join(".");
        match (value, sent.first()) {
            (None, None) => {}
            (None, Some(_)) => {
                return Err(format!(
                    "Mcp-Param-{} is sent but the argument {argument} is absent",
                    m.token
                ));
            }
            (Some(v), None) if rendered(v).is_none() => {}
            (Some(_), None) => {
                return Err(format!(
                    "Mcp-Param-{} is missing but the argument {argument} is present",
                    m.token
                ));
            }
            (Some(v), Some(raw)) => {
                let decoded = decode(raw).ok_or_else(|| {
                    format!("Mcp-Param-{} holds a malformed base64 value", m.token)
                })?;
                if rendered(v).is_none() || !matches(&m.kind, v, &decoded) {
                    return Err(format!(
                        "Mcp-Param-{} does not match the argument {argument}",
                        m.token
                    ));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "n": {"type": "integer", "x-mcp-header": "N"},
            "opts": {"type": "object", "properties": {"dry": {"type": "boolean", "x-mcp-header": "Dry"}}},
            "q": {"type": "string"}
        }})
    }

    #[test]
    fn annotations_count_only_where_the_rules_allow() {
        let m = mirrors(&schema());
        let tokens: Vec<_> = m.iter().map(|m| m.token.as_str()).collect();
        assert_eq!(tokens.len(), 3, "{m:?}");
        assert!(
            m.iter()
                .any(|m| m.path == ["opts", "dry"] && m.kind == "boolean")
        );
        for broken in [
            json!({"properties": {"a": {"type": "number", "x-mcp-header": "A"}}}),
            json!({"properties": {"a": {"type": "string", "x-mcp-header": "A b"}}}),
            json!({"properties": {"a": {"type": "string", "x-mcp-header": "A"}, "b": {"type": "string", "x-mcp-header": "a"}}}),
            json!({"anyOf": [{"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}]}),
            json!({"type": "object", "x-mcp-header": "Root"}),
        ] {
            assert!(mirrors(&broken).is_empty(), "{broken}");
        }
    }

    #[test]
    fn the_headers_written_for_a_call_pass_its_own_check() {
        let m = mirrors(&schema());
        for args in [
            json!({"region": "us-west1", "n": 42, "opts": {"dry": true}}),
            json!({"region": " café ", "n": -7, "opts": {"dry": false}}),
            json!({"region": "=?base64?eA==?=", "n": 0, "opts": {"dry": true}}),
        ] {
            let sent = headers_for(&m, &args);
            assert_eq!(sent.len(), 3, "{sent:?}");
            let header = |name: &str| {
                // Header names are case-insensitive; `check` asks in lowercase.
                sent.iter()
                    .filter(|(k, _)| k.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.as_bytes())
                    .collect::<Vec<_>>()
            };
            assert_eq!(check(&m, &args, header), Ok(()), "{args}");
        }
        assert_eq!(encode("us-west1"), "us-west1");
        assert_eq!(encode("é"), "=?base64?w6k=?=");
        assert!(headers_for(&m, &json!({"q": "x"})).is_empty());
    }

    #[test]
    fn headers_must_match_the_arguments_they_mirror() {
        let m = mirrors(&schema());
        let args = json!({"region": "us-west1", "n": 42, "opts": {"dry": true}, "q": "x"});
        let with = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .filter(|(k, _)| *k == name)
                    .map(|(_, v)| v.as_bytes())
                    .collect::<Vec<_>>()
            }
        };
        let good: &'static [(&str, &str)] = &[
            ("mcp-param-region", "us-west1"),
            ("mcp-param-n", "42.0"),
            ("mcp-param-dry", "true"),
        ];
        assert_eq!(check(&m, &args, with(good)), Ok(()));
        let encoded: &'static [(&str, &str)] = &[
            ("mcp-param-region", "=?base64?dXMtd2VzdDE=?="),
            ("mcp-param-n", "42"),
            ("mcp-param-dry", "true"),
        ];
        assert_eq!(check(&m, &args, with(encoded)), Ok(()));
        for bad in [
            &[
                ("mcp-param-region", "eu"),
                ("mcp-param-n", "42"),
                ("mcp-param-dry", "true"),
            ][..],
            &[("mcp-param-n", "42"), ("mcp-param-dry", "true")][..],
            &[
                ("mcp-param-region", "us-west1"),
                ("mcp-param-region", "us-west1"),
                ("mcp-param-n", "42"),
                ("mcp-param-dry", "true"),
            ][..],
            &[
                ("mcp-param-region", "=?base64?!!?="),
                ("mcp-param-n", "42"),
                ("mcp-param-dry", "true"),
            ][..],
            &[
                ("mcp-param-region", "us-west1"),
                ("mcp-param-n", "43"),
                ("mcp-param-dry", "true"),
            ][..],
        ] {
            let bad: &'static [(&str, &str)] = Box::leak(bad.to_vec().into_boxed_slice());
            assert!(check(&m, &args, with(bad)).is_err(), "{bad:?}");
        }
        // An absent argument must come without its header.
        let fewer = json!({"n": 1});
        let only_n: &'static [(&str, &str)] = &[("mcp-param-n", "1")];
        assert_eq!(check(&m, &fewer, with(only_n)), Ok(()));
        let stray: &'static [(&str, &str)] = &[("mcp-param-n", "1"), ("mcp-param-region", "x")];
        assert!(check(&m, &fewer, with(stray)).is_err());
    }
}
