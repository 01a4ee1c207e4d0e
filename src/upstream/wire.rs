//! The JSON text of what the gateway sends upstreams: requests written
//! straight into their buffer, with ids of the gateway's own.

use serde_json::value::RawValue;

use crate::jsonrpc::Json;

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
}

impl Params<'_> {
    /// The progress token of the gateway's own the params carry, if any.
    pub(crate) fn token(&self) -> Option<&str> {
        match self {
            Params::CallTool { progress, .. } | Params::TaskResult { progress, .. } => *progress,
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
            Params::Json(raw) => raw.get().len(),
            Params::Execute { tool, arguments } => tool.len() + arguments.get().len() + 24,
            Params::CallTool {
                name,
                arguments,
                progress,
            } => name.len() + arguments.get().len() + 26 + progress.map_or(0, |t| t.len() + 30),
            Params::TaskResult { task, progress } => {
                task.len() + 16 + progress.map_or(0, |t| t.len() + 30)
            }
        }
    }

    /// Appends the params' JSON text.
    pub fn write(&self, out: &mut Vec<u8>) {
        match self {
            Params::Json(raw) => out.extend_from_slice(raw.get().as_bytes()),
            Params::Execute { tool, arguments } => {
                out.extend_from_slice(br#"{"id":"#);
                write_json_string(out, tool);
                out.extend_from_slice(br#","arguments":"#);
                out.extend_from_slice(arguments.get().as_bytes());
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
                write_token(out, *progress);
                out.push(b'}');
            }
            Params::TaskResult { task, progress } => {
                out.extend_from_slice(br#"{"taskId":"#);
                write_json_string(out, task);
                write_token(out, *progress);
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

/// `,"_meta":{"progressToken":<token>}` when there is a token (its JSON text).
fn write_token(out: &mut Vec<u8>, token: Option<&str>) {
    if let Some(token) = token {
        out.extend_from_slice(br#","_meta":{"progressToken":"#);
        out.extend_from_slice(token.as_bytes());
        out.push(b'}');
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
