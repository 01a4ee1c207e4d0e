//! The composition root: builds every part from a `Config`, runs the listeners
//! and upstream supervisors, and shuts them down in order.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{Config, TransportSpec};
use crate::dispatch::Dispatcher;
use crate::http::admin::{self, AdminState};
use crate::http::agent::{self, AgentState};
use crate::http::serve::{ServeOptions, serve};
use crate::metrics::Metrics;
use crate::tenant::KeyStore;
use crate::upstream::{self, Upstream};

/// How long upstream supervisors get to stop their children.
const UPSTREAM_STOP_DEADLINE: Duration = Duration::from_secs(10);

/// Upstreams, their supervisors, and the dispatcher over them: everything but listeners.
pub struct Core {
    pub dispatcher: Dispatcher,
    pub keys: Arc<KeyStore>,
    pub metrics: Metrics,
    supervisors: TaskTracker,
    stop: CancellationToken,
}

impl Core {
    /// Starts every upstream's supervisor (children are spawned, handshakes begin).
    pub fn start(config: &Config) -> std::io::Result<Core> {
        let metrics = Metrics::new();
        let max_frame = config.gateway.limits.max_frame_bytes;
        let stop = CancellationToken::new();
        let supervisors = TaskTracker::new();
        let mut upstreams = Vec::new();
        let mut http_client = None;
        let pins = config
            .gateway
            .pins_file
            .clone()
            .map(|path| Arc::new(upstream::pins::PinStore::new(path)));
        for spec in &config.upstreams {
            let mut up = Upstream::new(
                &spec.name,
                &config.gateway.id,
                spec.timeout,
                spec.required,
                spec.max_concurrency.map(|n| (n, spec.max_queue)),
                metrics.clone(),
            );
            if let (true, Some(store)) = (spec.pin, &pins) {
                up.pin(store.clone());
            }
            match &spec.transport {
                TransportSpec::Stdio(stdio) => {
                    supervisors.spawn(upstream::stdio::run(
                        up.clone(),
                        stdio.clone(),
                        max_frame,
                        stop.clone(),
                    ));
                }
                TransportSpec::Http(http) => {
                    let client = match &http_client {
                        Some(c) => c,
                        None => http_client
                            .insert(upstream::http::client().map_err(std::io::Error::other)?),
                    };
                    let link = upstream::http::HttpLink::new(client.clone(), http, max_frame)
                        .map_err(std::io::Error::other)?;
                    supervisors.spawn(upstream::http::run(
                        up.clone(),
                        Arc::new(link),
                        stop.clone(),
                    ));
                }
            }
            upstreams.push(up);
        }
        let keys = Arc::new(KeyStore::new(&config.tenants));
        let dispatcher = Dispatcher::new(
            &config.gateway.id,
            upstreams,
            keys.tenants(),
            metrics.clone(),
        );
        dispatcher.spawn_change_fanout(keys.tenants(), &supervisors, stop.clone());
        supervisors.close();
        Ok(Core {
            dispatcher,
            keys,
            metrics,
            supervisors,
            stop,
        })
    }

    /// Stops every upstream (children get stdin closed, then a kill after a grace) and waits.
    pub async fn stop(self) {
        self.stop.cancel();
        if tokio::time::timeout(UPSTREAM_STOP_DEADLINE, self.supervisors.wait())
            .await
            .is_err()
        {
            tracing::warn!("upstreams did not stop in time");
        }
    }
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

/// Binds the configured addresses and starts.
pub async fn start(config: Config) -> std::io::Result<Running> {
    let agent = TcpListener::bind(config.gateway.listen).await?;
    let admin = TcpListener::bind(config.gateway.admin_listen).await?;
    start_with(config, agent, admin)
}

/// Starts on listeners the caller bound (tests bind port 0).
pub fn start_with(
    config: Config,
    agent: TcpListener,
    admin: TcpListener,
) -> std::io::Result<Running> {
    let agent_addr = agent.local_addr()?;
    let admin_addr = admin.local_addr()?;
    let limits = config.gateway.limits.clone();
    let core = Core::start(&config)?;
    let dispatcher = core.dispatcher.clone();
    let draining = Arc::new(AtomicBool::new(false));
    let agent_app = agent::router(AgentState {
        dispatcher: dispatcher.clone(),
        keys: core.keys.clone(),
        max_body_bytes: limits.max_body_bytes,
        max_batch: limits.max_batch,
        body_read_timeout: limits.body_read_timeout,
        metrics: core.metrics.clone(),
    });
    let admin_app = admin::router(AdminState {
        dispatcher: dispatcher.clone(),
        draining: draining.clone(),
    });
    let opts = ServeOptions {
        header_read_timeout: limits.header_read_timeout,
        max_connections: limits.max_connections,
        drain_deadline: config.gateway.shutdown_timeout,
    };

    let shutdown = CancellationToken::new();
    let admin_stop = CancellationToken::new();
    let admin_opts = ServeOptions {
        drain_deadline: Duration::from_secs(1),
        ..opts
    };
    let admin_task = tokio::spawn(serve(admin, admin_app, admin_opts, admin_stop.clone()));
    tracing::info!(addr = %agent_addr, "agent listener bound");
    tracing::info!(addr = %admin_addr, "admin listener bound");

    let stop = shutdown.clone();
    let task = tokio::spawn(async move {
        let agent_task = tokio::spawn(serve(agent, agent_app, opts, stop.clone()));
        stop.cancelled().await;
        tracing::info!("shutting down: readiness off, draining requests in flight");
        draining.store(true, Ordering::Relaxed);
        let _ = agent_task.await;
        core.stop().await;
        admin_stop.cancel();
        let _ = admin_task.await;
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
