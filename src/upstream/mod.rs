//! Upstream MCP servers. [`Transport`] is the one trait both kinds implement
//! (stdio children and HTTP servers); [`Upstream`] holds what the gateway knows
//! of one configured upstream (status, capabilities, catalog) and calls it.
//! Supervisors (`stdio::run`, `http::run`) own the connection's lifecycle.
//!
//! Longer than most files: the `Upstream` type, what the gateway knows of one
//! upstream and every way it is called. Its status, catalog, relistings and
//! pins are one state behind one set of locks; the parts that need none of it
//! (links, dialects, wire text, pending calls, slots) are files of their own.

mod acting;
pub mod asks;
mod backoff;
mod call_error;
pub mod children;
pub mod credentials;
mod detect;
mod dialect;
pub mod env_credential;
pub mod http;
pub(crate) mod http_pool;
mod input_rounds;
pub mod launch;
mod modelcontext;
mod pending;
pub mod pins;
pub mod progress;
mod slots;
pub(crate) mod sse;
pub mod standing;
pub mod stdio;
pub mod streamable;
mod v1;
mod wire;

pub use call_error::CallError;
pub use children::Instance;
pub use dialect::{Dialect, Op, TaskOp};
use slots::Slots;
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
use crate::protocol::catalog::Route;
use crate::protocol::tool_result::Answer;
use crate::protocol::{Capabilities, Catalog, Kind, ToolEntry, catalog};

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

/// A 2026-07-28 client's `tools/call`, as the upstream is sent it (see
/// [`Upstream::call_stateless`]).
#[derive(Debug)]
pub struct StatelessCall<'a> {
    pub arguments: Json<'a>,
    /// The client's `clientCapabilities`, as it sent them.
    pub capabilities: Option<Json<'a>>,
    /// The log level the client asked the call's lines at, as it sent it.
    pub log_level: Option<Json<'a>>,
    /// The client's answers to the upstream's last round, as it sent them.
    pub input_responses: Option<Json<'a>>,
    /// The upstream's own `requestState` of that round (unsealed).
    pub request_state: Option<&'a str>,
    /// The `Mcp-Param-*` headers of the arguments the tool mirrors.
    pub mirrored: &'a [(String, String)],
}

impl StatelessCall<'_> {
    /// About how long [`Self::write`] makes the params, less the name.
    fn len_hint(&self) -> usize {
        let raw = |json: Option<Json<'_>>| json.map_or(0, |j| j.get().len());
        192 + self.arguments.get().len()
            + raw(self.input_responses)
            + self.request_state.map_or(0, str::len)
            + raw(self.capabilities)
    }

    /// Writes the request's params: the upstream's tool name, the
    /// arguments, the round's answers and state, and the revision's `_meta`
    /// envelope (with the gateway's progress `token`, when it asks for
    /// progress, and the `trace`'s context, when there is one).
    fn write(
        &self,
        out: &mut Vec<u8>,
        name: &str,
        token: Option<&str>,
        trace: Option<&crate::telemetry::traces::Outbound>,
    ) {
        use crate::modelcontext::{CAPABILITIES_META, LOG_LEVEL_META, VERSION_META};
        out.extend_from_slice(br#"{"name":"#);
        wire::write_json_string(out, name);
        out.extend_from_slice(br#","arguments":"#);
        out.extend_from_slice(self.arguments.get().as_bytes());
        if let Some(responses) = self.input_responses {
            out.extend_from_slice(br#","inputResponses":"#);
            out.extend_from_slice(responses.get().as_bytes());
        }
        if let Some(state) = self.request_state {
            out.extend_from_slice(br#","requestState":"#);
            wire::write_json_string(out, state);
        }
        let member = |out: &mut Vec<u8>, key: &str, value: &[u8]| {
            out.push(b'"');
            out.extend_from_slice(key.as_bytes());
            out.extend_from_slice(b"\":");
            out.extend_from_slice(value);
        };
        out.extend_from_slice(br#","_meta":{"#);
        member(out, VERSION_META, b"\"");
        out.extend_from_slice(crate::modelcontext::STATELESS_REVISION.as_bytes());
        out.push(b'"');
        out.push(b',');
        member(out, CAPABILITIES_META, b"{");
        // Most clients declare nothing a round may use.
        let declared = self.capabilities.filter(|c| c.get() != "{}");
        let kept = crate::jsonrpc::scan::members(declared, ROUND_CAPABILITIES);
        let mut first = true;
        for (key, value) in ROUND_CAPABILITIES.iter().zip(kept) {
            if let Some(value) = value {
                if !first {
                    out.push(b',');
                }
                first = false;
                member(out, key, value.get().as_bytes());
            }
        }
        out.push(b'}');
        if let Some(level) = self.log_level {
            out.push(b',');
            member(out, LOG_LEVEL_META, level.get().as_bytes());
        }
        if let Some(token) = token {
            out.push(b',');
            member(out, "progressToken", token.as_bytes());
        }
        if let Some(trace) = trace {
            out.push(b',');
            wire::write_trace(out, trace);
        }
        out.extend_from_slice(b"}}");
    }
}

/// The client capabilities an upstream may use in an `input_required`
/// round, passed on from the client's.
const ROUND_CAPABILITIES: [&str; 3] = ["elicitation", "sampling", "roots"];

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

    /// Sets how long a question of a call's round waits for its client.
    pub fn answers_within(self: &mut Arc<Self>, wait: Duration) {
        if let Some(up) = Arc::get_mut(self) {
            up.answer_wait = wait;
        }
    }

    /// Marks it a child that serves one client session (see `per_session`),
    /// whose requests wait `wait` for that client's answers.
    pub fn serve_one_session(&self, wait: Duration, counted: Metrics) {
        let _ = self.one_session.set((wait, counted));
    }

    /// How long its requests wait for its one client's answers, and where
    /// they are counted, when it serves one client session.
    pub fn serves_one_session(&self) -> Option<&(Duration, Metrics)> {
        self.one_session.get()
    }

    /// Whether it runs a stdio child per client session (`per_session`).
    pub fn runs_children(&self) -> bool {
        self.children.get().is_some_and(|c| c.per_session())
    }

    /// Ends `tenant`'s child of the client session `scope`, if it runs one.
    pub fn end_session(&self, tenant: &str, scope: &[u8]) {
        if let Some(children) = self.children.get() {
            children.end(tenant, scope);
        }
    }

    /// Runs children for tenants, or client sessions, that its own process
    /// does not serve (see `children`).
    pub fn run_children(&self, children: Arc<children::Children>) {
        let _ = self.children.set(children);
    }

    /// Where `tenant`'s calls run (in the client session `session`, when it
    /// can be asked): this upstream, or a child of it (see `children`).
    /// Nearly always, for an upstream that runs none: itself, at once.
    pub fn instance(
        &self,
        tenant: &Arc<str>,
        user: Option<&Arc<crate::tenant::User>>,
        session: Option<&[u8]>,
    ) -> Result<Instance<'_>, CallError> {
        match self.children.get() {
            None => Ok(Instance::Own(self)),
            Some(children) => children.pick(self, tenant, user, session),
        }
    }

    /// A child's connection takes calls from now on.
    pub(crate) fn mark_ready(&self) {
        self.set_status(Status::Ready);
    }

    /// Whether it is a child serving one tenant (see `children`).
    pub(crate) fn is_child(&self) -> bool {
        self.tenant.is_some()
    }

    /// Whether its Streamable HTTP server gave it a session.
    pub(crate) fn keeps_sessions(&self) -> bool {
        self.keeps_sessions
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Calls started and not yet finished.
    pub fn calls_in_flight(&self) -> usize {
        self.calls.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Marks it replaced by a reload: it takes no part in metrics any more.
    pub fn retire(&self) {
        self.retired
            .store(true, std::sync::atomic::Ordering::Release);
    }

    fn is_retired(&self) -> bool {
        self.retired.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Bounds what its listings may take (before it starts).
    pub fn bound_listings(self: &mut Arc<Self>, bounds: ListingBounds) {
        if let Some(up) = Arc::get_mut(self) {
            up.bounds = bounds;
        }
    }

    /// Whether its pinned tools were last checked without the shared store
    /// (a relisting once the store answers may lift their quarantine).
    pub fn pins_fell_back(&self) -> bool {
        self.pins.as_ref().is_some_and(|p| p.fell_back())
    }

    /// Where its tools' pins are kept, when it is pinned.
    pub fn pins(&self) -> Option<&Arc<pins::PinStore>> {
        self.pins.as_ref()
    }

    /// The mode of its `auth`, when it has one (as audit lines name it).
    pub fn auth_mode(&self) -> Option<&'static str> {
        self.auth_mode
    }

    /// Notes the mode of its `auth` (before it starts).
    pub fn authenticate(self: &mut Arc<Self>, mode: &'static str) {
        if let Some(up) = Arc::get_mut(self) {
            up.auth_mode = Some(mode);
        }
    }

    /// Keeps the credential its links send (set once, as it starts).
    pub(crate) fn hold_credentials(&self, credentials: Arc<credentials::Credentials>) {
        let _ = self.credentials.set(credentials);
    }

    /// How many credentials have been obtained for it (see
    /// `Credentials::fetches`): 0 before any, or without `auth`.
    pub fn credential_fetches(&self) -> u64 {
        self.credentials.get().map_or(0, |c| c.fetches())
    }

    /// Pins this upstream's tool definitions in `store` (before it starts).
    pub fn pin(self: &mut Arc<Self>, store: Arc<pins::PinStore>) {
        if let Some(up) = Arc::get_mut(self) {
            up.pins = Some(store);
        }
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

    /// Namespaced ids of resources the upstream said changed (`mcp/resourceDidChange`).
    pub fn subscribe_changes(&self) -> broadcast::Receiver<(Option<Arc<str>>, Arc<str>)> {
        self.changes.subscribe()
    }

    /// The upstream's (and its children's) `notifications/tasks/status`,
    /// as they sent them, each with the incarnation that sent it.
    pub fn subscribe_task_statuses(&self) -> broadcast::Receiver<(Arc<str>, JsonBuf)> {
        self.task_statuses.subscribe()
    }

    /// A task's status the upstream announced (no one listening is no error).
    pub(super) fn task_status(&self, params: Option<Json<'_>>) {
        if let Some(params) = params {
            let _ = self
                .task_statuses
                .send((self.incarnation(), params.to_buf()));
        }
    }

    /// Its current incarnation (see the field), with the sessions its
    /// Streamable HTTP server forgot since the handshake: empty before its
    /// first handshake.
    pub fn incarnation(&self) -> Arc<str> {
        let base = read(&self.incarnation);
        match read(&self.link).and_then(|l| l.as_streamable().map(|s| s.renewed())) {
            Some(renewed) if renewed > 0 => format!("{base}.{renewed}").into(),
            _ => base,
        }
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

    /// The live connection, waiting (within the call timeout) while the upstream is starting.
    async fn ready_link(&self) -> Result<Arc<dyn Transport>, CallError> {
        match self.wait_started().await {
            Status::Ready => read(&self.link).ok_or_else(|| CallError::unavailable("not running")),
            // A credential that could not be had says why.
            Status::Down => Err(self
                .refusal()
                .unwrap_or_else(|| CallError::unavailable("not running"))),
            Status::Starting => Err(CallError::unavailable("still starting")),
        }
    }

    /// Calls the tool with these arguments (the agent's text, as sent): the
    /// result in the gateway's own shape, an object whose `output` is the
    /// tool's output, whatever the upstream's protocol.
    /// Where a tenant's call runs is [`Self::instance`]'s to say.
    pub async fn call_tool(
        &self,
        tool: &ToolEntry,
        arguments: Json<'_>,
        reports: Option<&(dyn Fn(progress::Report) + Sync)>,
    ) -> Result<Answer, CallError> {
        match &tool.route {
            Route::ById => {
                // MCP v1.0 has no progress: a caller that asked hears none.
                let params = Params::Execute {
                    tool: &tool.original_id,
                    arguments,
                };
                self.call(Op::CallTool, params).await.map(Answer::Object)
            }
            // Boxed: a call of the handshake era does not carry its state.
            Route::ByName { .. } if self.mc.modern_only() => {
                Box::pin(self.call_in_rounds(tool, arguments, reports)).await
            }
            Route::ByName { name, structured } => {
                let result = match reports {
                    None => {
                        let params = Params::CallTool {
                            name,
                            arguments,
                            progress: None,
                        };
                        self.call(Op::CallTool, params).await?
                    }
                    // Boxed: a call without reports does not carry this one's state.
                    Some(heard) => Box::pin(self.call_reporting(name, arguments, heard)).await?,
                };
                modelcontext::tool_result(result, *structured)
            }
        }
    }

    /// A `tools/call` sent with a progress token of the gateway's own: each
    /// report the upstream sends while the call waits (its progress, its log
    /// lines on the call's own stream) is handed to `heard`, in order, all
    /// of them before the call's answer is returned.
    async fn call_reporting(
        &self,
        name: &str,
        arguments: Json<'_>,
        heard: &(dyn Fn(progress::Report) + Sync),
    ) -> Result<JsonBuf, CallError> {
        let (registered, reports) = self.progress.register();
        let params = Params::CallTool {
            name,
            arguments,
            progress: Some(&registered.token),
        };
        Self::hearing(self.call(Op::CallTool, params), reports, heard).await
    }

    /// `tasks/result` of the upstream's task `task`, with `heard` taking
    /// what the upstream asks on its stream while the task waits for input
    /// (see [`Self::call_reporting`]); without, a plain request.
    pub async fn task_result(
        &self,
        task: &str,
        heard: Option<&(dyn Fn(progress::Report) + Sync)>,
    ) -> Result<JsonBuf, CallError> {
        let op = Op::Task(TaskOp::Result);
        let Some(heard) = heard else {
            let params = Params::TaskResult {
                task,
                progress: None,
            };
            return self.call(op, params).await;
        };
        let (registered, reports) = self.progress.register();
        let params = Params::TaskResult {
            task,
            progress: Some(&registered.token),
        };
        Self::hearing(self.call(op, params), reports, heard).await
    }

    /// Awaits `call`, handing `heard` each report as it comes, all of them
    /// before the answer is returned.
    async fn hearing(
        call: impl std::future::Future<Output = Result<JsonBuf, CallError>>,
        mut reports: progress::Heard,
        heard: &(dyn Fn(progress::Report) + Sync),
    ) -> Result<JsonBuf, CallError> {
        tokio::pin!(call);
        let answer = loop {
            tokio::select! {
                biased;
                Some(report) = reports.recv() => heard(report),
                answer = &mut call => break answer,
            }
        };
        // Reports the reader handed over before the answer came.
        while let Some(report) = reports.try_recv() {
            heard(report);
        }
        answer
    }

    /// The table of calls waiting for progress, which the upstream's links
    /// hand its `notifications/progress` to as they hear them.
    pub fn progress(&self) -> &Arc<progress::Progress> {
        &self.progress
    }

    /// The upstream's own name (or uri) for a definition of this kind, from
    /// the original id the catalog holds it by: what a face calls it. An MCP
    /// v1.0 upstream's own is that id; `None` when it is not one of this kind.
    pub fn own_key(&self, kind: Kind, original: &str) -> Option<String> {
        match self.dialect() {
            Dialect::ModelContext => crate::modelcontext::key_of(kind, original),
            Dialect::V1 => Some(original.to_owned()),
        }
    }

    /// Whether it lists prompts and resource templates of its own shape
    /// (prompts with arguments, uri templates), which a face that can carry
    /// them lists as the upstream did rather than from the catalog.
    pub fn lists_its_own(&self) -> bool {
        self.dialect() == Dialect::ModelContext
    }

    /// The prompts an upstream of the Model Context Protocol last listed, as
    /// it listed them, arguments and all (none for an MCP v1.0 upstream).
    pub fn own_prompts(&self) -> Arc<Vec<serde_json::Map<String, serde_json::Value>>> {
        match self.dialect() {
            Dialect::ModelContext => self.mc.own_prompts(),
            Dialect::V1 => Arc::default(),
        }
    }

    /// The resource templates an upstream of the Model Context Protocol last
    /// listed, as it listed them (none for an MCP v1.0 upstream).
    pub fn own_templates(&self) -> Arc<Vec<serde_json::Map<String, serde_json::Value>>> {
        match self.dialect() {
            Dialect::ModelContext => self.mc.own_templates(),
            Dialect::V1 => Arc::default(),
        }
    }

    /// Whether it answers `completion/complete` (an upstream of the Model
    /// Context Protocol that declared `completions`).
    pub fn completes(&self) -> bool {
        self.dialect() == Dialect::ModelContext && self.mc.completes()
    }

    /// What it declared of the 2025-11-25 revision's tasks (none for MCP v1.0).
    pub fn tasks(&self) -> crate::modelcontext::TaskCaps {
        match self.dialect() {
            Dialect::ModelContext => self.mc.tasks(),
            Dialect::V1 => crate::modelcontext::TaskCaps::default(),
        }
    }

    /// Whether a 2026-07-28 client's calls reach it in that revision: a
    /// Streamable HTTP upstream of the protocol that takes it (not one
    /// whose calls run on a child per session).
    pub fn speaks_stateless(&self) -> bool {
        self.dialect() == Dialect::ModelContext && !self.runs_children() && self.mc.stateless()
    }

    /// Whether its requests during a call can be told to be that call's: a
    /// Streamable HTTP upstream of the protocol (each call's requests come
    /// on its own stream), not one run as a child per session.
    pub fn asks_during_calls(&self) -> bool {
        self.dialect() == Dialect::ModelContext
            && !self.runs_children()
            && read(&self.link).is_some_and(|link| link.as_streamable().is_some())
    }

    /// Whether any upstream at all may log during calls (see
    /// [`Self::logs_during_calls`]): `false` until one declared `logging`.
    pub fn some_may_log() -> bool {
        modelcontext::SOME_UPSTREAM_LOGS.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether its log lines during a call can be told to be that call's
    /// (see [`Self::asks_during_calls`]), and it declared it logs.
    pub fn logs_during_calls(&self) -> bool {
        self.dialect() == Dialect::ModelContext && self.mc.logs() && self.asks_during_calls()
    }

    /// `tools/call` of a 2026-07-28 client sent in that revision: the
    /// client's retry of an `input_required` round carries its
    /// `inputResponses` and the upstream's own `requestState` on, and only
    /// the capabilities the client declared that the upstream may use in
    /// such a round (elicitation, sampling, roots) are declared for it.
    /// With `reports`, the upstream's progress and log lines of the call
    /// are handed over as they come (see [`Self::call_reporting`]).
    pub async fn call_stateless(
        &self,
        tool: &ToolEntry,
        call: &StatelessCall<'_>,
        reports: Option<&(dyn Fn(progress::Report) + Sync)>,
    ) -> Result<Round, CallError> {
        let Route::ByName { name, structured } = &tool.route else {
            return Err(CallError::protocol("MCP v1.0 has no 2026-07-28 revision"));
        };
        let (registered, heard_reports) = match reports {
            Some(_) => {
                let (registered, heard) = self.progress.register();
                (Some(registered), Some(heard))
            }
            None => (None, None),
        };
        let token = registered.as_ref().map(|r| &*r.token);
        let params = Params::Stateless {
            params: StatelessBody::Call(call),
            name,
            token,
            headers: call.mirrored,
        };
        let answer = match (reports, heard_reports) {
            (Some(heard), Some(reports)) => {
                Self::hearing(self.call(Op::CallTool, params), reports, heard).await?
            }
            _ => self.call(Op::CallTool, params).await?,
        };
        if modelcontext::input_required(&answer) {
            return Ok(Round::InputRequired(answer));
        }
        modelcontext::tool_result(answer, *structured).map(Round::Done)
    }

    /// `tools/call` of a tool the upstream runs as a task, with the
    /// client's `task` params (its requested `ttl`): the upstream's
    /// `CreateTaskResult` as it gave it. Tasks outlive the session that
    /// created them, so they run on the upstream's own link, never on a
    /// session's child.
    pub async fn create_task(
        &self,
        tool: &ToolEntry,
        arguments: Json<'_>,
        task: Json<'_>,
    ) -> Result<JsonBuf, CallError> {
        let Route::ByName { name, .. } = &tool.route else {
            return Err(CallError::protocol("MCP v1.0 has no tasks"));
        };
        let name = serde_json::to_string(name).unwrap_or_default();
        let params = format!(
            r#"{{"name":{name},"arguments":{},"task":{}}}"#,
            arguments.get(),
            task.get()
        );
        let params: Box<RawValue> = serde_json::from_str(&params)
            .map_err(|_| CallError::protocol("the gateway wrote params that are not JSON"))?;
        self.call(Op::CallTool, Params::Json((&*params).into()))
            .await
    }

    /// One of the task requests (`tasks/get`, ...) with these params.
    pub async fn task_request(&self, op: TaskOp, params: Json<'_>) -> Result<JsonBuf, CallError> {
        self.call(Op::Task(op), Params::Json(params)).await
    }

    /// `completion/complete` with these params (the upstream's own names
    /// in its `ref`): its result as the upstream gave it.
    pub async fn complete(&self, params: Json<'_>) -> Result<JsonBuf, CallError> {
        self.call(Op::Complete, Params::Json(params)).await
    }

    /// `resources/read` of one of this upstream's uris, now: its result as the upstream gave it.
    pub async fn read_resource(&self, uri: &str) -> Result<JsonBuf, CallError> {
        let params = crate::modelcontext::uri_params(uri);
        let params: &serde_json::value::RawValue = serde_json::from_str(&params)
            .map_err(|_| CallError::protocol("the gateway wrote params that are not JSON"))?;
        self.call(Op::ReadResource, Params::Json(params.into()))
            .await
    }

    /// `prompts/get` of one of [`Self::own_prompts`] with the client's
    /// arguments: the upstream's result as it sent it.
    pub async fn get_prompt(&self, name: &str, arguments: Json<'_>) -> Result<JsonBuf, CallError> {
        self.call(
            Op::GetPrompt,
            Params::CallTool {
                name,
                arguments,
                progress: None,
            },
        )
        .await
    }

    /// Sends `op` with the upstream's timeout, counting the outcome.
    pub async fn call(&self, op: Op, params: Params<'_>) -> Result<JsonBuf, CallError> {
        let method = self.dialect().method(op);
        // A server of the 2026-07-28 revision alone takes every request in
        // that revision's envelope.
        let enveloped;
        let params = match self.mc.modern_only() && params.stateless().is_none() {
            false => params,
            true => {
                enveloped = Enveloped::of(method, params)?;
                enveloped.params(params.token())?
            }
        };
        let started = Instant::now();
        let in_flight = &self.hot().in_flight;
        in_flight.inc();
        self.calls.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        // Decremented however the call ends: answered, failed, timed out, or cancelled (dropped).
        let _in_flight = scopeguard(move || {
            in_flight.dec();
            self.calls.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        });
        // One clock read for the call's duration and its deadline.
        let deadline = tokio::time::Instant::from_std(started) + self.timeout;
        // The request's trace context goes out in its `_meta` (and an HTTP
        // link's headers).
        let traced = crate::telemetry::traces::client(method, params.name(), &self.name);
        let inner = params;
        let params = match &traced {
            Some(trace) => Params::Traced {
                params: &inner,
                trace,
            },
            None => inner,
        };
        // Made where it is awaited: a future bound to a name first would be
        // moved into place, a copy of the whole call's state.
        let result = || async {
            let _slot = match &self.slots {
                Some(slots) => Some(slots.enter(deadline).await?),
                None => None,
            };
            let link = self.ready_link().await?;
            // HTTP links are awaited in place: no boxed future to allocate
            // (their futures are small, so copying them with their callers'
            // is cheap). They keep the deadline themselves, with a timer per
            // pooled connection.
            if let Some(http) = link.as_http() {
                return http.call(method, params, started, Some(deadline)).await;
            }
            if let Some(streamable) = link.as_streamable() {
                return streamable
                    .call(method, params, started, Some(deadline))
                    .await;
            }
            tokio::time::timeout_at(deadline, link.request(method, params))
                .await
                .unwrap_or(Err(CallError::Timeout))
        };
        let result = match traced.as_ref().and_then(|t| t.span()) {
            None => result().await,
            // Boxed: a call with no span of its own to run in does not
            // carry the state of one that has.
            Some(cx) => {
                use opentelemetry::trace::FutureExt as _;
                let result = Box::pin(result().with_context(cx.clone())).await;
                crate::telemetry::traces::end(cx, result.as_ref().err().map(CallError::outcome));
                result
            }
        };
        if let Err(e) = &result {
            if let CallError::Unavailable(_) = e {
                self.suspect.notify_one();
            }
            // The gateway's words only: an upstream's own error or failed
            // tool is its answer, not a failure of the upstream.
            if let CallError::Unavailable(_) | CallError::Timeout | CallError::Protocol(_) = e {
                self.note_failure(&format!("{} failed: {e}", method));
            }
        }
        let seconds = started.elapsed().as_secs_f64();
        let labels = [&*self.name, method];
        match (&result, op) {
            (Ok(_), Op::CallTool) => {
                let hot = self.hot();
                hot.execute_ok.inc();
                hot.execute_seconds.observe(seconds);
            }
            _ => {
                let outcome = result.as_ref().map_or_else(CallError::outcome, |_| "ok");
                self.metrics
                    .upstream_calls
                    .with_label_values(&[labels[0], labels[1], outcome])
                    .inc();
                self.metrics
                    .upstream_seconds
                    .with_label_values(&labels)
                    .observe(seconds);
            }
        }
        result
    }

    /// Handshake over a new connection, then fill the catalog, then serve.
    pub async fn connect(&self, link: Arc<dyn Transport>) -> Result<(), CallError> {
        let mut nonce = [0u8; 12];
        let _ = getrandom::fill(&mut nonce);
        let incarnation: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
        // Before the handshake: no answer of the new process is ever
        // read under the old one's incarnation.
        write(&self.incarnation, Arc::from(incarnation));
        let caps = match self.dialect() {
            Dialect::V1 => v1::handshake(self, &*link).await?,
            Dialect::ModelContext => self.mc.handshake(self, &*link).await?,
        };
        write(&self.capabilities, Some(caps));
        self.keeps_sessions.store(
            link.as_streamable().is_some_and(|l| l.has_session()),
            std::sync::atomic::Ordering::Release,
        );
        if let Some(tenant) = &self.tenant {
            // A child serves calls: the upstream's own process lists. A
            // Streamable HTTP session is ready once its stream is (its
            // supervisor says so).
            let streamable = link.as_streamable().is_some();
            write(&self.link, Some(link));
            if !streamable {
                self.mark_ready();
            }
            tracing::debug!(upstream = %self.name, tenant = %tenant, "a tenant's child is connected");
            return Ok(());
        }
        self.refresh_with(&*link, caps).await;
        write(&self.link, Some(link));
        write(&self.problem, None);
        self.set_status(Status::Ready);
        self.listings_may_have_changed();
        self.metrics
            .upstream_up
            .with_label_values(&[&self.name])
            .set(1);
        // What it offers, as listed: a kind it does not offer counts 0.
        let listed = {
            let catalog = self.catalog.read().unwrap_or_else(PoisonError::into_inner);
            let mut listed = [0; 3];
            for kind in Kind::ALL {
                listed[kind.index()] = catalog.listing(kind).count;
            }
            listed
        };
        tracing::info!(
            upstream = %self.name,
            protocol = self.dialect().as_str(),
            tools = listed[Kind::Tool.index()],
            resources = listed[Kind::Resource.index()],
            prompts = listed[Kind::Prompt.index()],
            "upstream ready"
        );
        Ok(())
    }

    /// Returns when a call has found the upstream unreachable since the last time.
    pub(crate) async fn suspected(&self) {
        self.suspect.notified().await;
    }

    /// The connection is gone: calls fail fast until the next `connect`.
    pub fn disconnect(&self) {
        write(&self.link, None);
        self.set_status(Status::Down);
        self.listings_may_have_changed();
        if self.is_retired() || self.is_child() {
            // A reload replaced it: its successor owns the upstream's series now.
            return;
        }
        self.metrics
            .upstream_up
            .with_label_values(&[&self.name])
            .set(0);
    }

    /// Notes that a listing being read may be kept for `ttl` at most.
    pub(super) fn listing_kept_for(&self, ttl: Duration) {
        let mut kept = self
            .relist
            .ttl
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        kept.0 = Some(kept.0.map_or(ttl, |t| t.min(ttl)));
    }

    /// Re-reads every declared listing and swaps the catalog. A listing that fails
    /// to load keeps its previous contents. A listing whose server said how
    /// long it may be kept (`ttlMs`) is read again once that is over.
    async fn refresh_with(&self, link: &dyn Transport, caps: Capabilities) {
        self.relist
            .ttl
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .0 = None;
        let mut fresh = Vec::new();
        for kind in Kind::ALL {
            let method = kind.list_method();
            if !caps.allows(method) {
                continue;
            }
            if self.dialect() == Dialect::ModelContext {
                if let Some(built) = self.mc.list(self, link, kind).await {
                    self.admit_listing(kind, built, &mut fresh).await;
                }
                continue;
            }
            if let Some(built) = v1::list(self, link, kind).await {
                self.admit_listing(kind, built, &mut fresh).await;
            }
        }
        let next = self.catalog().with(fresh);
        for kind in Kind::ALL {
            self.metrics
                .definitions_listed
                .with_label_values(&[&self.name, kind.as_str()])
                .set(next.listing(kind).count as i64);
        }
        write(&self.catalog, next);
        self.listings_may_have_changed();
        let mut kept = self
            .relist
            .ttl
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        kept.1 = kept.0.map(|ttl| Instant::now() + ttl.max(MIN_LISTING_TTL));
        drop(kept);
        // The relister waits for the new deadline.
        self.relist.wake.notify_one();
    }

    /// Pins, logs and counts a freshly built listing, and queues it for the catalog.
    async fn admit_listing(
        &self,
        kind: Kind,
        mut built: catalog::Built,
        fresh: &mut Vec<(Kind, catalog::Built)>,
    ) {
        if kind == Kind::Tool {
            self.apply_pins(&mut built).await;
        }
        // Said once per definition and reason, not at every relisting: a
        // warning for what no client gets, a debug line for what only MCP
        // v1.0's listings leave out.
        let catalog = self.catalog();
        let before = catalog.dropped(kind);
        for d in built.dropped.iter().filter(|d| !before.contains(d)) {
            let id = d.id.as_deref().unwrap_or("");
            if d.v1_only {
                tracing::debug!(upstream = %self.name, kind = kind.as_str(), id, reason = %d.reason, "definition left out of MCP v1.0 listings");
            } else {
                tracing::warn!(upstream = %self.name, kind = kind.as_str(), id, reason = %d.reason, "definition left out of listings");
            }
        }
        self.metrics
            .definitions_dropped
            .with_label_values(&[&self.name, kind.as_str()])
            .inc_by(built.dropped.len() as u64);
        // Moved into the catalog, so sessions can say why a definition is missing.
        fresh.push((kind, built));
    }

    /// Quarantines the tools whose definition matches no pin (see
    /// `pins::record`). If the pins cannot be read or written, every tool is
    /// quarantined: pinning fails closed.
    async fn apply_pins(&self, built: &mut catalog::Built) {
        let Some(store) = &self.pins else { return };
        let seen = std::mem::take(&mut built.seen);
        let quarantined = match store.check_now(&self.name, &seen).await {
            Ok(checked) => checked.quarantined,
            Err(e) => {
                tracing::error!(upstream = %self.name, pins = %store.place(), error = %e, "cannot use the pins; quarantining every tool of this upstream");
                seen.iter()
                    .map(|s| (s.id.clone(), pins::Reason::Changed))
                    .collect()
            }
        };
        for (id, reason) in &quarantined {
            let new = seen
                .iter()
                .find(|s| s.id == *id)
                .map_or("", |s| s.fingerprint.as_str());
            tracing::warn!(upstream = %self.name, tool = %id, reason = reason.as_str(), fingerprint = new, pins = %store.place(), "tool definition matches no pin: quarantined until reviewed (GET /pins on the admin listener, or mcp-gateway pins list)");
        }
        self.metrics
            .definitions_quarantined
            .with_label_values(&[&self.name])
            .set(quarantined.len() as i64);
        let ids = quarantined.into_iter().map(|(id, _)| id).collect();
        built.quarantine(&ids);
    }

    /// Refreshes the catalog unless that was done less than a second ago (or is under way).
    pub async fn refresh_on_demand(&self) {
        let mut last = self.refresh_gate.lock().await;
        if last.is_some_and(|t| t.elapsed() < MIN_REFRESH_INTERVAL) {
            return;
        }
        let (Some(link), Some(caps)) = (read(&self.link), self.capabilities()) else {
            return;
        };
        *last = Some(Instant::now());
        drop(last);
        self.refresh_with(&*link, caps).await;
    }

    /// Handles a notification the upstream sent.
    pub fn on_notification(&self, method: &str, params: Option<Json<'_>>) {
        if self.dialect() == Dialect::ModelContext {
            return self.mc.on_notification(self, method, params);
        }
        v1::on_notification(self, method, params);
    }

    /// Sends later notifications to the store's relay before acting on them.
    pub fn relay_to(&self, relay: Relay) {
        let _ = self.relay.set(relay);
    }

    /// A notification said a listing changed, or the resource with this
    /// original id did: relayed to the other replicas when they share a
    /// store (the relay then asks this one for the relisting, unless another
    /// replica heard the same and speaks for it); acted on here alone when
    /// there is no store or its queue is full, so that nothing is lost.
    fn heard(&self, changed: Option<&str>) {
        if let Some(tenant) = &self.tenant {
            // A tenant's child: what changed in it is that tenant's alone,
            // told to it; the listings are the upstream's own process's.
            let Some(original) = changed else {
                return self.relist_soon(None);
            };
            if let Some(relay) = self.relay.get() {
                let heard = Heard {
                    upstream: self.name.clone(),
                    changed: Some(original.to_owned()),
                    shared: false,
                    tenant: Some(tenant.clone()),
                };
                if relay.to.try_send(heard).is_ok() {
                    return;
                }
            }
            return self.announce_change_to(tenant, original);
        }
        if let Some(relay) = self.relay.get() {
            let heard = Heard {
                upstream: self.name.clone(),
                changed: changed.map(str::to_owned),
                shared: relay.shared,
                tenant: None,
            };
            if relay.to.try_send(heard).is_ok() {
                return;
            }
        }
        self.relist_soon(changed);
    }

    /// Asks for a relisting (a notification said a listing changed) and,
    /// once it is done, the announcement that the resource with this
    /// original id changed. Returns at once: [`Self::relister`] does the work.
    pub(crate) fn relist_soon(&self, changed: Option<&str>) {
        if let Some(original) = changed {
            let mut announce = self
                .relist
                .announce
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if announce.len() < MAX_PENDING_ANNOUNCEMENTS {
                announce.insert(original.to_owned());
            } else if !announce.contains(original) {
                self.metrics
                    .upstream_protocol_errors
                    .with_label_values(&[&self.name])
                    .inc();
            }
        }
        self.relist
            .wanted
            .store(true, std::sync::atomic::Ordering::Release);
        self.relist.wake.notify_one();
    }

    /// Runs the relistings [`Self::relist_soon`] asked for, one at a time,
    /// each announcing the resource changes asked for before it started.
    /// The upstream's supervisor runs it while the connection is served.
    pub(crate) async fn relister(&self) {
        if self.is_child() {
            // The upstream's own relister lists what a child asks for.
            return std::future::pending().await;
        }
        loop {
            let due = self
                .relist
                .ttl
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .1;
            match due {
                Some(due) => tokio::select! {
                    () = self.relist.wake.notified() => {}
                    () = tokio::time::sleep_until(tokio::time::Instant::from_std(due)) => {
                        self.relist.wanted.store(true, std::sync::atomic::Ordering::Release);
                    }
                },
                None => self.relist.wake.notified().await,
            }
            while self
                .relist
                .wanted
                .swap(false, std::sync::atomic::Ordering::AcqRel)
            {
                let announce = std::mem::take(
                    &mut *self
                        .relist
                        .announce
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner),
                );
                let started = Instant::now();
                self.refresh_now().await;
                for original in announce {
                    self.announce_change(&original);
                }
                // Relistings are spaced: a server that says "changed" without
                // end gets a few relistings a second, not one per notification.
                tokio::time::sleep_until(tokio::time::Instant::from_std(started + MIN_RELIST_GAP))
                    .await;
            }
        }
    }

    /// Refreshes the catalog now.
    async fn refresh_now(&self) {
        if let (Some(link), Some(caps)) = (read(&self.link), self.capabilities()) {
            let mut last = self.refresh_gate.lock().await;
            self.refresh_with(&*link, caps).await;
            *last = Some(Instant::now());
        }
    }

    /// Tells `tenant`'s sessions alone that the resource with this original
    /// id changed (in its own child).
    pub fn announce_change_to(&self, tenant: &str, original: &str) {
        let namespaced = crate::protocol::mcpid::namespace(&self.gateway_id, &self.name, original);
        let _ = self.changes.send((Some(tenant.into()), namespaced.into()));
    }

    /// Tells the tenants' sessions that the resource with this original id changed.
    fn announce_change(&self, original: &str) {
        let namespaced = crate::protocol::mcpid::namespace(&self.gateway_id, &self.name, original);
        let _ = self.changes.send((None, namespaced.into()));
    }

    pub(crate) fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn raw(v: Value) -> Box<RawValue> {
        RawValue::from_string(v.to_string()).unwrap()
    }

    #[test]
    fn a_stateless_call_carries_the_round_and_only_the_capabilities_a_round_may_use() {
        let arguments = raw(json!({"a": "x\"y"}));
        let capabilities = raw(json!({
            "elicitation": {"form": {}},
            "roots": {},
            "extensions": {"io.modelcontextprotocol/tasks": {}},
        }));
        let responses = raw(json!({"k": {"action": "accept"}}));
        let level = raw(json!("warning"));
        let call = StatelessCall {
            arguments: Json::from(&*arguments),
            capabilities: Some(Json::from(&*capabilities)),
            log_level: Some(Json::from(&*level)),
            input_responses: Some(Json::from(&*responses)),
            request_state: Some("own \"state\""),
            mirrored: &[],
        };
        let written = |call: &StatelessCall<'_>, name: &str, token: Option<&str>| {
            let mut out = Vec::new();
            call.write(&mut out, name, token, None);
            serde_json::from_slice::<Value>(&out).unwrap()
        };
        let params = written(&call, "tool \"one\"", Some("\"mcp-gateway/7\""));
        assert_eq!(
            params,
            json!({
                "name": "tool \"one\"",
                "arguments": {"a": "x\"y"},
                "inputResponses": {"k": {"action": "accept"}},
                "requestState": "own \"state\"",
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}, "roots": {}},
                    "io.modelcontextprotocol/logLevel": "warning",
                    "progressToken": "mcp-gateway/7",
                },
            })
        );
        let bare = StatelessCall {
            capabilities: None,
            log_level: None,
            input_responses: None,
            request_state: None,
            ..call
        };
        let params = written(&bare, "t", None);
        assert_eq!(
            params["_meta"],
            json!({
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            })
        );
    }
}
