//! Between eras: a handshake-era upstream that asks (elicitation, sampling,
//! roots) during the call of a 2026-07-28 client, which cannot be sent a
//! request. The call runs on in a task of its own; the upstream's request
//! ends the client's request with `input_required` (the request as its one
//! `inputRequests` entry), and the call is held here, under a random id its
//! sealed `requestState` names, until the client's retry brings the answer:
//! the answer goes to the upstream, which goes on to its result (or asks
//! again: another round). A held call ends when its round's time runs out
//! (`gateway.server_request_timeout_ms`; the upstream is then answered with
//! an error and the call cancelled); a tenant holds at most [`PER_TENANT`].
//! The call lives in this replica: a retry that reaches another is refused
//! with a clear error (see `docs/protocol-decisions.md`).

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use tokio::sync::{mpsc, oneshot};

use super::Dispatcher;
use super::execute::RoundIn;
use super::rounds::{self, RoundState};
use crate::error::GatewayError;
use crate::jsonrpc::{Json, JsonBuf, scan};
use crate::protocol::ToolEntry;
use crate::protocol::tool_result::Answer;
use crate::tenant::Tenant;
use crate::upstream::progress::{Ask, AskReply, Report};
use crate::upstream::{CallError, Upstream};

/// Calls one tenant may have held at once, waiting for its clients' retries.
pub const PER_TENANT: usize = crate::upstream::asks::PER_TENANT;

/// Reports a held call keeps before its client's request takes them.
const QUEUED: usize = 64;

/// What an upstream may ask a 2026-07-28 client in a round, and the
/// capability the client must have declared for each.
const ASKABLE: [(&str, &str); 3] = [
    ("elicitation/create", "elicitation"),
    ("sampling/createMessage", "sampling"),
    ("roots/list", "roots"),
];

/// The calls held for their clients' retries. A cheap clone.
#[derive(Clone, Default)]
pub struct HeldCalls(Arc<Table>);

#[derive(Default)]
struct Table {
    calls: DashMap<Box<str>, HeldCall>,
    per_tenant: DashMap<Arc<str>, usize>,
}

/// A call running upstream in a task of its own, and the request of the
/// upstream's its client was last asked.
pub struct HeldCall {
    tenant: Arc<str>,
    /// The key of the `inputRequests` entry the client was sent, and the
    /// upstream's request it stands for.
    asked: Option<(String, Ask)>,
    reports: mpsc::Receiver<Report>,
    result: oneshot::Receiver<Result<Answer, CallError>>,
    task: tokio::task::AbortHandle,
}

impl Drop for HeldCall {
    /// A call nobody will retry is cancelled (and its upstream's waiting
    /// request, dropped unanswered, is answered with an error).
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HeldCall {
    /// Starts `entry`'s call with these arguments, its reports kept for the
    /// client's request.
    fn start(
        up: Arc<Upstream>,
        entry: Arc<ToolEntry>,
        arguments: JsonBuf,
        tenant: Arc<str>,
    ) -> HeldCall {
        let (heard, reports) = mpsc::channel(QUEUED);
        let (done, result) = oneshot::channel();
        let task = tokio::spawn(async move {
            // A report past the queue is lost; an ask lost so is answered
            // to the upstream with an error when its reply is dropped.
            let heard = move |report: Report| {
                let _ = heard.try_send(report);
            };
            let answer = up
                .call_tool(&entry, arguments.as_json(), Some(&heard), None)
                .await;
            let _ = done.send(answer);
        });
        HeldCall {
            tenant,
            asked: None,
            reports,
            result,
            task: task.abort_handle(),
        }
    }

    /// Hands the upstream the client's answer to the request it was asked:
    /// its `inputResponses` entry under the key it was sent. One missing
    /// leaves the upstream's request unanswered, which it is then told.
    fn answer(&mut self, responses: Option<Json<'_>>) {
        let Some((key, ask)) = self.asked.take() else {
            return;
        };
        let [response] = scan::members(responses, [key.as_str()]);
        if let Some(response) = response {
            let _ = ask.reply.send(AskReply::Answered(Ok(response.to_buf())));
        }
    }
}

impl HeldCalls {
    /// Holds `call` for its client's retry, for `lifetime` at most: the id
    /// its state names; the call back when its tenant holds [`PER_TENANT`].
    fn hold(&self, call: HeldCall, lifetime: Duration) -> Result<String, HeldCall> {
        {
            let mut count = self.0.per_tenant.entry(call.tenant.clone()).or_default();
            if *count >= PER_TENANT {
                return Err(call);
            }
            *count += 1;
        }
        let mut nonce = [0u8; 16];
        let _ = getrandom::fill(&mut nonce);
        let id: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
        self.0.calls.insert(id.as_str().into(), call);
        let table = self.clone();
        let expired = id.clone();
        tokio::spawn(async move {
            tokio::time::sleep(lifetime).await;
            drop(table.take(None, &expired));
        });
        Ok(id)
    }

    /// The call held under `id`, taken out (for `tenant` only, when named).
    fn take(&self, tenant: Option<&str>, id: &str) -> Option<HeldCall> {
        let (_, call) = self
            .0
            .calls
            .remove_if(id, |_, call| tenant.is_none_or(|t| *call.tenant == *t))?;
        if let Some(mut count) = self.0.per_tenant.get_mut(&call.tenant) {
            *count = count.saturating_sub(1);
        }
        Some(call)
    }

    /// Calls held now (all tenants).
    pub fn len(&self) -> usize {
        self.0.calls.len()
    }
}

/// Whether a 2026-07-28 client's call may be held for it: the upstream can
/// ask during the call, and the client declared it can be asked something
/// or continues a held call. A substring search first: most calls name
/// none of it.
pub(super) fn may_hold(up: &Upstream, params: Option<Json<'_>>) -> bool {
    let Some(params) = params.map(|p| p.get()) else {
        return false;
    };
    let named = ["requestState", "elicitation", "sampling", "roots"]
        .iter()
        .any(|n| params.contains(n));
    named && up.asks_during_calls()
}

impl Dispatcher {
    /// A 2026-07-28 client's call of a handshake-era upstream that may ask
    /// during it: started (or, on a retry, taken up where its last round
    /// left it, with the client's answer), then followed until its result
    /// or the upstream's next request, which ends this round.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn call_held(
        &self,
        tenant: &Tenant,
        id: &str,
        up: &Arc<Upstream>,
        entry: &Arc<ToolEntry>,
        arguments: Json<'_>,
        reports: Option<&(dyn Fn(Report) + Sync)>,
        round: &RoundIn<'_>,
    ) -> Result<Answer, GatewayError> {
        let [meta, responses, state] =
            scan::members(round.params, ["_meta", "inputResponses", "requestState"]);
        let [capabilities] = scan::members(meta, [crate::modelcontext::CAPABILITIES_META]);
        let [elicitation, sampling, roots] =
            scan::members(capabilities, ["elicitation", "sampling", "roots"]);
        let declared = [elicitation, sampling, roots].map(|c| c.is_some());
        let opened = self.opened_round(tenant, id, state)?;
        let mut call = match opened.and_then(|o| o.held) {
            Some(held) => {
                let mut call = self.held().take(Some(&tenant.name), &held).ok_or_else(|| {
                    GatewayError::InvalidParams(
                        "the call this requestState continues is not held here: it ended, its round's time ran out, or another replica holds it; call the tool again"
                            .into(),
                    )
                })?;
                call.answer(responses);
                call
            }
            None => HeldCall::start(
                up.clone(),
                entry.clone(),
                arguments.to_buf(),
                tenant.name.clone(),
            ),
        };
        let upstream_error = |error| GatewayError::Upstream {
            upstream: up.name.clone(),
            error,
        };
        loop {
            let report = tokio::select! {
                biased;
                report = call.reports.recv() => report,
                result = &mut call.result => {
                    // Reports the call made before its answer.
                    while let Ok(report) = call.reports.try_recv() {
                        if let (Some(heard), Report::Progress(_) | Report::Message(_)) = (reports, &report) {
                            heard(report);
                        }
                    }
                    let result = result.unwrap_or_else(|_| Err(CallError::unavailable("the call ended")));
                    return result.map_err(upstream_error);
                }
            };
            let ask = match report {
                Some(Report::Ask(ask)) => ask,
                Some(report @ (Report::Progress(_) | Report::Message(_))) => {
                    if let Some(heard) = reports {
                        heard(report);
                    }
                    continue;
                }
                // Nothing was forwarded that could be withdrawn: a held
                // request is withdrawn by dropping its reply.
                Some(Report::Withdrawn(_)) => continue,
                None => {
                    let result = (&mut call.result)
                        .await
                        .unwrap_or_else(|_| Err(CallError::unavailable("the call ended")));
                    return result.map_err(upstream_error);
                }
            };
            if &*ask.method == "ping" {
                if let Ok(empty) = serde_json::value::RawValue::from_string("{}".into()) {
                    let _ = ask.reply.send(AskReply::Answered(Ok(JsonBuf::from(empty))));
                }
                continue;
            }
            let may = ASKABLE
                .iter()
                .zip(declared)
                .any(|((method, _), declared)| declared && *method == &*ask.method);
            if !may {
                ask.refuse("the client cannot be asked this: it did not declare it");
                continue;
            }
            let params: serde_json::Value = ask
                .params
                .as_ref()
                .and_then(|p| serde_json::from_str(p.get()).ok())
                .unwrap_or_else(|| serde_json::json!({}));
            let request = serde_json::json!({"method": &*ask.method, "params": params});
            let key = ask_key();
            call.asked = Some((key.clone(), ask));
            match self.held().hold(call, self.round_lifetime()) {
                Ok(held) => {
                    let state = RoundState::new(id, None, Some(held), self.round_lifetime());
                    return Err(GatewayError::InputRequired(Box::new(serde_json::json!({
                        "resultType": "input_required",
                        "inputRequests": {key: request},
                        "requestState": rounds::seal(self.sealer(), &tenant.name, &state),
                    }))));
                }
                Err(mut back) => {
                    if let Some((_, ask)) = back.asked.take() {
                        ask.refuse("the tenant has as many calls waiting for input as it may");
                    }
                    call = back;
                }
            }
        }
    }
}

/// The key of an `inputRequests` entry: random, so that a client's answer
/// names the round it was asked in.
fn ask_key() -> String {
    let mut nonce = [0u8; 8];
    let _ = getrandom::fill(&mut nonce);
    let hex: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
    format!("mcp-gateway-{hex}")
}
