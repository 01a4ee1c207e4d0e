//! Tasks through the face, in both eras, over the core's tasks (see
//! `dispatch::core::tasks`): upstreams speak the 2025-11-25 revision's, which
//! handshake-era clients get as they are, and 2026-07-28 clients that declare
//! the `io.modelcontextprotocol/tasks` extension get in that extension's
//! shape (a `tools/call` answered `resultType: "task"`, `tasks/get` carrying
//! the result once the task is done, `tasks/cancel` acknowledged).

use super::*;
use crate::upstream::TaskOp;

/// The tasks extension of the 2026-07-28 revision.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// What the face offers of tasks, when an upstream the tenant sees runs
/// tools as tasks: the 2025-11-25 revision's capability (`tasks/list` and
/// `tasks/cancel` are the gateway's to answer), or the 2026-07-28
/// revision's extension.
pub(super) fn offer_tasks(capabilities: &mut Map<String, Value>, era: Era) {
    match era {
        Era::Handshake => {
            capabilities.insert(
                "tasks".into(),
                json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}),
            );
        }
        Era::Stateless => {
            capabilities.insert("extensions".into(), json!({ TASKS_EXTENSION: {} }));
        }
    }
}

/// The `task` params a `tools/call` of `tool` runs as a task with, if it
/// does: in the handshake era when the client asks (`params.task`); in the
/// 2026-07-28 revision, where the server decides, when the tool runs only
/// as a task and the client declared the extension. A tool that runs only
/// as a task, called otherwise, is refused as each revision says.
pub(super) fn task_asked<'a>(
    tool: &FaceTool,
    call: Call<'a>,
    era: Era,
) -> Result<Option<Json<'a>>, GatewayError> {
    match era {
        Era::Handshake => {
            let [task] = members(call.params, ["task"]);
            match task {
                Some(task) if task.first_byte() == b'{' => Ok(Some(task)),
                Some(_) => Err(invalid("params.task must be an object")),
                None if tool.task_only => Err(GatewayError::TaskRequired(tool.id.to_string())),
                None => Ok(None),
            }
        }
        Era::Stateless if !tool.task_only => Ok(None),
        Era::Stateless if declares_tasks(call.params) => Ok(Some(Json::EMPTY_OBJECT)),
        Era::Stateless => Err(GatewayError::TasksExtensionMissing),
    }
}

/// A `CreateTaskResult` as the era says it: as it is in the handshake era;
/// in the 2026-07-28 revision the task itself, `resultType: "task"`.
pub(super) fn task_created(created: Value, era: Era) -> Out {
    match era {
        Era::Handshake => Out::Value(created),
        Era::Stateless => {
            let mut task = stateless_task(created.get("task").unwrap_or(&Value::Null));
            task.insert("resultType".into(), "task".into());
            Out::Value(Value::Object(task))
        }
    }
}

/// A 2025-11-25 task object in the tasks extension's fields (`ttlMs`,
/// `pollIntervalMs`); `input_required` reads `working` until the gateway
/// has the upstream's request to show with it (see `stateless_get`).
fn stateless_task(task: &Value) -> Map<String, Value> {
    let mut out = Map::new();
    for (from, to) in [
        ("taskId", "taskId"),
        ("status", "status"),
        ("statusMessage", "statusMessage"),
        ("createdAt", "createdAt"),
        ("lastUpdatedAt", "lastUpdatedAt"),
        ("ttl", "ttlMs"),
        ("pollInterval", "pollIntervalMs"),
    ] {
        if let Some(v) = task.get(from) {
            out.insert(to.into(), v.clone());
        }
    }
    out.entry("ttlMs").or_insert(Value::Null);
    if out.get("status").and_then(Value::as_str) == Some("input_required") {
        out.insert("status".into(), "working".into());
    }
    out
}

impl ModelContext<'_> {
    /// `tasks/get`, `tasks/result`, `tasks/list`, `tasks/cancel`, and the
    /// tasks extension's `tasks/update`.
    pub(super) async fn answer_task(
        &self,
        tenant: &Tenant,
        method: &str,
        params: Option<Json<'_>>,
        era: Era,
        via: Via<'_>,
    ) -> Built {
        let op = match method {
            "tasks/get" => Some(TaskOp::Get),
            "tasks/result" => Some(TaskOp::Result),
            "tasks/cancel" => Some(TaskOp::Cancel),
            "tasks/update" => None,
            _ => return Ok(Out::Value(self.core.list_tasks(tenant).await)),
        };
        if era == Era::Stateless && !declares_tasks(params) {
            return Err(GatewayError::TasksExtensionMissing);
        }
        let [id] = members(params, ["taskId"]);
        let id = id
            .and_then(string_of)
            .ok_or_else(|| invalid("params must be an object {\"taskId\": string}"))?;
        let Some(op) = op else {
            let [responses] = members(params, ["inputResponses"]);
            self.core.task_update(tenant, &id, responses).await?;
            return Ok(Out::Value(json!({})));
        };
        match (era, op) {
            (Era::Handshake, TaskOp::Result) => self.task_result(tenant, &id, params, via).await,
            (Era::Handshake, op) => {
                let (answer, _) = self.core.task_request(tenant, op, &id, None).await?;
                Ok(Out::Value(answer))
            }
            (Era::Stateless, TaskOp::Cancel) => {
                self.core.task_request(tenant, op, &id, None).await?;
                Ok(Out::Value(json!({})))
            }
            (Era::Stateless, _) => self.stateless_get(tenant, &id, params).await,
        }
    }

    /// `tasks/result`: what the task's call would have answered, its
    /// outcome audited (the task's final outcome, as the gateway hands it
    /// out). While the task waits for input (`input_required`), what its
    /// upstream asks reaches a client that can be asked, as during a call.
    async fn task_result(
        &self,
        tenant: &Tenant,
        id: &str,
        params: Option<Json<'_>>,
        via: Via<'_>,
    ) -> Built {
        let started = std::time::Instant::now();
        let answered = match via.progress.filter(|_| via.asks.is_some()) {
            Some(out) => {
                let forwarder = Forwarder::new(
                    self.core.asks(),
                    &tenant.name,
                    Era::Handshake,
                    out,
                    params,
                    &via,
                );
                let forward = |report| forwarder.hear(report);
                self.core
                    .task_request(tenant, TaskOp::Result, id, Some(&forward))
                    .await
            }
            None => {
                self.core
                    .task_request(tenant, TaskOp::Result, id, None)
                    .await
            }
        };
        let mut audit = Audit::new(crate::dispatch::PROTOCOL_MCP);
        if audit.enabled() {
            let outcome = match &answered {
                Ok((result, task)) => {
                    audit.task(&self.core.task_tool(task), &task.upstream);
                    if is_error(result) { "tool_error" } else { "ok" }
                }
                Err(e) => e.outcome(),
            };
            audit.log_outcome(tenant, outcome, started.elapsed());
        }
        let (result, _) = answered?;
        Ok(if is_error(&result) {
            Out::ToolError(result)
        } else {
            Out::Value(result)
        })
    }

    /// The tasks extension's `tasks/get`: the task, and once it is done its
    /// result (`completed`, a tool's own error included) or the JSON-RPC
    /// error its call ended with (`failed`). A task waiting for input is
    /// `input_required` with what its upstream asks (see
    /// `core::task_input`), once the upstream has said it.
    async fn stateless_get(&self, tenant: &Tenant, id: &str, params: Option<Json<'_>>) -> Built {
        let [meta] = members(params, ["_meta"]);
        let [capabilities] = members(meta, [CAPABILITIES_META]);
        let declared =
            members(capabilities, ["elicitation", "sampling", "roots"]).map(|c| c.is_some());
        let task = self.detailed_task(tenant, id, Some(declared)).await?;
        Ok(Out::Value(Value::Object(task)))
    }

    /// A task's status as the tasks extension's `notifications/tasks` on a
    /// listen tagged `tag`: the task as `tasks/get` answers it (its result
    /// once it ended); `None` when it cannot be had (the upstream no longer
    /// knows it). A notification opens no watch for the task's input: the
    /// poll that follows it does.
    pub async fn task_notification(
        &self,
        tenant: &Tenant,
        status: &str,
        tag: &str,
    ) -> Option<Vec<u8>> {
        let status: Value = serde_json::from_str(status).ok()?;
        let id = status.get("taskId")?.as_str()?;
        let mut task = self.detailed_task(tenant, id, None).await.ok()?;
        if let Ok(tag) = serde_json::from_str::<Value>(tag) {
            task.insert("_meta".into(), tag);
        }
        Some(super::listen::notification(
            "notifications/tasks",
            &Value::Object(task).to_string(),
        ))
    }

    /// The task as `tasks/get` answers it in the extension. `declared`: what
    /// the polling client can be asked (see `core::task_input`); `None`: no
    /// poll, so a task waiting for input reads `working`.
    async fn detailed_task(
        &self,
        tenant: &Tenant,
        id: &str,
        declared: Option<[bool; 3]>,
    ) -> Result<Map<String, Value>, GatewayError> {
        let (task, _) = self
            .core
            .task_request(tenant, TaskOp::Get, id, None)
            .await?;
        let mut out = stateless_task(&task);
        if let Some(declared) = declared
            && task.get("status").and_then(Value::as_str) == Some("input_required")
            && let Some(asked) = self.core.task_input(tenant, id, declared).await?
        {
            out.insert("status".into(), "input_required".into());
            out.insert("inputRequests".into(), asked);
        }
        let done = matches!(
            task.get("status").and_then(Value::as_str),
            Some("completed" | "failed")
        );
        if done {
            match self
                .core
                .task_request(tenant, TaskOp::Result, id, None)
                .await
            {
                Ok((mut result, _)) => {
                    if let Some(Value::Object(meta)) = result.get_mut("_meta") {
                        meta.remove(crate::dispatch::core::RELATED_TASK_META);
                        if meta.is_empty() {
                            result.as_object_mut().map(|r| r.remove("_meta"));
                        }
                    }
                    out.insert("status".into(), "completed".into());
                    out.insert("result".into(), result);
                }
                Err(GatewayError::Upstream {
                    error: CallError::Remote(error),
                    ..
                }) => {
                    out.insert("status".into(), "failed".into());
                    out.insert(
                        "error".into(),
                        serde_json::from_str(error.get()).unwrap_or(Value::Null),
                    );
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
}

/// Whether a tool's result is its own error (`isError: true`).
fn is_error(result: &Value) -> bool {
    result.get("isError").and_then(Value::as_bool) == Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_reads_in_the_extensions_fields() {
        let task = json!({"taskId": "T", "status": "input_required", "createdAt": "a",
            "lastUpdatedAt": "b", "ttl": 300000, "pollInterval": 1000, "other": 1});
        assert_eq!(
            Value::Object(stateless_task(&task)),
            json!({"taskId": "T", "status": "working", "createdAt": "a", "lastUpdatedAt": "b",
                "ttlMs": 300000, "pollIntervalMs": 1000})
        );
        let Out::Value(created) = task_created(
            json!({"task": {"taskId": "T", "status": "working"}}),
            Era::Stateless,
        ) else {
            panic!()
        };
        assert_eq!(
            created,
            json!({"taskId": "T", "status": "working", "ttlMs": null, "resultType": "task"})
        );
    }

    #[test]
    fn only_a_declared_extension_counts() {
        let params = |caps: &str| -> Box<serde_json::value::RawValue> {
            serde_json::from_str(&format!(r#"{{"_meta":{{"{CAPABILITIES_META}":{caps}}}}}"#))
                .unwrap()
        };
        let declared = params(r#"{"extensions":{"io.modelcontextprotocol/tasks":{}}}"#);
        assert!(declares_tasks(Some((&*declared).into())));
        for caps in [
            "{}",
            r#"{"extensions":{}}"#,
            r#"{"extensions":{"io.modelcontextprotocol/tasks":true}}"#,
            r#"{"tasks":{}}"#,
        ] {
            let p = params(caps);
            assert!(!declares_tasks(Some((&*p).into())), "{caps}");
        }
        assert!(!declares_tasks(None));
    }
}
