//! One JSON-RPC message in, at most one response out: the same for every
//! transport toward agents (HTTP bodies, batches, sessions, stdio mode).

use serde_json::value::RawValue;

use super::Dispatcher;
use crate::error::{GatewayError, WireError};
use crate::jsonrpc::{Incoming, Reply, classify, write_error, write_reply};
use crate::protocol::Method;
use crate::tenant::Tenant;

/// Answers one message in a stateless exchange; `None` for notifications (never answered).
pub async fn respond(dispatcher: &Dispatcher, tenant: &Tenant, raw: &RawValue) -> Option<Vec<u8>> {
    match classify(raw) {
        Incoming::Request { id, method, params } => {
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
            Some(out)
        }
        Incoming::Notification { method, .. } => {
            tracing::debug!(method = %method, "notification from agent");
            None
        }
        Incoming::Invalid { id, error } => {
            let mut out = Vec::new();
            write_error(&mut out, id, &error);
            Some(out)
        }
        Incoming::Ignored => None,
    }
}

/// Writes a gateway error as its wire form.
pub fn write_gateway_error(out: &mut Vec<u8>, id: Option<&RawValue>, e: &GatewayError) {
    match e.to_wire() {
        WireError::Own(obj) => write_error(out, id, &obj),
        WireError::Raw(raw) => write_reply(out, id, Reply::RawError(raw.get().as_bytes())),
    }
}
