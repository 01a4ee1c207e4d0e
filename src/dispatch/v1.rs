//! The MCP v1.0 face of the dispatcher: its method names, its params and
//! result shapes (`{"capabilities": ...}`, listings as one array, the
//! `{"id", "arguments"}` of `mcp/executeTool`), and its metric labels (the
//! method names, a closed set). Everything it answers, it asks of the
//! neutral operations of [`Dispatcher`].

use std::time::Instant;

use bytes::Bytes;

use super::{Dispatcher, Payload, execute};
use crate::error::GatewayError;
use crate::jsonrpc::Json;
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

impl Dispatcher {
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
                let caps = serde_json::to_string(&self.hello(tenant).await).unwrap_or_default();
                Ok(Payload::Text(format!(r#"{{"capabilities":{caps}}}"#)))
            }
            Method::ListTools | Method::ListResources | Method::ListPrompts => {
                let kind = Kind::of_list_method(m).unwrap_or(Kind::Tool);
                match list_params_ok(params) {
                    Ok(()) => Ok(Payload::Parts(array(
                        self.listing_when_started(tenant, kind).await,
                    ))),
                    Err(e) => Err(e),
                }
            }
            Method::ExecuteTool => {
                let mut audit = execute::Audit::new(super::PROTOCOL_V1);
                let result = match execute::v1_params(params) {
                    Ok((id, arguments)) => self.call_tool(tenant, id, arguments, &mut audit).await,
                    Err(e) => Err(e),
                };
                if audit.enabled() {
                    audit.log(tenant, &result, started.elapsed());
                }
                result.map(Payload::Raw)
            }
            Method::Initialized | Method::ResourceDidChange | Method::Other => {
                Err(GatewayError::MethodNotFound)
            }
        };
        let outcome = result.as_ref().map_or_else(GatewayError::outcome, |_| "ok");
        let metrics = &self.inner.metrics;
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
            Method::ExecuteTool => self.inner.execute_seconds.observe(seconds),
            _ => metrics
                .request_seconds
                .with_label_values(&[m.as_str()])
                .observe(seconds),
        }
        result
    }
}
