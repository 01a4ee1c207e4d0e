//! Every mistake of a file's shape at once. Reading the file into its types
//! stops at the first unknown key, missing field or wrong type; when it
//! does, the file is read as plain YAML and held to the types' own JSON
//! Schema (`raw::schema`), which names each mistake with where it is. A
//! file whose YAML is itself broken has the one error its reader gives.

use serde_json::Value;

use super::Problem;

/// Each mistake of shape in `text`, by where it is; empty when the schema
/// finds none (the reader's own error then stands).
pub fn mistakes(text: &str) -> Vec<Problem> {
    let Ok(instance) = serde_saphyr::from_str::<Value>(text) else {
        return Vec::new();
    };
    let schema = without_null(super::raw::schema());
    let Ok(validator) = jsonschema::options().offline().build(&schema) else {
        return Vec::new();
    };
    let mut found: Vec<Problem> = validator
        .iter_errors(&instance)
        .map(|e| Problem {
            path: dotted(e.instance_path().as_str()),
            message: e.to_string(),
        })
        .collect();
    found.sort_by(|a, b| a.path.cmp(&b.path));
    found.dedup_by(|a, b| a.path == b.path && a.message == b.message);
    found
}

/// The schema with each optional object's `anyOf: [object, null]` read as
/// the object: a mistake inside it is then named where it is, not as an
/// object that matches neither branch. (A null there was already accepted
/// by the reader, which stopped elsewhere.)
fn without_null(schema: Value) -> Value {
    match schema {
        Value::Object(mut o) => {
            if let Some(Value::Array(any)) = o.get("anyOf") {
                let kept: Vec<&Value> = any.iter().filter(|b| b["type"] != "null").collect();
                if let ([one], true) = (kept.as_slice(), any.len() == 2) {
                    let one = (*one).clone();
                    o.remove("anyOf");
                    if let Value::Object(inner) = without_null(one) {
                        o.extend(inner);
                    }
                }
            }
            Value::Object(o.into_iter().map(|(k, v)| (k, without_null(v))).collect())
        }
        Value::Array(a) => Value::Array(a.into_iter().map(without_null).collect()),
        other => other,
    }
}

/// `/tenants/acme/upstreams/1` as the file's readers write it:
/// `tenants.acme.upstreams[1]`.
fn dotted(pointer: &str) -> String {
    let mut out = String::new();
    for part in pointer.split('/').skip(1) {
        let part = part.replace("~1", "/").replace("~0", "~");
        if part.bytes().all(|b| b.is_ascii_digit()) && !part.is_empty() {
            out.push_str(&format!("[{part}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&part);
        }
    }
    if out.is_empty() {
        "(the file)".into()
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mistake_of_shape_is_named_in_one_pass() {
        let text = "gateway: {listen: 8080, typo: 1}\nupstreams:\n  a: {stdio: {args: [x]}}\n  b: {http: {url: \"http://x/mcp\"}, timeout_ms: soon}\ntenants:\n  t: {upstreams: [a], max_sessions: -1}\n";
        let found = mistakes(text);
        let text: Vec<String> = found.iter().map(ToString::to_string).collect();
        let all = text.join("\n");
        for at in [
            "gateway: Additional properties",
            "typo",
            "gateway.listen:",
            "upstreams.a.stdio: \"command\" is a required property",
            "upstreams.b.timeout_ms:",
            "tenants.t.max_sessions:",
        ] {
            assert!(all.contains(at), "{at} missing from:\n{all}");
        }
    }

    #[test]
    fn a_pointer_reads_as_the_files_path() {
        assert_eq!(
            dotted("/tenants/acme/upstreams/1"),
            "tenants.acme.upstreams[1]"
        );
        assert_eq!(dotted(""), "(the file)");
    }
}
