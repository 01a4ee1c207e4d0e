//! One JSON-RPC message in, at most one response out: the same for every
//! transport toward agents (HTTP bodies, batches, sessions, stdio mode).

use std::time::{Duration, Instant};

use serde_json::value::RawValue;

use super::{Dispatcher, Payload};
use crate::error::{GatewayError, WireError};
use crate::jsonrpc::{Incoming, Reply, classify, write_error, write_reply};
use crate::protocol::{Kind, Method, mcpid};
use crate::tenant::Tenant;

/// Answers one message in a stateless exchange; `None` for notifications (never answered).
pub async fn respond(dispatcher: &Dispatcher, tenant: &Tenant, raw: &RawValue) -> Option<Vec<u8>> {
    respond_traced(dispatcher, tenant, raw, false).await.0
}

/// Like [`respond`]; with `trace`, also a line for `$/logTrace` saying who served
/// the request, how long it took, and what a listing left out. It names only what
/// this tenant may see, and never arguments, results or secrets.
pub async fn respond_traced(
    dispatcher: &Dispatcher,
    tenant: &Tenant,
    raw: &RawValue,
    trace: bool,
) -> (Option<Vec<u8>>, Option<String>) {
    match classify(raw) {
        Incoming::Request { id, method, params } => {
            let started = Instant::now();
            let result = if Method::parse(&method) == Method::Initialize && id.get() != "1" {
                Err(GatewayError::InitializeId)
            } else {
                dispatcher.request(tenant, &method, params).await
            };
            let mut out = Vec::new();
            match &result {
                Ok(payload) => write_reply(&mut out, Some(id), Reply::Result(payload.as_bytes())),
                Err(e) => write_gateway_error(&mut out, Some(id), e),
            }
            let line = trace.then(|| {
                describe(
                    dispatcher,
                    tenant,
                    &method,
                    params,
                    &result,
                    started.elapsed(),
                )
            });
            (Some(out), line)
        }
        Incoming::Notification { method, .. } => {
            tracing::debug!(method = %method, "notification from agent");
            (None, None)
        }
        Incoming::Invalid { id, error } => {
            let mut out = Vec::new();
            write_error(&mut out, id, &error);
            (Some(out), None)
        }
        Incoming::Ignored => (None, None),
    }
}

/// Writes a gateway error as its wire form.
pub fn write_gateway_error(out: &mut Vec<u8>, id: Option<&RawValue>, e: &GatewayError) {
    match e.to_wire() {
        WireError::Own(obj) => write_error(out, id, &obj),
        WireError::Raw(raw) => write_reply(out, id, Reply::RawError(raw.get().as_bytes())),
    }
}

fn describe(
    dispatcher: &Dispatcher,
    tenant: &Tenant,
    method: &str,
    params: Option<&RawValue>,
    result: &Result<Payload, GatewayError>,
    elapsed: Duration,
) -> String {
    let ms = elapsed.as_secs_f64() * 1000.0;
    let outcome = result.as_ref().map_or_else(GatewayError::outcome, |_| "ok");
    let m = Method::parse(method);
    match m {
        Method::ExecuteTool => {
            #[derive(serde::Deserialize)]
            struct P {
                id: String,
            }
            let id = params
                .and_then(|p| serde_json::from_str::<P>(p.get()).ok())
                .map(|p| p.id);
            let upstream = id
                .as_deref()
                .and_then(|id| mcpid::parse(dispatcher.gateway_id(), id))
                .map(|(u, _)| u.to_owned())
                .filter(|u| tenant.sees(u));
            match (id, upstream) {
                (Some(id), Some(u)) => {
                    format!("mcp/executeTool {id}: upstream {u}, {ms:.1} ms, {outcome}")
                }
                _ => format!(
                    "mcp/executeTool: no upstream of this tenant owns the id, {ms:.1} ms, {outcome}"
                ),
            }
        }
        Method::ListTools | Method::ListResources | Method::ListPrompts => {
            let kind = Kind::of_list_method(m).unwrap_or(Kind::Tool);
            format!(
                "{method}: {ms:.1} ms, {outcome}; {}",
                dispatcher.listing_report(tenant, kind)
            )
        }
        _ => format!("{method}: {ms:.1} ms, {outcome}"),
    }
}
