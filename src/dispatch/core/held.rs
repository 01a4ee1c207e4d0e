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
//! The call lives in this replica: a retry that reaches another is carried
//! here through the shared store (`continue_round`), and the round's
//! outcome back; without a store it is refused with a clear error.
//!
//! A stdio upstream run `per_session` asks nobody from its shared child; a
//! held call on it runs on a child of its own for the request chain (the
//! call and its rounds), whose requests are that call's, ended with it.

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use tokio::sync::{mpsc, oneshot};

use super::Dispatcher;
use super::place::Place;
use super::rounds::{self, RoundIn, RoundState};
use crate::error::GatewayError;
use crate::jsonrpc::{Json, JsonBuf, scan};
use crate::protocol::ToolEntry;
use crate::protocol::tool_result::Answer;
use crate::store::bus::RoundAsked;
use crate::tenant::reports::{ReportBudget, ReportReceiver, ReportSender, report_queue};
use crate::tenant::{Admission, Tenant};
use crate::upstream::progress::{Ask, AskReply, Report};
use crate::upstream::{CallError, Upstream};

/// Calls one tenant may have held at once, waiting for its clients' retries.
pub const PER_TENANT: usize = crate::upstream::asks::PER_TENANT;

/// What an upstream may ask a 2026-07-28 client in a round, and the
/// capability the client must have declared for each.
pub(super) const ASKABLE: [(&str, &str); 3] = [
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
    /// Retries waiting for another replica's news of their round: where
    /// its outcomes ("held", then the round's) go, and where its reports do.
    waiters: DashMap<Box<str>, (mpsc::Sender<String>, ReportSender<String>)>,
}

/// A retry's place among those waiting for news, left when dropped.
struct Waiter {
    table: HeldCalls,
    id: String,
    /// "held", then the round's outcome: two news at most, never lost to a
    /// full queue.
    news: mpsc::Receiver<String>,
    /// The round's progress and log lines, in order, bounded in bytes (the
    /// oldest lost first).
    reports: ReportReceiver<String>,
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.table.0.waiters.remove(self.id.as_str());
    }
}

/// A call running upstream in a task of its own, and the request of the
/// upstream's its client was last asked.
pub struct HeldCall {
    tenant: Arc<str>,
    /// The tool's namespaced id, and its upstream.
    tool: Arc<str>,
    upstream: Arc<str>,
    /// The key of the `inputRequests` entry the client was sent, and the
    /// upstream's request it stands for.
    asked: Option<(String, Ask)>,
    /// What the call reports while nobody follows it, bounded in bytes per
    /// call and per tenant (the oldest progress lost first, never a request).
    reports: ReportReceiver<Report>,
    result: oneshot::Receiver<Result<Answer, CallError>>,
    task: tokio::task::AbortHandle,
    /// Its place among the tenant's calls in flight, while it is held.
    place: Option<Admission>,
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
        (tenant, user): (Arc<str>, Option<Arc<crate::tenant::User>>),
        tool: &str,
        budget: (Arc<ReportBudget>, prometheus::IntCounter),
    ) -> HeldCall {
        let upstream = up.name.clone();
        let (heard, reports) = report_queue(Some(budget.0), Some(budget.1));
        let (done, result) = oneshot::channel();
        // The chain's own child, ended when the call ends or is dropped.
        let chain = up.runs_children().then(|| ChainChild {
            scope: format!("chain:{}", random_hex::<16>()).into_bytes().into(),
            up: up.clone(),
            tenant: tenant.clone(),
        });
        let caller = tenant.clone();
        let task = tokio::spawn(async move {
            // A report past the queue's bytes is lost (the oldest first);
            // an ask that finds no room is answered to the upstream with an
            // error when its reply is dropped.
            let heard = move |report: Report| {
                let _ = crate::upstream::progress::queue(&heard, report);
            };
            let scope = chain.as_ref().map(|c| &*c.scope);
            let answer = match up.instance(&caller, user.as_ref(), scope) {
                Ok(instance) => {
                    instance
                        .call_tool(&entry, arguments.as_json(), Some(&heard))
                        .await
                }
                Err(e) => Err(e),
            };
            let _ = done.send(answer);
        });
        HeldCall {
            tenant,
            tool: tool.into(),
            upstream,
            asked: None,
            reports,
            result,
            task: task.abort_handle(),
            place: None,
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
    fn hold(&self, call: HeldCall, lifetime: Duration) -> Result<String, Box<HeldCall>> {
        {
            let mut count = self.0.per_tenant.entry(call.tenant.clone()).or_default();
            if *count >= PER_TENANT {
                return Err(Box::new(call));
            }
            *count += 1;
        }
        let id = random_hex::<16>();
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

    /// A new place to wait for another replica's news of a round.
    fn wait_for_news(&self) -> Waiter {
        let (tx, news) = mpsc::channel(2);
        let (reported, reports) = report_queue(None, None);
        let id = random_hex::<16>();
        self.0.waiters.insert(id.as_str().into(), (tx, reported));
        Waiter {
            table: self.clone(),
            id,
            news,
            reports,
        }
    }

    /// Hands another replica's news to the retry waiting under `waiter`;
    /// whether one waits there.
    pub fn news(&self, waiter: &str, news: &str) -> bool {
        let Some(tx) = self.0.waiters.get(waiter) else {
            return false;
        };
        let (outcomes, reports) = &*tx;
        match news::is_report(news) {
            true => {
                let _ = reports.push(news.to_owned(), news.len(), true);
            }
            false => {
                let _ = outcomes.try_send(news.to_owned());
            }
        }
        true
    }
}

pub(super) fn random_hex<const N: usize>() -> String {
    let mut nonce = [0u8; N];
    let _ = getrandom::fill(&mut nonce);
    nonce.iter().map(|b| format!("{b:02x}")).collect()
}

/// A request chain's child of an upstream run per session: ended when the
/// chain's call ends, or is dropped (its round's time ran out).
struct ChainChild {
    scope: Box<[u8]>,
    up: Arc<Upstream>,
    tenant: Arc<str>,
}

impl Drop for ChainChild {
    fn drop(&mut self) {
        self.up.end_session(&self.tenant, &self.scope);
    }
}

/// Whether a 2026-07-28 client's call may be held for it: the upstream can
/// ask during the call (or runs a child per request chain, which can), and
/// the client continues a held call or declared, in its `_meta`'s client
/// capabilities, that it can be asked something. Only those parsed members
/// decide: a word in the arguments decides nothing.
pub(super) fn may_hold(up: &Upstream, round: &RoundIn<'_>) -> bool {
    if !(up.asks_during_calls() || up.runs_children()) {
        return false;
    }
    let [_, state] = round.answers;
    state.is_some() || declares_askable(round.capabilities)
}

/// Whether these client capabilities declare any that a round may ask by.
fn declares_askable(capabilities: Option<Json<'_>>) -> bool {
    let capabilities = capabilities.filter(|c| c.get() != "{}");
    scan::members(capabilities, ASKABLE.map(|(_, c)| c))
        .iter()
        .any(Option::is_some)
}

/// How long a retry waits for the replica that holds its call to say so.
const HELD_ELSEWHERE_WAIT: Duration = Duration::from_secs(2);

fn not_held() -> GatewayError {
    GatewayError::InvalidParams(
        "the call this requestState continues is not held here: it ended, its round's time ran out, or another replica holds it; call the tool again"
            .into(),
    )
}

impl Dispatcher {
    /// A 2026-07-28 client's call of a handshake-era upstream that may ask
    /// during it: started (or, on a retry, taken up where its last round
    /// left it, with the client's answer), then followed until its result
    /// or the upstream's next request, which ends this round. A retry whose
    /// call another replica holds is sent there through the shared store.
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
        let [responses, state] = round.answers;
        let declared =
            scan::members(round.capabilities, ASKABLE.map(|(_, c)| c)).map(|c| c.is_some());
        let opened = self.opened_round(tenant, id, state)?;
        let call = match opened.and_then(|o| o.held) {
            Some(held) => match self.held().take(Some(&tenant.name), &held) {
                Some(mut call) => {
                    call.answer(responses);
                    call
                }
                None => {
                    let asked = RoundAsked {
                        held,
                        tenant: tenant.name.to_string(),
                        responses: responses.map(|r| r.get().to_owned()).unwrap_or_default(),
                        declared,
                        waiter: String::new(),
                    };
                    return self.round_elsewhere(up, entry, asked, reports).await;
                }
            },
            None => {
                if let Some(place) = round.place {
                    place.ensure(self, tenant).await?;
                }
                HeldCall::start(
                    up.clone(),
                    entry.clone(),
                    arguments.to_buf(),
                    (tenant.name.clone(), tenant.user.clone()),
                    id,
                    (
                        tenant.reports.clone(),
                        self.metrics().reports_dropped.clone(),
                    ),
                )
            }
        };
        self.follow(call, declared, reports, round.place).await
    }

    /// Follows a held call until its result, or the upstream's next request
    /// the client can be asked (the call held again, the round's
    /// `input_required` returned as [`GatewayError::InputRequired`]).
    async fn follow(
        &self,
        mut call: HeldCall,
        declared: [bool; 3],
        reports: Option<&(dyn Fn(Report) + Sync)>,
        place: Option<&Place>,
    ) -> Result<Answer, GatewayError> {
        let upstream = call.upstream.clone();
        let upstream_error = |error| GatewayError::Upstream {
            upstream: upstream.clone(),
            error,
        };
        loop {
            let report = tokio::select! {
                biased;
                report = call.reports.recv() => report,
                result = &mut call.result => {
                    // Reports the call made before its answer.
                    while let Some(report) = call.reports.try_recv() {
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
            let Some(ask) = for_the_client(ask, declared) else {
                continue;
            };
            let params: serde_json::Value = ask
                .params
                .as_ref()
                .and_then(|p| serde_json::from_str(p.get()).ok())
                .unwrap_or_else(|| serde_json::json!({}));
            let request = serde_json::json!({"method": &*ask.method, "params": params});
            let key = ask_key();
            call.asked = Some((key.clone(), ask));
            // Held, it keeps the place of the request that ran it.
            if call.place.is_none() {
                call.place = place.and_then(Place::take);
            }
            let (tenant, tool) = (call.tenant.clone(), call.tool.clone());
            match self.held().hold(call, self.round_lifetime()) {
                Ok(held) => {
                    let state = RoundState::new(&tool, None, Some(held), self.round_lifetime());
                    return Err(GatewayError::InputRequired(Box::new(serde_json::json!({
                        "resultType": "input_required",
                        "inputRequests": {key: request},
                        "requestState": rounds::seal(self.sealer(), &tenant, &state),
                    }))));
                }
                Err(mut back) => {
                    if let Some((_, ask)) = back.asked.take() {
                        ask.refuse("the tenant has as many calls waiting for input as it may");
                    }
                    call = *back;
                }
            }
        }
    }

    /// A retry whose call this replica does not hold: asked of the others
    /// through the shared store. The one holding it says so at once, then
    /// sends the round's outcome (within the upstream's call timeout);
    /// without a store, or when none says so in time, the retry is refused.
    async fn round_elsewhere(
        &self,
        up: &Upstream,
        entry: &ToolEntry,
        mut asked: RoundAsked,
        reports: Option<&(dyn Fn(Report) + Sync)>,
    ) -> Result<Answer, GatewayError> {
        let Some(store) = self.store() else {
            return Err(not_held());
        };
        let mut waiter = self.held().wait_for_news();
        asked.waiter = waiter.id.clone();
        if store.announce_round(asked).await.is_err() {
            return Err(GatewayError::StoreDown);
        }
        match tokio::time::timeout(HELD_ELSEWHERE_WAIT, waiter.news.recv()).await {
            Ok(Some(news)) if news == HELD => {}
            _ => return Err(not_held()),
        }
        // The round's reports come first, then its outcome, all within the
        // upstream's call timeout. The holder publishes every report before
        // the outcome, so once the outcome is here its reports are queued.
        let deadline = tokio::time::Instant::now() + up.timeout();
        let heard = |news: &str| {
            if let (Some(heard), Some(report)) = (reports, news::heard(news)) {
                heard(report);
            }
        };
        loop {
            let outcome = tokio::select! {
                biased;
                Some(report) = waiter.reports.recv() => {
                    heard(&report);
                    continue;
                }
                outcome = tokio::time::timeout_at(deadline, waiter.news.recv()) => outcome,
            };
            let news = outcome
                .ok()
                .flatten()
                .ok_or_else(|| GatewayError::Upstream {
                    upstream: up.name.clone(),
                    error: CallError::Timeout,
                })?;
            while let Some(report) = waiter.reports.try_recv() {
                heard(&report);
            }
            return news::decode(&news, &up.name, entry);
        }
    }

    /// Another replica's client retried a round whose call is held here:
    /// it is continued for that replica, which is told first that it is
    /// held here and then what became of the round.
    pub fn continue_round(&self, origin: &str, asked: RoundAsked) {
        let Some(mut call) = self.held().take(Some(&asked.tenant), &asked.held) else {
            return;
        };
        let Some(store) = self.store().cloned() else {
            return;
        };
        let (this, origin) = (self.clone(), origin.to_owned());
        tokio::spawn(async move {
            if store
                .announce_round_news(&origin, &asked.waiter, HELD)
                .await
                .is_err()
            {
                return;
            }
            let responses: Option<Box<serde_json::value::RawValue>> =
                serde_json::from_str(&asked.responses).ok();
            call.answer(responses.as_deref().map(Json::from));
            // The round's progress and log lines go to the waiting replica
            // as they come, in order, and all of them before its outcome.
            let (relayed, mut relaying) = report_queue::<String>(None, None);
            let relay = {
                let (store, origin, waiter) = (store.clone(), origin.clone(), asked.waiter.clone());
                tokio::spawn(async move {
                    while let Some(news) = relaying.recv().await {
                        let _ = store.announce_round_news(&origin, &waiter, &news).await;
                    }
                })
            };
            let heard = move |report: Report| {
                if let Some(news) = news::report(&report) {
                    // Past the queue's bytes a report is lost, never the round.
                    let bytes = news.len();
                    let _ = relayed.push(news, bytes, true);
                }
            };
            // The call keeps its own place: the retry elsewhere took none.
            let outcome = this.follow(call, asked.declared, Some(&heard), None).await;
            drop(heard);
            let _ = relay.await;
            let news = news::encode(&outcome);
            let _ = store
                .announce_round_news(&origin, &asked.waiter, &news)
                .await;
        });
    }
}

/// The first news of a round held elsewhere: the replica holding it has it.
const HELD: &str = r#"{"k":"held"}"#;

/// A round's outcome as the bus carries it between replicas.
pub(super) mod news;

/// An upstream's request during a round, for a 2026-07-28 client that
/// declared `declared` (of [`ASKABLE`]): a `ping` is answered here, one the
/// client did not declare is refused upstream, and either way `None`; the
/// rest is the client's to answer.
pub(super) fn for_the_client(ask: Ask, declared: [bool; 3]) -> Option<Ask> {
    if &*ask.method == "ping" {
        if let Ok(empty) = serde_json::value::RawValue::from_string("{}".into()) {
            let _ = ask.reply.send(AskReply::Answered(Ok(JsonBuf::from(empty))));
        }
        return None;
    }
    let may = ASKABLE
        .iter()
        .zip(declared)
        .any(|((method, _), declared)| declared && *method == &*ask.method);
    if !may {
        ask.refuse("the client cannot be asked this: it did not declare it");
        return None;
    }
    Some(ask)
}

/// The key of an `inputRequests` entry: random, so that a client's answer
/// names the round it was asked in.
pub(super) fn ask_key() -> String {
    format!("mcp-gateway-{}", random_hex::<8>())
}
