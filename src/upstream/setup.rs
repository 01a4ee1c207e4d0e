//! How an upstream is set up and heard: serving one session, running
//! children, retirement, listing bounds, pins and credentials; the
//! changes and task statuses its subscribers hear.

use super::*;

impl Upstream {
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

    pub(super) fn is_retired(&self) -> bool {
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

    /// Whether the latest credential obtained refreshed a user's consent.
    pub fn credential_refreshed(&self) -> bool {
        self.credentials
            .get()
            .is_some_and(|c| c.refreshed_at() != 0 && c.refreshed_at() == c.fetches())
    }

    /// Pins this upstream's tool definitions in `store` (before it starts).
    pub fn pin(self: &mut Arc<Self>, store: Arc<pins::PinStore>) {
        if let Some(up) = Arc::get_mut(self) {
            up.pins = Some(store);
        }
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
}
