//! The tools a handshake-era session over HTTP loaded (`load_tools`): kept
//! in the session's record here (within the tenant's bound of records) and,
//! with a store, for every replica until the session would have expired. A
//! store that is down leaves them to this replica, as a session's log level.

use futures_util::future::BoxFuture;

use super::mcp_sessions::{McpSessions, Opened, Refused};
use crate::dispatch::discovery::loaded::SessionTools;

/// One request's view of its session's loaded tools.
pub struct SessionLoads<'a> {
    pub sessions: &'a McpSessions,
    pub opened: Opened,
}

impl SessionTools for SessionLoads<'_> {
    fn loaded(&self) -> BoxFuture<'_, Vec<String>> {
        Box::pin(async move {
            if let Some(store) = self.sessions.store()
                && let Ok(shared) = store.loaded(&self.opened.nonce).await
            {
                return shared
                    .and_then(|ids| serde_json::from_str(&ids).ok())
                    .unwrap_or_default();
            }
            self.sessions.loaded_here(&self.opened)
        })
    }

    fn keep(&self, ids: Vec<String>) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let text = serde_json::to_string(&ids).unwrap_or_default();
            self.sessions
                .keep_loaded_here(&self.opened, ids)
                .map_err(|refused| match refused {
                    Refused::Full { retry_after_secs } => format!(
                        "the gateway keeps as many sessions' state as it may: try again in {retry_after_secs} s"
                    ),
                    _ => "the session's tools could not be kept".to_owned(),
                })?;
            if let Some(store) = self.sessions.store()
                && let Err(e) = store
                    .set_loaded(&self.opened.nonce, &text, self.opened.expires)
                    .await
            {
                tracing::debug!(error = %e, "a session's loaded tools kept on this replica only");
            }
            Ok(())
        })
    }
}
