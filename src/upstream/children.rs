//! The processes (and Streamable HTTP sessions) of one upstream that serve
//! one tenant, or one client session of a tenant, so that what a server
//! keeps in memory between calls is never another tenant's.
//!
//! The configured upstream's own process serves its listings (and pins,
//! health, notifications). Its calls are served:
//! - for a client session that can be asked, on an upstream run
//!   `per_session: true`: by that session's child, whose requests are then
//!   that client's;
//! - with `shared: true`, or for the one tenant that lists the upstream
//!   (the owner), or by a Streamable HTTP server that gave no session (it
//!   keeps nothing a session would scope): by the upstream's own;
//! - otherwise by the tenant's own child (or HTTP session), started on its
//!   first call and ended once idle.
//!
//! Every tenant's children are bounded apart: at most `max_children` at
//! once; past it the tenant's idlest child with no call in flight is ended
//! to make room, and when all of them are busy the call is refused (-32001,
//! as an upstream that cannot take it). One tenant never ends, or takes the
//! room of, another's. A child is ended with its session (DELETE, on the
//! replica that receives it), once idle for `idle_timeout`, and with the
//! upstream. Each is supervised as any upstream (process group, restarts
//! with backoff), its calls counted in the upstream's series and held to
//! its `max_concurrency` and `max_queue` (see `Upstream::child`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::credentials::{Credentials, Refusal};
use super::env_credential::EnvCredential;
use super::{CallError, Upstream};
use crate::config::{ChildBounds, HttpSpec, StdioSpec};
use crate::metrics::Metrics;
use crate::tenant::User;

/// How a child of the upstream is made.
pub enum Make {
    Stdio {
        spec: StdioSpec,
        max_frame: usize,
        /// The upstream's credential and the variable it goes in (`auth.env`).
        credential: Option<super::env_credential::EnvCredential>,
    },
    Streamable(Box<StreamableMake>),
    /// An MCP v1.0 server over HTTP: a user's own link, for upstreams that
    /// act for the user (its requests carry nothing else of a session).
    Http(Box<HttpMake>),
}

/// How an MCP v1.0 HTTP child (a user's link) is made.
pub struct HttpMake {
    pub client: reqwest::Client,
    pub spec: HttpSpec,
    pub max_frame: usize,
    pub credentials: Arc<super::credentials::Credentials>,
}

/// How a Streamable HTTP child (a session of the tenant's) is made.
pub struct StreamableMake {
    pub client: reqwest::Client,
    pub spec: HttpSpec,
    pub max_frame: usize,
    pub answers: super::streamable::ServerAnswers,
    /// The upstream's credential: a tenant's session carries it too.
    pub credentials: Option<Arc<super::credentials::Credentials>>,
}

/// Who the upstream's own process serves besides its listings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sharing {
    /// Every tenant (`shared: true`).
    Everyone,
    /// The one tenant that listed the upstream when it started, for as
    /// long as it runs: a tenant that a reload adds gets children of its
    /// own, and the owner's state stays its own.
    Owner(Arc<str>),
    /// No tenant: each has children of its own.
    Nobody,
}

/// What every child of one upstream is started with, and the children.
pub struct Children {
    make: Make,
    bounds: ChildBounds,
    per_session: bool,
    sharing: Sharing,
    /// How long a request of a session's child waits for its client's answer.
    wait: Duration,
    tenants: Mutex<HashMap<Arc<str>, Held>>,
    /// Ends every child (the upstream's own stop, or a reload retiring it).
    stop: CancellationToken,
    sessions_running: prometheus::IntGauge,
    tenants_running: prometheus::IntGauge,
}

/// One tenant's children.
#[derive(Default)]
struct Held {
    /// Its child for every call that is not a session's.
    own: Option<Child>,
    /// Its sessions' children (`per_session`).
    sessions: HashMap<Box<[u8]>, Child>,
}

impl Held {
    fn count(&self) -> usize {
        self.sessions.len() + usize::from(self.own.is_some())
    }

    /// Ends its idlest child with no call in flight; whether there was one.
    fn end_idlest(&mut self) -> bool {
        let idle = |c: &Child| c.up.calls_in_flight() == 0;
        let idlest_session = self
            .sessions
            .iter()
            .filter(|(_, c)| idle(c))
            .min_by_key(|(_, c)| c.used)
            .map(|(k, c)| (k.clone(), c.used));
        let own_idle = self.own.as_ref().filter(|c| idle(c)).map(|c| c.used);
        match (idlest_session, own_idle) {
            (Some((_, session)), Some(own)) if own <= session => self.own.take().is_some(),
            (Some((key, _)), _) => self.sessions.remove(&key).is_some(),
            (None, Some(_)) => self.own.take().is_some(),
            (None, None) => false,
        }
    }
}

/// A running child: ended when dropped.
struct Child {
    up: Arc<Upstream>,
    stop: CancellationToken,
    used: Instant,
}

impl Drop for Child {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The settings [`Children::new`] takes.
pub struct Template {
    pub make: Make,
    pub bounds: ChildBounds,
    pub per_session: bool,
    pub sharing: Sharing,
    pub wait: Duration,
}

/// Where a call of one tenant (or session) runs: the upstream's own
/// process or one of its children.
pub enum Instance<'a> {
    Own(&'a Upstream),
    Child(Arc<Upstream>),
}

impl std::ops::Deref for Instance<'_> {
    type Target = Upstream;
    fn deref(&self) -> &Upstream {
        match self {
            Instance::Own(up) => up,
            Instance::Child(up) => up,
        }
    }
}

impl Children {
    pub fn new(name: &str, t: Template, stop: CancellationToken, metrics: &Metrics) -> Arc<Self> {
        let sessions_running = metrics.session_children.with_label_values(&[name]);
        let tenants_running = metrics.tenant_children.with_label_values(&[name]);
        sessions_running.set(0);
        tenants_running.set(0);
        Arc::new(Children {
            make: t.make,
            bounds: t.bounds,
            per_session: t.per_session,
            sharing: t.sharing,
            wait: t.wait,
            tenants: Mutex::default(),
            stop,
            sessions_running,
            tenants_running,
        })
    }

    /// Whether a client session that can be asked gets a child of its own.
    pub fn per_session(&self) -> bool {
        self.per_session
    }

    /// Where `tenant`'s call runs (in the client session `session`, when
    /// it can be asked): see the module's comment.
    pub fn pick<'a>(
        &self,
        up: &'a Upstream,
        tenant: &Arc<str>,
        user: Option<&Arc<User>>,
        session: Option<&[u8]>,
    ) -> Result<Instance<'a>, CallError> {
        let scope = session.filter(|_| self.per_session);
        let acting = match (self.acting(), user) {
            (false, _) => None,
            (true, Some(user)) => Some(user),
            (true, None) => return Err(CallError::Credential(Box::new(Refusal::no_user()))),
        };
        if acting.is_none() && scope.is_none() && self.own_serves(up, tenant) {
            return Ok(Instance::Own(up));
        }
        let key = acting.map_or(tenant, |user| &user.key);
        let mut tenants = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        let held = match tenants.get_mut(key) {
            Some(held) => held,
            None => tenants.entry(key.clone()).or_default(),
        };
        // A user's child that could not start for want of their credential
        // starts anew: the first attempt of the new one is this call's.
        let stale = match scope {
            Some(scope) => held.sessions.get(scope),
            None => held.own.as_ref(),
        }
        .is_some_and(|c| acting.is_some() && c.up.lacks_credential());
        if stale {
            match scope {
                Some(scope) => drop(held.sessions.remove(scope)),
                None => held.own = None,
            }
        }
        let found = match scope {
            Some(scope) => held.sessions.get_mut(scope),
            None => held.own.as_mut(),
        };
        if let Some(child) = found {
            child.used = Instant::now();
            if let Some(user) = acting {
                child.up.act_for(tenant, user);
            }
            return Ok(Instance::Child(child.up.clone()));
        }
        if held.count() >= self.bounds.max_children && !held.end_idlest() {
            return Err(CallError::unavailable(
                "every child this tenant may run of this upstream is busy (max_children)",
            ));
        }
        let child = self.start(up, tenant, acting, scope.is_some());
        let running = Instance::Child(child.up.clone());
        match scope {
            Some(scope) => {
                held.sessions.insert(scope.into(), child);
            }
            None => held.own = Some(child),
        }
        let count = held.count();
        self.count(&tenants);
        tracing::info!(upstream = %up.name, tenant = %tenant, for_session = scope.is_some(), children = count, "a child started for a tenant");
        Ok(running)
    }

    /// Whether each user has children of their own (the upstream acts
    /// for the user: every credential is a user's).
    fn acting(&self) -> bool {
        match &self.make {
            Make::Stdio { credential, .. } => credential
                .as_ref()
                .is_some_and(|c| c.credentials.per_user()),
            Make::Streamable(m) => m.credentials.as_ref().is_some_and(|c| c.per_user()),
            Make::Http(_) => true,
        }
    }

    /// Whether the upstream's own process serves `tenant`'s calls that are
    /// no session's.
    fn own_serves(&self, up: &Upstream, tenant: &str) -> bool {
        match &self.sharing {
            Sharing::Everyone => true,
            Sharing::Owner(owner) => **owner == *tenant,
            // A Streamable HTTP server that gave no session keeps nothing
            // a session would scope.
            Sharing::Nobody => matches!(self.make, Make::Streamable(_)) && !up.keeps_sessions(),
        }
    }

    fn start(
        &self,
        up: &Upstream,
        tenant: &Arc<str>,
        user: Option<&Arc<User>>,
        one_session: bool,
    ) -> Child {
        let child = up.child(tenant);
        if one_session {
            child.serve_one_session(self.wait, up.metrics().clone());
        }
        let stop = self.stop.child_token();
        // A user's child carries that user's credential, and no other.
        let own = |shared: &Arc<Credentials>| match user {
            Some(user) => {
                let credentials = shared.for_user(tenant, user);
                child.hold_credentials(credentials.clone());
                credentials
            }
            None => shared.clone(),
        };
        match &self.make {
            Make::Stdio {
                spec,
                max_frame,
                credential,
            } => {
                let credential = credential.as_ref().map(|c| EnvCredential {
                    credentials: own(&c.credentials),
                    var: c.var.clone(),
                });
                tokio::spawn(super::stdio::run_with(
                    child.clone(),
                    spec.clone(),
                    *max_frame,
                    stop.clone(),
                    credential,
                ));
            }
            Make::Streamable(make) => {
                match super::streamable::StreamableLink::new(
                    make.client.clone(),
                    &make.spec,
                    make.max_frame,
                    make.answers.clone(),
                    child.progress().clone(),
                    make.credentials.as_ref().map(own),
                ) {
                    Ok((link, events)) => {
                        tokio::spawn(super::streamable::run(
                            child.clone(),
                            link,
                            events,
                            stop.clone(),
                        ));
                    }
                    // The upstream's own link was made from the same spec,
                    // so this cannot fail; if it did, the child stays down
                    // and its calls fail as an unreachable upstream's.
                    Err(e) => {
                        tracing::error!(upstream = %up.name, error = %e, "cannot make a tenant's link");
                        child.disconnect();
                    }
                }
            }
            Make::Http(make) => {
                match super::http::HttpLink::new(make.client.clone(), &make.spec, make.max_frame) {
                    Ok(link) => {
                        let link = link.with_credentials(Some(own(&make.credentials)));
                        tokio::spawn(super::http::run(
                            child.clone(),
                            Arc::new(link),
                            stop.clone(),
                        ));
                    }
                    Err(e) => {
                        tracing::error!(upstream = %up.name, error = %e, "cannot make a user's link");
                        child.disconnect();
                    }
                }
            }
        }
        Child {
            up: child,
            stop,
            used: Instant::now(),
        }
    }

    fn count(&self, tenants: &HashMap<Arc<str>, Held>) {
        let sessions: usize = tenants.values().map(|h| h.sessions.len()).sum();
        let own = tenants.values().filter(|h| h.own.is_some()).count();
        self.sessions_running.set(sessions as i64);
        self.tenants_running.set(own as i64);
    }

    /// Ends `tenant`'s child of the session `scope` (the session ended),
    /// whichever of its users' it is.
    pub fn end(&self, tenant: &str, scope: &[u8]) {
        let mut tenants = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        for (key, held) in tenants.iter_mut() {
            let users = key
                .strip_prefix(tenant)
                .is_some_and(|k| k.starts_with('\0'));
            if **key == *tenant || users {
                held.sessions.remove(scope);
            }
        }
        self.count(&tenants);
    }

    /// Ends the children idle (no call in flight) for `idle_timeout`.
    pub fn reap(&self) {
        let mut tenants = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        let idle = self.bounds.idle_timeout;
        let keep = |c: &Child| c.used.elapsed() < idle || c.up.calls_in_flight() > 0;
        for held in tenants.values_mut() {
            held.sessions.retain(|_, c| keep(c));
            if held.own.as_ref().is_some_and(|c| !keep(c)) {
                held.own = None;
            }
        }
        tenants.retain(|_, held| held.count() > 0);
        self.count(&tenants);
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
        let mut tenants = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        tenants.clear();
        self.count(&tenants);
    }
}
