//! Tasks across replicas. An upstream may keep a task in its session with
//! the replica that created it (the TypeScript SDK does), so another
//! replica's session cannot see it. With a shared store a task's sealed id
//! names its replica, and a request about it that reaches another replica
//! is carried there through the store's bus: the replica that created the
//! task says at once that it has the request, then sends its answer,
//! within the upstream's call timeout. When no replica says so in time (it
//! is gone, or the store is), the request is tried where it arrived. A
//! `tasks/list` asks every replica for the tenant's tasks it created and
//! lists what those that answer in time give, with its own.
//!
//! A `tasks/result` carried to another replica hears nothing of what the
//! upstream asks while the task waits for input: those requests are
//! answered there as a call's that no client can be asked.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;

use super::Dispatcher;
use super::held::news::{call_error, failure};
use super::tasks::TaskRef;
use crate::error::GatewayError;
use crate::store::bus::TaskAsked;
use crate::tenant::Tenant;
use crate::upstream::{CallError, TaskOp, Upstream};

/// How long the replica that created a task has to say it has a request.
const HOME_WAIT: Duration = Duration::from_secs(2);

/// How long `tasks/list` waits for the other replicas' tasks.
const LIST_WAIT: Duration = Duration::from_secs(2);

/// Answers one waiter may queue: one per replica that answers a `tasks/list`.
const QUEUED: usize = 64;

/// What one replica tells another about a task request, as the bus carries it.
#[derive(Serialize, Deserialize)]
#[serde(tag = "k", rename_all = "snake_case")]
enum TaskNews {
    /// The replica that created the task has the request.
    Here,
    /// The upstream's answer, the task's id the tenant's.
    Answered { j: Value },
    /// No such task of the tenant's there.
    NotFound,
    /// The upstream's failure (see `held::news::failure`).
    Failed { e: String, m: String },
    /// The tenant's tasks created there, for a `tasks/list`.
    Tasks { j: Vec<Value> },
}

fn encode(news: &TaskNews) -> String {
    serde_json::to_string(news).unwrap_or_default()
}

/// A request's place among those waiting for other replicas, left when dropped.
struct Waiter<'a> {
    dispatcher: &'a Dispatcher,
    id: String,
    news: mpsc::Receiver<String>,
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        self.dispatcher.task_book().waiters.remove(self.id.as_str());
    }
}

impl Waiter<'_> {
    async fn next(&mut self, within: Duration) -> Option<TaskNews> {
        let news = tokio::time::timeout(within, self.news.recv())
            .await
            .ok()??;
        serde_json::from_str(&news).ok()
    }
}

impl Dispatcher {
    fn task_waiter(&self) -> Waiter<'_> {
        let (tx, news) = mpsc::channel(QUEUED);
        let id = super::held::random_hex::<16>();
        self.task_book().waiters.insert(id.as_str().into(), tx);
        Waiter {
            dispatcher: self,
            id,
            news,
        }
    }

    /// Hands another replica's answer to the task request waiting under `waiter`.
    pub fn task_news(&self, waiter: &str, news: &str) {
        if let Some(tx) = self.task_book().waiters.get(waiter) {
            let _ = tx.try_send(news.to_owned());
        }
    }

    /// A request about a task another replica created, asked there: its
    /// answer, or `None` when the task is this replica's, there is no
    /// store, or that replica did not say in time that it has the request.
    pub(super) async fn task_at_home(
        &self,
        tenant: &Tenant,
        op: TaskOp,
        sealed: &str,
        up: &Upstream,
        task: &TaskRef,
    ) -> Option<Result<(serde_json::Value, TaskRef), GatewayError>> {
        let store = self.store()?;
        if task.replica.is_empty() || task.replica == store.replica_id() {
            return None;
        }
        let mut waiter = self.task_waiter();
        let asked = TaskAsked {
            tenant: tenant.name.to_string(),
            method: op.method().to_owned(),
            task: sealed.to_owned(),
            to: task.replica.clone(),
            waiter: waiter.id.clone(),
        };
        store.announce_task_asked(asked).await.ok()?;
        if !matches!(waiter.next(HOME_WAIT).await, Some(TaskNews::Here)) {
            tracing::debug!(replica = %task.replica, "the replica that created a task did not answer; asked here");
            return None;
        }
        let failed = |error| GatewayError::Upstream {
            upstream: up.name.clone(),
            error,
        };
        // The other replica keeps the upstream's timeout; this one waits a
        // little longer for its word.
        let answered = match waiter.next(up.timeout() + HOME_WAIT).await {
            Some(TaskNews::Answered { j }) => Ok((j, task.clone())),
            Some(TaskNews::NotFound) => Err(GatewayError::TaskNotFound),
            Some(TaskNews::Failed { e, m }) => Err(failed(call_error(&e, m))),
            None => Err(failed(CallError::Timeout)),
            Some(TaskNews::Here | TaskNews::Tasks { .. }) => Err(failed(CallError::protocol(
                "the other replica answered out of turn",
            ))),
        };
        Some(answered)
    }

    /// The tenant's tasks created through the other replicas, from those
    /// that answer within [`LIST_WAIT`]; none without a store.
    pub(super) async fn list_tasks_elsewhere(&self, tenant: &Tenant) -> Vec<Value> {
        let Some(store) = self.store() else {
            return Vec::new();
        };
        let others = store.replicas().saturating_sub(1);
        if others == 0 {
            return Vec::new();
        }
        let mut waiter = self.task_waiter();
        let asked = TaskAsked {
            tenant: tenant.name.to_string(),
            method: TaskOp::List.method().to_owned(),
            task: String::new(),
            to: String::new(),
            waiter: waiter.id.clone(),
        };
        if store.announce_task_asked(asked).await.is_err() {
            return Vec::new();
        }
        let deadline = tokio::time::Instant::now() + LIST_WAIT;
        let mut listed = Vec::new();
        for _ in 0..others {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match waiter.next(left).await {
                Some(TaskNews::Tasks { j }) => listed.extend(j),
                Some(_) => {}
                None => break,
            }
        }
        listed
    }

    /// Another replica's request about a task created here (or, for
    /// `tasks/list`, about the tenant's tasks created here), answered to
    /// it through the store.
    pub fn answer_task_asked(&self, origin: &str, asked: TaskAsked) {
        let (Some(store), Some(tenant)) = (self.store().cloned(), self.tenant_named(&asked.tenant))
        else {
            return;
        };
        let op = match asked.method.as_str() {
            m if m == TaskOp::Get.method() => TaskOp::Get,
            m if m == TaskOp::Result.method() => TaskOp::Result,
            m if m == TaskOp::Cancel.method() => TaskOp::Cancel,
            m if m == TaskOp::List.method() => TaskOp::List,
            _ => return,
        };
        let (this, origin) = (self.clone(), origin.to_owned());
        tokio::spawn(async move {
            let tell = |news: TaskNews| {
                let (store, origin, waiter) = (&store, &origin, &asked.waiter);
                async move {
                    store
                        .announce_round_news(origin, waiter, &encode(&news))
                        .await
                        .is_ok()
                }
            };
            if op == TaskOp::List {
                tell(TaskNews::Tasks {
                    j: this.list_tasks_here(&tenant).await,
                })
                .await;
                return;
            }
            if !tell(TaskNews::Here).await {
                return;
            }
            let news = match this.task_request_here(&tenant, op, &asked.task, None).await {
                Ok((j, _)) => TaskNews::Answered { j },
                Err(GatewayError::TaskNotFound) => TaskNews::NotFound,
                Err(GatewayError::Upstream { error, .. }) => {
                    let (e, m) = failure(&error);
                    TaskNews::Failed { e, m }
                }
                Err(other) => TaskNews::Failed {
                    e: "protocol_error".into(),
                    m: other.to_string(),
                },
            };
            tell(news).await;
        });
    }
}
