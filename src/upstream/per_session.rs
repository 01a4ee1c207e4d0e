//! Stdio children run once per client session (`per_session: true`). A
//! child that serves one client session asks only that client, so its
//! requests (elicitation, sampling, roots) can be taken to it, which a child
//! shared by every client's calls cannot do. The configured upstream's own
//! child still serves its listings and the calls of clients that cannot be
//! asked; a call of a client that can is sent to that session's child,
//! started on its first call. At most `max_children` run at once: past it,
//! the child idle longest (no call in flight) is ended to make room, and
//! when every child is busy the call is refused (-32001, as an upstream
//! that cannot take it). A child is ended with its session (DELETE, on the
//! replica that receives it) or once idle for `idle_timeout`; all end with
//! the upstream. Each child is supervised as any stdio upstream
//! (process group, restarts with backoff) under its own metrics registry,
//! so that its starts and stops do not move the upstream's own series;
//! `mcp_gateway_session_children` counts them per upstream.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::{CallError, Dialect, Upstream};
use crate::config::{PerSessionSpec, StdioSpec};
use crate::metrics::Metrics;

/// What every child of one upstream is started with.
pub struct PerSession {
    name: Arc<str>,
    gateway_id: String,
    spec: StdioSpec,
    bounds: PerSessionSpec,
    timeout: Duration,
    max_frame: usize,
    /// How long a request of a child waits for its client's answer.
    wait: Duration,
    children: Mutex<HashMap<Box<[u8]>, Child>>,
    /// Ends every child (the upstream's own stop, or a reload retiring it).
    stop: CancellationToken,
    running: prometheus::IntGauge,
    /// The gateway's metrics, where the children's requests are counted.
    metrics: Metrics,
}

struct Child {
    up: Arc<Upstream>,
    stop: CancellationToken,
    used: Instant,
}

/// The settings [`PerSession::new`] takes.
pub struct Template {
    pub gateway_id: String,
    pub spec: StdioSpec,
    pub bounds: PerSessionSpec,
    pub timeout: Duration,
    pub max_frame: usize,
    pub wait: Duration,
}

impl PerSession {
    pub fn new(name: &str, t: Template, stop: CancellationToken, metrics: &Metrics) -> Arc<Self> {
        let running = metrics.session_children.with_label_values(&[name]);
        running.set(0);
        Arc::new(PerSession {
            name: name.into(),
            gateway_id: t.gateway_id,
            spec: t.spec,
            bounds: t.bounds,
            timeout: t.timeout,
            max_frame: t.max_frame,
            wait: t.wait,
            children: Mutex::default(),
            stop,
            running,
            metrics: metrics.clone(),
        })
    }

    /// The child of the session `scope`, started when it has none.
    pub fn child(&self, scope: &[u8]) -> Result<Arc<Upstream>, CallError> {
        let mut children = self.children.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(child) = children.get_mut(scope) {
            child.used = Instant::now();
            return Ok(child.up.clone());
        }
        if children.len() >= self.bounds.max_children {
            let idlest = children
                .iter()
                .filter(|(_, c)| c.up.calls_in_flight() == 0)
                .min_by_key(|(_, c)| c.used)
                .map(|(k, _)| k.clone());
            let Some(idlest) = idlest else {
                return Err(CallError::unavailable(
                    "every per-session child is busy (max_children)",
                ));
            };
            if let Some(ended) = children.remove(&idlest) {
                ended.stop.cancel();
            }
        }
        let up = Upstream::new(
            &self.name,
            &self.gateway_id,
            self.timeout,
            false,
            None,
            Dialect::ModelContext,
            Metrics::new(),
        );
        up.serve_one_session(self.wait, self.metrics.clone());
        let stop = self.stop.child_token();
        tokio::spawn(super::stdio::run(
            up.clone(),
            self.spec.clone(),
            self.max_frame,
            stop.clone(),
        ));
        children.insert(
            scope.into(),
            Child {
                up: up.clone(),
                stop,
                used: Instant::now(),
            },
        );
        self.running.set(children.len() as i64);
        tracing::info!(upstream = %self.name, children = children.len(), "a child started for a client session");
        Ok(up)
    }

    /// Ends the child of the session `scope` (the session ended).
    pub fn end(&self, scope: &[u8]) {
        let mut children = self.children.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(child) = children.remove(scope) {
            child.stop.cancel();
        }
        self.running.set(children.len() as i64);
    }

    /// Ends the children idle (no call in flight) for `idle_timeout`.
    pub fn reap(&self) {
        let mut children = self.children.lock().unwrap_or_else(PoisonError::into_inner);
        let idle = self.bounds.idle_timeout;
        children.retain(|_, c| {
            let keep = c.used.elapsed() < idle || c.up.calls_in_flight() > 0;
            if !keep {
                c.stop.cancel();
            }
            keep
        });
        self.running.set(children.len() as i64);
    }

    /// Reaps idle children until the upstream stops (then every child ends).
    pub async fn run_reaper(self: Arc<Self>) {
        let every =
            (self.bounds.idle_timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(5));
        loop {
            tokio::select! {
                () = tokio::time::sleep(every) => self.reap(),
                () = self.stop.cancelled() => break,
            }
        }
        self.children
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        self.running.set(0);
    }
}
