//! Input to a task, between eras. A 2026-07-28 client of the tasks
//! extension polls `tasks/get` and, when its task is `input_required`,
//! answers the poll's `inputRequests` with `tasks/update`. A handshake-era
//! upstream (the 2025-11-25 revision's tasks) sends what it needs as a
//! request on the stream of an open `tasks/result` instead. When a poll
//! finds such a task waiting for input, the gateway opens `tasks/result`
//! upstream in a task of its own (a *watch*); the request the upstream sends
//! on it is the poll's one `inputRequests` entry (under a key of the
//! gateway's, the same on every poll until it is answered), and the answer
//! `tasks/update` brings goes to the waiting upstream. A `ping` is answered
//! here; a request the client did not declare it answers is refused.
//!
//! A watch ends with its `tasks/result` (the task's end), or once nobody
//! polled or answered it for `gateway.server_request_timeout_ms` (the
//! upstream's request is then refused); a tenant keeps at most
//! [`PER_TENANT`]. It lives in the replica that created the task, where
//! the upstream's session holds it: with a shared store, a poll or an
//! update that reaches another replica is carried there (see `task_homes`).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::tenant::reports::{ReportReceiver, report_queue};
use dashmap::DashMap;
use serde_json::{Value, json};

use super::Dispatcher;
use super::held::{PER_TENANT, ask_key, for_the_client};
use crate::error::GatewayError;
use crate::jsonrpc::{Json, scan};
use crate::tenant::Tenant;
use crate::upstream::TaskOp;
use crate::upstream::progress::{Ask, AskReply, Report};

/// How long a poll waits for the upstream to send what it asks once its
/// `tasks/result` is open (it sends a queued request at once).
pub(super) const FIRST_ASK_WAIT: Duration = Duration::from_secs(2);

/// A watch's key: its tenant, and the task's sealed id.
type WatchKey = (Arc<str>, String);

/// The open watches.
#[derive(Clone, Default)]
pub struct TaskInputs(Arc<DashMap<WatchKey, Arc<Watch>>>);

pub struct Watch {
    /// What the upstream asked, under its key, until it is answered.
    asked: Mutex<Option<(String, Ask)>>,
    reports: tokio::sync::Mutex<ReportReceiver<Report>>,
    /// When a poll or an answer last came (shared with the driver, which
    /// ends the watch once it is older than the round lifetime).
    touched: Arc<Mutex<Instant>>,
    driver: tokio::task::AbortHandle,
}

impl Watch {
    fn touch(&self) {
        *self.touched.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
    }

    /// The upstream's request waiting for the client, as `inputRequests`.
    fn input_requests(&self) -> Option<Value> {
        let asked = self.asked.lock().unwrap_or_else(PoisonError::into_inner);
        let (key, ask) = asked.as_ref()?;
        let params: Value = ask
            .params
            .as_ref()
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_else(|| json!({}));
        Some(json!({ key.as_str(): {"method": &*ask.method, "params": params} }))
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

impl TaskInputs {
    fn per_tenant(&self, tenant: &str) -> usize {
        self.0.iter().filter(|w| &*w.key().0 == tenant).count()
    }
}

impl Dispatcher {
    pub(super) fn task_inputs(&self) -> &TaskInputs {
        &self.inner.task_inputs
    }

    /// A 2026-07-28 client's poll found its task `input_required`: what the
    /// upstream asks, as the poll's `inputRequests` (a watch opened for it
    /// when there is none); `None` when it asks nothing the client can be
    /// asked yet, or the task went on. `declared`: which of `held::ASKABLE` the
    /// client declared.
    ///
    /// A task another replica created is watched there (see `task_homes`).
    pub async fn task_input(
        &self,
        tenant: &Tenant,
        sealed: &str,
        declared: [bool; 3],
    ) -> Result<Option<Value>, GatewayError> {
        if let Some(answered) = self.task_input_at_home(tenant, sealed, declared).await {
            return answered;
        }
        self.task_input_here(tenant, sealed, declared).await
    }

    /// [`Self::task_input`], watched from this replica.
    pub(super) async fn task_input_here(
        &self,
        tenant: &Tenant,
        sealed: &str,
        declared: [bool; 3],
    ) -> Result<Option<Value>, GatewayError> {
        let watch = self.watch(tenant, sealed)?;
        watch.touch();
        if let Some(asked) = watch.input_requests() {
            return Ok(Some(asked));
        }
        let mut reports = watch.reports.lock().await;
        let deadline = tokio::time::Instant::now() + FIRST_ASK_WAIT;
        loop {
            let report = match tokio::time::timeout_at(deadline, reports.recv()).await {
                Ok(Some(report)) => report,
                // The task's result came (its driver left the table as it
                // ended), or nothing was asked in time.
                Ok(None) | Err(_) => return Ok(None),
            };
            let Report::Ask(ask) = report else {
                continue;
            };
            let Some(ask) = for_the_client(ask, declared) else {
                continue;
            };
            *watch.asked.lock().unwrap_or_else(PoisonError::into_inner) = Some((ask_key(), ask));
            return Ok(watch.input_requests());
        }
    }

    /// `tasks/update`: the client's answers, by the keys of the
    /// `inputRequests` it was given, to the upstream waiting for them. An
    /// answer to a key nobody asked is ignored, as the extension says.
    /// A task another replica created takes its answers there.
    pub async fn task_update(
        &self,
        tenant: &Tenant,
        sealed: &str,
        responses: Option<Json<'_>>,
    ) -> Result<(), GatewayError> {
        if let Some(answered) = self.task_update_at_home(tenant, sealed, responses).await {
            return answered;
        }
        self.task_update_here(tenant, sealed, responses)
    }

    /// [`Self::task_update`], to this replica's watch.
    pub(super) fn task_update_here(
        &self,
        tenant: &Tenant,
        sealed: &str,
        responses: Option<Json<'_>>,
    ) -> Result<(), GatewayError> {
        // Another tenant's id, or a forged one, reads as unknown.
        self.task_of(tenant, sealed)?;
        let Some(watch) = self
            .task_inputs()
            .0
            .get(&(tenant.name.clone(), sealed.to_owned()))
            .map(|w| w.clone())
        else {
            return Ok(());
        };
        watch.touch();
        let mut asked = watch.asked.lock().unwrap_or_else(PoisonError::into_inner);
        let answered = asked
            .as_ref()
            .is_some_and(|(key, _)| scan::members(responses, [key.as_str()])[0].is_some());
        if answered && let Some((key, ask)) = asked.take() {
            let [response] = scan::members(responses, [key.as_str()]);
            if let Some(response) = response {
                let _ = ask.reply.send(AskReply::Answered(Ok(response.to_buf())));
            }
        }
        Ok(())
    }

    /// The task's watch, opened when it has none (within the tenant's bound).
    fn watch(&self, tenant: &Tenant, sealed: &str) -> Result<Arc<Watch>, GatewayError> {
        let key = (tenant.name.clone(), sealed.to_owned());
        if let Some(watch) = self.task_inputs().0.get(&key) {
            return Ok(watch.clone());
        }
        // The task is the tenant's before anything is opened for it.
        self.task_of(tenant, sealed)?;
        if self.task_inputs().per_tenant(&tenant.name) >= PER_TENANT {
            return Err(GatewayError::OverCapacity {
                reason: "tasks waiting for input",
                retry_after_secs: 1,
            });
        }
        let tenant = self
            .tenant_named(&tenant.name)
            .ok_or(GatewayError::TaskNotFound)?;
        // Entered before its driver starts, so that a driver that ends at
        // once leaves nothing behind; a poll that raced this one shares it.
        let vacant = match self.task_inputs().0.entry(key.clone()) {
            dashmap::Entry::Occupied(e) => return Ok(e.get().clone()),
            dashmap::Entry::Vacant(v) => v,
        };
        let (heard, reports) = report_queue(
            Some(tenant.reports.clone()),
            Some(self.metrics().reports_dropped.clone()),
        );
        let (this, id, lifetime) = (self.clone(), sealed.to_owned(), self.round_lifetime());
        let touched = Arc::new(Mutex::new(Instant::now()));
        let (ended, touched2) = (key.clone(), touched.clone());
        let driver = tokio::spawn(async move {
            let heard = move |report: Report| {
                let _ = crate::upstream::progress::queue(&heard, report);
            };
            let result = this.task_request(&tenant, TaskOp::Result, &id, Some(&heard));
            tokio::pin!(result);
            loop {
                let idle_until =
                    *touched2.lock().unwrap_or_else(PoisonError::into_inner) + lifetime;
                tokio::select! {
                    _ = &mut result => break,
                    () = tokio::time::sleep_until(idle_until.into()) => {
                        let last = *touched2.lock().unwrap_or_else(PoisonError::into_inner);
                        if last.elapsed() >= lifetime {
                            break;
                        }
                    }
                }
            }
            // Gone from the table: its reports' sender is dropped with this
            // task, and what it still asks is refused to the upstream.
            let _ended = this.task_inputs().0.remove(&ended);
        });
        let watch = Arc::new(Watch {
            asked: Mutex::new(None),
            reports: tokio::sync::Mutex::new(reports),
            touched,
            driver: driver.abort_handle(),
        });
        vacant.insert(watch.clone());
        Ok(watch)
    }
}
