//! A request's place among its tenant's calls in flight, which a call that
//! outlives the request (held across its client's `input_required` rounds)
//! takes with it, so that the tenant's `max_concurrency` counts every call
//! running upstream for it.

use super::Dispatcher;
use crate::error::GatewayError;
use crate::jsonrpc::{Json, scan};
use crate::tenant::{Admission, Tenant};

/// A request's place among its tenant's calls in flight (its admission),
/// which a call held for its client's retry takes with it: a held call
/// still runs upstream, and counts against the tenant's `max_concurrency`
/// until it ends. The retry that continues it is admitted against the
/// tenant's rate alone (see `continues_round`), its place the held call's;
/// a retry that starts a call upstream takes a place then ([`Self::ensure`]).
#[derive(Default)]
pub struct Place(std::sync::Mutex<Option<Admission>>);

impl Place {
    /// The place `admission` holds.
    pub fn new(admission: Admission) -> Self {
        Place(std::sync::Mutex::new(Some(admission)))
    }

    pub(super) fn take(&self) -> Option<Admission> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    /// Takes a place for `tenant` now when it holds none (a retry, which
    /// was admitted at its rate alone, starting a call upstream).
    pub(super) async fn ensure(
        &self,
        dispatcher: &Dispatcher,
        tenant: &Tenant,
    ) -> Result<(), GatewayError> {
        let empty = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_none();
        if empty {
            let admitted = dispatcher.admit(tenant, 1).await?;
            *self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(admitted);
        }
        Ok(())
    }
}

/// Whether a request continues an `input_required` round (a 2026-07-28
/// `tools/call` carrying `requestState`): admitted at the tenant's rate
/// alone, since the call it continues holds its place, or takes one when it
/// reaches an upstream (see [`Place`]).
pub fn continues_round(method: &str, params: Option<Json<'_>>) -> bool {
    // Most calls carry no such member, which a byte search tells before
    // the params are parsed.
    method == "tools/call"
        && params.is_some_and(|p| {
            memchr::memmem::find(p.get().as_bytes(), b"\"requestState\"").is_some()
        })
        && scan::members(params, ["requestState"])[0].is_some()
}
