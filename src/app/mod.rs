//! The composition root: builds every part from a `Config`, runs the listeners
//! and upstream supervisors, and shuts them down in order. The core
//! (upstreams, dispatcher, reload) is `assembly`; watching the file,
//! `reload`; what other replicas ask, `here`.

mod assembly;
mod here;
mod reload;

pub use assembly::Core;
use assembly::lock;
use here::Here;
use reload::watch_config;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use std::path::PathBuf;

use crate::config::KeyDigest;
use crate::config::{Config, GatewaySettings};
use crate::dispatch::Dispatcher;
use crate::http::admin::{self, AdminState};
use crate::http::agent::{self, AgentState};
use crate::http::serve::{ServeOptions, http1, serve};

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
    let agent_app = agent::service(agent_state(
        &config,
        &core,
        &shutdown,
        &sealing,
        calls.clone(),
    ));
    let admin_app = admin::router(
        AdminState {
            dispatcher: dispatcher.clone(),
            draining: draining.clone(),
            token: core.admin_token.clone(),
            consents: core.consents.clone(),
        },
        core.console.clone(),
    );
    core.console
        .window
        .spawn(core.metrics.clone(), shutdown.clone());
    let opts = ServeOptions {
        header_read_timeout: config.gateway.limits.header_read_timeout,
        max_connections: config.gateway.limits.max_connections,
        drain_deadline: config.gateway.shutdown_timeout,
        accept_errors: core.metrics.accept_errors.with_label_values::<&str>(&[]),
    };
    let header_read_timeout = opts.header_read_timeout;
    let admin_stop = CancellationToken::new();
    let admin_task = serve_admin(admin, &opts, admin_app, admin_stop.clone());
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
    let store_task = start_store(&core, store, calls, &store_stop);
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

/// What every connection and request of the agent edge shares.
fn agent_state(
    config: &Config,
    core: &Core,
    shutdown: &CancellationToken,
    sealing: &crate::config::KeyDigest,
    calls: crate::http::calls::Calls,
) -> AgentState {
    let limits = &config.gateway.limits;
    let dispatcher = &core.dispatcher;
    AgentState {
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
                sealing,
                limits.max_session_records_per_tenant,
                dispatcher.subscription_budget().clone(),
            )
            .shared(core.store().cloned()),
        ),
        calls,
        consents: core.consents.clone(),
    }
}

/// The admin listener served until `stop`, each request knowing its peer
/// (the console's login audit line).
fn serve_admin(
    admin: TcpListener,
    opts: &ServeOptions,
    admin_app: axum::Router,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let admin_opts = ServeOptions {
        drain_deadline: Duration::from_secs(1),
        max_connections: crate::descriptors::ADMIN_CONNECTIONS,
        ..opts.clone()
    };
    let header_read_timeout = opts.header_read_timeout;
    tokio::spawn(serve(admin, admin_opts, stop, move |stream, stop| {
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
    }))
}

/// The store's beat, its counts kept, and the relay of change notifications
/// both ways, until `stop`: the beat's task, when there is a store.
fn start_store(
    core: &Core,
    store: Option<crate::store::Store>,
    calls: crate::http::calls::Calls,
    stop: &CancellationToken,
) -> Option<tokio::task::JoinHandle<()>> {
    let dispatcher = &core.dispatcher;
    let heard = core.shared.as_ref().and_then(|s| lock(&s.heard).take());
    let here = Here {
        dispatcher: dispatcher.clone(),
        calls,
    };
    if let Some(limits) = dispatcher.shared_limits() {
        tokio::spawn(limits.clone().keep_counts(stop.clone()));
    }
    store.zip(heard).map(|(s, heard)| {
        tokio::spawn(s.clone().relay(heard, here.clone(), stop.clone()));
        tokio::spawn(s.clone().listen(here, stop.clone()));
        tokio::spawn(s.run(stop.clone()))
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
