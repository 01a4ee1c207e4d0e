//! A stdio upstream's credential (`auth.env`): put, bare, in the named
//! environment variable of each process started, obtained just before it
//! starts. A process is restarted with a fresh credential once its own is
//! past reuse (and no call is in flight on it), since a process cannot be
//! handed a new environment. A user's child gets that user's credential
//! alone (see `children`); the listing process of a per-user upstream gets
//! none.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use super::credentials::Credentials;
use super::{CallError, Upstream};
use crate::config::StdioSpec;

/// The credential a stdio process is started with, and the variable it
/// goes in.
#[derive(Clone)]
pub struct EnvCredential {
    pub credentials: Arc<Credentials>,
    pub var: String,
}

impl EnvCredential {
    /// `spec` with the credential in its environment; the refusal, noted
    /// on `up` (its calls are told it), when none can be had.
    pub async fn spec_for<'a>(
        &self,
        up: &Upstream,
        spec: &'a StdioSpec,
    ) -> Result<Cow<'a, StdioSpec>, String> {
        match self.credentials.current().await {
            Ok((value, _)) => {
                up.note_refusal(None);
                let mut spec = spec.clone();
                let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
                spec.env.insert(self.var.clone(), value);
                Ok(Cow::Owned(spec))
            }
            Err(refusal) => {
                let why = refusal.detail.clone();
                up.note_refusal(Some(&CallError::Credential(Box::new(refusal))));
                Err(why)
            }
        }
    }

    /// Returns once the credential the process was started with is past
    /// reuse and no call is in flight on `up`: it is then restarted.
    pub async fn past_reuse(&self, up: &Upstream) {
        let Some(until) = self.credentials.reused_until() else {
            return std::future::pending().await;
        };
        tokio::time::sleep_until(until.into()).await;
        while up.calls_in_flight() > 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
