//! What the agent edge needs, shared by every connection and request: the
//! dispatcher, the key store, the bounds of bodies, batches, sessions and
//! connections, and the shutdown signal.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::calls::Calls;
use super::mcp_sessions::McpSessions;
use super::session;
use crate::dispatch::Dispatcher;
use crate::metrics::Metrics;
use crate::tenant::{KeyStore, Places};

/// What the agent edge needs; a cheap clone.
#[derive(Clone)]
pub struct AgentState {
    pub dispatcher: Dispatcher,
    /// Swapped whole on reload.
    pub keys: Arc<arc_swap::ArcSwap<KeyStore>>,
    pub max_body_bytes: usize,
    pub max_batch: usize,
    pub body_read_timeout: std::time::Duration,
    pub sessions: session::SessionLimits,
    /// Connections one tenant may hold (see `conn_place`), and how many each holds.
    pub max_connections_per_tenant: usize,
    pub connections: Places,
    pub metrics: Metrics,
    /// Origins whose requests are served (see `GatewaySettings::allowed_origins`).
    pub allowed_origins: Vec<String>,
    /// Cancelled when the gateway starts shutting down: long-lived streams end gracefully.
    pub shutdown: CancellationToken,
    /// The handshake era's sessions, when `gateway.session_secret` is set.
    pub mcp_sessions: Option<McpSessions>,
    /// Their calls in flight here, for `notifications/cancelled`.
    pub calls: Calls,
    /// Users' consents to upstreams: the browser's steps and the
    /// connections users list and revoke (`/oauth/upstream/`).
    pub consents: Arc<arc_swap::ArcSwapOption<crate::upstream::credentials::Consents>>,
}
