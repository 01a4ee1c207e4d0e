//! The core of a running gateway: its upstreams and their supervisors,
//! the dispatcher over them, the tenants' keys, the store, and how a
//! reload swaps what changed and leaves the rest running.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

use arc_swap::ArcSwap;

use crate::config::{Config, GatewaySettings, TransportSpec, UpstreamSpec};
use crate::dispatch::Dispatcher;
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
    pub(super) admin_token: Arc<arc_swap::ArcSwapOption<crate::config::KeyDigest>>,
    /// The bound on obtained tokens every upstream's credentials share.
    tokens: Arc<upstream::credentials::TokenBudget>,
    /// Users' consents to upstreams (`user_consent`), when configured;
    /// made anew by a reload that changes what they share.
    pub consents: Arc<arc_swap::ArcSwapOption<upstream::credentials::Consents>>,
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
    pub(super) shared: Option<Shared>,
}

/// What a core keeps of the shared store.
pub(super) struct Shared {
    store: crate::store::Store,
    relay: tokio::sync::mpsc::Sender<upstream::Heard>,
    /// The relay's receiving end, until [`start_on`] starts the relay.
    pub(super) heard: Mutex<Option<tokio::sync::mpsc::Receiver<upstream::Heard>>>,
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
            consents: Arc::default(),
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
            consents: self.consents_for(spec, gateway)?,
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

    /// The consents an upstream with `user_consent` asks through: the ones
    /// in force while what they share is unchanged, else new ones.
    fn consents_for(
        &self,
        spec: &crate::config::UpstreamSpec,
        gateway: &GatewaySettings,
    ) -> std::io::Result<Option<Arc<upstream::credentials::Consents>>> {
        let (Some(settings), Some(auth)) = (&gateway.consent, &spec.auth) else {
            return Ok(None);
        };
        if let Some(held) = self.consents.load_full()
            && held.settings() == settings
        {
            return Ok(Some(held));
        }
        let consents = upstream::credentials::Consents::new(
            settings.clone(),
            self.http_client()?,
            auth.timeout,
            self.shared.as_ref().map(|s| s.store.clone()),
            self.metrics.clone(),
        );
        self.consents.store(Some(consents.clone()));
        Ok(Some(consents))
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

fn relay(spec: &UpstreamSpec, to: &tokio::sync::mpsc::Sender<upstream::Heard>) -> upstream::Relay {
    upstream::Relay {
        to: to.clone(),
        shared: matches!(spec.transport, TransportSpec::Http(_)),
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
