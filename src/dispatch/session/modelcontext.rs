//! A session's Model Context Protocol requests: each message read in that
//! protocol's terms (its handshake, `resources/subscribe`, a listen for
//! changes, a request answered in turn).

use super::*;

impl Session {
    /// One message of a client of the Model Context Protocol.
    pub(super) async fn on_modelcontext(&mut self, raw: &RawValue) -> bool {
        let via = Via {
            http: None,
            notifies: true,
            progress: None,
            log_level: self.log_level,
            asks: None,
            scanned: None,
            place: None,
            tools: None,
        };
        match classify(raw) {
            Incoming::Request { id, method, params } => {
                let era = mcp::Era::of_request(&method, params, None);
                if method == "initialize" && era == mcp::Era::Handshake {
                    self.can = mcp::ClientCan::of_initialize(params);
                }
                if method == "logging/setLevel" && era == mcp::Era::Handshake {
                    // Answered below as any request; its level kept for the calls after it.
                    if let Some(level) = mcp::level_of(params) {
                        self.log_level = Some(level);
                    }
                }
                match (&*method, era) {
                    ("initialize", mcp::Era::Handshake) => {
                        self.handshake.initialized = true;
                        let (reply, _) =
                            respond_traced(&self.dispatcher, &self.tenant, raw, false, via).await;
                        match reply {
                            Some(reply) => self.send(reply.into_vec()).await,
                            None => true,
                        }
                    }
                    ("subscriptions/listen", _) => self.open_listen(id, params).await,
                    ("resources/subscribe" | "resources/unsubscribe", mcp::Era::Handshake) => {
                        let mut reply = Vec::new();
                        match self.subscribe(uri_of(params), method == "resources/subscribe") {
                            Ok(()) => crate::jsonrpc::write_reply(
                                &mut reply,
                                Some(id),
                                crate::jsonrpc::Reply::Result(b"{}"),
                            ),
                            Err(e) => write_gateway_error(&mut reply, Some(id), &e),
                        }
                        self.send(reply).await
                    }
                    _ => self.dispatch(raw, via, era == mcp::Era::Handshake).await,
                }
            }
            Incoming::Notification { method, params } => {
                self.on_notification(&method, params);
                true
            }
            Incoming::Invalid { id, error } => {
                let mut reply = Vec::new();
                write_error(&mut reply, id, &error);
                self.send(reply).await
            }
            // An answer to a request of an upstream's forwarded to this
            // client goes back to it; any other is counted and dropped. An
            // answer gets no answer itself.
            Incoming::Response { id, outcome } => {
                let asks = self.dispatcher.asks();
                if asks.answer(&self.scope, id.get(), outcome) == Taken::Stray {
                    self.dispatcher.metrics().stray_answers.inc();
                }
                true
            }
            Incoming::Ignored => true,
        }
    }

    /// `subscriptions/listen`: a listen of the session's own, within its
    /// bound; its refusal is answered at once.
    async fn open_listen(&mut self, id: Json<'_>, params: Option<Json<'_>>) -> bool {
        let opened = if self.listens.len() >= MAX_LISTENS {
            Err(GatewayError::InvalidParams(format!(
                "a session holds at most {MAX_LISTENS} listens; cancel one first"
            )))
        } else {
            super::mcp::ModelContext::new(&self.dispatcher).open_listen(
                &self.tenant,
                id,
                params,
                None,
            )
        };
        match opened {
            Ok(filter) => {
                self.listen(id, filter);
                true
            }
            Err(e) => {
                let mut reply = Vec::new();
                write_gateway_error(&mut reply, Some(id), &e);
                self.send(reply).await
            }
        }
    }

    /// A client's notification: `initialized` starts the session's
    /// notifications; `cancelled` ends a listen, or drops a call in flight,
    /// which cancels it upstream too and leaves it unanswered.
    fn on_notification(&mut self, method: &str, params: Option<Json<'_>>) {
        match method {
            "notifications/initialized" => self.start_notifications(),
            "notifications/cancelled" => {
                if let Some(id) = cancelled_request(params) {
                    if let Some(listen) = self.listens.remove(id.get()) {
                        listen.abort();
                    }
                    if let Some(call) = self.calls.remove(id.get()) {
                        call.abort();
                    }
                }
            }
            _ => {}
        }
    }

    /// `resources/subscribe` (`on`) of a uri the tenant can read, within
    /// the bounds, or `resources/unsubscribe`.
    fn subscribe(&self, uri: Option<String>, on: bool) -> Result<(), GatewayError> {
        let uri = uri.ok_or_else(|| {
            GatewayError::InvalidParams("params must be an object {\"uri\": string}".into())
        })?;
        let mut subscribed = self
            .subscribed
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !on {
            subscribed.remove(&uri);
            return Ok(());
        }
        if !self.dispatcher.readable(&self.tenant, &uri) {
            return Err(GatewayError::ResourceNotFound(uri));
        }
        let budget = self.dispatcher.subscription_budget();
        subscribed
            .add(budget, &self.tenant.name, &uri)
            .map_err(|refused| match refused {
                crate::tenant::subscriptions::Refused::Session(_) => {
                    GatewayError::InvalidParams(refused.explain())
                }
                crate::tenant::subscriptions::Refused::Tenant(_) => GatewayError::OverCapacity {
                    reason: "subscription budget",
                    retry_after_secs: 1,
                },
            })
    }

    /// Opens a listen: its acknowledgment, then the changes it asked for,
    /// until the client cancels it or leaves.
    fn listen(&mut self, id: Json<'_>, filter: mcp::Filter) {
        let key: Box<str> = id.get().into();
        let tag = mcp::listen_tag(id);
        let ack = mcp::acknowledged(&tag, &filter);
        let out = self.out.clone();
        let mut watcher = Watcher::new(&self.dispatcher, &self.tenant);
        let (dispatcher, tenant) = (self.dispatcher.clone(), self.tenant.clone());
        let mut holder = self.credential.clone();
        let task = tokio::spawn(async move {
            if out.send(ack).await.is_err() {
                return;
            }
            while let Some(change) = watcher.next().await {
                if !filter.hears(&change) {
                    continue;
                }
                if !still_names(&mut holder, &tenant.name) {
                    return;
                }
                let message = match &change {
                    // As `tasks/get` would answer it, which asks its upstream.
                    Change::TaskStatus(status) => {
                        mcp::ModelContext::new(&dispatcher)
                            .task_notification(&tenant, status, &tag)
                            .await
                    }
                    change => Some(mcp::change_notification(change, Some(&tag))),
                };
                if let Some(message) = message
                    && out.send(message).await.is_err()
                {
                    return;
                }
            }
        });
        if let Some(old) = self.listens.insert(key, task) {
            old.abort();
        }
    }
}
