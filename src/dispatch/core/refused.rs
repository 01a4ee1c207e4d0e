//! The audit line of a call refused at admission (its tenant over its rate
//! or concurrency limit, or the store down under `when_down: refuse`):
//! every `tools/call` and `mcp/executeTool` answered or refused has one, a
//! tenant's refusals within their own share of the log.

use std::time::Duration;

use super::Dispatcher;
use super::audit::Audit;
use crate::error::GatewayError;
use crate::jsonrpc::{Json, scan};
use crate::tenant::Tenant;

impl Dispatcher {
    /// Writes the audit line of `method` (when it is a tool call) refused
    /// with `error`, unless the tenant's refusals have had their share of
    /// the log this second (then it is counted).
    pub fn audit_refused(
        &self,
        tenant: &Tenant,
        method: &str,
        params: Option<Json<'_>>,
        error: &GatewayError,
    ) {
        let (protocol, named) = match method {
            "tools/call" => (crate::dispatch::PROTOCOL_MCP, "name"),
            "mcp/executeTool" => (crate::dispatch::PROTOCOL_V1, "id"),
            _ => return,
        };
        let mut audit = Audit::new(protocol);
        if !audit.enabled() {
            return;
        }
        if !tenant.refusals.may_write() {
            self.metrics()
                .audit_lines_dropped
                .with_label_values(&[&tenant.name])
                .inc();
            return;
        }
        let [tool, arguments] = scan::members(params, [named, "arguments"]);
        let tool =
            tool.and_then(|t| serde_json::from_str::<std::borrow::Cow<'_, str>>(t.get()).ok());
        audit.refused(tool.as_deref(), arguments);
        audit.log_outcome(tenant, error.outcome(), Duration::ZERO);
    }
}
