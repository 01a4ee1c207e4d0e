//! The JSON text of what the gateway sends upstreams: requests written
//! straight into their buffer, with ids of the gateway's own.

use serde_json::value::RawValue;

use crate::jsonrpc::Json;
use crate::telemetry::traces::Outbound;

/// The params of a request the gateway sends. Each form is valid JSON by
/// construction, so nothing is parsed again to send it.
#[derive(Clone, Copy, Debug)]
pub enum Params<'a> {
    /// Params as they are.
    Json(Json<'a>),
    /// `{"id": <tool id>, "arguments": <arguments>}`: an `mcp/executeTool`
    /// forwarded with the upstream's own tool id, written straight into the
    /// request (the arguments are the agent's, byte for byte).
    Execute { tool: &'a str, arguments: Json<'a> },
    /// `{"name": <tool name>, "arguments": <arguments>}`: a `tools/call` (or
    /// `prompts/get`) of the Model Context Protocol, written the same way;
    /// with `_meta.progressToken` when the gateway asks for progress (the
    /// token's JSON text).
    CallTool {
        name: &'a str,
        arguments: Json<'a>,
        progress: Option<&'a str>,
    },
    /// `{"taskId": <id>}`: a `tasks/result`, with `_meta.progressToken` when
    /// the gateway hears what the upstream asks while the client waits.
    TaskResult {
        task: &'a str,
        progress: Option<&'a str>,
    },
    /// A request of the 2026-07-28 revision, its params written by the
    /// caller (`_meta` envelope and all): sent without the upstream's
    /// session, `name` in its `Mcp-Name` header, `token` the progress
    /// token of the gateway's own its `_meta` carries, if any, and the
    /// arguments the tool mirrors in `headers` (`Mcp-Param-*`).
    Stateless {
        params: StatelessBody<'a>,
        name: &'a str,
        token: Option<&'a str>,
        headers: &'a [(String, String)],
    },
    /// Any of the others with the trace context it carries added to its
    /// `_meta` (and, over HTTP, its headers).
    Traced {
        params: &'a Params<'a>,
        trace: &'a Outbound,
    },
}

/// The params of a 2026-07-28 request: as they are, or a client's call
/// written straight into the request (see [`super::StatelessCall`]).
#[derive(Clone, Copy, Debug)]
pub enum StatelessBody<'a> {
    Json(Json<'a>),
    Call(&'a super::StatelessCall<'a>),
}

impl<'a> Params<'a> {
    /// The tool (or prompt) the params name, if any.
    pub(crate) fn name(&self) -> Option<&str> {
        match self {
            Params::CallTool { name, .. } => Some(name),
            Params::Execute { tool, .. } => Some(tool),
            Params::Stateless { name, .. } => Some(name),
            Params::Traced { params, .. } => params.name(),
            Params::Json(_) | Params::TaskResult { .. } => None,
        }
    }

    /// The mirrored headers of a 2026-07-28 request (see
    /// [`Params::Stateless`]); `None` for any other.
    pub(crate) fn stateless(&self) -> Option<&'a [(String, String)]> {
        match self {
            Params::Stateless { headers, .. } => Some(headers),
            Params::Traced { params, .. } => params.stateless(),
            _ => None,
        }
    }

    /// The trace context the params carry, if any.
    pub(crate) fn trace(&self) -> Option<&'a Outbound> {
        match self {
            Params::Traced { trace, .. } => Some(trace),
            _ => None,
        }
    }

    /// The progress token of the gateway's own the params carry, if any.
    pub(crate) fn token(&self) -> Option<&str> {
        match self {
            Params::CallTool { progress, .. } | Params::TaskResult { progress, .. } => *progress,
            Params::Stateless { token, .. } => *token,
            Params::Traced { params, .. } => params.token(),
            Params::Json(_) | Params::Execute { .. } => None,
        }
    }
}

impl<'a> From<&'a RawValue> for Params<'a> {
    fn from(raw: &'a RawValue) -> Self {
        Params::Json(raw.into())
    }
}

impl<'a> From<Json<'a>> for Params<'a> {
    fn from(raw: Json<'a>) -> Self {
        Params::Json(raw)
    }
}

impl Params<'_> {
    pub(crate) fn len_hint(&self) -> usize {
        match self {
            Params::Json(raw)
            | Params::Stateless {
                params: StatelessBody::Json(raw),
                ..
            } => raw.get().len(),
            Params::Stateless {
                params: StatelessBody::Call(call),
                name,
                ..
            } => call.len_hint() + name.len(),
            Params::Execute { tool, arguments } => tool.len() + arguments.get().len() + 24,
            Params::CallTool {
                name,
                arguments,
                progress,
            } => name.len() + arguments.get().len() + 26 + progress.map_or(0, |t| t.len() + 30),
            Params::TaskResult { task, progress } => {
                task.len() + 16 + progress.map_or(0, |t| t.len() + 30)
            }
            Params::Traced { params, .. } => params.len_hint() + 96,
        }
    }

    /// Appends the params' JSON text.
    pub fn write(&self, out: &mut Vec<u8>) {
        self.write_with(out, None);
    }

    /// Appends the params' JSON text, with the fields of `extra` in its `_meta`.
    fn write_with(&self, out: &mut Vec<u8>, extra: Option<&Outbound>) {
        match self {
            Params::Traced { params, trace } => params.write_with(out, Some(trace)),
            Params::Stateless {
                params: StatelessBody::Call(call),
                name,
                token,
                ..
            } => call.write(out, name, *token, extra),
            Params::Json(raw)
            | Params::Stateless {
                params: StatelessBody::Json(raw),
                ..
            } => match extra {
                None => out.extend_from_slice(raw.get().as_bytes()),
                Some(extra) => write_json_with_meta(out, raw.get(), extra),
            },
            Params::Execute { tool, arguments } => {
                out.extend_from_slice(br#"{"id":"#);
                write_json_string(out, tool);
                out.extend_from_slice(br#","arguments":"#);
                out.extend_from_slice(arguments.get().as_bytes());
                write_meta(out, None, extra);
                out.push(b'}');
            }
            Params::CallTool {
                name,
                arguments,
                progress,
            } => {
                out.extend_from_slice(br#"{"name":"#);
                write_json_string(out, name);
                out.extend_from_slice(br#","arguments":"#);
                out.extend_from_slice(arguments.get().as_bytes());
                write_meta(out, *progress, extra);
                out.push(b'}');
            }
            Params::TaskResult { task, progress } => {
                out.extend_from_slice(br#"{"taskId":"#);
                write_json_string(out, task);
                write_meta(out, *progress, extra);
                out.push(b'}');
            }
        }
    }

    /// The params as one JSON text.
    pub fn to_text(&self) -> String {
        let mut out = Vec::with_capacity(self.len_hint());
        self.write(&mut out);
        String::from_utf8(out).unwrap_or_else(|_| unreachable!("JSON text is UTF-8"))
    }
}

/// `"traceparent":"…"` and the trace's other fields: members of `_meta`.
pub(super) fn write_trace(out: &mut Vec<u8>, trace: &Outbound) {
    out.extend_from_slice(trace.traceparent_member());
    for (key, value) in trace.more() {
        out.extend_from_slice(b",\"");
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(b"\":");
        write_json_string(out, value);
    }
}

/// `,"_meta":{"progressToken":<token>,<extra>}` with what there is (the
/// token's JSON text, the trace's fields); nothing when there is neither.
fn write_meta(out: &mut Vec<u8>, token: Option<&str>, extra: Option<&Outbound>) {
    if token.is_none() && extra.is_none() {
        return;
    }
    out.extend_from_slice(br#","_meta":{"#);
    if let Some(token) = token {
        out.extend_from_slice(br#""progressToken":"#);
        out.extend_from_slice(token.as_bytes());
        if extra.is_some() {
            out.push(b',');
        }
    }
    if let Some(extra) = extra {
        write_trace(out, extra);
    }
    out.push(b'}');
}

/// Params given as JSON text, with `extra` members in their `_meta`: added
/// before the closing brace when the params have no `_meta`; merged into it
/// (the added members replacing theirs) when they do. Params that are not
/// an object are written as they are.
fn write_json_with_meta(out: &mut Vec<u8>, params: &str, extra: &Outbound) {
    let trimmed = params.trim_end();
    if !trimmed.starts_with('{') || !trimmed.ends_with('}') {
        out.extend_from_slice(params.as_bytes());
        return;
    }
    if !params.contains("\"_meta\"") {
        out.extend_from_slice(&trimmed.as_bytes()[..trimmed.len() - 1]);
        let empty = trimmed[1..trimmed.len() - 1].trim().is_empty();
        out.extend_from_slice(if empty {
            b"\"_meta\":{"
        } else {
            b",\"_meta\":{"
        });
        write_trace(out, extra);
        out.extend_from_slice(b"}}");
        return;
    }
    type Object = serde_json::Map<String, serde_json::Value>;
    let merged = serde_json::from_str::<Object>(params)
        .ok()
        .and_then(|mut p| {
            let mut added = b"{".to_vec();
            write_trace(&mut added, extra);
            added.push(b'}');
            let added: Object = serde_json::from_slice(&added).ok()?;
            match p.entry("_meta").or_insert_with(|| Object::new().into()) {
                serde_json::Value::Object(meta) => meta.extend(added),
                other => *other = added.into(),
            }
            serde_json::to_vec(&p).ok()
        });
    match merged {
        Some(merged) => out.extend_from_slice(&merged),
        None => out.extend_from_slice(params.as_bytes()),
    }
}

/// The JSON text of a request the gateway sends; ids are the gateway's own.
pub(crate) fn encode_request(id: Option<u64>, method: &str, params: Params<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + method.len() + params.len_hint());
    write_request(&mut out, id, method, params);
    out
}

/// Appends the JSON text of a request (see [`encode_request`]).
pub(crate) fn write_request(out: &mut Vec<u8>, id: Option<u64>, method: &str, params: Params<'_>) {
    out.extend_from_slice(br#"{"jsonrpc":"2.0","#);
    if let Some(id) = id {
        out.extend_from_slice(br#""id":"#);
        write_u64(out, id);
        out.push(b',');
    }
    out.extend_from_slice(br#""method":"#);
    write_json_string(out, method);
    out.extend_from_slice(br#","params":"#);
    params.write(out);
    out.push(b'}');
}

/// Appends `s` as a JSON string. Method names and most tool ids need no
/// escaping and are written as they are, without a serializer.
pub(super) fn write_json_string(out: &mut Vec<u8>, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        // Serializing a string into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, s);
    }
}

/// Appends `n` in decimal (ids are written on every call: no formatter needed).
pub(crate) fn write_u64(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(decimal(n, &mut [0; 20]));
}

/// `n` in decimal, written at the end of `digits`.
pub(crate) fn decimal(mut n: u64, digits: &mut [u8; 20]) -> &[u8] {
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &digits[i..]
}

pub(super) fn empty_object() -> &'static RawValue {
    // A literal that is valid JSON: the conversion cannot fail.
    serde_json::from_str("{}").unwrap_or_else(|_| unreachable!())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_context_joins_whatever_meta_the_params_have() {
        let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let trace = &crate::telemetry::traces::outbound_for(parent);
        let traced = |params: Params<'_>| -> serde_json::Value {
            let text = Params::Traced {
                params: &params,
                trace,
            }
            .to_text();
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
        };
        let raw = |t: &'static str| -> Json<'static> {
            let v: &'static RawValue = serde_json::from_str(t).unwrap();
            v.into()
        };
        let args = raw(r#"{"x":1}"#);
        assert_eq!(
            traced(Params::CallTool {
                name: "t",
                arguments: args,
                progress: Some("\"p\"")
            }),
            serde_json::json!({"name": "t", "arguments": {"x": 1}, "_meta": {"progressToken": "p", "traceparent": parent}})
        );
        assert_eq!(
            traced(Params::Execute {
                tool: "mcp://a/t",
                arguments: args
            }),
            serde_json::json!({"id": "mcp://a/t", "arguments": {"x": 1}, "_meta": {"traceparent": parent}})
        );
        assert_eq!(
            traced(Params::Json(raw(" { } "))),
            serde_json::json!({"_meta": {"traceparent": parent}})
        );
        assert_eq!(
            traced(Params::Json(raw(r#"{"uri":"a"}"#))),
            serde_json::json!({"uri": "a", "_meta": {"traceparent": parent}})
        );
        // The client's own context is replaced; the rest of its `_meta` kept.
        assert_eq!(
            traced(Params::Json(raw(
                r#"{"_meta":{"traceparent":"00-old","k":1},"ref":{}}"#
            ))),
            serde_json::json!({"_meta": {"traceparent": parent, "k": 1}, "ref": {}})
        );
        // Not an object: as it is.
        let text = Params::Traced {
            params: &Params::Json(raw("[1]")),
            trace,
        }
        .to_text();
        assert_eq!(text, "[1]");
    }

    #[test]
    fn ids_are_written_in_decimal() {
        for n in [0, 7, 10, 1234567890, u64::MAX] {
            let mut out = b"x".to_vec();
            write_u64(&mut out, n);
            assert_eq!(out, format!("x{n}").into_bytes());
        }
        let params: &RawValue = serde_json::from_str("{}").unwrap();
        let request = encode_request(Some(42), "mcp/listTools", params.into());
        assert_eq!(
            request,
            br#"{"jsonrpc":"2.0","id":42,"method":"mcp/listTools","params":{}}"#
        );
    }
}
