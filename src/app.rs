//! The composition root: builds every part from a `Config`, runs the listeners
//! and upstream supervisors, and shuts them down in order.
//!
//! Longer than most files: the composition root. Starting, reloading and
//! shutting down touch every part and are read in the order they run, each
//! step a function of its own.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

use arc_swap::ArcSwap;

use crate::config::KeyDigest;
use crate::config::{Config, GatewaySettings, TransportSpec, UpstreamSpec};
use crate::dispatch::Dispatcher;
use crate::http::admin::{self, AdminState};
use crate::http::agent::{self, AgentState};
use crate::http::serve::{ServeOptions, http1, serve};
use crate::metrics::Metrics;
use crate::tenant::KeyStore;
use crate::upstream::{self, Upstream};

/// How long upstream supervisors get to stop their children.
const UPSTREAM_STOP_DEADLINE: Duration = Duration::from_secs(10);

/// One running upstream: its spec (to tell whether a reload changes it), its
/// state, and the token that stops its supervisor.
struct Handle {
    spec: UpstreamSpec,
    pins_file: Option<PathBuf>,
    up: Arc<Upstream>,
    stop: CancellationToken,
}

/// Upstreams, their supervisors, and the dispatcher over them: everything but
/// listeners. A reload swaps what changed and leaves the rest running.
pub struct Core {
    pub dispatcher: Dispatcher,
    keys: Arc<ArcSwap<KeyStore>>,
    pub metrics: Metrics,
    settings: GatewaySettings,
    /// The traces settings it started with (a change needs a restart).
    traces: crate::telemetry::traces::TracesFile,
    /// The admin listener's token, swapped by a reload.
    admin_token: Arc<arc_swap::ArcSwapOption<crate::config::KeyDigest>>,
    /// The bound on obtained tokens every upstream's credentials share.
    tokens: Arc<upstream::credentials::TokenBudget>,
    /// The admin console's state (its settings swapped by a reload).
    pub console: Arc<crate::http::console::Console>,
    supervisors: TaskTracker,
    running: Mutex<HashMap<String, Handle>>,
    http_client: Mutex<Option<reqwest::Client>>,
    /// The JWT issuers in force, each with the token that stops its key
    /// refresher; kept across reloads that leave them unchanged, so that
    /// their keys stay cached.
    issuers: Mutex<Vec<(Arc<crate::auth::Issuer>, CancellationToken)>>,
    /// The store replicas share, and where upstreams' change notifications
    /// go for it (see `crate::store::bus`).
    shared: Option<Shared>,
}

/// What a core keeps of the shared store.
struct Shared {
    store: crate::store::Store,
    relay: tokio::sync::mpsc::Sender<upstream::Heard>,
    /// The relay's receiving end, until [`start_on`] starts the relay.
    heard: Mutex<Option<tokio::sync::mpsc::Receiver<upstream::Heard>>>,
}

impl Core {
    /// Starts every upstream's supervisor (children are spawned, handshakes begin).
    pub fn start(config: &Config) -> std::io::Result<Core> {
        let metrics = Metrics::new();
        let dispatcher = Dispatcher::new(&config.gateway.id, Vec::new(), &[], metrics.clone());
        dispatcher.set_name_budget(config.gateway.tool_name_budget);
        dispatcher.set_round_lifetime(config.gateway.server_request_timeout);
        let limits = &config.gateway.limits;
        dispatcher.set_subscription_budget(crate::tenant::subscriptions::SubscriptionBudget::new(
            limits.max_subscription_bytes_per_session,
            limits.max_subscription_bytes_per_tenant,
        ));
        dispatcher.spills().set_max_bytes(limits.max_spill_bytes);
        dispatcher.results().set_max_bytes(limits.max_cache_bytes);
        // The shared store, when there is one: connected (and reconnected) in
        // the background once serving starts; serving never waits for it.
        let shared = match config.gateway.store.clone() {
            Some(settings) => {
                let store = crate::store::Store::new(settings, metrics.clone())
                    .map_err(std::io::Error::other)?;
                dispatcher.share_limits(crate::store::limits::SharedLimits::new(store.clone()));
                dispatcher.spills().share(store.clone());
                dispatcher.results().share(store.clone());
                let (relay, heard) = crate::store::bus::relay_queue();
                Some(Shared {
                    store,
                    relay,
                    heard: Mutex::new(Some(heard)),
                })
            }
            None => None,
        };
        let core = Core {
            dispatcher,
            keys: Arc::new(ArcSwap::from_pointee(KeyStore::default())),
            metrics,
            settings: config.gateway.clone(),
            traces: config.traces.clone(),
            admin_token: Arc::new(arc_swap::ArcSwapOption::from(
                config.gateway.admin_token.map(Arc::new),
            )),
            console: Arc::new(console(config)),
            tokens: upstream::credentials::TokenBudget::new(config.gateway.max_cached_tokens),
            supervisors: TaskTracker::new(),
            running: Mutex::new(HashMap::new()),
            http_client: Mutex::new(None),
            issuers: Mutex::new(Vec::new()),
            shared,
        };
        core.keys.store(Arc::new(core.key_store(config)?));
        let mut running = HashMap::new();
        for spec in &config.upstreams {
            running.insert(spec.name.clone(), core.launch(spec, config)?);
        }
        let upstreams: Vec<_> = running.values().map(|h| h.up.clone()).collect();
        core.dispatcher
            .replace(upstreams, core.keys.load().tenants());
        *lock(&core.running) = running;
        Ok(core)
    }

    /// The HTTP client upstreams and issuers' key fetches share.
    fn http_client(&self) -> std::io::Result<reqwest::Client> {
        let mut slot = lock(&self.http_client);
        Ok(match &*slot {
            Some(c) => c.clone(),
            None => slot
                .insert(upstream::http::client().map_err(std::io::Error::other)?)
                .clone(),
        })
    }

    /// The key set of a configuration: its tenants' API keys, and its JWT
    /// issuers (those already running keep their cached keys; new ones
    /// start fetching theirs, removed ones stop).
    fn key_store(&self, config: &Config) -> std::io::Result<KeyStore> {
        use crate::auth::{Issuer, Issuers, ProtectedResource};
        let mut held = lock(&self.issuers);
        let mut next = Vec::new();
        for spec in &config.auth.issuers {
            if let Some(at) = held.iter().position(|(i, _)| i.spec == *spec) {
                next.push(held.remove(at));
                continue;
            }
            let issuer = Issuer::new(spec.clone(), self.http_client()?);
            let stop = CancellationToken::new();
            self.supervisors
                .spawn(crate::auth::keep_fresh(issuer.clone(), stop.clone()));
            next.push((issuer, stop));
        }
        for (_, stop) in held.drain(..) {
            stop.cancel();
        }
        held.clone_from(&next);
        let names: Vec<&str> = next.iter().map(|(i, _)| i.spec.issuer.as_str()).collect();
        let mut scopes: Vec<&str> = config
            .tenants
            .iter()
            .flat_map(|t| t.tools.scoped.iter().map(|(_, s)| s.as_str()))
            .collect();
        scopes.sort_unstable();
        scopes.dedup();
        let resource = config
            .auth
            .resource
            .as_deref()
            .and_then(|r| ProtectedResource::new(r, &names, &scopes))
            .map(Arc::new);
        let list = next.into_iter().map(|(i, _)| i).collect();
        Ok(KeyStore::new(&config.tenants)
            .with_issuers(Arc::new(Issuers { list }), resource)
            .with_jwks(config.auth.signing.as_ref()))
    }

    /// The current tenants and keys (swapped on reload).
    /// The shared store, when there is one.
    pub fn store(&self) -> Option<&crate::store::Store> {
        self.shared.as_ref().map(|s| &s.store)
    }

    pub fn keys(&self) -> Arc<ArcSwap<KeyStore>> {
        self.keys.clone()
    }

    /// Creates an upstream and starts its supervisor.
    fn launch(&self, spec: &UpstreamSpec, config: &Config) -> std::io::Result<Handle> {
        let gateway = &config.gateway;
        let max_frame = gateway.limits.max_frame_bytes;
        let sharing = sharing(spec, config);
        let stop = CancellationToken::new();
        let mut up = Upstream::new(
            &spec.name,
            &gateway.id,
            spec.timeout,
            spec.required,
            spec.max_concurrency.map(|n| (n, spec.max_queue)),
            spec.protocol,
            self.metrics.clone(),
        );
        up.answers_within(gateway.server_request_timeout);
        up.bound_listings(crate::protocol::bounds::ListingBounds {
            listing_bytes: gateway.limits.max_listing_bytes,
            definition_bytes: gateway.limits.max_definition_bytes,
        });
        if let Some(auth) = &spec.auth {
            up.authenticate(auth.mode.as_str());
        }
        if let (true, Some(path)) = (spec.pin, &gateway.pins_file) {
            let mut pins = upstream::pins::PinStore::new(path.clone());
            if let Some(shared) = &self.shared {
                pins = pins.shared(shared.store.clone());
            }
            up.pin(Arc::new(pins));
        }
        // A stdio upstream with `auth` asks an authorization server too.
        let client = match spec.transport {
            TransportSpec::Stdio(_) if spec.auth.is_none() => None,
            _ => Some(self.http_client()?),
        };
        upstream::launch::Launch {
            up: up.clone(),
            spec: spec.clone(),
            sharing,
            stop: stop.clone(),
            supervisors: self.supervisors.clone(),
            metrics: self.metrics.clone(),
            client,
            tokens: self.tokens.clone(),
            max_frame,
            max_server_requests: gateway.limits.max_server_requests,
            server_request_timeout: gateway.server_request_timeout,
        }
        .start()
        .map_err(std::io::Error::other)?;
        self.dispatcher
            .spawn_change_fanout(&up, &self.supervisors, stop.clone());
        if let Some(shared) = &self.shared {
            up.relay_to(relay(spec, &shared.relay));
        }
        Ok(Handle {
            spec: spec.clone(),
            pins_file: gateway.pins_file.clone(),
            up,
            stop,
        })
    }

    /// Applies a new, valid configuration: unchanged upstreams keep running
    /// untouched, changed ones are started anew, removed and replaced ones are
    /// drained (no new calls; those in flight finish, within their timeout)
    /// and then stopped; tenants, keys and limits are swapped at once.
    /// Settings that need a restart (addresses, limits of the listeners) are
    /// kept as they are, with a warning; a change of `gateway.id` is refused.
    pub fn reload(&self, config: &Config) -> Result<String, String> {
        if config.gateway.id != self.settings.id {
            return Err(
                "gateway.id cannot change without a restart (it is part of every mcpId)".into(),
            );
        }
        let restart_needed =
            crate::config::restart::unapplied(&self.settings, &self.traces, config);
        // Applied at once: what the admin listener asks of its callers.
        self.admin_token
            .store(config.gateway.admin_token.map(Arc::new));
        self.console.ui.store(Arc::new(config.gateway.admin_ui));
        self.tokens.set_max(config.gateway.max_cached_tokens);
        self.console
            .transports
            .store(Arc::new(crate::http::console::transports(config)));
        if !restart_needed.is_empty() {
            tracing::warn!(settings = ?restart_needed, "these settings changed but only take effect after a restart");
        }
        let mut running = lock(&self.running);
        let mut next = HashMap::new();
        let mut retired = Vec::new();
        let (mut kept, mut started) = (0, 0);
        for spec in &config.upstreams {
            match running.remove(&spec.name) {
                Some(h) if h.spec == *spec && h.pins_file == config.gateway.pins_file => {
                    kept += 1;
                    next.insert(spec.name.clone(), h);
                }
                old => {
                    retired.extend(old);
                    started += 1;
                    let fresh = self
                        .launch(spec, config)
                        .map_err(|e| format!("cannot start upstream {}: {e}", spec.name))?;
                    next.insert(spec.name.clone(), fresh);
                }
            }
        }
        retired.extend(running.drain().map(|(_, h)| h));
        *running = next;
        let keys = self
            .key_store(config)
            .map_err(|e| format!("cannot start the issuers' key refresh: {e}"))?;
        self.dispatcher.replace(
            running.values().map(|h| h.up.clone()).collect(),
            keys.tenants(),
        );
        self.keys.store(Arc::new(keys));
        // Announced only now: a stream woken by the change looks at its key
        // again and must see the new keys, or a removed key would hear it.
        self.dispatcher.listings_may_have_changed();
        drop(running);
        let drained = retired.len();
        for h in retired {
            h.up.retire();
            self.supervisors.spawn(drain(h));
        }
        Ok(format!(
            "{kept} upstreams kept, {started} started, {drained} draining; {} tenants",
            config.tenants.len()
        ))
    }

    /// Stops every upstream (children get stdin closed, then TERM, then KILL) and waits.
    pub async fn stop(&self) {
        for h in lock(&self.running).values() {
            h.stop.cancel();
        }
        for (_, stop) in lock(&self.issuers).iter() {
            stop.cancel();
        }
        self.supervisors.close();
        if tokio::time::timeout(UPSTREAM_STOP_DEADLINE, self.supervisors.wait())
            .await
            .is_err()
        {
            tracing::warn!("upstreams did not stop in time");
        }
    }
}

/// The tenants that list the upstream `spec`.
fn listing<'a>(spec: &UpstreamSpec, config: &'a Config) -> Vec<&'a str> {
    config
        .tenants
        .iter()
        .filter(|t| t.upstreams.contains(&spec.name))
        .map(|t| t.name.as_str())
        .collect()
}

/// Which tenants the upstream's own process serves: all with `shared:
/// true`; the one tenant that lists it when it starts (for as long as it
/// runs: a tenant a reload adds gets a child of its own); else none.
fn sharing(spec: &UpstreamSpec, config: &Config) -> upstream::children::Sharing {
    use upstream::children::Sharing;
    match (spec.shared, listing(spec, config).as_slice()) {
        (true, _) => Sharing::Everyone,
        (false, [one]) => Sharing::Owner((*one).into()),
        (false, _) => Sharing::Nobody,
    }
}

/// Lets the calls in flight on a replaced or removed upstream finish (up to
/// its timeout), then stops it.
async fn drain(h: Handle) {
    let deadline = tokio::time::Instant::now() + h.up.timeout();
    while h.up.calls_in_flight() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tracing::info!(upstream = %h.up.name, "upstream drained after a reload; stopping it");
    h.stop.cancel();
}

/// The console's state for `config`, before any reload.
fn console(config: &Config) -> crate::http::console::Console {
    let limits = &config.gateway.limits;
    crate::http::console::Console {
        ui: Arc::new(ArcSwap::from_pointee(config.gateway.admin_ui)),
        transports: Arc::new(ArcSwap::from_pointee(crate::http::console::transports(
            config,
        ))),
        window: Default::default(),
        sessions: crate::http::console::Sessions::new(),
        record: Arc::new(crate::http::console::ConfigRecord::new(
            config.digest.clone(),
        )),
        connections: Default::default(),
        max_sessions_per_tenant: limits.max_sessions_per_tenant,
        max_connections_per_tenant: limits.max_connections_per_tenant,
        started_at: std::time::SystemTime::now(),
    }
}

/// A digest of the contents of `files` (a missing file counts as empty).
fn digest(files: &[PathBuf]) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for f in files {
        h.update(f.as_os_str().as_encoded_bytes());
        h.update(std::fs::read(f).unwrap_or_default());
    }
    h.finalize().to_vec()
}

/// Reloads the configuration from `path` on SIGHUP, and when the config file
/// or a key file it reads changes (polled: content digests, so the symlink
/// swap Kubernetes does when a ConfigMap or Secret changes is seen as well).
/// An invalid config is rejected with a log line and a metric, and the
/// running one keeps serving.
async fn watch_config(
    core: Arc<Core>,
    path: PathBuf,
    mut sources: Vec<PathBuf>,
    poll: Option<Duration>,
    stop: CancellationToken,
) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangup = signal(SignalKind::hangup()).ok();
    let mut seen = digest(&sources);
    for outcome in ["applied", "rejected"] {
        core.metrics.config_reloads.with_label_values(&[outcome]);
    }
    loop {
        let forced = tokio::select! {
            _ = async { match hangup.as_mut() { Some(h) => { h.recv().await; } None => std::future::pending().await } } => true,
            _ = async { match poll { Some(p) => tokio::time::sleep(p).await, None => std::future::pending().await } } => false,
            _ = stop.cancelled() => return,
        };
        let now = digest(&sources);
        if !forced && now == seen {
            continue;
        }
        seen = now;
        let result = match Config::load_tracing(&path, crate::config::Purpose::Serve) {
            Ok(c) => core.reload(&c).inspect(|_| {
                sources = c.sources.clone();
                seen = digest(&sources);
            }),
            // Watched from now on too: what the rejected config names (a
            // key file not there yet) is looked at again when it appears.
            Err((e, tried)) => {
                for file in tried {
                    if !sources.contains(&file) {
                        sources.push(file);
                    }
                }
                seen = digest(&sources);
                Err(e.to_string())
            }
        };
        let file_digest = crate::config::text_digest(&std::fs::read(&path).unwrap_or_default());
        match &result {
            Ok(_) => core.console.record.applied(file_digest),
            Err(e) => core.console.record.rejected(file_digest, e.clone()),
        }
        match result {
            Ok(summary) => {
                tracing::info!(config = %path.display(), %summary, "configuration reloaded");
                core.metrics
                    .config_reloads
                    .with_label_values(&["applied"])
                    .inc();
            }
            Err(e) => {
                tracing::error!(config = %path.display(), error = %e, "configuration reload rejected; the running configuration stays");
                core.metrics
                    .config_reloads
                    .with_label_values(&["rejected"])
                    .inc();
            }
        }
    }
}

fn relay(spec: &UpstreamSpec, to: &tokio::sync::mpsc::Sender<upstream::Heard>) -> upstream::Relay {
    upstream::Relay {
        to: to.clone(),
        shared: matches!(spec.transport, TransportSpec::Http(_)),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A running gateway.
pub struct Running {
    pub agent_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub dispatcher: Dispatcher,
    shutdown: CancellationToken,
    task: JoinHandle<()>,
}

impl Running {
    /// A token that starts the shutdown when cancelled.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Starts the shutdown and waits for it to finish.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        let _ = self.task.await;
    }

    /// Waits until the gateway has stopped (after its token is cancelled).
    pub async fn wait(self) {
        let _ = self.task.await;
    }
}

/// Binds the configured addresses and starts; with `watch`, the config file
/// it was loaded from is reloaded on change and on SIGHUP.
pub async fn start(config: Config, watch: Option<PathBuf>) -> std::io::Result<Running> {
    let agent = TcpListener::bind(config.gateway.listen).await?;
    let admin = TcpListener::bind(config.gateway.admin_listen).await?;
    start_on(config, watch, agent, admin)
}

/// Starts on listeners the caller bound (tests bind port 0), without reloads.
pub fn start_with(
    config: Config,
    agent: TcpListener,
    admin: TcpListener,
) -> std::io::Result<Running> {
    start_on(config, None, agent, admin)
}

/// Starts on listeners the caller bound, reloading from `watch` if given.
/// The key handshake-era session ids are sealed with: the configured
/// secret's, or one drawn for this process, so that a single gateway serves
/// those clients fully (sessions, their GET stream) without configuration.
/// Such sessions are this process's own: another replica, or this one
/// restarted, answers their ids 404 and the client opens a new session.
fn session_key(configured: Option<KeyDigest>) -> KeyDigest {
    if let Some(key) = configured {
        return key;
    }
    let mut secret = [0u8; 32];
    if getrandom::fill(&mut secret).is_err() {
        // Unguessable enough for ids that live as long as the process.
        let now = format!("{:?}{}", std::time::SystemTime::now(), std::process::id());
        secret[..now.len().min(32)].copy_from_slice(&now.as_bytes()[..now.len().min(32)]);
    }
    tracing::info!(
        "no gateway.session_secret: handshake-era sessions are sealed with a secret of this process's own; behind several replicas, set one secret for all of them"
    );
    KeyDigest::of(&secret)
}

pub fn start_on(
    config: Config,
    watch: Option<PathBuf>,
    agent: TcpListener,
    admin: TcpListener,
) -> std::io::Result<Running> {
    let agent_addr = agent.local_addr()?;
    let admin_addr = admin.local_addr()?;
    let limits = config.gateway.limits.clone();
    let core = Arc::new(Core::start(&config)?);
    let traces = start_traces(&config, &core.metrics).map_err(std::io::Error::other)?;
    let dispatcher = core.dispatcher.clone();
    let draining = Arc::new(AtomicBool::new(false));
    let shutdown = CancellationToken::new();
    let store = core.store().cloned();
    // One key seals session ids and what else clients are handed back.
    let sealing = session_key(config.gateway.session_key);
    dispatcher.set_sealer(crate::seal::Sealer::new(&sealing));
    dispatcher.asks().seal_with(
        crate::seal::Sealer::new(&sealing),
        config.gateway.server_request_timeout,
    );
    // The edge's calls in flight, which the other replicas' cancellations reach.
    let calls = crate::http::calls::Calls::default();
    let agent_app = agent::service(AgentState {
        dispatcher: dispatcher.clone(),
        keys: core.keys(),
        max_body_bytes: limits.max_body_bytes,
        max_batch: limits.max_batch,
        body_read_timeout: limits.body_read_timeout,
        sessions: crate::http::session::SessionLimits::new(
            limits.max_sessions_per_tenant,
            limits.session_idle_timeout,
            limits.max_session_in_flight,
        ),
        max_connections_per_tenant: limits.max_connections_per_tenant,
        connections: core.console.connections.clone(),
        metrics: core.metrics.clone(),
        allowed_origins: config.gateway.allowed_origins.clone(),
        shutdown: shutdown.clone(),
        mcp_sessions: Some(
            crate::http::mcp_sessions::McpSessions::new(
                &sealing,
                limits.max_session_records_per_tenant,
                dispatcher.subscription_budget().clone(),
            )
            .shared(store.clone()),
        ),
        calls: calls.clone(),
    });
    let admin_app = admin::router(
        AdminState {
            dispatcher: dispatcher.clone(),
            draining: draining.clone(),
            token: core.admin_token.clone(),
        },
        core.console.clone(),
    );
    core.console
        .window
        .spawn(core.metrics.clone(), shutdown.clone());
    let opts = ServeOptions {
        header_read_timeout: limits.header_read_timeout,
        max_connections: limits.max_connections,
        drain_deadline: config.gateway.shutdown_timeout,
        accept_errors: core.metrics.accept_errors.with_label_values::<&str>(&[]),
    };

    let admin_stop = CancellationToken::new();
    let admin_opts = ServeOptions {
        drain_deadline: Duration::from_secs(1),
        max_connections: crate::descriptors::ADMIN_CONNECTIONS,
        ..opts.clone()
    };
    let header_read_timeout = opts.header_read_timeout;
    let admin_task = tokio::spawn(serve(
        admin,
        admin_opts,
        admin_stop.clone(),
        move |stream, stop| {
            // Each request knows its peer (the console's login audit line).
            let peer = stream.peer_addr().ok();
            let app = tower::ServiceExt::map_request(
                admin_app.clone(),
                move |mut req: axum::http::Request<hyper::body::Incoming>| {
                    if let Some(peer) = peer {
                        req.extensions_mut()
                            .insert(crate::http::console::Peer(peer));
                    }
                    req
                },
            );
            http1(
                hyper_util::rt::TokioIo::new(stream),
                hyper_util::service::TowerToHyperService::new(app),
                header_read_timeout,
                stop,
            )
        },
    ));
    tracing::info!(addr = %agent_addr, "agent listener bound");
    tracing::info!(addr = %admin_addr, "admin listener bound");
    exposed_note(agent_addr, admin_addr, &config.gateway);

    let stop = shutdown.clone();
    if let Some(path) = watch {
        let sources = config.sources.clone();
        tokio::spawn(watch_config(
            core.clone(),
            path,
            sources,
            config.gateway.reload_poll,
            shutdown.clone(),
        ));
    }
    // The store's connection and beat end after the listeners have drained;
    // so do the relay of upstreams' change notifications and the channel
    // the other replicas' come in on.
    let store_stop = CancellationToken::new();
    let heard = core.shared.as_ref().and_then(|s| lock(&s.heard).take());
    let here = Here {
        dispatcher: dispatcher.clone(),
        calls,
    };
    if let Some(limits) = dispatcher.shared_limits() {
        tokio::spawn(limits.clone().keep_counts(store_stop.clone()));
    }
    let store_task = store.zip(heard).map(|(s, heard)| {
        tokio::spawn(s.clone().relay(heard, here.clone(), store_stop.clone()));
        tokio::spawn(s.clone().listen(here, store_stop.clone()));
        tokio::spawn(s.run(store_stop.clone()))
    });
    let task = tokio::spawn(async move {
        let agent_task = tokio::spawn(serve(agent, opts, stop.clone(), move |stream, stop| {
            agent::connection(agent_app.clone(), stream, header_read_timeout, stop)
        }));
        stop.cancelled().await;
        tracing::info!("shutting down: readiness off, draining requests in flight");
        draining.store(true, Ordering::Relaxed);
        let _ = agent_task.await;
        core.stop().await;
        if let Some(traces) = traces {
            traces.shutdown(TRACES_FLUSH).await;
        }
        admin_stop.cancel();
        let _ = admin_task.await;
        store_stop.cancel();
        if let Some(t) = store_task {
            let _ = t.await;
        }
        tracing::info!("stopped");
    });
    Ok(Running {
        agent_addr,
        admin_addr,
        dispatcher,
        shutdown,
        task,
    })
}

/// How long the spans still queued at shutdown may take to be exported.
pub const TRACES_FLUSH: Duration = Duration::from_secs(2);

/// Starts exporting traces when the environment or `telemetry.traces`
/// names a collector; a setting that cannot be used stops the start.
pub fn start_traces(
    config: &Config,
    metrics: &crate::metrics::Metrics,
) -> Result<Option<crate::telemetry::traces::Traces>, String> {
    use crate::telemetry::traces;
    let settings = traces::settings(&config.traces, |k| std::env::var(k).ok())
        .map_err(|why| format!("traces: {why}"))?;
    let Some(settings) = settings else {
        return Ok(None);
    };
    let started = traces::start(&settings, metrics.trace_spans_dropped.clone())?;
    tracing::info!(
        endpoint = %crate::redact::written(&settings.endpoint),
        protocol = ?settings.protocol,
        service = %settings.service_name,
        "exporting traces"
    );
    Ok(Some(started))
}

/// This replica as the store's change channel acts on it: its upstreams
/// (relisted when another replica heard them change) and its edge's calls
/// (cancelled when their client's cancellation reached another replica).
#[derive(Clone)]
struct Here {
    dispatcher: Dispatcher,
    calls: crate::http::calls::Calls,
}

impl crate::store::bus::Here for Here {
    fn relist_soon(&self, upstream: &str, changed: Option<&str>) {
        if let Some(up) = self.dispatcher.upstream(upstream) {
            up.relist_soon(changed);
        }
    }

    fn changed_for(&self, tenant: &str, upstream: &str, changed: &str) {
        if let Some(up) = self.dispatcher.upstream(upstream) {
            up.announce_change_to(tenant, changed);
        }
    }

    fn recheck_pins(&self) {
        for upstream in self.dispatcher.upstreams() {
            if upstream.pins_fell_back() {
                upstream.relist_soon(None);
            }
        }
    }

    fn cancel_call(&self, session: &[u8], id: &str) {
        if let Ok(nonce) = std::str::from_utf8(session) {
            self.calls.cancel(nonce, id);
        }
    }

    fn answer_ask(&self, session: &[u8], id: &str, outcome: Result<&str, &str>) {
        // Only text that is one JSON value is taken (the publishing replica
        // parsed it as such; this one does not trust the channel more).
        fn raw(t: &str) -> Option<&serde_json::value::RawValue> {
            serde_json::from_str(t).ok()
        }
        let outcome = match outcome {
            Ok(result) => raw(result).map(|r| Ok(crate::jsonrpc::Json::from(r))),
            Err(error) => raw(error).map(|e| Err(crate::jsonrpc::Json::from(e))),
        };
        if let Some(outcome) = outcome {
            self.dispatcher.asks().answer(session, id, outcome);
        }
    }

    fn continue_round(&self, origin: &str, round: crate::store::bus::RoundAsked) {
        self.dispatcher.continue_round(origin, round);
    }

    fn round_news(&self, waiter: &str, news: &str) {
        if !self.dispatcher.held().news(waiter, news) {
            self.dispatcher.task_news(waiter, news);
        }
    }

    fn task_asked(&self, origin: &str, asked: crate::store::bus::TaskAsked) {
        self.dispatcher.answer_task_asked(origin, asked);
    }

    fn task_status(&self, tenant: &str, status: &str) {
        // Only one JSON object is taken (this replica does not trust the
        // channel more than the one that published it).
        if serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(status).is_ok() {
            self.dispatcher.tell_task_status(tenant, status);
        }
    }
}

/// Listening on every interface is what a pod does, and a mistake on a
/// laptop: said once, with what the gateway itself does not provide there.
fn exposed_note(agent: SocketAddr, admin: SocketAddr, gateway: &GatewaySettings) {
    let everywhere = |a: SocketAddr| a.ip().is_unspecified();
    if !everywhere(agent) && !everywhere(admin) {
        return;
    }
    tracing::info!(
        agent = %agent,
        admin = %admin,
        allowed_origins = gateway.allowed_origins.len(),
        admin_token = gateway.admin_token.is_some(),
        "listening on every interface: the gateway speaks plain HTTP (terminate TLS in front of it), \
         serves /metrics and /readyz's detail to anyone without admin_token, and refuses every request \
         that carries an Origin not in allowed_origins; use 127.0.0.1 to keep it local"
    );
}
