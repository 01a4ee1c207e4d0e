//! An upstream's connection and catalog: the handshake over a new link,
//! its listings admitted (bounds, pins), relistings when it says they
//! changed or they are past their time, and the changes announced.

use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use crate::jsonrpc::Json;
use crate::metrics::Metrics;
use crate::protocol::{Capabilities, Kind, catalog};

use super::*;

impl Upstream {
    /// Handshake over a new connection, then fill the catalog, then serve.
    pub async fn connect(&self, link: Arc<dyn Transport>) -> Result<(), CallError> {
        let mut nonce = [0u8; 12];
        let _ = getrandom::fill(&mut nonce);
        let incarnation: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
        // Before the handshake: no answer of the new process is ever
        // read under the old one's incarnation.
        write(&self.incarnation, Arc::from(incarnation));
        let caps = match self.dialect() {
            Dialect::V1 => v1::handshake(self, &*link).await?,
            Dialect::ModelContext => self.mc.handshake(self, &*link).await?,
        };
        write(&self.capabilities, Some(caps));
        self.keeps_sessions.store(
            link.as_streamable().is_some_and(|l| l.has_session()),
            std::sync::atomic::Ordering::Release,
        );
        if let Some(tenant) = &self.tenant {
            // A child serves calls: the upstream's own process lists. A
            // Streamable HTTP session is ready once its stream is (its
            // supervisor says so).
            let streamable = link.as_streamable().is_some();
            write(&self.link, Some(link));
            if !streamable {
                self.mark_ready();
            }
            tracing::debug!(upstream = %self.name, tenant = %tenant, "a tenant's child is connected");
            return Ok(());
        }
        self.refresh_with(&*link, caps).await;
        write(&self.link, Some(link));
        write(&self.problem, None);
        self.set_status(Status::Ready);
        self.listings_may_have_changed();
        self.metrics
            .upstream_up
            .with_label_values(&[&self.name])
            .set(1);
        // What it offers, as listed: a kind it does not offer counts 0.
        let listed = {
            let catalog = self.catalog.read().unwrap_or_else(PoisonError::into_inner);
            let mut listed = [0; 3];
            for kind in Kind::ALL {
                listed[kind.index()] = catalog.listing(kind).count;
            }
            listed
        };
        tracing::info!(
            upstream = %self.name,
            protocol = self.dialect().as_str(),
            tools = listed[Kind::Tool.index()],
            resources = listed[Kind::Resource.index()],
            prompts = listed[Kind::Prompt.index()],
            "upstream ready"
        );
        Ok(())
    }

    /// Returns when a call has found the upstream unreachable since the last time.
    pub(crate) async fn suspected(&self) {
        self.suspect.notified().await;
    }

    /// The connection is gone: calls fail fast until the next `connect`.
    pub fn disconnect(&self) {
        write(&self.link, None);
        self.set_status(Status::Down);
        self.listings_may_have_changed();
        if self.is_retired() || self.is_child() {
            // A reload replaced it: its successor owns the upstream's series now.
            return;
        }
        self.metrics
            .upstream_up
            .with_label_values(&[&self.name])
            .set(0);
    }

    /// Notes that a listing being read may be kept for `ttl` at most.
    pub(super) fn listing_kept_for(&self, ttl: Duration) {
        let mut kept = self
            .relist
            .ttl
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        kept.0 = Some(kept.0.map_or(ttl, |t| t.min(ttl)));
    }

    /// Re-reads every declared listing and swaps the catalog. A listing that fails
    /// to load keeps its previous contents. A listing whose server said how
    /// long it may be kept (`ttlMs`) is read again once that is over.
    async fn refresh_with(&self, link: &dyn Transport, caps: Capabilities) {
        self.relist
            .ttl
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .0 = None;
        let mut fresh = Vec::new();
        for kind in Kind::ALL {
            let method = kind.list_method();
            if !caps.allows(method) {
                continue;
            }
            if self.dialect() == Dialect::ModelContext {
                if let Some(built) = self.mc.list(self, link, kind).await {
                    self.admit_listing(kind, built, &mut fresh).await;
                }
                continue;
            }
            if let Some(built) = v1::list(self, link, kind).await {
                self.admit_listing(kind, built, &mut fresh).await;
            }
        }
        let next = self.catalog().with(fresh);
        for kind in Kind::ALL {
            self.metrics
                .definitions_listed
                .with_label_values(&[&self.name, kind.as_str()])
                .set(next.listing(kind).count as i64);
        }
        write(&self.catalog, next);
        self.listings_may_have_changed();
        let mut kept = self
            .relist
            .ttl
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        kept.1 = kept.0.map(|ttl| Instant::now() + ttl.max(MIN_LISTING_TTL));
        drop(kept);
        // The relister waits for the new deadline.
        self.relist.wake.notify_one();
    }

    /// Pins, logs and counts a freshly built listing, and queues it for the catalog.
    async fn admit_listing(
        &self,
        kind: Kind,
        mut built: catalog::Built,
        fresh: &mut Vec<(Kind, catalog::Built)>,
    ) {
        if kind == Kind::Tool {
            self.apply_pins(&mut built).await;
        }
        // Said once per definition and reason, not at every relisting: a
        // warning for what no client gets, a debug line for what only MCP
        // v1.0's listings leave out.
        let catalog = self.catalog();
        let before = catalog.dropped(kind);
        for d in built.dropped.iter().filter(|d| !before.contains(d)) {
            let id = d.id.as_deref().unwrap_or("");
            if d.v1_only {
                tracing::debug!(upstream = %self.name, kind = kind.as_str(), id, reason = %d.reason, "definition left out of MCP v1.0 listings");
            } else {
                tracing::warn!(upstream = %self.name, kind = kind.as_str(), id, reason = %d.reason, "definition left out of listings");
            }
        }
        self.metrics
            .definitions_dropped
            .with_label_values(&[&self.name, kind.as_str()])
            .inc_by(built.dropped.len() as u64);
        // Moved into the catalog, so sessions can say why a definition is missing.
        fresh.push((kind, built));
    }

    /// Quarantines the tools whose definition matches no pin (see
    /// `pins::record`). If the pins cannot be read or written, every tool is
    /// quarantined: pinning fails closed.
    async fn apply_pins(&self, built: &mut catalog::Built) {
        let Some(store) = &self.pins else { return };
        let seen = std::mem::take(&mut built.seen);
        let quarantined = match store.check_now(&self.name, &seen).await {
            Ok(checked) => checked.quarantined,
            Err(e) => {
                tracing::error!(upstream = %self.name, pins = %store.place(), error = %e, "cannot use the pins; quarantining every tool of this upstream");
                seen.iter()
                    .map(|s| (s.id.clone(), pins::Reason::Changed))
                    .collect()
            }
        };
        for (id, reason) in &quarantined {
            let new = seen
                .iter()
                .find(|s| s.id == *id)
                .map_or("", |s| s.fingerprint.as_str());
            tracing::warn!(upstream = %self.name, tool = %id, reason = reason.as_str(), fingerprint = new, pins = %store.place(), "tool definition matches no pin: quarantined until reviewed (GET /pins on the admin listener, or mcp-gateway pins list)");
        }
        self.metrics
            .definitions_quarantined
            .with_label_values(&[&self.name])
            .set(quarantined.len() as i64);
        let ids = quarantined.into_iter().map(|(id, _)| id).collect();
        built.quarantine(&ids);
    }

    /// Refreshes the catalog unless that was done less than a second ago (or is under way).
    pub async fn refresh_on_demand(&self) {
        let mut last = self.refresh_gate.lock().await;
        if last.is_some_and(|t| t.elapsed() < MIN_REFRESH_INTERVAL) {
            return;
        }
        let (Some(link), Some(caps)) = (read(&self.link), self.capabilities()) else {
            return;
        };
        *last = Some(Instant::now());
        drop(last);
        self.refresh_with(&*link, caps).await;
    }

    /// Handles a notification the upstream sent.
    pub fn on_notification(&self, method: &str, params: Option<Json<'_>>) {
        if self.dialect() == Dialect::ModelContext {
            return self.mc.on_notification(self, method, params);
        }
        v1::on_notification(self, method, params);
    }

    /// Sends later notifications to the store's relay before acting on them.
    pub fn relay_to(&self, relay: Relay) {
        let _ = self.relay.set(relay);
    }

    /// A notification said a listing changed, or the resource with this
    /// original id did: relayed to the other replicas when they share a
    /// store (the relay then asks this one for the relisting, unless another
    /// replica heard the same and speaks for it); acted on here alone when
    /// there is no store or its queue is full, so that nothing is lost.
    pub(super) fn heard(&self, changed: Option<&str>) {
        if let Some(tenant) = &self.tenant {
            // A tenant's child: what changed in it is that tenant's alone,
            // told to it; the listings are the upstream's own process's.
            let Some(original) = changed else {
                return self.relist_soon(None);
            };
            if let Some(relay) = self.relay.get() {
                let heard = Heard {
                    upstream: self.name.clone(),
                    changed: Some(original.to_owned()),
                    shared: false,
                    tenant: Some(tenant.clone()),
                };
                if relay.to.try_send(heard).is_ok() {
                    return;
                }
            }
            return self.announce_change_to(tenant, original);
        }
        if let Some(relay) = self.relay.get() {
            let heard = Heard {
                upstream: self.name.clone(),
                changed: changed.map(str::to_owned),
                shared: relay.shared,
                tenant: None,
            };
            if relay.to.try_send(heard).is_ok() {
                return;
            }
        }
        self.relist_soon(changed);
    }

    /// Asks for a relisting (a notification said a listing changed) and,
    /// once it is done, the announcement that the resource with this
    /// original id changed. Returns at once: [`Self::relister`] does the work.
    pub(crate) fn relist_soon(&self, changed: Option<&str>) {
        if let Some(original) = changed {
            let mut announce = self
                .relist
                .announce
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if announce.len() < MAX_PENDING_ANNOUNCEMENTS {
                announce.insert(original.to_owned());
            } else if !announce.contains(original) {
                self.metrics
                    .upstream_protocol_errors
                    .with_label_values(&[&self.name])
                    .inc();
            }
        }
        self.relist
            .wanted
            .store(true, std::sync::atomic::Ordering::Release);
        self.relist.wake.notify_one();
    }

    /// Runs the relistings [`Self::relist_soon`] asked for, one at a time,
    /// each announcing the resource changes asked for before it started.
    /// The upstream's supervisor runs it while the connection is served.
    pub(crate) async fn relister(&self) {
        if self.is_child() {
            // The upstream's own relister lists what a child asks for.
            return std::future::pending().await;
        }
        loop {
            let due = self
                .relist
                .ttl
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .1;
            match due {
                Some(due) => tokio::select! {
                    () = self.relist.wake.notified() => {}
                    () = tokio::time::sleep_until(tokio::time::Instant::from_std(due)) => {
                        self.relist.wanted.store(true, std::sync::atomic::Ordering::Release);
                    }
                },
                None => self.relist.wake.notified().await,
            }
            while self
                .relist
                .wanted
                .swap(false, std::sync::atomic::Ordering::AcqRel)
            {
                let announce = std::mem::take(
                    &mut *self
                        .relist
                        .announce
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner),
                );
                let started = Instant::now();
                self.refresh_now().await;
                for original in announce {
                    self.announce_change(&original);
                }
                // Relistings are spaced: a server that says "changed" without
                // end gets a few relistings a second, not one per notification.
                tokio::time::sleep_until(tokio::time::Instant::from_std(started + MIN_RELIST_GAP))
                    .await;
            }
        }
    }

    /// Refreshes the catalog now.
    async fn refresh_now(&self) {
        if let (Some(link), Some(caps)) = (read(&self.link), self.capabilities()) {
            let mut last = self.refresh_gate.lock().await;
            self.refresh_with(&*link, caps).await;
            *last = Some(Instant::now());
        }
    }

    /// Tells `tenant`'s sessions alone that the resource with this original
    /// id changed (in its own child).
    pub fn announce_change_to(&self, tenant: &str, original: &str) {
        let namespaced = crate::protocol::mcpid::namespace(&self.gateway_id, &self.name, original);
        let _ = self.changes.send((Some(tenant.into()), namespaced.into()));
    }

    /// Tells the tenants' sessions that the resource with this original id changed.
    fn announce_change(&self, original: &str) {
        let namespaced = crate::protocol::mcpid::namespace(&self.gateway_id, &self.name, original);
        let _ = self.changes.send((None, namespaced.into()));
    }

    pub(crate) fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}
