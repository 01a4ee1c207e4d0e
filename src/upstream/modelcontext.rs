//! An upstream that speaks the Model Context Protocol: its handshake, its
//! listings (drained across pages, resources read into their contents,
//! prompts fetched), its notifications, and its tool results, each turned
//! into the gateway's own shapes by `crate::modelcontext`.
//!
//! Longer than most files: one dialect's side of an upstream, its handshake,
//! its listings drained across pages and its notifications, over the same
//! link.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;
use serde_json::value::RawValue;

use super::{CallError, Op, Params, StatelessBody, Transport, Upstream};
use crate::jsonrpc::{Json, JsonBuf};
use crate::metrics::Metrics;
use crate::modelcontext::{self as mc, CallFailure, LeftOut, ResourceText, Unmapped, method};
use crate::protocol::bounds::Taker;
use crate::protocol::catalog::{self, Candidate, Dropped, Route};
use crate::protocol::tool_result::Answer;
use crate::protocol::{Capabilities, Kind};

/// Pages of one listing followed before the rest is left out.
const MAX_PAGES: usize = 100;
/// Definitions of one kind taken from one upstream.
const MAX_DEFINITIONS: usize = 10_000;
/// Resource reads and prompt fetches in flight at once, per upstream.
const READS_AT_ONCE: usize = 4;
/// The longest text of one resource carried into a listing.
const MAX_RESOURCE_TEXT: usize = 1 << 20;
/// The longest a resource read or prompt fetch may take, whatever the call timeout.
const MAX_READ_TIME: Duration = Duration::from_secs(10);

/// What the gateway keeps of one such upstream between refreshes.
/// Set once any upstream of the process declared `logging`: until then no
/// call needs to ask whether its upstream logs (most gateways front none
/// that does).
pub(super) static SOME_UPSTREAM_LOGS: AtomicBool = AtomicBool::new(false);

#[derive(Default)]
pub(super) struct State {
    /// The server takes `resources/subscribe`.
    subscribe: AtomicBool,
    /// The server answers `completion/complete`.
    completions: AtomicBool,
    /// The server declared `logging`.
    logging: AtomicBool,
    /// What it declared of tasks ([`mc::TaskCaps`] as bits).
    tasks: std::sync::atomic::AtomicU8,
    /// The server (over Streamable HTTP) takes 2026-07-28 requests too.
    stateless: AtomicBool,
    /// The server speaks only the 2026-07-28 revision: every request goes
    /// to it in that revision's envelope, and it has no handshake.
    modern_only: AtomicBool,
    /// Resource contents by uri, as last read (failed reads are not kept).
    resources: Mutex<HashMap<String, Result<ResourceText, LeftOut>>>,
    /// Uris subscribed to on the current connection.
    subscribed: Mutex<HashSet<String>>,
    /// The prompts as the server last listed them (arguments and all), for
    /// the Model Context Protocol's face, which offers them as they are.
    prompts: Mutex<Arc<Vec<serde_json::Map<String, Value>>>>,
    /// The resource templates as the server last listed them, for that face.
    templates: Mutex<Arc<Vec<serde_json::Map<String, Value>>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Bytes of resource texts (or prompt messages) one listing may still
/// carry: the listing's bound, spent as reads come back; once it is spent,
/// nothing more is read.
struct Budget {
    bound: usize,
    left: std::sync::atomic::AtomicUsize,
}

impl Budget {
    fn new(bound: usize) -> Self {
        Budget {
            bound,
            left: std::sync::atomic::AtomicUsize::new(bound),
        }
    }

    fn spent(&self) -> bool {
        self.left.load(Ordering::Acquire) == 0
    }

    /// Spends `n` bytes; false (and nothing left) when there were not as many.
    fn spend(&self, n: usize) -> bool {
        let taken = self
            .left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                left.checked_sub(n)
            });
        if taken.is_err() {
            self.left.store(0, Ordering::Release);
        }
        taken.is_ok()
    }

    fn left_out(&self, key: &str) -> LeftOut {
        LeftOut {
            key: Some(key.to_owned()),
            reason: Unmapped::OverLimit,
            detail: format!(
                "the listing's texts are over the {}-byte bound (gateway.limits.max_listing_bytes)",
                self.bound
            ),
        }
    }
}

/// Sends `op` with these params (JSON text) and waits at most `within`.
async fn ask(
    up: &Upstream,
    link: &dyn Transport,
    op: Op,
    params: &str,
    within: Duration,
) -> Result<JsonBuf, CallError> {
    let method_name = up.dialect().method(op);
    let params: &RawValue = serde_json::from_str(params)
        .map_err(|_| CallError::protocol("the gateway wrote params that are not JSON"))?;
    if up.mc.modern_only() && op != Op::Initialize {
        let enveloped = super::Enveloped::of(method_name, params.into())?;
        let sent = enveloped.params(None)?;
        return tokio::time::timeout(within, link.request(method_name, sent))
            .await
            .unwrap_or(Err(CallError::Timeout));
    }
    tokio::time::timeout(within, link.request(method_name, params.into()))
        .await
        .unwrap_or(Err(CallError::Timeout))
}

/// `server/discover`, asked in the 2026-07-28 revision: its result, or
/// `None` when the server does not answer it so.
async fn discover(up: &Upstream, link: &dyn Transport) -> Option<JsonBuf> {
    let params = mc::discover_params();
    let params: &RawValue = serde_json::from_str(&params).ok()?;
    let sent = Params::Stateless {
        params: StatelessBody::Json(params.into()),
        name: "",
        token: None,
        headers: &[],
    };
    let asked = link.request(method::DISCOVER, sent);
    match tokio::time::timeout(up.handshake_timeout(), asked).await {
        Ok(Ok(found)) => Some(found),
        Ok(Err(e)) => {
            tracing::debug!(upstream = %up.name, error = %e, "no 2026-07-28 revision offered");
            None
        }
        Err(_) => None,
    }
}

impl State {
    /// Every series of the unmapped gauge, at zero from the start.
    pub(super) fn declare_series(metrics: &Metrics, upstream: &str) {
        for kind in Kind::ALL {
            for reason in Unmapped::ALL.into_iter().filter(|r| r.applies_to(kind)) {
                metrics.definitions_unmapped.with_label_values(&[
                    upstream,
                    kind.as_str(),
                    reason.as_str(),
                ]);
            }
        }
    }

    /// `initialize` offering the newest handshake-era revision, then
    /// `notifications/initialized`. A server that refuses the handshake
    /// (as one that speaks only the 2026-07-28 revision answers it, with
    /// an error) is asked `server/discover` in that revision: when it
    /// lists the revision, every request goes to it that way; otherwise
    /// the refusal stands.
    pub(super) async fn handshake(
        &self,
        up: &Upstream,
        link: &dyn Transport,
    ) -> Result<Capabilities, CallError> {
        // A new connection is asked the handshake first, whatever the last one spoke.
        self.modern_only.store(false, Ordering::Release);
        let initialized = ask(
            up,
            link,
            Op::Initialize,
            // A Streamable HTTP upstream's requests during a call come on
            // that call's own stream, and a child per session asks only its
            // session's client, so the gateway can take them to that client;
            // a shared stdio child's cannot be told apart.
            &mc::initialize_params(
                link.as_streamable().is_some() || up.serves_one_session().is_some(),
            ),
            up.handshake_timeout(),
        )
        .await;
        let (handshake, modern_only) = match initialized {
            Ok(answer) => (
                mc::read_initialize(answer.get()).map_err(CallError::protocol)?,
                false,
            ),
            Err(refused @ (CallError::Protocol(_) | CallError::Remote(_))) => {
                let found = discover(up, link).await;
                match found.map(|found| mc::read_discover(found.get())) {
                    Some(Ok(handshake)) => (handshake, true),
                    _ => return Err(refused),
                }
            }
            Err(e) => return Err(e),
        };
        if !modern_only {
            link.notify(up.dialect().initialized(), super::empty_object())
                .await?;
        }
        self.subscribe.store(handshake.subscribe, Ordering::Release);
        self.completions
            .store(handshake.completions, Ordering::Release);
        self.logging.store(handshake.logging, Ordering::Release);
        if handshake.logging {
            SOME_UPSTREAM_LOGS.store(true, Ordering::Release);
        }
        self.tasks.store(handshake.tasks.bits(), Ordering::Release);
        // A server that also takes the 2026-07-28 revision is sent that
        // revision's calls in it (see `Upstream::call_stateless`); it
        // says so in a `server/discover` asked that way.
        let stateless = modern_only
            || (link.as_streamable().is_some()
                && discover(up, link)
                    .await
                    .is_some_and(|found| mc::discovered_stateless(found.get())));
        self.stateless.store(stateless, Ordering::Release);
        self.modern_only.store(modern_only, Ordering::Release);
        // A new connection holds no subscriptions.
        lock(&self.subscribed).clear();
        tracing::info!(upstream = %up.name, revision = %handshake.revision, stateless, modern_only, "Model Context Protocol handshake done");
        Ok(handshake.capabilities)
    }

    /// Every page of a listing, up to the bounds (pages, definitions, and
    /// bytes: see `protocol::bounds`); what is past them is said in the second part.
    async fn drain(
        &self,
        up: &Upstream,
        link: &dyn Transport,
        op: Op,
        field: &str,
    ) -> Result<(Vec<Value>, Vec<LeftOut>), CallError> {
        let over = |key: Option<String>, detail: String| LeftOut {
            key,
            reason: Unmapped::OverLimit,
            detail,
        };
        let mut taker = Taker::new(up.bounds);
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        let mut left = Vec::new();
        for _ in 0..MAX_PAGES {
            let answer = ask(
                up,
                link,
                op,
                &mc::page_params(cursor.as_deref()),
                up.timeout(),
            )
            .await?;
            let page = mc::read_page(field, answer.get()).map_err(CallError::protocol)?;
            if let Some(ttl) = page.ttl_ms {
                up.listing_kept_for(std::time::Duration::from_millis(ttl));
            }
            items.extend(
                taker
                    .take(page.items)
                    .into_iter()
                    .filter_map(|raw| serde_json::from_str::<Value>(raw.get()).ok()),
            );
            left.extend(taker.left.drain(..).map(|o| over(o.id, o.why)));
            if items.len() > MAX_DEFINITIONS {
                items.truncate(MAX_DEFINITIONS);
                left.push(over(
                    None,
                    format!("more than {MAX_DEFINITIONS} definitions; the rest is left out"),
                ));
                return Ok((items, left));
            }
            match page.next {
                Some(next) if !taker.full => cursor = Some(next),
                _ => return Ok((items, left)),
            }
        }
        left.push(over(
            None,
            format!("more than {MAX_PAGES} pages; the rest is left out"),
        ));
        Ok((items, left))
    }

    /// One kind's listing as the gateway's catalog takes it; `None` when the
    /// listing itself failed (the previous one is kept).
    pub(super) async fn list(
        &self,
        up: &Upstream,
        link: &dyn Transport,
        kind: Kind,
    ) -> Option<catalog::Built> {
        let field = mc::list_method(kind).1;
        let (items, mut left) = match self.drain(up, link, Op::List(kind), field).await {
            Ok(drained) => drained,
            Err(e) => {
                tracing::warn!(upstream = %up.name, kind = kind.as_str(), error = %e, "listing failed; keeping the previous one");
                return None;
            }
        };
        let mut candidates = Vec::new();
        let objects = items.into_iter().filter_map(|item| match item {
            Value::Object(def) => Some(def),
            _ => None,
        });
        match kind {
            Kind::Tool => {
                for def in objects {
                    match mc::tool(&def) {
                        Ok(tool) => candidates.push(Candidate {
                            definition: Value::Object(tool.definition),
                            source: Some(Value::Object(def)),
                            route: Route::ByName {
                                name: tool.name,
                                structured: tool.structured,
                            },
                        }),
                        Err(l) => left.push(l),
                    }
                }
            }
            Kind::Resource => {
                self.resources(up, link, objects.collect(), &mut candidates, &mut left)
                    .await;
                match self
                    .drain(up, link, Op::ListTemplates, "resourceTemplates")
                    .await
                {
                    Ok((templates, over)) => {
                        *lock(&self.templates) = Arc::new(
                            templates
                                .iter()
                                .filter_map(Value::as_object)
                                .cloned()
                                .collect(),
                        );
                        left.extend(
                            templates
                                .iter()
                                .filter_map(Value::as_object)
                                .map(mc::template),
                        );
                        left.extend(over);
                    }
                    Err(e) => {
                        tracing::debug!(upstream = %up.name, error = %e, "no resource templates listed")
                    }
                }
            }
            Kind::Prompt => {
                let defs: Vec<_> = objects.collect();
                *lock(&self.prompts) = Arc::new(defs.clone());
                self.prompts(up, link, defs, &mut candidates, &mut left)
                    .await;
            }
        }
        let mut built = catalog::build_from(&up.gateway_id, &up.name, kind, candidates);
        let mut counts: HashMap<Unmapped, i64> = HashMap::new();
        for l in &left {
            *counts.entry(l.reason).or_default() += 1;
            built.dropped.push(Dropped {
                kind,
                id: l.key.as_deref().map(|k| mc::original_id(kind, k)),
                reason: format!("{} ({})", l.detail, l.reason.as_str()),
                // The official face offers templates and prompts as the
                // upstream listed them.
                v1_only: matches!(
                    l.reason,
                    Unmapped::Template
                        | Unmapped::RequiredArguments
                        | Unmapped::UnsupportedMessages
                ),
            });
        }
        for reason in Unmapped::ALL.into_iter().filter(|r| r.applies_to(kind)) {
            up.metrics()
                .definitions_unmapped
                .with_label_values(&[&up.name, kind.as_str(), reason.as_str()])
                .set(counts.get(&reason).copied().unwrap_or(0));
        }
        Some(built)
    }

    /// Each listed resource with its text: from the cache, or read now (a
    /// few at a time, each within its time limit and size cap).
    async fn resources(
        &self,
        up: &Upstream,
        link: &dyn Transport,
        defs: Vec<serde_json::Map<String, Value>>,
        candidates: &mut Vec<Candidate>,
        left: &mut Vec<LeftOut>,
    ) {
        let within = up.timeout().min(MAX_READ_TIME);
        // The texts carried into the listing take the listing's bound together.
        let budget = Budget::new(up.bounds.listing_bytes);
        let mut listed = Vec::new();
        for def in defs {
            match mc::resource_uri(&def) {
                Ok(uri) => {
                    let uri = uri.to_owned();
                    listed.push((def, uri));
                }
                Err(l) => left.push(l),
            }
        }
        let read = futures_util::stream::iter(listed)
            .map(|(def, uri)| {
                let budget = &budget;
                async move {
                    if budget.spent() {
                        let over = budget.left_out(&uri);
                        return (def, uri, Err(over));
                    }
                    let cached = lock(&self.resources).get(&uri).cloned();
                    let text = match cached {
                        Some(text) => text,
                        None => {
                            let params = mc::uri_params(&uri);
                            match ask(up, link, Op::ReadResource, &params, within).await {
                                Ok(answer) => {
                                    mc::read_resource_text(&uri, answer.get(), MAX_RESOURCE_TEXT)
                                }
                                Err(e) => Err(LeftOut {
                                    key: Some(uri.clone()),
                                    reason: Unmapped::ReadFailed,
                                    detail: format!("resources/read failed: {e}"),
                                }),
                            }
                        }
                    };
                    let text = match text {
                        Ok(t) if !budget.spend(t.text.len()) => Err(budget.left_out(&uri)),
                        other => other,
                    };
                    (def, uri, text)
                }
            })
            .buffered(READS_AT_ONCE)
            .collect::<Vec<_>>()
            .await;
        let mut cache = HashMap::new();
        let mut to_subscribe = Vec::new();
        for (def, uri, text) in read {
            match &text {
                Ok(text) => candidates.push(Candidate::native(Value::Object(mc::resource(
                    &def, &uri, text,
                )))),
                Err(l) => left.push(l.clone()),
            }
            if !matches!(&text, Err(l) if matches!(l.reason, Unmapped::ReadFailed | Unmapped::OverLimit))
            {
                cache.insert(uri.clone(), text);
            }
            to_subscribe.push(uri);
        }
        // Only what is listed now stays cached.
        *lock(&self.resources) = cache;
        if self.subscribe.load(Ordering::Acquire) {
            let fresh: Vec<String> = {
                let mut subscribed = lock(&self.subscribed);
                to_subscribe
                    .into_iter()
                    .filter(|uri| subscribed.insert(uri.clone()))
                    .collect()
            };
            futures_util::stream::iter(fresh)
                .for_each_concurrent(READS_AT_ONCE, |uri| async move {
                    let params = mc::uri_params(&uri);
                    if let Err(e) = ask(up, link, Op::Subscribe, &params, within).await {
                        tracing::debug!(upstream = %up.name, uri, error = %e, "resources/subscribe failed");
                        lock(&self.subscribed).remove(&uri);
                    }
                })
                .await;
        }
    }

    /// Each listed prompt that takes no required arguments, fetched.
    async fn prompts(
        &self,
        up: &Upstream,
        link: &dyn Transport,
        defs: Vec<serde_json::Map<String, Value>>,
        candidates: &mut Vec<Candidate>,
        left: &mut Vec<LeftOut>,
    ) {
        let within = up.timeout().min(MAX_READ_TIME);
        let budget = Budget::new(up.bounds.listing_bytes);
        let mut fetchable = Vec::new();
        for def in defs {
            match mc::prompt_name(&def) {
                Ok(name) => {
                    let name = name.to_owned();
                    fetchable.push((def, name));
                }
                Err(l) => left.push(l),
            }
        }
        let fetched = futures_util::stream::iter(fetchable)
            .map(|(def, name)| {
                let budget = &budget;
                async move {
                    if budget.spent() {
                        return Err(budget.left_out(&name));
                    }
                    let params = mc::get_prompt_params(&name);
                    match ask(up, link, Op::GetPrompt, &params, within).await {
                        Ok(answer) if !budget.spend(answer.get().len()) => {
                            Err(budget.left_out(&name))
                        }
                        Ok(answer) => mc::prompt(&def, &name, answer.get()),
                        Err(e) => Err(LeftOut {
                            key: Some(name.clone()),
                            reason: Unmapped::ReadFailed,
                            detail: format!("prompts/get failed: {e}"),
                        }),
                    }
                }
            })
            .buffered(READS_AT_ONCE)
            .collect::<Vec<_>>()
            .await;
        for prompt in fetched {
            match prompt {
                Ok(def) => candidates.push(Candidate::native(Value::Object(def))),
                Err(l) => left.push(l),
            }
        }
    }

    /// Whether the server answers `completion/complete`.
    pub(super) fn completes(&self) -> bool {
        self.completions.load(Ordering::Acquire)
    }

    /// Whether the server declared `logging`.
    pub(super) fn logs(&self) -> bool {
        self.logging.load(Ordering::Acquire)
    }

    /// Whether the server takes 2026-07-28 requests.
    pub(super) fn stateless(&self) -> bool {
        self.stateless.load(Ordering::Acquire)
    }

    /// Whether the server speaks only the 2026-07-28 revision.
    pub(super) fn modern_only(&self) -> bool {
        self.modern_only.load(Ordering::Acquire)
    }

    /// What the server declared of tasks.
    pub(super) fn tasks(&self) -> mc::TaskCaps {
        mc::TaskCaps::from_bits(self.tasks.load(Ordering::Acquire))
    }

    /// The prompts as the server last listed them.
    pub(super) fn own_prompts(&self) -> Arc<Vec<serde_json::Map<String, Value>>> {
        lock(&self.prompts).clone()
    }

    /// The resource templates as the server last listed them.
    pub(super) fn own_templates(&self) -> Arc<Vec<serde_json::Map<String, Value>>> {
        lock(&self.templates).clone()
    }

    /// A notification from the server: a changed listing is listed again; an
    /// updated resource is read again and announced to the tenants' sessions
    /// (both soon, coalesced: see `Upstream::relister`).
    pub(super) fn on_notification(
        &self,
        up: &Upstream,
        method_name: &str,
        params: Option<Json<'_>>,
    ) {
        match method_name {
            method::TOOLS_CHANGED | method::RESOURCES_CHANGED | method::PROMPTS_CHANGED => {
                up.heard(None);
            }
            method::RESOURCE_UPDATED => {
                let Some(uri) = mc::updated_uri(params.map(Json::get)) else {
                    up.metrics()
                        .upstream_protocol_errors
                        .with_label_values(&[&up.name])
                        .inc();
                    return;
                };
                lock(&self.resources).remove(&uri);
                up.heard(Some(&mc::original_id(Kind::Resource, &uri)));
            }
            "notifications/tasks/status" => up.task_status(params),
            method::MESSAGE => {
                tracing::debug!(target: "upstream_log", upstream = %up.name, message = params.map_or("", Json::get), "log message from upstream");
            }
            other => {
                tracing::debug!(upstream = %up.name, method = other, "ignored notification from upstream");
            }
        }
    }
}

/// A `tools/call` result as the core's answer (see `crate::modelcontext::tool_result`).
pub(super) fn tool_result(result: JsonBuf, structured: bool) -> Result<Answer, CallError> {
    match mc::tool_result(result, structured) {
        Ok(answer) => Ok(answer),
        Err(CallFailure::Tool(text)) => Err(CallError::Tool(text)),
        Err(CallFailure::Broken(why)) => Err(CallError::protocol(why)),
    }
}

/// Whether a result is the 2026-07-28 revision's `input_required` (its
/// `resultType` says so).
pub(super) fn input_required(result: &JsonBuf) -> bool {
    #[derive(serde::Deserialize)]
    struct Typed<'a> {
        #[serde(rename = "resultType", borrow)]
        result_type: Option<std::borrow::Cow<'a, str>>,
    }
    static FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new("\"input_required\""));
    FINDER.find(result.get().as_bytes()).is_some()
        && serde_json::from_str::<Typed<'_>>(result.get())
            .is_ok_and(|t| t.result_type.as_deref() == Some("input_required"))
}
