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
//! A 2026-07-28 client's poll of a task waiting for input, and its
//! `tasks/update`, are carried the same way, so the task's watch (see
//! `task_input`) lives where the task does. A handshake-era client's
//! `tasks/result` carried to another replica hears nothing of what the
//! upstream asks while the task waits for input: those requests are
//! refused there, as a call's that no client can be asked.

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
    /// What the upstream asks of a task waiting for input there, as a
    /// poll's `inputRequests` (none yet: `null`).
    Input { j: Option<Value> },
}

/// The bus's name for a poll of a task's input (see `task_input`).
const INPUT: &str = "mcp-gateway/taskInput";
/// The bus's name for `tasks/update`.
const UPDATE: &str = "tasks/update";

/// What a request about a task asks of the replica that created it.
struct Asked<'a> {
    method: &'a str,
    declared: Option<[bool; 3]>,
    responses: Option<String>,
    /// How long its answer may take once that replica has it.
    within: Duration,
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

    /// Asks the replica that created `task` about it, through the store:
    /// its answer (`None` when none came within `asked.within`), or `None`
    /// when the task is this replica's, there is no store, or that replica
    /// did not say in time that it has the request.
    async fn ask_home(
        &self,
        tenant: &Tenant,
        sealed: &str,
        task: &TaskRef,
        asked: Asked<'_>,
    ) -> Option<Option<TaskNews>> {
        let store = self.store()?;
        if task.replica.is_empty() || task.replica == store.replica_id() {
            return None;
        }
        let mut waiter = self.task_waiter();
        let message = TaskAsked {
            tenant: tenant.name.to_string(),
            method: asked.method.to_owned(),
            task: sealed.to_owned(),
            to: task.replica.clone(),
            waiter: waiter.id.clone(),
            declared: asked.declared,
            responses: asked.responses,
        };
        store.announce_task_asked(message).await.ok()?;
        if !matches!(waiter.next(HOME_WAIT).await, Some(TaskNews::Here)) {
            tracing::debug!(replica = %task.replica, "the replica that created a task did not answer; asked here");
            return None;
        }
        Some(waiter.next(asked.within).await)
    }

    /// A request about a task another replica created, asked there: its
    /// answer, or `None` when it is to be asked here (see [`Self::ask_home`]).
    pub(super) async fn task_at_home(
        &self,
        tenant: &Tenant,
        op: TaskOp,
        sealed: &str,
        up: &Upstream,
        task: &TaskRef,
    ) -> Option<Result<(Value, TaskRef), GatewayError>> {
        // The other replica keeps the upstream's timeout; this one waits a
        // little longer for its word.
        let asked = Asked {
            method: op.method(),
            declared: None,
            responses: None,
            within: up.timeout() + HOME_WAIT,
        };
        let news = self.ask_home(tenant, sealed, task, asked).await?;
        Some(match news {
            Some(TaskNews::Answered { j }) => Ok((j, task.clone())),
            news => Err(unexpected(news, up)),
        })
    }

    /// A poll of the input of a task another replica created, watched
    /// there (see `task_input`); `None` when it is to be watched here.
    pub(super) async fn task_input_at_home(
        &self,
        tenant: &Tenant,
        sealed: &str,
        declared: [bool; 3],
    ) -> Option<Result<Option<Value>, GatewayError>> {
        let (up, task) = self.task_of(tenant, sealed).ok()?;
        let asked = Asked {
            method: INPUT,
            declared: Some(declared),
            responses: None,
            within: super::task_input::FIRST_ASK_WAIT + HOME_WAIT,
        };
        let news = self.ask_home(tenant, sealed, &task, asked).await?;
        Some(match news {
            Some(TaskNews::Input { j }) => Ok(j),
            // Nothing said in time reads as nothing asked yet.
            None => Ok(None),
            news => Err(unexpected(news, &up)),
        })
    }

    /// `tasks/update` of a task another replica created, to its watch
    /// there; `None` when it is to be answered here.
    pub(super) async fn task_update_at_home(
        &self,
        tenant: &Tenant,
        sealed: &str,
        responses: Option<crate::jsonrpc::Json<'_>>,
    ) -> Option<Result<(), GatewayError>> {
        let (up, task) = self.task_of(tenant, sealed).ok()?;
        let asked = Asked {
            method: UPDATE,
            declared: None,
            responses: responses.map(|r| r.get().to_owned()),
            within: HOME_WAIT,
        };
        let news = self.ask_home(tenant, sealed, &task, asked).await?;
        Some(match news {
            Some(TaskNews::Answered { .. }) => Ok(()),
            news => Err(unexpected(news, &up)),
        })
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
            declared: None,
            responses: None,
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
            m if m == TaskOp::Get.method() => Some(TaskOp::Get),
            m if m == TaskOp::Result.method() => Some(TaskOp::Result),
            m if m == TaskOp::Cancel.method() => Some(TaskOp::Cancel),
            m if m == TaskOp::List.method() => Some(TaskOp::List),
            INPUT | UPDATE => None,
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
            if op == Some(TaskOp::List) {
                tell(TaskNews::Tasks {
                    j: this.list_tasks_here(&tenant).await,
                })
                .await;
                return;
            }
            if !tell(TaskNews::Here).await {
                return;
            }
            let (id, declared) = (&asked.task, asked.declared.unwrap_or_default());
            let news = match op {
                Some(op) => this
                    .task_request_here(&tenant, op, id, None)
                    .await
                    .map(|(j, _)| TaskNews::Answered { j }),
                None if asked.method == INPUT => this
                    .task_input_here(&tenant, id, declared)
                    .await
                    .map(|j| TaskNews::Input { j }),
                None => {
                    let responses: Option<Box<serde_json::value::RawValue>> = asked
                        .responses
                        .as_deref()
                        .and_then(|r| serde_json::from_str(r).ok());
                    let responses = responses.as_deref().map(crate::jsonrpc::Json::from);
                    this.task_update_here(&tenant, id, responses)
                        .map(|()| TaskNews::Answered { j: Value::Null })
                }
            };
            tell(news.unwrap_or_else(|error| failed_news(&error))).await;
        });
    }
}

/// A failure as news carries it back.
fn failed_news(error: &GatewayError) -> TaskNews {
    match error {
        GatewayError::TaskNotFound => TaskNews::NotFound,
        GatewayError::Upstream { error, .. } => {
            let (e, m) = failure(error);
            TaskNews::Failed { e, m }
        }
        other => TaskNews::Failed {
            e: "protocol_error".into(),
            m: other.to_string(),
        },
    }
}

/// The error a news that is not the answer asked for stands for.
fn unexpected(news: Option<TaskNews>, up: &Upstream) -> GatewayError {
    let failed = |error| GatewayError::Upstream {
        upstream: up.name.clone(),
        error,
    };
    match news {
        Some(TaskNews::NotFound) => GatewayError::TaskNotFound,
        Some(TaskNews::Failed { e, m }) => failed(call_error(&e, m)),
        None => failed(CallError::Timeout),
        Some(_) => failed(CallError::protocol(
            "the other replica answered out of turn",
        )),
    }
}
