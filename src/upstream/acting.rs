//! An upstream that acts for the user (`auth` of a per-user mode): each
//! user's calls run on a child of their own (a Streamable HTTP session, or
//! an MCP v1.0 link), whose credential is theirs alone (see `children`).
//! Its listings are shared: the upstream's own connection lists it with
//! the credential of the latest caller who needed a listing while it had
//! none, so it waits, down, for its first such caller.

use std::sync::Arc;

use super::credentials::Refusal;
use super::{CallError, Status, Upstream};
use crate::tenant::User;

impl Upstream {
    /// Whether it acts for the user, and has no listing now: a caller's
    /// listing (or call) asks for one with their credential.
    pub fn awaits_user(&self) -> bool {
        self.credentials
            .get()
            .is_some_and(|c| c.per_user() && !self.is_child())
            && self.status() == Status::Down
    }

    /// Asks for a listing with `user`'s credential, when it
    /// [`Self::awaits_user`]: it is starting from now on, until its
    /// handshake ends (see `Upstream::wait_first_start`). Without a user
    /// nothing changes, and a call is answered that a user is needed.
    pub fn list_for(&self, tenant: &Arc<str>, user: Option<&Arc<User>>) {
        let (Some(user), Some(credentials)) = (user, self.credentials.get()) else {
            return;
        };
        if !self.awaits_user() {
            return;
        }
        credentials.offer(tenant, user);
        self.set_status(Status::Starting);
        self.user_came.notify_one();
    }

    /// Whether it is a child that could not start for want of its
    /// user's credential (a consent not given yet, say): a call that comes
    /// may bring what it lacked, so the child is started anew for it.
    pub(crate) fn lacks_credential(&self) -> bool {
        self.is_child()
            && self.status() == Status::Down
            && matches!(self.refusal(), Some(CallError::Credential(_)))
    }

    /// Returns when a caller asked for a listing (see [`Self::list_for`]):
    /// the supervisor's wait before its next handshake ends at once.
    pub(crate) async fn user_came(&self) {
        self.user_came.notified().await;
    }

    /// A user's child's credential acts for `user`'s newest token.
    pub(crate) fn act_for(&self, tenant: &Arc<str>, user: &Arc<User>) {
        if let Some(credentials) = self.credentials.get() {
            credentials.offer(tenant, user);
        }
    }

    /// The error a call of this upstream gets while it has no listing for
    /// this caller: the reason no credential could be had (no user, or
    /// the user's refused).
    pub fn unlisted_error(&self, user: Option<&Arc<User>>) -> Option<CallError> {
        let credentials = self.credentials.get()?;
        if !credentials.per_user() || self.status() == Status::Ready {
            return None;
        }
        match user {
            None => Some(CallError::Credential(Box::new(Refusal::no_user()))),
            Some(_) => self.refusal(),
        }
    }
}
