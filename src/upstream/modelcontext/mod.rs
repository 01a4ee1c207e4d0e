//! An upstream that speaks the Model Context Protocol: its handshake, its
//! listings (drained across pages, resources read into their contents,
//! prompts fetched), its notifications, and its tool results, each turned
//! into the gateway's own shapes by `crate::modelcontext`.
//!
//! Here its handshake, what it declared and its notifications; its listings
//! in `listing`.

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

mod listing;

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
