//! What changed for a tenant, as the Model Context Protocol's clients hear
//! it: a listing of a kind (after a reload, an upstream's new catalog, an
//! upstream going down or coming back), one resource, or one of the tenant's
//! tasks. A listing counts as changed only when what the tenant sees of it
//! differs, so a refresh that brought nothing new says nothing.

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use tokio::sync::{broadcast, watch};

use super::Dispatcher;
use crate::protocol::Kind;
use crate::tenant::Tenant;

/// One change a client may be told of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// What the tenant sees of this kind's listing changed.
    Listing(Kind),
    /// The resource with this namespaced id changed.
    Resource(Arc<str>),
    /// A task of the tenant's changed status: `notifications/tasks/status`
    /// params, its id the one the tenant holds.
    TaskStatus(Arc<str>),
}

/// What reaches a tenant's streams beside its listings.
#[derive(Debug, Clone)]
pub enum Announced {
    /// The resource with this namespaced id changed.
    Resource(Arc<str>),
    /// A task of the tenant's changed status (see [`Change::TaskStatus`]).
    TaskStatus(Arc<str>),
}

/// Follows one tenant's changes, by name: after a reload it follows what the
/// configuration then says of that tenant.
pub struct Watcher {
    dispatcher: Dispatcher,
    tenant: Arc<str>,
    listings: watch::Receiver<u64>,
    resources: Option<broadcast::Receiver<Announced>>,
    digests: [u64; 3],
    pending: VecDeque<Change>,
}

impl Watcher {
    pub fn new(dispatcher: &Dispatcher, tenant: &Tenant) -> Self {
        let listings = dispatcher.listings_changed();
        let mut w = Self {
            resources: dispatcher.subscribe_changes(tenant),
            dispatcher: dispatcher.clone(),
            tenant: tenant.name.clone(),
            listings,
            digests: [0; 3],
            pending: VecDeque::new(),
        };
        w.digests = w.digest_all();
        w
    }

    fn digest_all(&self) -> [u64; 3] {
        let tenant = self.dispatcher.tenant_named(&self.tenant);
        Kind::ALL.map(|kind| {
            let mut h = std::hash::DefaultHasher::new();
            if let Some(t) = &tenant {
                for part in self.dispatcher.listing(t, kind) {
                    part.hash(&mut h);
                }
                // Prompts of upstreams of the protocol are offered as those
                // listed them (with their arguments), beside the catalog,
                // and so are their resource templates.
                let own = match kind {
                    Kind::Prompt => self.dispatcher.own_prompts(t),
                    Kind::Resource => self.dispatcher.own_templates(t),
                    Kind::Tool => {
                        // What curation gives the Model Context Protocol
                        // face alone (bare names, titles) changes its listing too.
                        t.curation.as_ref().map(|c| c.digest).hash(&mut h);
                        Vec::new()
                    }
                };
                for (upstream, own) in own {
                    upstream.name.hash(&mut h);
                    for item in own.iter() {
                        serde_json::to_string(item).unwrap_or_default().hash(&mut h);
                    }
                }
            }
            h.finish()
        })
    }

    /// The next change; `None` once the gateway is shutting down.
    pub async fn next(&mut self) -> Option<Change> {
        loop {
            if let Some(c) = self.pending.pop_front() {
                return Some(c);
            }
            tokio::select! {
                changed = self.listings.changed() => {
                    changed.ok()?;
                    let now = self.digest_all();
                    for (i, kind) in Kind::ALL.into_iter().enumerate() {
                        if now[i] != self.digests[i] {
                            self.pending.push_back(Change::Listing(kind));
                        }
                    }
                    self.digests = now;
                }
                id = recv(&mut self.resources) => match id {
                    Ok(Announced::Resource(id)) => return Some(Change::Resource(id)),
                    Ok(Announced::TaskStatus(params)) => return Some(Change::TaskStatus(params)),
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(skipped = n, "resource change notifications dropped: the client fell behind");
                    }
                    Err(broadcast::error::RecvError::Closed) => self.resources = None,
                },
            }
        }
    }
}

async fn recv(
    rx: &mut Option<broadcast::Receiver<Announced>>,
) -> Result<Announced, broadcast::error::RecvError> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}
