//! Upstream MCP servers. [`Transport`] is the one trait both kinds implement
//! (stdio children and HTTP servers); [`Upstream`] holds what the gateway knows
//! of one configured upstream (status, capabilities, catalog) and calls it.
//! Supervisors (`stdio::run`, `http::run`) own the connection's lifecycle.
//!
//! The `Upstream` type and its state (status, catalog, relistings, pins,
//! behind one set of locks) are here; its ways of being called
//! (`calls`), what it can do (`abilities`), its connection and listings
//! (`listing`), and the parts that need none of its state (links,
//! dialects, wire text, pending calls, slots) are files of their own.

mod abilities;
mod acting;
pub mod asks;
mod backoff;
mod call_error;
mod calls;
pub mod children;
pub mod credentials;
mod detect;
mod dialect;
pub mod env_credential;
pub mod http;
pub(crate) mod http_pool;
mod input_rounds;
pub mod launch;
mod listing;
mod modelcontext;
mod pending;
pub mod pins;
pub mod progress;
mod setup;
mod slots;
pub(crate) mod sse;
pub mod standing;
mod stateless_call;
pub mod stdio;
pub mod streamable;
mod v1;
mod wire;

pub use call_error::CallError;
pub use children::Instance;
pub use dialect::{Dialect, Op, TaskOp};
use slots::Slots;
pub use stateless_call::StatelessCall;
use wire::empty_object;
pub use wire::{Params, StatelessBody};
pub(crate) use wire::{decimal, encode_request, write_request, write_u64};

use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use serde_json::value::RawValue;
use tokio::sync::{broadcast, watch};

use crate::jsonrpc::{Json, JsonBuf};
use crate::metrics::Metrics;
use crate::protocol::bounds::ListingBounds;
use crate::protocol::tool_result::Answer;
use crate::protocol::{Capabilities, Catalog, Kind};

/// One connection to an upstream: sends requests and notifications.
pub trait Transport: Send + Sync + 'static {
    /// Sends a request and waits for its answer (no timeout here: the caller sets it).
    fn request<'a>(
        &'a self,
        method: &'a str,
        params: Params<'a>,
    ) -> BoxFuture<'a, Result<JsonBuf, CallError>>;
    /// Sends a notification.
    fn notify<'a>(
        &'a self,
        method: &'a str,
        params: &'a RawValue,
    ) -> BoxFuture<'a, Result<(), CallError>>;
    /// The link as a plain HTTP one, whose requests [`Upstream::call`] awaits
    /// in place (no boxed future) and hands the time the call started (one
    /// clock read less).
    fn as_http(&self) -> Option<&http::HttpLink> {
        None
    }
    /// The link as a Streamable HTTP one, awaited in place the same way.
    fn as_streamable(&self) -> Option<&streamable::StreamableLink> {
        None
    }
}

/// What a call in the 2026-07-28 revision came to.
pub enum Round {
    /// The tool's result.
    Done(Answer),
    /// The upstream needs the client's input first: its result as it gave
    /// it (`inputRequests`, `requestState`).
    InputRequired(JsonBuf),
}

/// Runs `f` when dropped.
pub(crate) fn scopeguard<F: FnOnce()>(f: F) -> impl Drop {
    struct Guard<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Guard<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    Guard(Some(f))
}

/// Where an upstream stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Not yet connected (first start).
    Starting,
    /// Handshake done; calls go through.
    Ready,
    /// Crashed, refused or restarting: calls fail at once with -32001.
    Down,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Starting => "starting",
            Status::Ready => "ready",
            Status::Down => "down",
        }
    }
}

struct HotSeries {
    in_flight: prometheus::IntGauge,
    execute_ok: prometheus::IntCounter,
    execute_seconds: prometheus::Histogram,
}

impl HotSeries {
    fn new(metrics: &Metrics, name: &str, dialect: Dialect) -> Self {
        let call_method = dialect.method(Op::CallTool);
        HotSeries {
            in_flight: metrics.upstream_in_flight.with_label_values(&[name]),
            execute_ok: metrics
                .upstream_calls
                .with_label_values(&[name, call_method, "ok"]),
            execute_seconds: metrics
                .upstream_seconds
                .with_label_values(&[name, call_method]),
        }
    }
}

/// What the gateway knows of one configured upstream. Shared as `Arc<Upstream>`.
pub struct Upstream {
    pub name: Arc<str>,
    /// The protocol it speaks: as configured, or told at its first handshake.
    dialect: dialect::Settled,
    /// What only an upstream of the Model Context Protocol keeps.
    mc: modelcontext::State,
    /// Readiness waits for it.
    pub required: bool,
    gateway_id: Arc<str>,
    timeout: Duration,
    status: watch::Sender<Status>,
    link: RwLock<Option<Arc<dyn Transport>>>,
    capabilities: RwLock<Option<Capabilities>>,
    catalog: RwLock<Catalog>,
    /// One refresh at a time; and on demand no more often than `MIN_REFRESH_INTERVAL`.
    refresh_gate: tokio::sync::Mutex<Option<Instant>>,
    /// Namespaced ids of resources that changed, each with the one tenant
    /// it concerns when a tenant's child said so (its state is that
    /// tenant's alone), else `None`: every tenant that sees the upstream.
    changes: broadcast::Sender<(Option<Arc<str>>, Arc<str>)>,
    /// `notifications/tasks/status` params the upstream (or a child of
    /// it) sent, as it sent them, with the incarnation that sent them.
    task_statuses: broadcast::Sender<(Arc<str>, JsonBuf)>,
    /// This process's (or HTTP session's) incarnation: new at every
    /// handshake, so that what the upstream numbered in one (its task ids)
    /// is never taken for what it numbers in the next.
    incarnation: RwLock<Arc<str>>,
    /// Counts what may have changed its listings (a new catalog, a status change).
    listings: watch::Sender<u64>,
    /// Its `max_concurrency` and `max_queue`, shared with its children.
    slots: Option<Arc<Slots>>,
    pins: Option<Arc<pins::PinStore>>,
    /// Calls started and not finished (what a drain waits for).
    calls: std::sync::atomic::AtomicUsize,
    /// The series every tool call touches, resolved once (a label lookup hashes
    /// its label values and takes a lock).
    /// Its calls' own series, labelled with its protocol's method once it is known.
    hot: std::sync::OnceLock<HotSeries>,
    /// Why it last failed to connect, until it connects (readiness's detail).
    problem: RwLock<Option<Arc<str>>>,
    /// Since when it is in its state, and its last failure (the console's).
    standing: standing::Standing,
    /// Its last handshake could not have a credential: why (see `note_refusal`).
    refusal: RwLock<Option<CallError>>,
    /// The mode of its `auth`, when it has one.
    auth_mode: Option<&'static str>,
    /// The credential its links send, once it has started.
    credentials: std::sync::OnceLock<Arc<credentials::Credentials>>,
    /// Set when a reload replaced or removed this upstream.
    retired: std::sync::atomic::AtomicBool,
    /// Woken when a call found the upstream unreachable: its supervisor looks
    /// at once whether it is still there.
    suspect: tokio::sync::Notify,
    /// A caller asked for a listing of an upstream that acts for the user
    /// (see `acting`).
    user_came: tokio::sync::Notify,
    /// Relistings the upstream's notifications asked for (see
    /// [`Self::relister`]), shared with its children: a listing that changed
    /// in a child is listed again from the upstream's own process.
    relist: Arc<Relist>,
    /// Where its change notifications go first when replicas share a store
    /// (see `crate::store::bus`); unset, they are acted on here alone.
    relay: std::sync::OnceLock<Relay>,
    /// Its calls in flight whose callers asked for progress.
    progress: Arc<progress::Progress>,
    /// What one of its listings may take.
    bounds: ListingBounds,
    metrics: Metrics,
    /// Set on a child that serves one client session: its requests are
    /// that client's, wait this long for its answers, and are counted in
    /// these metrics (the gateway's, where the child's own are its own).
    one_session: std::sync::OnceLock<(Duration, Metrics)>,
    /// Set when it runs children for tenants or client sessions (see `children`).
    children: std::sync::OnceLock<Arc<children::Children>>,
    /// Set on a child: the tenant it serves. A child lists nothing and
    /// moves none of the upstream's own series but its calls'.
    tenant: Option<Arc<str>>,
    /// Whether its Streamable HTTP server gave it a session at the last
    /// handshake (see `children`).
    keeps_sessions: std::sync::atomic::AtomicBool,
    /// How long a question of a call's round waits for its client
    /// (`gateway.server_request_timeout_ms`; see `input_rounds`).
    answer_wait: Duration,
}

/// A request's params in the 2026-07-28 revision's envelope (see
/// [`crate::modelcontext::enveloped`]), for a server that speaks only it.
struct Enveloped {
    text: String,
    name: Option<String>,
}

impl Enveloped {
    fn of(method: &str, params: Params<'_>) -> Result<Self, CallError> {
        let (text, name) = crate::modelcontext::enveloped(method, &params.to_text())
            .map_err(CallError::protocol)?;
        Ok(Enveloped { text, name })
    }

    /// The params to send, carrying the progress `token` the request had.
    fn params<'a>(&'a self, token: Option<&'a str>) -> Result<Params<'a>, CallError> {
        let raw: &RawValue = serde_json::from_str(&self.text)
            .map_err(|_| CallError::protocol("the gateway wrote params that are not JSON"))?;
        Ok(Params::Stateless {
            params: StatelessBody::Json(raw.into()),
            name: self.name.as_deref().unwrap_or(""),
            token,
            headers: &[],
        })
    }
}

/// Relistings asked for by an upstream's notifications, coalesced: at most one
/// runs and at most one more is pending, however many notifications arrive,
/// so that a storm of `list_changed` costs two listings, not one each.
#[derive(Default)]
struct Relist {
    /// A relisting is wanted that has not started yet.
    wanted: std::sync::atomic::AtomicBool,
    wake: tokio::sync::Notify,
    /// Resources (original ids) to announce once the pending relisting is done.
    announce: std::sync::Mutex<std::collections::HashSet<String>>,
    /// The shortest `ttlMs` the listings being read said, and when the
    /// last relisting that heard one is due to be done again.
    ttl: std::sync::Mutex<(Option<Duration>, Option<Instant>)>,
}

/// The shortest an upstream's `ttlMs` is taken to be: a server that says 0
/// (or little more) is relisted once a second, not without end.
const MIN_LISTING_TTL: Duration = Duration::from_secs(1);

pub use crate::store::bus::Heard;

/// The queue from upstreams' notifications to the store's relay.
#[derive(Debug, Clone)]
pub struct Relay {
    pub to: tokio::sync::mpsc::Sender<Heard>,
    pub shared: bool,
}

/// Resource changes kept for announcement while a relisting is pending; an
/// upstream naming more distinct resources at once loses the rest (counted
/// as protocol errors: no honest server changes that many between two listings).
const MAX_PENDING_ANNOUNCEMENTS: usize = 4096;

const MIN_REFRESH_INTERVAL: Duration = Duration::from_secs(1);
/// The least time from the start of one relisting that notifications asked
/// for to the start of the next.
const MIN_RELIST_GAP: Duration = Duration::from_millis(100);
/// The least time a child gets to answer `initialize`.
const HANDSHAKE_AT_LEAST: Duration = Duration::from_secs(10);

fn read<T: Clone>(lock: &RwLock<T>) -> T {
    lock.read().unwrap_or_else(PoisonError::into_inner).clone()
}

fn write<T>(lock: &RwLock<T>, value: T) {
    *lock.write().unwrap_or_else(PoisonError::into_inner) = value;
}

impl Upstream {
    pub fn new(
        name: &str,
        gateway_id: &str,
        timeout: Duration,
        required: bool,
        limit: Option<(usize, usize)>,
        protocol: crate::config::Protocol,
        metrics: Metrics,
    ) -> Arc<Self> {
        let dialect = Dialect::of(protocol);
        // Every series of a configured upstream exists from the start, at zero, so
        // dashboards show 0 rather than no data and increase() sees the first event.
        metrics.upstream_up.with_label_values(&[name]).set(0);
        metrics.upstream_restarts.with_label_values(&[name]);
        metrics.upstream_protocol_errors.with_label_values(&[name]);
        metrics.upstream_in_flight.with_label_values(&[name]);
        metrics
            .upstream_log_lines_dropped
            .with_label_values(&[name]);
        metrics.definitions_quarantined.with_label_values(&[name]);
        metrics.tenant_children.with_label_values(&[name]);
        metrics.session_children.with_label_values(&[name]);
        for kind in Kind::ALL {
            metrics
                .definitions_dropped
                .with_label_values(&[name, kind.as_str()]);
            metrics
                .definitions_listed
                .with_label_values(&[name, kind.as_str()]);
        }
        // At zero for MCP v1.0 upstreams too (their definitions need no
        // mapping), so that every upstream has the same series.
        modelcontext::State::declare_series(&metrics, name);
        let slots = limit.map(|(running, waiting)| {
            Arc::new(Slots {
                running: Arc::new(tokio::sync::Semaphore::new(
                    running.min(tokio::sync::Semaphore::MAX_PERMITS),
                )),
                waiting: std::sync::atomic::AtomicUsize::new(0),
                max_waiting: waiting,
            })
        });
        Arc::new(Self::build(
            name, gateway_id, timeout, required, slots, dialect, metrics, None,
        ))
    }

    /// A child of this upstream serving `tenant` (see `children`): its
    /// calls are held to this upstream's slots and counted in its series,
    /// its task statuses heard where this upstream's are.
    pub(crate) fn child(&self, tenant: &Arc<str>) -> Arc<Upstream> {
        let mut child = Self::build(
            &self.name,
            &self.gateway_id,
            self.timeout,
            false,
            self.slots.clone(),
            self.dialect.get(),
            self.metrics.clone(),
            Some(tenant.clone()),
        );
        child.answer_wait = self.answer_wait;
        child.bounds = self.bounds;
        child.task_statuses = self.task_statuses.clone();
        child.changes = self.changes.clone();
        child.relist = self.relist.clone();
        if let Some(relay) = self.relay.get() {
            let _ = child.relay.set(relay.clone());
        }
        Arc::new(child)
    }

    #[allow(clippy::too_many_arguments)]
    fn build(
        name: &str,
        gateway_id: &str,
        timeout: Duration,
        required: bool,
        slots: Option<Arc<Slots>>,
        dialect: Option<Dialect>,
        metrics: Metrics,
        tenant: Option<Arc<str>>,
    ) -> Self {
        let hot = std::sync::OnceLock::new();
        if let Some(dialect) = dialect {
            let _ = hot.set(HotSeries::new(&metrics, name, dialect));
        }
        Self {
            name: name.into(),
            dialect: dialect::Settled::new(dialect),
            problem: RwLock::new(None),
            standing: standing::Standing::new(),
            refusal: RwLock::new(None),
            auth_mode: None,
            credentials: std::sync::OnceLock::new(),
            mc: modelcontext::State::default(),
            required,
            gateway_id: gateway_id.into(),
            timeout,
            status: watch::Sender::new(Status::Starting),
            link: RwLock::new(None),
            capabilities: RwLock::new(None),
            catalog: RwLock::new(Catalog::default()),
            refresh_gate: tokio::sync::Mutex::new(None),
            changes: broadcast::Sender::new(64),
            task_statuses: broadcast::Sender::new(64),
            incarnation: RwLock::new(Arc::from("")),
            listings: watch::Sender::new(0),
            slots,
            pins: None,
            calls: std::sync::atomic::AtomicUsize::new(0),
            hot,
            retired: std::sync::atomic::AtomicBool::new(false),
            suspect: tokio::sync::Notify::new(),
            user_came: tokio::sync::Notify::new(),
            relist: Arc::default(),
            relay: std::sync::OnceLock::new(),
            progress: Arc::new(progress::Progress::counting(
                metrics.reports_dropped.clone(),
            )),
            bounds: ListingBounds::default(),
            metrics,
            one_session: std::sync::OnceLock::new(),
            children: std::sync::OnceLock::new(),
            tenant,
            keeps_sessions: std::sync::atomic::AtomicBool::new(false),
            answer_wait: input_rounds::DEFAULT_WAIT,
        }
    }

    /// The protocol it speaks; until it is told (`protocol: auto`), the
    /// Model Context Protocol, which is tried first.
    pub fn dialect(&self) -> Dialect {
        self.dialect.get().unwrap_or(Dialect::ModelContext)
    }

    /// Whether its protocol is still to be told at a handshake.
    pub fn detecting(&self) -> bool {
        self.dialect.get().is_none()
    }

    /// Settles the protocol told at its first handshake; it stays for good.
    pub fn settle(&self, dialect: Dialect) {
        self.dialect.set(dialect);
        let _ = self
            .hot
            .set(HotSeries::new(&self.metrics, &self.name, dialect));
    }

    /// Notes why it could not connect: readiness says so until it does.
    pub fn note_problem(&self, why: &str) {
        write(&self.problem, Some(Arc::from(why)));
        self.standing.failed(why);
    }

    /// Notes a failure that is no reason to be down (a process that
    /// exited, a call that timed out): its last error, for people.
    pub fn note_failure(&self, what: &str) {
        self.standing.failed(what);
    }

    /// Since when it stands where it does, and its last failure.
    pub fn standing(&self) -> &standing::Standing {
        &self.standing
    }

    /// Enters `status`, noting when it changed.
    fn set_status(&self, status: Status) {
        if self.status.send_replace(status) != status {
            self.standing.moved();
        }
    }

    /// Notes how its last handshake ended: a credential that could not be
    /// had is what a call is told while it is down (see [`Self::refusal`]).
    pub fn note_refusal(&self, failure: Option<&CallError>) {
        let refusal = failure.filter(|e| matches!(e, CallError::Credential(_)));
        write(&self.refusal, refusal.cloned());
    }

    /// Why a call cannot reach it while it is down, when its last
    /// handshake could not have a credential.
    pub fn refusal(&self) -> Option<CallError> {
        read(&self.refusal)
    }

    /// Why it last failed to connect, if it has not connected since.
    pub fn problem(&self) -> Option<Arc<str>> {
        self.problem
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn hot(&self) -> &HotSeries {
        self.hot
            .get_or_init(|| HotSeries::new(&self.metrics, &self.name, self.dialect()))
    }

    pub fn status(&self) -> Status {
        *self.status.borrow()
    }

    /// The capabilities from the last successful handshake.
    pub fn capabilities(&self) -> Option<Capabilities> {
        *self
            .capabilities
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub fn catalog(&self) -> Catalog {
        read(&self.catalog)
    }

    /// Runs `f` on the current catalog without taking a share of it (a
    /// lookup's hot path); `f` must not touch this upstream's catalog again.
    pub fn with_catalog<R>(&self, f: impl FnOnce(&Catalog) -> R) -> R {
        f(&self.catalog.read().unwrap_or_else(PoisonError::into_inner))
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// How long the answer to `initialize` is waited for: the call timeout,
    /// but at least [`HANDSHAKE_AT_LEAST`], since a child answers it only
    /// once it has started (an interpreter loading its SDK takes seconds).
    /// HTTP supervisors bound the whole handshake themselves.
    pub fn handshake_timeout(&self) -> Duration {
        self.timeout.max(HANDSHAKE_AT_LEAST)
    }

    /// Changes whenever its listings may have: a new catalog, or a status change.
    pub fn subscribe_listings(&self) -> watch::Receiver<u64> {
        self.listings.subscribe()
    }

    fn listings_may_have_changed(&self) {
        self.listings.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The status once the first start is over, waiting at most the call timeout.
    pub async fn wait_started(&self) -> Status {
        self.wait_started_within(self.timeout).await
    }

    /// The status once the first start is over, waiting as long as the
    /// handshake may take: what a freshly started gateway's first listing
    /// (and a name looked up in it) waits for, since a child that loads an
    /// interpreter takes seconds, whatever its calls' timeout.
    pub async fn wait_first_start(&self) -> Status {
        self.wait_started_within(self.handshake_timeout()).await
    }

    async fn wait_started_within(&self, within: Duration) -> Status {
        // Nearly always: no subscription, no timer.
        let now = self.status();
        if now != Status::Starting {
            return now;
        }
        let mut rx = self.status.subscribe();
        let wait = rx.wait_for(|s| *s != Status::Starting);
        match tokio::time::timeout(within, wait).await {
            Ok(Ok(s)) => *s,
            Ok(Err(_)) | Err(_) => Status::Starting,
        }
    }
}
