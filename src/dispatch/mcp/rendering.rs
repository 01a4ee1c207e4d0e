//! A tool and its result as the face writes them: a listed tool (its name,
//! title, schemas, what the upstream's definition kept, the namespaced id in
//! `_meta`), and a call's result rendered once from what the tool produced
//! (its blocks, or a text block and `structuredContent`; a cut result with
//! its note and page links).

use super::*;

/// A tool's result as the protocol carries it: the upstream's own content
/// blocks when the tool produced blocks; otherwise a text block holding the
/// output and, where a schema was listed, `structuredContent`. An error of the
/// tool itself, or arguments the tool's schema refuses, as `isError`.
pub(super) fn call_result(result: Result<ToolResult, GatewayError>, structured: bool) -> Built {
    let tool_error = |why: &str| {
        Out::ToolError(json!({"content": [{"type": "text", "text": why}], "isError": true}))
    };
    let result = match result {
        Ok(result) => result,
        Err(GatewayError::InvalidArguments(why)) => return Ok(tool_error(&why)),
        Err(GatewayError::Upstream {
            error: CallError::Tool(why),
            ..
        }) => return Ok(tool_error(&why)),
        Err(e) => return Err(e),
    };
    Ok(rendered(&result, structured))
}

/// A successful result as the protocol carries it.
fn rendered(result: &ToolResult, structured: bool) -> Out {
    let (kind, output) = result.output();
    if let Some(cut) = result.cut_off() {
        return Out::Value(cut_result(kind, output, cut, structured));
    }
    if kind == Output::Blocks {
        return Out::Written(format!(r#"{{"content":{}}}"#, output.get()));
    }
    // Written straight from the output's text: a text block holding it, and
    // the output itself as `structuredContent`. Room for its escapes (a few
    // quotes, as a rule) and for what the stateless era adds too.
    let len = output.get().len();
    let mut out = String::with_capacity(2 * len + 96 + STATELESS_ROOM);
    out.push_str(r#"{"content":[{"type":"text","text":"#);
    push_as_string(&mut out, output.get());
    out.push_str("}]");
    if structured {
        out.push_str(r#","structuredContent":"#);
        out.push_str(output.get());
    }
    out.push('}');
    Out::Written(out)
}

/// A result cut to its budget: what was kept, the note and page links
/// after it, and the mark in `_meta`.
fn cut_result(kind: Output, output: Json<'_>, cut: &Cut, structured: bool) -> Value {
    let meta = json!({ crate::output::TRUNCATED: cut.mark });
    let kept: Value = serde_json::from_str(output.get()).unwrap_or(Value::Null);
    if kind == Output::Blocks {
        return json!({"content": kept, "_meta": meta});
    }
    let mut content = vec![json!({"type": "text", "text": output.get()})];
    content.extend(cut.tail.iter().cloned());
    let mut result = json!({"content": content, "_meta": meta});
    if structured {
        result["structuredContent"] = kept;
    }
    result
}

/// `json`, valid JSON text, written as a JSON string: only its quotes,
/// backslashes and the whitespace between its tokens need escaping (within
/// its strings every control character is escaped already), which is what
/// serde_json would write.
fn push_as_string(out: &mut String, json: &str) {
    out.push('"');
    let mut from = 0;
    for (i, b) in json.bytes().enumerate() {
        let escaped = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            _ => continue,
        };
        out.push_str(&json[from..i]);
        out.push_str(escaped);
        from = i + 1;
    }
    out.push_str(&json[from..]);
    out.push('"');
}

/// A tool as the face lists it: its name, the MCP v1.0 name as its title
/// (unless the upstream gave one), what the upstream's own definition kept
/// (annotations, icons, execution, `_meta`), and the namespaced id in `_meta`.
pub(super) fn render_tool(
    name: &str,
    def: &Map<String, Value>,
    kept: Option<&str>,
    id: &str,
    output: Option<&Value>,
) -> Box<str> {
    let kept: Map<String, Value> = kept
        .and_then(|k| serde_json::from_str(k).ok())
        .unwrap_or_default();
    let mut tool = Map::new();
    tool.insert("name".into(), name.into());
    if let Some(title) = kept.get("title").or_else(|| def.get("name")) {
        tool.insert("title".into(), title.clone());
    }
    // A task-only tool's own description was kept: the core's notes that it is.
    let description = kept.get("description").or_else(|| def.get("description"));
    tool.insert(
        "description".into(),
        description.cloned().unwrap_or_default(),
    );
    // The protocol's input schemas have an object root (arguments are an
    // object); one without says so by wrapping, which accepts the same objects.
    let input = match def.get("inputSchema") {
        Some(schema) if schema.get("type").and_then(Value::as_str) == Some("object") => {
            schema.clone()
        }
        Some(schema) => json!({"type": "object", "allOf": [schema]}),
        None => json!({"type": "object"}),
    };
    tool.insert("inputSchema".into(), input);
    if let Some(output) = output {
        tool.insert("outputSchema".into(), output.clone());
    }
    copy_members(&kept, &mut tool, &["annotations", "icons", "execution"]);
    tool.insert(
        "_meta".into(),
        meta_with(kept.get("_meta"), MCPID_META, id.into()),
    );
    Value::Object(tool).to_string().into_boxed_str()
}

/// The members named `keys` that `from` has, copied into `to`.
pub(super) fn copy_members(from: &Map<String, Value>, to: &mut Map<String, Value>, keys: &[&str]) {
    for key in keys {
        if let Some(v) = from.get(*key) {
            to.insert((*key).into(), v.clone());
        }
    }
}

/// An upstream's own `_meta` (if it is an object) with the gateway's `key` added.
pub(super) fn meta_with(own: Option<&Value>, key: &str, value: Value) -> Value {
    let mut meta = match own {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    meta.insert(key.into(), value);
    Value::Object(meta)
}

#[cfg(test)]
mod tests;
