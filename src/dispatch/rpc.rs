//! One JSON-RPC message in, at most one response out: the same for every
//! transport toward agents (HTTP bodies, batches, sessions, stdio mode).

use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::value::RawValue;

use super::mcp::{Era, ModelContext, Via};
use super::v1::V1;
use super::{Dispatcher, Payload, Standing};
use crate::error::{GatewayError, WireError};
use crate::jsonrpc::Json;
use crate::jsonrpc::{Incoming, Reply, classify, write_error, write_reply, write_result_head};
use crate::protocol::{Kind, Method, mcpid};
use crate::tenant::Tenant;

/// One response as it goes out: one buffer, or (a listing) the envelope around
/// parts shared with the catalogs, which are never copied on the way to a socket.
pub enum Outgoing {
    Flat(Vec<u8>),
    Parts(Vec<Bytes>),
}

impl Outgoing {
    /// One buffer, for transports that frame or join their answers.
    pub fn into_vec(self) -> Vec<u8> {
        match self {
            Outgoing::Flat(v) => v,
            Outgoing::Parts(parts) => join(&parts),
        }
    }
}

/// Parts joined into one buffer.
pub(super) fn join(parts: &[Bytes]) -> Vec<u8> {
    let mut out = Vec::with_capacity(parts.iter().map(Bytes::len).sum());
    for p in parts {
        out.extend_from_slice(p);
    }
    out
}

/// Answers one message in a stateless exchange; `None` for notifications (never answered).
pub async fn respond(dispatcher: &Dispatcher, tenant: &Tenant, raw: &RawValue) -> Option<Outgoing> {
    respond_traced(dispatcher, tenant, raw, false, Via::default())
        .await
        .0
}

/// Like [`respond`]; with `trace`, also a line for `$/logTrace` saying who served
/// the request, how long it took, and what a listing left out. It names only what
/// this tenant may see, and never arguments, results or secrets.
pub async fn respond_traced(
    dispatcher: &Dispatcher,
    tenant: &Tenant,
    raw: &RawValue,
    trace: bool,
    via: Via<'_>,
) -> (Option<Outgoing>, Option<String>) {
    let (out, line, _) = respond_classified(dispatcher, tenant, classify(raw), trace, via).await;
    (out, line)
}

/// How a lone request's answer stands, and the scope the caller's token
/// lacked when that is why it was refused.
pub struct Status {
    pub standing: Standing,
    pub missing_scope: Option<std::sync::Arc<str>>,
}

/// Like [`respond_traced`], for a message its caller has classified already
/// (each classification parses the message's envelope again); also how the
/// answer stands, for a transport that says so.
pub async fn respond_classified(
    dispatcher: &Dispatcher,
    tenant: &Tenant,
    incoming: Incoming<'_>,
    trace: bool,
    via: Via<'_>,
) -> (Option<Outgoing>, Option<String>, Status) {
    let mut status = Status {
        standing: Standing::Answered,
        missing_scope: None,
    };
    let (out, line) = match incoming {
        Incoming::Request { id, method, params } => {
            // Only a traced exchange reports how long it took.
            let started = trace.then(Instant::now);
            let mcp = via.scanned.is_some()
                || via.http.is_some_and(|h| h.say_modelcontext())
                || super::mcp::speaks(&method, params);
            dispatcher.metrics().by_protocol[usize::from(mcp)].inc();
            // Made where it is awaited: a future bound to a name first would
            // be moved into place, a copy of the whole request's state.
            let run = || async {
                if mcp {
                    let (result, era) = ModelContext::new(dispatcher)
                        .request(tenant, &method, params, via)
                        .await;
                    let standing = match (era, &result) {
                        (Era::Stateless, Err(e)) => Some(super::mcp::stateless_standing(e.code())),
                        _ => None,
                    };
                    (result, standing)
                } else if Method::parse(&method) == Method::Initialize && id.get() != "1" {
                    (Err(GatewayError::InitializeId), None)
                } else {
                    (
                        V1::new(dispatcher).request(tenant, &method, params).await,
                        None,
                    )
                }
            };
            use crate::telemetry::traces::InTrace;
            let (result, standing) = match request_context(tenant, &method, id, params, &via) {
                None => run().await,
                Some(InTrace::Unsampled(trace)) => trace.run(std::pin::pin!(run())).await,
                Some(InTrace::Context(cx)) => {
                    use opentelemetry::trace::FutureExt as _;
                    let answered = std::pin::pin!(run()).with_context(cx.clone()).await;
                    let error = answered.0.as_ref().err().map(|e| match e.code() {
                        Some(code) => code.to_string(),
                        None => e.outcome().to_owned(),
                    });
                    crate::telemetry::traces::end(&cx, error.as_deref());
                    answered
                }
            };
            if let Some(standing) = standing {
                status.standing = standing;
            }
            if let Err(GatewayError::ScopeMissing { scope, .. }) = &result {
                status.missing_scope = Some(scope.clone());
            }
            let line = trace.then(|| {
                describe(
                    dispatcher,
                    tenant,
                    &method,
                    params,
                    &result,
                    started.map(|s| s.elapsed()).unwrap_or_default(),
                )
            });
            (Some(enveloped(id, result)), line)
        }
        Incoming::Notification { method, .. } => {
            tracing::debug!(method = %method, "notification from agent");
            (None, None)
        }
        // A client of the Model Context Protocol answering a request is
        // answered by nothing (202 over HTTP); MCP v1.0 has no requests to
        // answer, so there it is an invalid request.
        Incoming::Response { .. } if via.http.is_some_and(|h| h.say_modelcontext()) => (None, None),
        incoming @ Incoming::Response { .. } => match incoming.without_responses() {
            Incoming::Invalid { id, error } => (Some(invalid(id, &error)), None),
            _ => (None, None),
        },
        Incoming::Invalid { id, error } => (Some(invalid(id, &error)), None),
        Incoming::Ignored => (None, None),
    };
    (out, line, status)
}

/// A request's answer in its JSON-RPC envelope under the request's id.
fn enveloped(id: Json<'_>, result: Result<Payload, GatewayError>) -> Outgoing {
    // The envelope around a result is under 64 bytes beside the id.
    let room = match &result {
        Ok(Payload::Raw(r)) => r.get().len(),
        Ok(Payload::Text(t)) => t.len(),
        _ => 64,
    };
    let mut out = Vec::with_capacity(room + id.get().len() + 64);
    match result {
        Ok(Payload::Raw(r)) => {
            write_reply(&mut out, Some(id), Reply::Result(r.get().as_bytes()));
            Outgoing::Flat(out)
        }
        Ok(Payload::Text(t)) => {
            write_reply(&mut out, Some(id), Reply::Result(t.as_bytes()));
            Outgoing::Flat(out)
        }
        // The listing's parts go out between the envelope's head and tail, uncopied.
        Ok(Payload::Parts(p)) => {
            write_result_head(&mut out, Some(id));
            let mut all = Vec::with_capacity(p.len() + 2);
            all.push(Bytes::from(out));
            all.extend(p);
            all.push(Bytes::from_static(b"}"));
            Outgoing::Parts(all)
        }
        Err(e) => {
            write_gateway_error(&mut out, Some(id), &e);
            Outgoing::Flat(out)
        }
    }
}

/// The answer to a message that is not a valid request: its error, under
/// its id when it had one.
fn invalid(id: Option<Json<'_>>, error: &crate::jsonrpc::ErrorObject) -> Outgoing {
    let mut out = Vec::new();
    write_error(&mut out, id, error);
    Outgoing::Flat(out)
}

/// The trace a request runs in: a span of the gateway's (when traces are
/// exported) child of what the request carried in `params._meta` or its
/// HTTP headers; `None` when there is neither a collector nor a context to
/// carry on.
fn request_context(
    tenant: &Tenant,
    method: &str,
    id: Json<'_>,
    params: Option<Json<'_>>,
    via: &Via<'_>,
) -> Option<crate::telemetry::traces::InTrace> {
    use crate::telemetry::traces;
    let headers = via.http.and_then(|h| h.all);
    // What `_meta` carries of trace context, read where it names any.
    let meta = match via.scanned {
        Some(scanned) if !scanned.traced() => [None, None, None],
        _ => super::mcp::trace_meta(params),
    };
    let parent = traces::incoming(meta, |name| {
        let value = headers?.values(name).into_iter().next()?;
        std::str::from_utf8(value).ok()
    })?;
    if !traces::enabled() {
        return Some(traces::InTrace::Context(parent));
    }
    let cx = match traces::server(parent) {
        traces::InTrace::Context(cx) => cx,
        unsampled => return Some(unsampled),
    };
    // What names the span is read only for a span that records.
    if traces::records(&cx) {
        let target = super::mcp::target_of(params);
        let version = super::mcp::meta_version(params);
        let http = via.http.as_ref();
        fn header(v: Option<&[u8]>) -> Option<&str> {
            v.and_then(|v| std::str::from_utf8(v).ok())
        }
        let span = traces::ServerSpan {
            method,
            target: target.as_deref(),
            protocol_version: header(http.and_then(|h| h.protocol_version)).or(version.as_deref()),
            session: header(http.and_then(|h| h.session)),
            request_id: id.get(),
            tenant: &tenant.name,
        };
        traces::describe(&cx, &span);
    }
    Some(traces::InTrace::Context(cx))
}

/// Writes a gateway error as its wire form.
pub fn write_gateway_error(out: &mut Vec<u8>, id: Option<Json<'_>>, e: &GatewayError) {
    match e.to_wire() {
        WireError::Own(obj) => write_error(out, id, &obj),
        WireError::Written(_, text) => write_reply(out, id, Reply::RawError(text.as_bytes())),
        WireError::Raw(raw) => write_reply(out, id, Reply::RawError(raw.get().as_bytes())),
    }
}

fn describe(
    dispatcher: &Dispatcher,
    tenant: &Tenant,
    method: &str,
    params: Option<Json<'_>>,
    result: &Result<Payload, GatewayError>,
    elapsed: Duration,
) -> String {
    let ms = crate::telemetry::millis(elapsed);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn written(e: &GatewayError) -> serde_json::Value {
        let mut out = Vec::new();
        write_gateway_error(&mut out, Some(Json::EMPTY_OBJECT), e);
        serde_json::from_slice(&out).unwrap()
    }

    #[test]
    fn the_stateless_revisions_own_errors_go_out_with_their_codes_and_data() {
        let mismatch = GatewayError::HeaderMismatch("the Mcp-Name header differs".into());
        assert_eq!(
            written(&mismatch)["error"],
            serde_json::json!({"code": -32020, "message": "Header mismatch: the Mcp-Name header differs"})
        );
        assert_eq!(mismatch.code(), Some(-32020));
        let version = GatewayError::UnsupportedVersion {
            requested: "2099-01-01".into(),
            supported: &["2026-07-28", "2025-11-25"],
        };
        assert_eq!(
            written(&version)["error"],
            serde_json::json!({"code": -32022, "message": "Unsupported protocol version",
                "data": {"supported": ["2026-07-28", "2025-11-25"], "requested": "2099-01-01"}})
        );
        assert_eq!(version.code(), Some(-32022));
        assert_eq!(version.outcome(), "invalid_request");
    }
}
