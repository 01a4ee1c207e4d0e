//! Starting one configured upstream's supervisors: its own process or
//! connection, and the children that serve tenants or client sessions its
//! own process does not (see `children`). An upstream whose protocol is
//! `auto` over HTTP is asked first which one it speaks (see `detect`); the
//! supervisor of that protocol starts once it has answered. Over stdio the
//! supervisor asks each time it would start a process of an upstream still
//! to be told.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::children::{Children, HttpMake, Make, Sharing, StreamableMake, Template};
use super::credentials::Credentials;
use super::detect::NotTold;
use super::env_credential::EnvCredential;
use super::{CallError, Dialect, Upstream};
use crate::config::{HttpSpec, TransportSpec, UpstreamSpec};
use crate::metrics::Metrics;

/// What starting one upstream needs.
pub struct Launch {
    pub up: Arc<Upstream>,
    pub spec: UpstreamSpec,
    pub sharing: Sharing,
    pub stop: CancellationToken,
    pub supervisors: TaskTracker,
    pub metrics: Metrics,
    pub client: Option<reqwest::Client>,
    /// The bound on obtained tokens every upstream's credentials share.
    pub tokens: Arc<crate::upstream::credentials::TokenBudget>,
    /// Users' consents, when the gateway asks for any.
    pub consents: Option<Arc<crate::upstream::credentials::Consents>>,
    pub max_frame: usize,
    pub max_server_requests: usize,
    /// How long an upstream's request waits for a client's answer.
    pub server_request_timeout: Duration,
}

impl Launch {
    /// Spawns its supervisors; over HTTP with `protocol: auto`, once the
    /// upstream said which protocol it speaks.
    pub fn start(self) -> Result<(), String> {
        match (&self.spec.transport, Dialect::of(self.spec.protocol)) {
            (TransportSpec::Stdio(stdio), _) => {
                let credential = self.env_credential()?;
                // The listing process of an upstream that acts for each
                // user gets no credential: it is nobody's.
                let own = credential.clone().filter(|c| !c.credentials.per_user());
                self.supervisors.spawn(super::stdio::run_with(
                    self.up.clone(),
                    stdio.clone(),
                    self.max_frame,
                    self.stop.clone(),
                    own,
                ));
                let make = Make::Stdio {
                    spec: stdio.clone(),
                    max_frame: self.max_frame,
                    credential,
                };
                self.run_children(make);
                Ok(())
            }
            (TransportSpec::Http(http), Some(dialect)) => {
                let http = http.clone();
                let credentials = self.credentials()?;
                self.start_http(&http, dialect, credentials)
            }
            (TransportSpec::Http(http), None) => {
                let http = http.clone();
                let credentials = self.credentials()?;
                let supervisors = self.supervisors.clone();
                supervisors.spawn(async move {
                    let Some(dialect) = self.told_over_http(&http, credentials.as_deref()).await
                    else {
                        return;
                    };
                    if let Err(e) = self.start_http(&http, dialect, credentials) {
                        tracing::error!(upstream = %self.up.name, error = %e, "cannot start upstream");
                    }
                });
                Ok(())
            }
        }
    }

    /// Asks the upstream until it answers in one protocol or the other (or
    /// it is stopped: `None`), waiting longer between attempts each time.
    async fn told_over_http(
        &self,
        http: &HttpSpec,
        credentials: Option<&Credentials>,
    ) -> Option<Dialect> {
        let client = self.client.clone()?;
        let mut backoff =
            super::backoff::Backoff::new(Duration::from_millis(100), Duration::from_secs(30));
        loop {
            // Bounded as a handshake over HTTP is.
            let wait = self.up.timeout().min(super::http::MAX_HANDSHAKE);
            // The question carries the upstream's credential, as every request does.
            let mut asking = std::borrow::Cow::Borrowed(http);
            if let Some(c) = credentials {
                match c.current().await {
                    Ok((value, _)) => {
                        let value = value.to_str().unwrap_or_default().to_owned();
                        asking
                            .to_mut()
                            .headers
                            .insert(c.header().to_string(), value);
                    }
                    Err(refusal) => {
                        self.up
                            .note_refusal(Some(&CallError::Credential(Box::new(refusal))));
                        // Down, not starting: listings do not wait for it.
                        self.up.disconnect();
                        tokio::select! {
                            () = tokio::time::sleep(backoff.next_delay()) => continue,
                            () = self.up.user_came() => continue,
                            () = self.stop.cancelled() => return None,
                        }
                    }
                }
            }
            let asked = super::detect::over_http(&client, &asking, wait);
            let told = tokio::select! {
                told = asked => told,
                () = self.stop.cancelled() => return None,
            };
            match told {
                Ok(dialect) => {
                    self.up.settle(dialect);
                    tracing::info!(upstream = %self.up.name, protocol = dialect.as_str(), "upstream protocol told at its handshake");
                    return Some(dialect);
                }
                Err(why) => {
                    match &why {
                        NotTold::Unreachable(_) => {
                            tracing::warn!(upstream = %self.up.name, url = %http.url, error = %why, "upstream unreachable; its protocol is asked again when it answers");
                        }
                        NotTold::Neither(_) => {
                            tracing::warn!(upstream = %self.up.name, url = %http.url, tried = super::detect::TRIED, error = %why, "upstream answered in neither protocol; set protocol: modelcontextprotocol or v1 to skip the question");
                        }
                    }
                    self.up.note_problem(&why.to_string());
                    // Down, not starting: listings do not wait for it.
                    self.up.disconnect();
                }
            }
            tokio::select! {
                () = tokio::time::sleep(backoff.next_delay()) => {}
                () = self.stop.cancelled() => return None,
            }
        }
    }

    /// A stdio upstream's credential and the variable it goes in, when it
    /// has `auth`.
    fn env_credential(&self) -> Result<Option<EnvCredential>, String> {
        let Some(var) = self.spec.auth.as_ref().and_then(|a| a.env.clone()) else {
            return Ok(None);
        };
        let (Some(auth), Some(client)) = (&self.spec.auth, &self.client) else {
            return Err("no HTTP client for a stdio upstream's credential".into());
        };
        let credentials = Credentials::new(
            &self.spec.name,
            auth.clone(),
            client.clone(),
            self.metrics.clone(),
            self.tokens.clone(),
            self.consents(auth),
        )?;
        let credentials = Arc::new(credentials);
        // Its own process holds a credential only when it is everyone's;
        // a per-user upstream's is listed by a process that holds none.
        if !credentials.per_user() {
            self.up.hold_credentials(credentials.clone());
        }
        Ok(Some(EnvCredential { credentials, var }))
    }

    /// Users' consents, for an upstream that asks for them.
    fn consents(
        &self,
        auth: &crate::config::upstream_auth::UpstreamAuth,
    ) -> Option<Arc<crate::upstream::credentials::Consents>> {
        let crate::config::upstream_auth::AuthMode::UserConsent(consent) = &auth.mode else {
            return None;
        };
        let consents = self.consents.clone()?;
        consents.register(&self.spec.name, consent);
        Some(consents)
    }

    /// The upstream's credential, when it has `auth`.
    fn credentials(&self) -> Result<Option<Arc<Credentials>>, String> {
        let (Some(auth), Some(client)) = (&self.spec.auth, &self.client) else {
            return Ok(None);
        };
        let credentials = Credentials::new(
            &self.spec.name,
            auth.clone(),
            client.clone(),
            self.metrics.clone(),
            self.tokens.clone(),
            self.consents(auth),
        )?;
        let credentials = Arc::new(credentials);
        self.up.hold_credentials(credentials.clone());
        Ok(Some(credentials))
    }

    fn start_http(
        &self,
        http: &HttpSpec,
        dialect: Dialect,
        credentials: Option<Arc<Credentials>>,
    ) -> Result<(), String> {
        let client = self
            .client
            .clone()
            .ok_or("no HTTP client for an HTTP upstream")?;
        let (up, stop) = (self.up.clone(), self.stop.clone());
        match dialect {
            Dialect::V1 => {
                if let Some(credentials) = credentials.clone().filter(|c| c.per_user()) {
                    self.run_children(Make::Http(Box::new(HttpMake {
                        client: client.clone(),
                        spec: http.clone(),
                        max_frame: self.max_frame,
                        credentials,
                    })));
                }
                let link = super::http::HttpLink::new(client, http, self.max_frame)
                    .map_err(|e| e.to_string())?
                    .with_credentials(credentials);
                self.supervisors
                    .spawn(super::http::run(up, Arc::new(link), stop));
            }
            Dialect::ModelContext => {
                let answers = super::streamable::ServerAnswers::new(
                    self.max_server_requests,
                    self.spec.timeout,
                    self.server_request_timeout,
                    self.metrics.clone(),
                );
                let make = Make::Streamable(Box::new(StreamableMake {
                    client: client.clone(),
                    spec: http.clone(),
                    max_frame: self.max_frame,
                    answers: answers.clone(),
                    credentials: credentials.clone(),
                }));
                let (link, events) = super::streamable::StreamableLink::new(
                    client,
                    http,
                    self.max_frame,
                    answers,
                    up.progress().clone(),
                    credentials,
                )
                .map_err(|e| e.to_string())?;
                self.run_children(make);
                self.supervisors
                    .spawn(super::streamable::run(up, link, events, stop));
            }
        }
        Ok(())
    }

    /// Runs the children of the upstream that serve tenants or client
    /// sessions its own process does not, where any may.
    fn run_children(&self, make: Make) {
        let acting = self.spec.auth.as_ref().is_some_and(|a| a.mode.per_user());
        if !acting && !self.spec.per_session && self.sharing == Sharing::Everyone {
            return;
        }
        let template = Template {
            make,
            bounds: self.spec.children,
            per_session: self.spec.per_session,
            sharing: self.sharing.clone(),
            wait: self.server_request_timeout,
        };
        let children = Children::new(
            &self.spec.name,
            template,
            self.stop.child_token(),
            &self.metrics,
        );
        self.up.run_children(children.clone());
        self.supervisors.spawn(children.run_reaper());
    }
}
