//! The core: a tenant's upstreams behind neutral operations, shaped by
//! neither agent protocol. What a tenant sees (`hello`, a merged `listing` of
//! a kind), a tool called by namespaced id with validation and audit
//! (`execute`), a resource read where a link or template points (`links`),
//! admission against the tenant's limits, and the changes its sessions
//! hear. Its state is its own: the faces (`v1`, `mcp`) hold a handle and
//! ask these operations.

mod audit;
mod budget;
mod cached;
mod curate;
mod execute;
mod held;
mod links;
mod own;
mod place;
mod refused;
mod rounds;
mod task_homes;
mod task_input;
mod tasks;

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use bytes::Bytes;
use dashmap::DashMap;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::dispatch::watch::Announced;
use crate::error::GatewayError;
use crate::metrics::Metrics;
use crate::protocol::{Capabilities, Kind};
use crate::tenant::subscriptions::SubscriptionBudget;
use crate::tenant::{Admission, Refusal, Tenant};
use crate::upstream::{Status, Upstream};

pub use audit::Audit;
pub use cached::{CACHED, with_meta};
pub(in crate::dispatch) use curate::budget_schema;
pub use place::{Place, continues_round};
pub use rounds::RoundIn;
pub use tasks::RELATED_TASK_META;

/// Change notifications a slow session may fall behind by before it misses some.
const CHANGES_BACKLOG: usize = 256;

/// What a reload replaces: the upstreams and the tenants' view of them.
struct State {
    upstreams: HashMap<Arc<str>, Arc<Upstream>, foldhash::fast::RandomState>,
    /// Tenant name → which upstreams it sees (for routing notifications).
    tenants: Vec<Arc<Tenant>>,
}

struct Inner {
    gateway_id: String,
    /// Swapped whole on reload; requests read it without a lock.
    state: ArcSwap<State>,
    /// Per tenant: namespaced ids of resources that changed, for its open
    /// sessions. Kept across reloads, so open sessions keep hearing.
    changes: DashMap<Arc<str>, broadcast::Sender<Announced>>,
    /// Counts what may have changed some tenant's listings: a reload, an
    /// upstream's new catalog or status (see [`watch::Watcher`]).
    listings: tokio::sync::watch::Sender<u64>,
    metrics: Metrics,
    /// The length tool and prompt names keep within where a face shortens
    /// them (`gateway.tool_name_budget`); set once, at start.
    name_budget: std::sync::atomic::AtomicUsize,
    /// The bounds of resource subscriptions (set once, at start).
    subscriptions: std::sync::OnceLock<SubscriptionBudget>,
    /// Seals what clients are handed and give back (set once, at start;
    /// a key of this process's own otherwise).
    sealer: std::sync::OnceLock<crate::seal::Sealer>,
    /// See [`Dispatcher::set_round_lifetime`].
    round_lifetime_ms: std::sync::atomic::AtomicU64,
    /// 2026-07-28 clients' calls held across their rounds (see `held`).
    held: held::HeldCalls,
    /// Tenants' limits held across replicas, with a shared store (set once, at start).
    shared: std::sync::OnceLock<crate::store::limits::SharedLimits>,
    /// Requests of upstreams forwarded to clients, waiting for their answers.
    asks: crate::upstream::asks::Asks,
    /// The tasks each tenant created through this replica.
    tasks: tasks::TaskBook,
    /// Tasks of 2026-07-28 clients whose upstream waits for input.
    task_inputs: task_input::TaskInputs,
    /// Cut results' pages (see `output::spill`).
    spills: crate::output::spill::Spills,
    /// Tenants' cached results (see `crate::cache`).
    results: crate::cache::ResultCache,
}

/// A cheap-clone handle on everything a request needs.
#[derive(Clone)]
pub struct Dispatcher {
    inner: Arc<Inner>,
}

impl Dispatcher {
    pub fn new(
        gateway_id: &str,
        upstreams: Vec<Arc<Upstream>>,
        tenants: &[Arc<Tenant>],
        metrics: Metrics,
    ) -> Self {
        let d = Self {
            inner: Arc::new(Inner {
                gateway_id: gateway_id.to_owned(),
                state: ArcSwap::from_pointee(State {
                    upstreams: HashMap::default(),
                    tenants: Vec::new(),
                }),
                changes: DashMap::new(),
                listings: tokio::sync::watch::Sender::new(0),
                name_budget: std::sync::atomic::AtomicUsize::new(
                    crate::modelcontext::names::DEFAULT_BUDGET,
                ),
                subscriptions: std::sync::OnceLock::new(),
                sealer: std::sync::OnceLock::new(),
                round_lifetime_ms: std::sync::atomic::AtomicU64::new(300_000),
                held: Default::default(),
                shared: std::sync::OnceLock::new(),
                asks: Default::default(),
                tasks: Default::default(),
                task_inputs: Default::default(),
                spills: crate::output::spill::Spills::new(metrics.clone()),
                results: crate::cache::ResultCache::new(metrics.clone()),
                metrics,
            }),
        };
        d.replace(upstreams, tenants);
        d
    }

    /// Requests of upstreams forwarded to clients, waiting for their answers.
    pub fn asks(&self) -> &crate::upstream::asks::Asks {
        &self.inner.asks
    }

    /// Swaps in a new set of upstreams and tenants (a config reload). Requests
    /// already running keep what they started with. Nobody hears of it until
    /// [`Self::listings_may_have_changed`]: a reload announces it once the
    /// keys are swapped too, so a stream woken by it sees the new keys.
    pub fn replace(&self, upstreams: Vec<Arc<Upstream>>, tenants: &[Arc<Tenant>]) {
        let metrics = &self.inner.metrics;
        for t in tenants {
            metrics.sessions_open.with_label_values(&[&t.name]);
            metrics.audit_lines_dropped.with_label_values(&[&t.name]);
            metrics.results_truncated.with_label_values(&[&t.name]);
            metrics.spill_bytes.with_label_values(&[&t.name]);
            metrics.result_cache_entries.with_label_values(&[&t.name]);
            for outcome in ["hit", "miss"] {
                metrics.result_cache.with_label_values(&[&t.name, outcome]);
            }
            for reason in ["rate_limited", "concurrency_limited"] {
                metrics
                    .requests_limited
                    .with_label_values(&[&t.name, reason]);
            }
        }
        self.inner.state.store(Arc::new(State {
            upstreams: upstreams.into_iter().map(|u| (u.name.clone(), u)).collect(),
            tenants: tenants.to_vec(),
        }));
    }

    /// Hears whenever some tenant's listings may have changed (from now on).
    pub(in crate::dispatch) fn listings_changed(&self) -> tokio::sync::watch::Receiver<u64> {
        let mut rx = self.inner.listings.subscribe();
        rx.mark_unchanged();
        rx
    }

    /// Wakes whoever watches listings: some tenant's may have changed.
    pub fn listings_may_have_changed(&self) {
        self.inner.listings.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Sets the names' length budget (before the face serves a request).
    pub fn set_name_budget(&self, budget: usize) {
        self.inner
            .name_budget
            .store(budget, std::sync::atomic::Ordering::Relaxed);
    }

    /// The length a face keeps the tool and prompt names it makes within.
    pub fn name_budget(&self) -> usize {
        self.inner
            .name_budget
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Sets the bounds of resource subscriptions (before the faces serve a request).
    pub fn set_subscription_budget(&self, budget: SubscriptionBudget) {
        let _ = self.inner.subscriptions.set(budget);
    }

    /// The bounds of resource subscriptions, and what each tenant holds.
    pub fn subscription_budget(&self) -> &SubscriptionBudget {
        self.inner
            .subscriptions
            .get_or_init(SubscriptionBudget::default)
    }

    /// Sets the key what clients are handed is sealed with (before the faces serve a request).
    pub fn set_sealer(&self, sealer: crate::seal::Sealer) {
        let _ = self.inner.sealer.set(sealer);
    }

    /// How long a client has to retry an `input_required` round (and an
    /// upstream's request forwarded to a client waits for its answer):
    /// `gateway.server_request_timeout_ms`.
    pub fn set_round_lifetime(&self, lifetime: std::time::Duration) {
        let ms = u64::try_from(lifetime.as_millis()).unwrap_or(u64::MAX);
        self.inner
            .round_lifetime_ms
            .store(ms, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn round_lifetime(&self) -> std::time::Duration {
        std::time::Duration::from_millis(
            self.inner
                .round_lifetime_ms
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// 2026-07-28 clients' calls held across their rounds.
    pub fn held(&self) -> &held::HeldCalls {
        &self.inner.held
    }

    /// The sealer of what clients are handed and give back.
    pub fn sealer(&self) -> &crate::seal::Sealer {
        self.inner.sealer.get_or_init(|| {
            let mut key = [0u8; 32];
            let _ = getrandom::fill(&mut key);
            crate::seal::Sealer::new(&crate::config::KeyDigest::of(&key))
        })
    }

    /// The tenants of the configuration in force, in its order.
    pub fn tenants(&self) -> Vec<Arc<Tenant>> {
        self.inner.state.load().tenants.clone()
    }

    /// The tenant of this name as the configuration in force has it.
    pub fn tenant_named(&self, name: &str) -> Option<Arc<Tenant>> {
        let state = self.inner.state.load();
        state.tenants.iter().find(|t| &*t.name == name).cloned()
    }

    pub fn gateway_id(&self) -> &str {
        &self.inner.gateway_id
    }

    /// Changed resources (namespaced ids) of the tenant's upstreams, and
    /// its tasks' statuses, as they happen.
    pub fn subscribe_changes(&self, tenant: &Tenant) -> Option<broadcast::Receiver<Announced>> {
        let sender = self
            .inner
            .changes
            .entry(tenant.name.clone())
            .or_insert_with(|| broadcast::Sender::new(CHANGES_BACKLOG));
        Some(sender.subscribe())
    }

    /// Forwards `up`'s `mcp/resourceDidChange` to the tenants that see it (as
    /// the current config says), and to no other, until `stop`.
    pub fn spawn_change_fanout(
        &self,
        up: &Arc<Upstream>,
        tasks: &TaskTracker,
        stop: CancellationToken,
    ) {
        let mut rx = up.subscribe_changes();
        let mut listings = up.subscribe_listings();
        let mut statuses = up.subscribe_task_statuses();
        let name = up.name.clone();
        let this = self.clone();
        tasks.spawn(async move {
            loop {
                let id = tokio::select! {
                    changed = listings.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        this.listings_may_have_changed();
                        continue;
                    }
                    status = statuses.recv() => match status {
                        Ok((incarnation, params)) => {
                            this.announce_task_status(&name, &incarnation, &params).await;
                            continue;
                        }
                        Err(broadcast::error::RecvError::Lagged(n)) => {
                            tracing::warn!(skipped = n, "task status notifications dropped: too many at once");
                            continue;
                        }
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                    r = rx.recv() => match r {
                        Ok(id) => id,
                        Err(broadcast::error::RecvError::Lagged(n)) => {
                            tracing::warn!(skipped = n, "resource change notifications dropped: too many at once");
                            continue;
                        }
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                    _ = stop.cancelled() => return,
                };
                let (only, id) = id;
                let state = this.inner.state.load();
                let concerned = |t: &Tenant| t.sees(&name) && only.as_ref().is_none_or(|o| *o == t.name);
                for t in state.tenants.iter().filter(|t| concerned(t)) {
                    if let Some(sender) = this.inner.changes.get(&t.name) {
                        // No open session is not an error.
                        let _ = sender.send(Announced::Resource(id.clone()));
                    }
                }
            }
        });
    }

    /// For `$/logTrace`: which of the tenant's upstreams a listing of `kind`
    /// drew on, which were down, and what was left out and why.
    pub fn listing_report(&self, tenant: &Tenant, kind: Kind) -> String {
        let mut parts = Vec::new();
        for up in self.upstreams_of(tenant) {
            if up.status() != Status::Ready {
                parts.push(format!(
                    "upstream {} is {}, not listed",
                    up.name,
                    up.status().as_str()
                ));
                continue;
            }
            if !up
                .capabilities()
                .is_some_and(|c| c.allows(kind.list_method()))
            {
                continue;
            }
            let catalog = up.catalog();
            parts.push(format!(
                "upstream {}: {} listed",
                up.name,
                catalog.listing(kind).count
            ));
            for d in catalog.dropped(kind) {
                parts.push(format!(
                    "upstream {} left out {} {}: {}",
                    up.name,
                    kind.as_str(),
                    d.id.as_deref().unwrap_or("(no mcpId)"),
                    d.reason
                ));
            }
        }
        parts.join("; ")
    }

    pub fn upstream(&self, name: &str) -> Option<Arc<Upstream>> {
        self.inner.state.load().upstreams.get(name).cloned()
    }

    /// Every configured upstream, by name.
    pub fn upstreams(&self) -> Vec<Arc<Upstream>> {
        let mut all: Vec<_> = self
            .inner
            .state
            .load()
            .upstreams
            .values()
            .cloned()
            .collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Holds tenants' limits across replicas through this store (before the faces serve a request).
    pub fn share_limits(&self, shared: crate::store::limits::SharedLimits) {
        let _ = self.inner.shared.set(shared);
    }

    /// The limits held with the other replicas, when there is a store.
    pub fn shared_limits(&self) -> Option<&crate::store::limits::SharedLimits> {
        self.inner.shared.get()
    }

    /// Tenants' cached results, kept here or in the shared store.
    pub fn results(&self) -> &crate::cache::ResultCache {
        &self.inner.results
    }

    /// Cut results' pages, kept here or in the shared store.
    pub fn spills(&self) -> &crate::output::spill::Spills {
        &self.inner.spills
    }

    /// The shared store, when there is one.
    pub fn store(&self) -> Option<&crate::store::Store> {
        self.inner.shared.get().map(|s| s.store())
    }

    /// Admits `n` requests of `tenant` against its limits, counting
    /// refusals: this replica's own, or with a shared store every
    /// replica's together (no store round trip on the usual path).
    pub async fn admit(&self, tenant: &Tenant, n: u32) -> Result<Admission, GatewayError> {
        let admitted = match self.inner.shared.get() {
            Some(shared) => shared.admit(tenant, n).await,
            None => tenant.admit(n),
        };
        admitted
            .map(|a| a.counted(tenant, n))
            .map_err(|refusal| self.refused(tenant, refusal))
    }

    /// Admits one request of `tenant` against its rate limit only (see
    /// [`Tenant::admit_rate`]), counting a refusal.
    pub async fn admit_rate(&self, tenant: &Tenant) -> Result<(), GatewayError> {
        let admitted = match self.inner.shared.get() {
            Some(shared) => shared.admit_rate(tenant).await,
            None => tenant.admit_rate(),
        };
        admitted.map_err(|refusal| self.refused(tenant, refusal))
    }

    fn refused(&self, tenant: &Tenant, refusal: Refusal) -> GatewayError {
        self.inner
            .metrics
            .requests_limited
            .with_label_values(&[&tenant.name, refusal.reason()])
            .inc();
        match refusal {
            Refusal::StoreDown => GatewayError::StoreDown,
            Refusal::Rate { .. } | Refusal::Concurrency => GatewayError::OverCapacity {
                reason: match refusal {
                    Refusal::Rate { .. } => "rate limit",
                    _ => "concurrency limit",
                },
                retry_after_secs: refusal.retry_after_secs(),
            },
        }
    }

    /// The upstreams a tenant sees, in its configured order.
    pub(in crate::dispatch) fn upstreams_of(&self, tenant: &Tenant) -> Vec<Arc<Upstream>> {
        let state = self.inner.state.load();
        tenant
            .upstreams
            .iter()
            .filter_map(|n| state.upstreams.get(n).cloned())
            .collect()
    }

    /// Runs `f` over the upstreams a tenant sees, in its configured order,
    /// without gathering them (a face's hot path walks them once).
    pub(in crate::dispatch) fn visit_upstreams_of<R>(
        &self,
        tenant: &Tenant,
        f: impl FnOnce(&mut dyn Iterator<Item = &Arc<Upstream>>) -> R,
    ) -> R {
        let state = self.inner.state.load();
        let mut upstreams = tenant
            .upstreams
            .iter()
            .filter_map(|n| state.upstreams.get(n));
        f(&mut upstreams)
    }

    /// On a freshly started gateway, waits for the tenant's upstreams that are
    /// still on their first start (each within its handshake's time), so
    /// that the first `initialize` or listing reflects them. Down upstreams
    /// are not waited for.
    pub(in crate::dispatch) async fn wait_for_starting(&self, tenant: &Tenant) {
        // Nearly always, nothing is: found without gathering the upstreams.
        let any = {
            let state = self.inner.state.load();
            tenant.upstreams.iter().any(|n| {
                state.upstreams.get(n).is_some_and(|u| {
                    // One that acts for the user lists with this caller's
                    // credential when it has no listing.
                    u.list_for(&tenant.name, tenant.user.as_ref());
                    u.status() == Status::Starting
                })
            })
        };
        if !any {
            return;
        }
        let starting = self
            .upstreams_of(tenant)
            .into_iter()
            .filter(|u| u.status() == Status::Starting)
            .map(|u| async move { u.wait_first_start().await });
        futures_util::future::join_all(starting).await;
    }

    /// The union of what the tenant's upstreams declared at their last handshake.
    pub fn capabilities(&self, tenant: &Tenant) -> Capabilities {
        self.upstreams_of(tenant)
            .into_iter()
            .filter_map(|u| u.capabilities())
            .fold(Capabilities::default(), Capabilities::union)
    }

    /// What the tenant's upstreams offer, once those still on their first
    /// start have finished it (each within its own timeout).
    pub async fn hello(&self, tenant: &Tenant) -> Capabilities {
        self.wait_for_starting(tenant).await;
        self.capabilities(tenant)
    }

    /// The merged listing of one kind, as [`Self::listing`], once the
    /// tenant's upstreams still on their first start have finished it.
    pub async fn listing_when_started(&self, tenant: &Tenant, kind: Kind) -> Vec<Bytes> {
        self.wait_for_starting(tenant).await;
        self.listing(tenant, kind)
    }

    /// The merged listing of one kind: every ready upstream's cached
    /// definitions (in the gateway's own shape, pre-serialized), separated by
    /// commas. A down upstream is left out; the listing itself never fails.
    /// The parts share the catalogs' buffers: a listing costs what writing its
    /// bytes costs, and nothing is copied to build it.
    pub fn listing(&self, tenant: &Tenant, kind: Kind) -> Vec<Bytes> {
        self.listing_where(tenant, kind, None)
    }

    /// [`Self::listing`] of the tools `keep` matches alone (a search
    /// listing's `always`), when given.
    pub fn listing_where(
        &self,
        tenant: &Tenant,
        kind: Kind,
        keep: Option<&dyn Fn(&str) -> bool>,
    ) -> Vec<Bytes> {
        let catalogs: Vec<_> = self
            .upstreams_of(tenant)
            .into_iter()
            .filter(|u| u.status() == Status::Ready)
            .filter(|u| {
                u.capabilities()
                    .is_some_and(|c| c.allows(kind.list_method()))
            })
            .map(|u| u.catalog())
            .collect();
        let mut parts = Vec::with_capacity(2 * catalogs.len() + 2);
        let mut empty = true;
        let mut push = |parts: &mut Vec<Bytes>, part: Bytes| {
            if !empty {
                parts.push(Bytes::from_static(b","));
            }
            empty = false;
            parts.push(part);
        };
        // Tools a tenant's policy hides are left out item by item; otherwise
        // each upstream's listing is written out whole, as pre-serialized.
        // A tool curation renames or describes anew is written again.
        let tools = kind == Kind::Tool;
        let policy = tenant.policy.as_ref().filter(|_| tools);
        let curation = tenant.curation.as_ref().filter(|_| tools);
        for catalog in &catalogs {
            let listing = catalog.listing(kind);
            if listing.count == 0 {
                continue;
            }
            let bytes = catalog.listing_bytes(kind);
            if policy.is_none() && curation.is_none() && keep.is_none() {
                push(&mut parts, bytes);
                continue;
            }
            for (id, range) in &listing.items {
                if !policy.is_none_or(|p| p.allows(id)) || !keep.is_none_or(|k| k(id)) {
                    continue;
                }
                match curation.filter(|c| c.renders_v1(id)) {
                    Some(c) => {
                        let text = &listing.json[range.clone()];
                        let budgeted = c.budget(id).is_some();
                        push(&mut parts, curate::v1_entry(text, c.over(id), budgeted));
                    }
                    None => push(&mut parts, bytes.slice(range.clone())),
                }
            }
        }
        parts
    }
}
