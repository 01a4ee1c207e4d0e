//! Tasks, as the 2025-11-25 revision defines them: a tool call an upstream
//! runs as a task, then `tasks/get`, `tasks/result`, `tasks/list` and
//! `tasks/cancel` about it.
//!
//! The client never sees the upstream's own task id. It is handed
//! `{tag}.{upstream}.{incarnation}.{id}.{tool}` (each part but the tag
//! base64url), the tag an HMAC (`crate::seal`) binding the tenant, the
//! upstream, the incarnation of the process (or HTTP session) that made the
//! task, the upstream's id and the tool: any replica with the same secret
//! routes a request about the task to its upstream with no table, and an id
//! of another tenant's, or an altered or forged one, reads exactly like one
//! that does not exist. So does an id of an incarnation that is gone: an
//! upstream that restarted numbers its tasks anew, and its `t1` is not the
//! `t1` the old id named.
//! Upstreams shared by tenants list every tenant's tasks, so each replica
//! remembers (bounded, per tenant) the tasks it created, and `tasks/list`
//! shows a tenant only those. The same memory takes an upstream's
//! `notifications/tasks/status` to the streams of the tenant whose task it
//! is, its id sealed; a status of a task no tenant created here reaches no one.
//!
//! An upstream keeps a task in its session with the replica that created
//! it (the TypeScript SDK does), so with a shared store the sealed id also
//! names that replica, and a request about the task that reaches another is
//! carried there (see `task_homes`).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use dashmap::DashMap;
use serde_json::Value;
use serde_json::value::RawValue;

use super::Dispatcher;
use super::audit::Audit;
use crate::error::GatewayError;
use crate::jsonrpc::{Json, JsonBuf};
use crate::protocol::mcpid;
use crate::tenant::Tenant;
use crate::upstream::progress::Report;
use crate::upstream::{CallError, TaskOp, Upstream};

/// What the seal of a task id is for.
const PURPOSE: &str = "task";
/// Tasks a replica remembers per tenant for `tasks/list`; past it the oldest is forgotten.
pub const REMEMBERED_PER_TENANT: usize = 1024;
/// Pages of an upstream's `tasks/list` followed at most.
const MAX_LIST_PAGES: usize = 50;
/// Where a task's result names the task it belongs to.
pub const RELATED_TASK_META: &str = "io.modelcontextprotocol/related-task";

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// A task as the gateway knows it from the id it handed out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRef {
    pub upstream: String,
    /// The incarnation of the upstream's instance that made it (see
    /// `Upstream::incarnation`).
    pub incarnation: String,
    /// The upstream's own task id.
    pub id: String,
    /// The tool's id on its upstream (the catalog's original id).
    pub tool: String,
    /// The replica that created it, in the shared store (empty without one).
    pub replica: String,
}

pub(super) fn seal(sealer: &crate::seal::Sealer, tenant: &str, task: &TaskRef) -> String {
    let tag = sealer.tag(
        PURPOSE,
        &[
            tenant,
            &task.upstream,
            &task.incarnation,
            &task.id,
            &task.tool,
            &task.replica,
        ],
    );
    let mut sealed = format!(
        "{tag}.{}.{}.{}.{}",
        B64.encode(&task.upstream),
        B64.encode(&task.incarnation),
        B64.encode(&task.id),
        B64.encode(&task.tool)
    );
    if !task.replica.is_empty() {
        sealed.push('.');
        sealed.push_str(&B64.encode(&task.replica));
    }
    sealed
}

fn open(sealer: &crate::seal::Sealer, tenant: &str, sealed: &str) -> Option<TaskRef> {
    let mut parts = sealed.split('.');
    let (tag, upstream, incarnation) = (parts.next()?, parts.next()?, parts.next()?);
    let (id, tool) = (parts.next()?, parts.next()?);
    let replica = parts.next();
    if parts.next().is_some() {
        return None;
    }
    let text = |part: &str| String::from_utf8(B64.decode(part).ok()?).ok();
    let task = TaskRef {
        upstream: text(upstream)?,
        incarnation: text(incarnation)?,
        id: text(id)?,
        tool: text(tool)?,
        replica: match replica {
            Some(replica) => text(replica).filter(|r| !r.is_empty())?,
            None => String::new(),
        },
    };
    sealer
        .verify(
            PURPOSE,
            &[
                tenant,
                &task.upstream,
                &task.incarnation,
                &task.id,
                &task.tool,
                &task.replica,
            ],
            tag,
        )
        .then_some(task)
}

/// The tasks each tenant created through this replica, newest last.
#[derive(Default)]
pub struct TaskBook {
    by_tenant: DashMap<Arc<str>, Mutex<VecDeque<Remembered>>>,
    /// Requests about tasks asked of other replicas, waiting for their
    /// answers (see `task_homes`).
    pub(super) waiters: DashMap<Box<str>, tokio::sync::mpsc::Sender<String>>,
}

/// A task the book remembers: its upstream, the incarnation that made it,
/// the upstream's id, its tool.
struct Remembered {
    upstream: Arc<str>,
    incarnation: String,
    id: String,
    tool: String,
}

impl TaskBook {
    fn remember(&self, tenant: &Arc<str>, upstream: &Arc<str>, task: &TaskRef) {
        let entry = self.by_tenant.entry(tenant.clone()).or_default();
        let mut tasks = entry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if tasks.len() >= REMEMBERED_PER_TENANT {
            tasks.pop_front();
        }
        tasks.push_back(Remembered {
            upstream: upstream.clone(),
            incarnation: task.incarnation.clone(),
            id: task.id.clone(),
            tool: task.tool.clone(),
        });
    }

    /// A tenant's remembered tasks, by upstream: each one's tool by its
    /// incarnation and id.
    fn of(&self, tenant: &str) -> HashMap<Arc<str>, HashMap<(String, String), String>> {
        let mut by_upstream: HashMap<Arc<str>, HashMap<(String, String), String>> = HashMap::new();
        if let Some(tasks) = self.by_tenant.get(tenant) {
            let tasks = tasks
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for task in tasks.iter() {
                by_upstream
                    .entry(task.upstream.clone())
                    .or_default()
                    .insert(
                        (task.incarnation.clone(), task.id.clone()),
                        task.tool.clone(),
                    );
            }
        }
        by_upstream
    }

    /// The tenants that created the task `id` on `upstream`'s incarnation
    /// `incarnation` here, each with the tool it runs: at most one, since
    /// tenants share an incarnation only of an upstream `shared: true`,
    /// whose ids are then its own to keep apart.
    fn creators(&self, upstream: &str, incarnation: &str, id: &str) -> Vec<(Arc<str>, String)> {
        let mut found = Vec::new();
        for book in self.by_tenant.iter() {
            let tasks = book
                .value()
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(t) = tasks
                .iter()
                .find(|t| &*t.upstream == upstream && t.incarnation == incarnation && t.id == id)
            {
                found.push((book.key().clone(), t.tool.clone()));
            }
        }
        found
    }

    /// Forgets a tenant's tasks on `upstream` that are not in `alive` (its
    /// upstream no longer lists them: they expired, or their incarnation
    /// is gone).
    fn keep_only(&self, tenant: &str, upstream: &str, alive: &HashSet<(String, String)>) {
        if let Some(tasks) = self.by_tenant.get(tenant) {
            let mut tasks = tasks
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            tasks.retain(|t| {
                &*t.upstream != upstream || alive.contains(&(t.incarnation.clone(), t.id.clone()))
            });
        }
    }
}

/// The `taskId` of a task object (a `Task`, or what `tasks/get` answers).
fn task_id(task: &Value) -> Option<&str> {
    task.get("taskId").and_then(Value::as_str)
}

impl Dispatcher {
    pub(super) fn task_book(&self) -> &TaskBook {
        &self.inner.tasks
    }

    /// This replica's id in the shared store, which task ids name (empty without one).
    fn replica_id(&self) -> String {
        self.store()
            .map(|s| s.replica_id().to_owned())
            .unwrap_or_default()
    }

    /// `tools/call` as a task: the checks of any call (the tenant's policy
    /// and scopes, the arguments against the tool's schema), then the
    /// upstream creates the task; its `CreateTaskResult` with the sealed id.
    /// The tenant's limits were taken when the request was admitted.
    pub async fn create_task(
        &self,
        tenant: &Tenant,
        id: &str,
        arguments: Json<'_>,
        task: Json<'_>,
        audit: &mut Audit,
    ) -> Result<Value, GatewayError> {
        let (up, entry) = self.checked_tool(tenant, id, arguments, audit).await?;
        if !entry.as_task || !up.tasks().tool_calls {
            return Err(GatewayError::TaskUnsupported(id.to_owned()));
        }
        let upstream_error = |error| GatewayError::Upstream {
            upstream: up.name.clone(),
            error,
        };
        let instance = up
            .instance(&tenant.name, tenant.user.as_ref(), None)
            .map_err(upstream_error)?;
        // Taken once it runs (a tenant's child may be starting) and before
        // the call, and the call's task refused when another incarnation
        // answered it: an id is never bound to an incarnation that did not
        // make its task.
        instance.wait_started().await;
        let incarnation = instance.incarnation();
        let created = instance
            .create_task(&entry, arguments, task)
            .await
            .map_err(upstream_error)?;
        if instance.incarnation() != incarnation {
            return Err(upstream_error(CallError::unavailable(
                "the upstream restarted while it created the task",
            )));
        }
        let mut created: Value = serde_json::from_str(created.get()).unwrap_or(Value::Null);
        let own = created
            .get("task")
            .and_then(task_id)
            .map(str::to_owned)
            .ok_or_else(|| GatewayError::Upstream {
                upstream: up.name.clone(),
                error: CallError::protocol("its answer to a task-augmented call holds no task id"),
            })?;
        let task = TaskRef {
            upstream: up.name.to_string(),
            incarnation: incarnation.to_string(),
            id: own,
            tool: entry.original_id.clone(),
            replica: self.replica_id(),
        };
        created["task"]["taskId"] = seal(self.sealer(), &tenant.name, &task).into();
        self.task_book().remember(&tenant.name, &up.name, &task);
        Ok(created)
    }

    /// The task a sealed id names for `tenant`, and its upstream: one the
    /// tenant no longer sees, another tenant's, or a forged id is not found.
    pub(super) fn task_of(
        &self,
        tenant: &Tenant,
        sealed: &str,
    ) -> Result<(Arc<Upstream>, TaskRef), GatewayError> {
        let task = open(self.sealer(), &tenant.name, sealed).ok_or(GatewayError::TaskNotFound)?;
        if !tenant.sees(&task.upstream) {
            return Err(GatewayError::TaskNotFound);
        }
        let up = self
            .upstream(&task.upstream)
            .ok_or(GatewayError::TaskNotFound)?;
        Ok((up, task))
    }

    /// Whether a sealed task id is one of `tenant`'s tasks it still sees.
    pub fn task_is_tenants(&self, tenant: &Tenant, sealed: &str) -> bool {
        self.task_of(tenant, sealed).is_ok()
    }

    /// `tasks/get`, `tasks/result` or `tasks/cancel` of the task a sealed id
    /// names: the upstream's answer as a value, with the task's id the sealed
    /// one wherever the upstream named its own (the task object's `taskId`,
    /// the result's related-task `_meta`, the text of an error).
    ///
    /// `heard`: for `tasks/result`, what the upstream asks on its stream
    /// while the task waits for input (its `input_required` status), handed
    /// over as a call's reports are.
    ///
    /// A task another replica created is asked about there, through the
    /// shared store (`heard` then hears nothing); when that replica does not
    /// say it has the request in time, it is tried here.
    pub async fn task_request(
        &self,
        tenant: &Tenant,
        op: TaskOp,
        sealed: &str,
        heard: Option<&(dyn Fn(Report) + Sync)>,
    ) -> Result<(Value, TaskRef), GatewayError> {
        let (up, task) = self.task_of(tenant, sealed)?;
        if let Some(answered) = self.task_at_home(tenant, op, sealed, &up, &task).await {
            return answered;
        }
        self.task_request_here(tenant, op, sealed, heard).await
    }

    /// [`Self::task_request`] on this replica's session with the upstream.
    pub(super) async fn task_request_here(
        &self,
        tenant: &Tenant,
        op: TaskOp,
        sealed: &str,
        heard: Option<&(dyn Fn(Report) + Sync)>,
    ) -> Result<(Value, TaskRef), GatewayError> {
        let (up, task) = self.task_of(tenant, sealed)?;
        let instance = up
            .instance(&tenant.name, tenant.user.as_ref(), None)
            .map_err(|error| GatewayError::Upstream {
                upstream: up.name.clone(),
                error,
            })?;
        // The incarnation is checked before and after: an answer of one
        // that started meanwhile is not this task's.
        let same = || *instance.incarnation() == *task.incarnation;
        if !same() {
            return Err(GatewayError::TaskNotFound);
        }
        let answer = match op {
            TaskOp::Result => instance.task_result(&task.id, heard).await,
            op => {
                let params = serde_json::json!({ "taskId": task.id }).to_string();
                let params: Box<RawValue> = serde_json::from_str(&params)
                    .unwrap_or_else(|_| unreachable!("written as JSON"));
                instance.task_request(op, (&*params).into()).await
            }
        };
        if !same() {
            return Err(GatewayError::TaskNotFound);
        }
        let answer = answer.map_err(|error| GatewayError::Upstream {
            upstream: up.name.clone(),
            error: match error {
                CallError::Remote(raw) => CallError::Remote(sealed_in(&raw, &task.id, sealed)),
                error => error,
            },
        })?;
        let mut answer: Value = serde_json::from_str(answer.get()).unwrap_or(Value::Null);
        if answer.get("taskId").is_some() {
            answer["taskId"] = sealed.into();
        }
        if let Some(related) = answer
            .get_mut("_meta")
            .and_then(|m| m.get_mut(RELATED_TASK_META))
            .filter(|r| r.is_object())
        {
            related["taskId"] = sealed.into();
        }
        if op == TaskOp::Result
            && let Some(content) = answer.get_mut("content")
        {
            // Links in the result become uris the gateway serves, as in a call's.
            self.rewrite_links(tenant, &up, content);
        }
        Ok((answer, task))
    }

    /// `tasks/list`: the tenant's tasks as their upstreams list them now,
    /// with sealed ids, in one page: those it created through this replica,
    /// and with a shared store those of every replica that answers in time
    /// (see `task_homes`). An upstream that is down or does not list tasks
    /// shows none.
    pub async fn list_tasks(&self, tenant: &Tenant) -> Value {
        let mut listed = self.list_tasks_here(tenant).await;
        listed.extend(self.list_tasks_elsewhere(tenant).await);
        serde_json::json!({ "tasks": listed })
    }

    /// The tenant's tasks created through this replica, as their upstreams
    /// list them now (see [`Self::list_tasks`]).
    pub(super) async fn list_tasks_here(&self, tenant: &Tenant) -> Vec<Value> {
        let mut listed = Vec::new();
        let replica = self.replica_id();
        for (upstream, ids) in self.task_book().of(&tenant.name) {
            let Some(up) = self
                .upstream(&upstream)
                .filter(|u| tenant.sees(&u.name) && u.tasks().list)
            else {
                continue;
            };
            let Ok(instance) = up.instance(&tenant.name, tenant.user.as_ref(), None) else {
                continue;
            };
            let incarnation = instance.incarnation();
            let Some(tasks) = drain_tasks(&instance).await else {
                continue;
            };
            if instance.incarnation() != incarnation {
                continue;
            }
            let mut alive = HashSet::new();
            for mut task in tasks {
                // The tool is not in a listed task: the id's seal binds the
                // one remembered when the task was created. Only tasks of
                // the incarnation listing them are the tenant's.
                let Some(key) = task_id(&task).map(|id| (incarnation.to_string(), id.to_owned()))
                else {
                    continue;
                };
                let Some(tool) = ids.get(&key).cloned() else {
                    continue;
                };
                let task_ref = TaskRef {
                    upstream: upstream.to_string(),
                    incarnation: key.0.clone(),
                    id: key.1.clone(),
                    tool,
                    replica: replica.clone(),
                };
                task["taskId"] = seal(self.sealer(), &tenant.name, &task_ref).into();
                alive.insert(key);
                listed.push(task);
            }
            self.task_book().keep_only(&tenant.name, &upstream, &alive);
        }
        listed
    }

    /// An upstream's `notifications/tasks/status`: to the open streams of
    /// the tenant that created the task through this replica (here, and on
    /// every replica through the shared store), the task's id the one sealed
    /// for it; dropped (and logged) when no tenant did.
    pub async fn announce_task_status(&self, upstream: &str, incarnation: &str, params: &JsonBuf) {
        let Ok(mut status) = serde_json::from_str::<Value>(params.get()) else {
            return;
        };
        let Some(own) = task_id(&status).map(str::to_owned) else {
            tracing::debug!(upstream, "a task status without a task id, dropped");
            return;
        };
        let creators = self.task_book().creators(upstream, incarnation, &own);
        if creators.is_empty() {
            tracing::debug!(
                upstream,
                "a status of a task no tenant created here, dropped"
            );
        }
        for (tenant, tool) in creators {
            let task = TaskRef {
                upstream: upstream.to_owned(),
                incarnation: incarnation.to_owned(),
                id: own.clone(),
                tool,
                replica: self.replica_id(),
            };
            status["taskId"] = seal(self.sealer(), &tenant, &task).into();
            let status = status.to_string();
            self.tell_task_status(&tenant, &status);
            if let Some(store) = self.store()
                && let Err(e) = store.announce_task_status(&tenant, &status).await
            {
                tracing::debug!(error = %e, "a task's status not shared with the other replicas");
            }
        }
    }

    /// A task status of `tenant`'s (the notification's params, its id the
    /// tenant's) to this replica's streams of it.
    pub fn tell_task_status(&self, tenant: &str, status: &str) {
        if let Some(sender) = self.inner.changes.get(tenant) {
            // No open stream is not an error.
            let _ = sender.send(crate::dispatch::watch::Announced::TaskStatus(status.into()));
        }
    }

    /// The namespaced id of the tool a task runs.
    pub fn task_tool(&self, task: &TaskRef) -> String {
        mcpid::namespace(self.gateway_id(), &task.upstream, &task.tool)
    }
}

/// An upstream's whole `tasks/list`, across its pages (bounded); `None`
/// when it cannot be had.
async fn drain_tasks(up: &Upstream) -> Option<Vec<Value>> {
    let mut tasks = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_LIST_PAGES {
        let params = match &cursor {
            Some(c) => serde_json::json!({ "cursor": c }),
            None => serde_json::json!({}),
        }
        .to_string();
        let params: Box<RawValue> = serde_json::from_str(&params).ok()?;
        let page = up
            .task_request(TaskOp::List, (&*params).into())
            .await
            .ok()?;
        let mut page: Value = serde_json::from_str(page.get()).ok()?;
        if let Some(Value::Array(listed)) = page.get_mut("tasks").map(Value::take) {
            tasks.extend(listed);
        }
        cursor = page
            .get("nextCursor")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if cursor.is_none() {
            break;
        }
    }
    Some(tasks)
}

/// An upstream's error text with its own task id replaced by the sealed one.
fn sealed_in(raw: &JsonBuf, own: &str, sealed: &str) -> JsonBuf {
    if own.is_empty() || !raw.get().contains(own) {
        return raw.clone();
    }
    let own_json = serde_json::to_string(own).unwrap_or_default();
    let inner = &own_json[1..own_json.len() - 1];
    let replaced = raw.get().replace(inner, sealed);
    match serde_json::from_str::<&RawValue>(&replaced) {
        Ok(v) => Json::from(v).to_buf(),
        Err(_) => raw.clone(),
    }
}

#[cfg(test)]
mod tests;
