//! An upstream that speaks MCP v1.0: its handshake, its listings (one
//! request each, bare arrays of definitions already in the gateway's shape)
//! and its one notification, `mcp/resourceDidChange`.

use serde_json::value::RawValue;

use super::{CallError, Op, Transport, Upstream, empty_object};
use crate::jsonrpc::Json;
use crate::protocol::capabilities::InitializeResult;
use crate::protocol::{Capabilities, Kind, Method, catalog};

/// `initialize` with the client's capabilities, then `initialized`.
pub(super) async fn handshake(
    up: &Upstream,
    link: &dyn Transport,
) -> Result<Capabilities, CallError> {
    let params: &RawValue = serde_json::from_str(r#"{"clientCapabilities":{}}"#)
        .unwrap_or_else(|_| unreachable!("literal JSON"));
    let method = up.dialect().method(Op::Initialize);
    let answer = tokio::time::timeout(up.handshake_timeout(), link.request(method, params.into()))
        .await
        .map_err(|_| CallError::Timeout)??;
    let init: InitializeResult = serde_json::from_str(answer.get())
        .map_err(|_| CallError::protocol("initialize result has no valid capabilities object"))?;
    link.notify(up.dialect().initialized(), empty_object())
        .await?;
    Ok(init.capabilities)
}

/// One kind's listing; `None` when it failed (the previous one is kept).
pub(super) async fn list(
    up: &Upstream,
    link: &dyn Transport,
    kind: Kind,
) -> Option<catalog::Built> {
    let method = up.dialect().method(Op::List(kind));
    let answer =
        tokio::time::timeout(up.timeout(), link.request(method, empty_object().into())).await;
    let result = match answer {
        Ok(Ok(result)) => result,
        Ok(Err(e)) => {
            tracing::warn!(upstream = %up.name, method, error = %e, "listing failed; keeping the previous one");
            return None;
        }
        Err(_) => {
            tracing::warn!(upstream = %up.name, method, "listing timed out; keeping the previous one");
            return None;
        }
    };
    Some(catalog::build(
        &up.gateway_id,
        &up.name,
        kind,
        result.as_json(),
        up.bounds,
    ))
}

/// `mcp/resourceDidChange`: listed again, and announced to the tenants'
/// sessions (soon, coalesced: see `Upstream::relister`).
pub(super) fn on_notification(up: &Upstream, method: &str, params: Option<Json<'_>>) {
    if Method::parse(method) != Method::ResourceDidChange {
        tracing::debug!(upstream = %up.name, method, "ignored notification from upstream");
        return;
    }
    #[derive(serde::Deserialize)]
    struct Changed {
        id: String,
    }
    let Some(changed) = params.and_then(|p| serde_json::from_str::<Changed>(p.get()).ok()) else {
        up.metrics()
            .upstream_protocol_errors
            .with_label_values(&[&up.name])
            .inc();
        return;
    };
    up.heard(Some(&changed.id));
}
