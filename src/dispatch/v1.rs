//! The MCP v1.0 face: its method names, its params and result shapes
//! (`{"capabilities": ...}`, listings as one array, the `{"id", "arguments"}`
//! of `mcp/executeTool`), and its metric labels (the method names, a closed
//! set). Everything it answers, it asks of the core's neutral operations.

use std::borrow::Cow;
use std::time::Instant;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{Audit, Dispatcher, Payload};
use crate::error::GatewayError;
use crate::jsonrpc::{Json, scan};
use crate::protocol::tool_result::{Output, ToolResult};
use crate::protocol::{Kind, Method};
use crate::tenant::Tenant;

/// A listing's parts as MCP v1.0 writes it: one JSON array.
pub(super) fn array(items: Vec<Bytes>) -> Vec<Bytes> {
    let mut parts = Vec::with_capacity(items.len() + 2);
    parts.push(Bytes::from_static(b"["));
    parts.extend(items);
    parts.push(Bytes::from_static(b"]"));
    parts
}

/// Listing methods take `null` or `{}` (members are ignored, for forward compatibility).
fn list_params_ok(params: Option<Json<'_>>) -> Result<(), GatewayError> {
    match params.map(|p| p.get().as_bytes().first()) {
        None | Some(Some(b'{')) | Some(Some(b'n')) => Ok(()),
        _ => Err(GatewayError::InvalidParams(
            "params must be null or an object".into(),
        )),
    }
}

#[derive(Deserialize)]
struct ExecuteParams<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
}

/// `params.id` and `params.arguments`, found in one pass over text already
/// known to be valid JSON; read by serde where the scan declines (a repeated
/// member, an escaped key).
fn execute_params(params: Json<'_>) -> Option<[Option<Json<'_>>; 2]> {
    if params.first_byte() != b'{' {
        return None;
    }
    scan::members_of(params, ["id", "arguments"]).or_else(|| {
        let p = serde_json::from_str::<ExecuteParams<'_>>(params.get()).ok()?;
        Some([p.id.map(Json::from), p.arguments.map(Json::from)])
    })
}

fn invalid(why: &str) -> GatewayError {
    GatewayError::InvalidParams(why.into())
}

/// MCP v1.0's `mcp/executeTool` params: the tool's namespaced id (borrowed
/// from the request unless it holds escapes) and its arguments (an object).
fn v1_params(params: Option<Json<'_>>) -> Result<(Cow<'_, str>, Json<'_>), GatewayError> {
    let [id, arguments] = params.and_then(execute_params).ok_or_else(|| {
        invalid("params must be an object {\"id\": string, \"arguments\": object}")
    })?;
    let id = id
        .and_then(crate::jsonrpc::message::as_string)
        .ok_or_else(|| invalid("params.id must be a string (the tool's mcpId)"))?;
    let arguments = arguments
        .filter(|a| a.first_byte() == b'{')
        .ok_or_else(|| invalid("params.arguments must be an object"))?;
    Ok((id, arguments))
}

/// The MCP v1.0 face over the core.
#[derive(Clone, Copy)]
pub struct V1<'a> {
    core: &'a Dispatcher,
}

impl<'a> V1<'a> {
    pub fn new(core: &'a Dispatcher) -> Self {
        V1 { core }
    }

    /// Answers one MCP v1.0 request (not a notification) for `tenant`, counting it.
    pub async fn request(
        &self,
        tenant: &Tenant,
        method: &str,
        params: Option<Json<'_>>,
    ) -> Result<Payload, GatewayError> {
        let started = Instant::now();
        let m = Method::parse(method);
        let result = match m {
            Method::Initialize => {
                let caps =
                    serde_json::to_string(&self.core.hello(tenant).await).unwrap_or_default();
                Ok(Payload::Text(format!(r#"{{"capabilities":{caps}}}"#)))
            }
            Method::ListTools | Method::ListResources | Method::ListPrompts => {
                let kind = Kind::of_list_method(m).unwrap_or(Kind::Tool);
                match list_params_ok(params) {
                    Ok(()) => {
                        let searched = match kind {
                            Kind::Tool if tenant.curation.is_some() => {
                                super::v1_discovery::listing(self.core, tenant).await
                            }
                            _ => None,
                        };
                        let parts = match searched {
                            Some(parts) => parts,
                            None => self.core.listing_when_started(tenant, kind).await,
                        };
                        Ok(Payload::Parts(array(parts)))
                    }
                    Err(e) => Err(e),
                }
            }
            Method::ExecuteTool => {
                let mut audit = Audit::new(super::PROTOCOL_V1);
                let result = match v1_params(params) {
                    Ok((id, arguments)) => {
                        // A meta-tool answers only where curation asks for discovery.
                        let meta = match tenant.curation.is_some() {
                            // Boxed: other calls carry none of its state.
                            true => {
                                Box::pin(super::v1_discovery::execute(
                                    self.core, tenant, &id, arguments, &mut audit,
                                ))
                                .await
                            }
                            false => None,
                        };
                        match meta {
                            Some(result) => result,
                            None => {
                                self.core
                                    .call_tool(tenant, id, arguments, &mut audit, None, None, None)
                                    .await
                            }
                        }
                    }
                    Err(e) => Err(e),
                };
                if audit.enabled() {
                    audit.log(tenant, &result, started.elapsed());
                }
                result.map(v1_result)
            }
            Method::Initialized | Method::ResourceDidChange | Method::Other => {
                Err(GatewayError::MethodNotFound)
            }
        };
        let outcome = result.as_ref().map_or_else(GatewayError::outcome, |_| "ok");
        let metrics = self.core.metrics();
        let series = || {
            metrics
                .requests
                .with_label_values(&[&tenant.name, m.as_str(), outcome])
        };
        match (m, &result) {
            (Method::ExecuteTool, Ok(_)) => tenant.executed.get_or_init(series).inc(),
            _ => series().inc(),
        }
        let seconds = started.elapsed().as_secs_f64();
        match m {
            Method::ExecuteTool => metrics.execute_seconds.observe(seconds),
            _ => metrics
                .request_seconds
                .with_label_values(&[m.as_str()])
                .observe(seconds),
        }
        result
    }
}

/// A tool's result as MCP v1.0 carries it: the upstream's own result object
/// when it sent one, otherwise `{"output": ...}` written around the output.
fn v1_result(result: ToolResult) -> Payload {
    if let Some(age) = result.age_ms() {
        // Answered from the cache: the result's `_meta` says how long ago it
        // was kept, written in first where the result has none of its own.
        let age = format!(r#"{{"ageMs":{age}}}"#);
        return Payload::Text(match v1_result(ToolResult::without_age(result)) {
            Payload::Raw(object) => {
                super::core::with_meta(object.as_json(), super::core::CACHED, &age)
            }
            Payload::Text(text) => {
                let meta = format!(r#"{{"_meta":{{"{}":{age}}},"#, super::core::CACHED);
                text.replacen('{', &meta, 1)
            }
            other => return other,
        });
    }
    let result = match result.into_object() {
        Ok(object) => return Payload::Raw(object),
        Err(result) => result,
    };
    let (kind, output) = result.output();
    if let Some(cut) = result.cut_off() {
        // The cut output, and the mark in the result's `_meta`.
        let meta = serde_json::json!({ crate::output::TRUNCATED: cut.mark }).to_string();
        let output = match kind {
            Output::Value => output.get().to_owned(),
            Output::Blocks => format!(r#"{{"content":{}}}"#, output.get()),
        };
        return Payload::Text(format!(r#"{{"output":{output},"_meta":{meta}}}"#));
    }
    let mut out = String::with_capacity(output.get().len() + 24);
    match kind {
        Output::Value => {
            out.push_str(r#"{"output":"#);
            out.push_str(output.get());
            out.push('}');
        }
        Output::Blocks => {
            out.push_str(r#"{"output":{"content":"#);
            out.push_str(output.get());
            out.push_str("}}");
        }
    }
    Payload::Text(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::JsonBuf;

    fn answer(text: &str) -> JsonBuf {
        Json::from(serde_json::from_str::<&serde_json::value::RawValue>(text).unwrap()).to_buf()
    }

    fn written(payload: Payload) -> String {
        match payload {
            Payload::Raw(r) => r.get().to_owned(),
            Payload::Text(t) => t,
            _ => unreachable!("a tool's result is one text"),
        }
    }

    #[test]
    fn a_tools_result_is_its_upstreams_object_or_written_around_its_output() {
        // An MCP v1.0 upstream's object goes as it came, members beside `output` too.
        let object = answer(r#"{"output":{"t":1},"extra":[1]}"#);
        let at = object.range_of(
            crate::jsonrpc::scan::members_of(object.as_json(), ["output"]).unwrap()[0].unwrap(),
        );
        assert_eq!(
            written(v1_result(ToolResult::new(object, at, Output::Value, true))),
            r#"{"output":{"t":1},"extra":[1]}"#
        );
        // A value of the protocol's `structuredContent`.
        let structured = answer(r#"{"content":[],"structuredContent":{"t":2}}"#);
        let at = structured.range_of(
            crate::jsonrpc::scan::members_of(structured.as_json(), ["structuredContent"]).unwrap()
                [0]
            .unwrap(),
        );
        assert_eq!(
            written(v1_result(ToolResult::new(
                structured,
                at,
                Output::Value,
                false
            ))),
            r#"{"output":{"t":2}}"#
        );
        // Content blocks, in the documented envelope.
        let blocks = answer(r#"{"content":[{"type":"text","text":"hi"}]}"#);
        let at = blocks.range_of(
            crate::jsonrpc::scan::members_of(blocks.as_json(), ["content"]).unwrap()[0].unwrap(),
        );
        assert_eq!(
            written(v1_result(ToolResult::new(
                blocks,
                at,
                Output::Blocks,
                false
            ))),
            r#"{"output":{"content":[{"type":"text","text":"hi"}]}}"#
        );
    }
}
