//! Handshake-era sessions as every replica sees them: an ended session
//! (DELETE) is a key with the id's remaining lifetime, looked up by each
//! replica that is asked to serve the session; a session's subscriptions
//! are a set with the same lifetime, looked up by the replica that holds
//! the session's stream when a resource changes; its log level is a string
//! with the same lifetime, read by the replica that runs a call of the
//! session which may log. A session id is sealed
//! and carries its expiry, so nothing else needs the store.

use super::{Store, StoreError};

impl Store {
    fn ended_key(&self, nonce: &str) -> String {
        self.key(&["ended", nonce])
    }

    fn subscribed_key(&self, nonce: &str) -> String {
        self.key(&["subscribed", nonce])
    }

    fn level_key(&self, nonce: &str) -> String {
        self.key(&["level", nonce])
    }

    fn loaded_key(&self, nonce: &str) -> String {
        self.key(&["loaded", nonce])
    }

    /// The ids of the tools a session loaded (a JSON array), kept until the
    /// session would have expired.
    pub async fn set_loaded(
        &self,
        nonce: &str,
        ids: &str,
        expires_unix: u64,
    ) -> Result<(), StoreError> {
        let ttl = expires_unix.saturating_sub(crate::auth::now()).max(1);
        self.query(
            redis::cmd("SET")
                .arg(self.loaded_key(nonce))
                .arg(ids)
                .arg("EX")
                .arg(ttl),
        )
        .await
    }

    /// The ids the session with this nonce loaded (on any replica), if any.
    pub async fn loaded(&self, nonce: &str) -> Result<Option<String>, StoreError> {
        self.query(redis::cmd("GET").arg(self.loaded_key(nonce)))
            .await
    }

    /// The log level a session's client set, kept until the session would
    /// have expired.
    pub async fn set_level(
        &self,
        nonce: &str,
        level: &str,
        expires_unix: u64,
    ) -> Result<(), StoreError> {
        let ttl = expires_unix.saturating_sub(crate::auth::now()).max(1);
        self.query(
            redis::cmd("SET")
                .arg(self.level_key(nonce))
                .arg(level)
                .arg("EX")
                .arg(ttl),
        )
        .await
    }

    /// The log level the session with this nonce set (on any replica), if any.
    pub async fn level(&self, nonce: &str) -> Result<Option<String>, StoreError> {
        self.query(redis::cmd("GET").arg(self.level_key(nonce)))
            .await
    }

    /// Records that the session with this nonce ended, until it would have expired.
    pub async fn end_session(&self, nonce: &str, expires_unix: u64) -> Result<(), StoreError> {
        let ttl = expires_unix.saturating_sub(crate::auth::now()).max(1);
        let _: () = self
            .query(
                redis::cmd("SET")
                    .arg(self.ended_key(nonce))
                    .arg(1)
                    .arg("EX")
                    .arg(ttl),
            )
            .await?;
        let _: Result<i64, _> = self
            .query(
                redis::cmd("DEL")
                    .arg(self.subscribed_key(nonce))
                    .arg(self.level_key(nonce)),
            )
            .await;
        Ok(())
    }

    /// Whether the session with this nonce was ended (on any replica).
    pub async fn session_ended(&self, nonce: &str) -> Result<bool, StoreError> {
        self.query(redis::cmd("EXISTS").arg(self.ended_key(nonce)))
            .await
            .map(|n: i64| n > 0)
    }

    /// `resources/subscribe` (`on`) or `unsubscribe` of a session, kept
    /// until it would have expired.
    pub async fn subscribe(
        &self,
        nonce: &str,
        uri: &str,
        on: bool,
        expires_unix: u64,
    ) -> Result<(), StoreError> {
        let key = self.subscribed_key(nonce);
        if !on {
            let _: i64 = self.query(redis::cmd("SREM").arg(&key).arg(uri)).await?;
            return Ok(());
        }
        let ttl = expires_unix.saturating_sub(crate::auth::now()).max(1);
        let mut pipe = redis::pipe();
        pipe.cmd("SADD").arg(&key).arg(uri).ignore();
        pipe.cmd("EXPIRE").arg(&key).arg(ttl).ignore();
        self.query_pipe(&pipe).await
    }

    /// Whether the session with this nonce subscribed to `uri` (on any replica).
    pub async fn subscribed(&self, nonce: &str, uri: &str) -> Result<bool, StoreError> {
        self.query(
            redis::cmd("SISMEMBER")
                .arg(self.subscribed_key(nonce))
                .arg(uri),
        )
        .await
        .map(|n: i64| n > 0)
    }
}
