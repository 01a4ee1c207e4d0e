//! A 2026-07-28 client's `tools/call` as the upstream is sent it.

use crate::jsonrpc::Json;

use super::*;

/// A 2026-07-28 client's `tools/call`, as the upstream is sent it (see
/// [`Upstream::call_stateless`]).
#[derive(Debug)]
pub struct StatelessCall<'a> {
    pub arguments: Json<'a>,
    /// The client's `clientCapabilities`, as it sent them.
    pub capabilities: Option<Json<'a>>,
    /// The log level the client asked the call's lines at, as it sent it.
    pub log_level: Option<Json<'a>>,
    /// The client's answers to the upstream's last round, as it sent them.
    pub input_responses: Option<Json<'a>>,
    /// The upstream's own `requestState` of that round (unsealed).
    pub request_state: Option<&'a str>,
    /// The `Mcp-Param-*` headers of the arguments the tool mirrors.
    pub mirrored: &'a [(String, String)],
}

impl StatelessCall<'_> {
    /// About how long [`Self::write`] makes the params, less the name.
    pub(super) fn len_hint(&self) -> usize {
        let raw = |json: Option<Json<'_>>| json.map_or(0, |j| j.get().len());
        192 + self.arguments.get().len()
            + raw(self.input_responses)
            + self.request_state.map_or(0, str::len)
            + raw(self.capabilities)
    }

    /// Writes the request's params: the upstream's tool name, the
    /// arguments, the round's answers and state, and the revision's `_meta`
    /// envelope (with the gateway's progress `token`, when it asks for
    /// progress, and the `trace`'s context, when there is one).
    pub(super) fn write(
        &self,
        out: &mut Vec<u8>,
        name: &str,
        token: Option<&str>,
        trace: Option<&crate::telemetry::traces::Outbound>,
    ) {
        use crate::modelcontext::{CAPABILITIES_META, LOG_LEVEL_META, VERSION_META};
        out.extend_from_slice(br#"{"name":"#);
        wire::write_json_string(out, name);
        out.extend_from_slice(br#","arguments":"#);
        out.extend_from_slice(self.arguments.get().as_bytes());
        if let Some(responses) = self.input_responses {
            out.extend_from_slice(br#","inputResponses":"#);
            out.extend_from_slice(responses.get().as_bytes());
        }
        if let Some(state) = self.request_state {
            out.extend_from_slice(br#","requestState":"#);
            wire::write_json_string(out, state);
        }
        let member = |out: &mut Vec<u8>, key: &str, value: &[u8]| {
            out.push(b'"');
            out.extend_from_slice(key.as_bytes());
            out.extend_from_slice(b"\":");
            out.extend_from_slice(value);
        };
        out.extend_from_slice(br#","_meta":{"#);
        member(out, VERSION_META, b"\"");
        out.extend_from_slice(crate::modelcontext::STATELESS_REVISION.as_bytes());
        out.push(b'"');
        out.push(b',');
        member(out, CAPABILITIES_META, b"{");
        // Most clients declare nothing a round may use.
        let declared = self.capabilities.filter(|c| c.get() != "{}");
        let kept = crate::jsonrpc::scan::members(declared, ROUND_CAPABILITIES);
        let mut first = true;
        for (key, value) in ROUND_CAPABILITIES.iter().zip(kept) {
            if let Some(value) = value {
                if !first {
                    out.push(b',');
                }
                first = false;
                member(out, key, value.get().as_bytes());
            }
        }
        out.push(b'}');
        if let Some(level) = self.log_level {
            out.push(b',');
            member(out, LOG_LEVEL_META, level.get().as_bytes());
        }
        if let Some(token) = token {
            out.push(b',');
            member(out, "progressToken", token.as_bytes());
        }
        if let Some(trace) = trace {
            out.push(b',');
            wire::write_trace(out, trace);
        }
        out.extend_from_slice(b"}}");
    }
}

/// The client capabilities an upstream may use in an `input_required`
/// round, passed on from the client's.
const ROUND_CAPABILITIES: [&str; 3] = ["elicitation", "sampling", "roots"];

#[cfg(test)]
mod tests;
