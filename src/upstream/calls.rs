//! Calling an upstream: a tool (with its progress and tasks heard), a
//! 2026-07-28 round, a task's request, a completion, a resource, a prompt,
//! and the one request path every call takes (its timeout, its metrics).

use std::sync::Arc;
use std::time::Instant;

use serde_json::value::RawValue;

use crate::jsonrpc::{Json, JsonBuf};
use crate::protocol::ToolEntry;
use crate::protocol::catalog::Route;
use crate::protocol::tool_result::Answer;

use super::*;

impl Upstream {
    /// The live connection, waiting (within the call timeout) while the upstream is starting.
    async fn ready_link(&self) -> Result<Arc<dyn Transport>, CallError> {
        match self.wait_started().await {
            Status::Ready => read(&self.link).ok_or_else(|| CallError::unavailable("not running")),
            // A credential that could not be had says why.
            Status::Down => Err(self
                .refusal()
                .unwrap_or_else(|| CallError::unavailable("not running"))),
            Status::Starting => Err(CallError::unavailable("still starting")),
        }
    }

    /// Calls the tool with these arguments (the agent's text, as sent): the
    /// result in the gateway's own shape, an object whose `output` is the
    /// tool's output, whatever the upstream's protocol.
    /// Where a tenant's call runs is [`Self::instance`]'s to say.
    pub async fn call_tool(
        &self,
        tool: &ToolEntry,
        arguments: Json<'_>,
        reports: Option<&(dyn Fn(progress::Report) + Sync)>,
    ) -> Result<Answer, CallError> {
        match &tool.route {
            Route::ById => {
                // MCP v1.0 has no progress: a caller that asked hears none.
                let params = Params::Execute {
                    tool: &tool.original_id,
                    arguments,
                };
                self.call(Op::CallTool, params).await.map(Answer::Object)
            }
            // Boxed: a call of the handshake era does not carry its state.
            Route::ByName { .. } if self.mc.modern_only() => {
                Box::pin(self.call_in_rounds(tool, arguments, reports)).await
            }
            Route::ByName { name, structured } => {
                let result = match reports {
                    None => {
                        let params = Params::CallTool {
                            name,
                            arguments,
                            progress: None,
                        };
                        self.call(Op::CallTool, params).await?
                    }
                    // Boxed: a call without reports does not carry this one's state.
                    Some(heard) => Box::pin(self.call_reporting(name, arguments, heard)).await?,
                };
                modelcontext::tool_result(result, *structured)
            }
        }
    }

    /// A `tools/call` sent with a progress token of the gateway's own: each
    /// report the upstream sends while the call waits (its progress, its log
    /// lines on the call's own stream) is handed to `heard`, in order, all
    /// of them before the call's answer is returned.
    async fn call_reporting(
        &self,
        name: &str,
        arguments: Json<'_>,
        heard: &(dyn Fn(progress::Report) + Sync),
    ) -> Result<JsonBuf, CallError> {
        let (registered, reports) = self.progress.register();
        let params = Params::CallTool {
            name,
            arguments,
            progress: Some(&registered.token),
        };
        Self::hearing(self.call(Op::CallTool, params), reports, heard).await
    }

    /// `tasks/result` of the upstream's task `task`, with `heard` taking
    /// what the upstream asks on its stream while the task waits for input
    /// (see [`Self::call_reporting`]); without, a plain request.
    pub async fn task_result(
        &self,
        task: &str,
        heard: Option<&(dyn Fn(progress::Report) + Sync)>,
    ) -> Result<JsonBuf, CallError> {
        let op = Op::Task(TaskOp::Result);
        let Some(heard) = heard else {
            let params = Params::TaskResult {
                task,
                progress: None,
            };
            return self.call(op, params).await;
        };
        let (registered, reports) = self.progress.register();
        let params = Params::TaskResult {
            task,
            progress: Some(&registered.token),
        };
        Self::hearing(self.call(op, params), reports, heard).await
    }

    /// Awaits `call`, handing `heard` each report as it comes, all of them
    /// before the answer is returned.
    async fn hearing(
        call: impl std::future::Future<Output = Result<JsonBuf, CallError>>,
        mut reports: progress::Heard,
        heard: &(dyn Fn(progress::Report) + Sync),
    ) -> Result<JsonBuf, CallError> {
        tokio::pin!(call);
        let answer = loop {
            tokio::select! {
                biased;
                Some(report) = reports.recv() => heard(report),
                answer = &mut call => break answer,
            }
        };
        // Reports the reader handed over before the answer came.
        while let Some(report) = reports.try_recv() {
            heard(report);
        }
        answer
    }

    /// `tools/call` of a 2026-07-28 client sent in that revision: the
    /// client's retry of an `input_required` round carries its
    /// `inputResponses` and the upstream's own `requestState` on, and only
    /// the capabilities the client declared that the upstream may use in
    /// such a round (elicitation, sampling, roots) are declared for it.
    /// With `reports`, the upstream's progress and log lines of the call
    /// are handed over as they come (see [`Self::call_reporting`]).
    pub async fn call_stateless(
        &self,
        tool: &ToolEntry,
        call: &StatelessCall<'_>,
        reports: Option<&(dyn Fn(progress::Report) + Sync)>,
    ) -> Result<Round, CallError> {
        let Route::ByName { name, structured } = &tool.route else {
            return Err(CallError::protocol("MCP v1.0 has no 2026-07-28 revision"));
        };
        let (registered, heard_reports) = match reports {
            Some(_) => {
                let (registered, heard) = self.progress.register();
                (Some(registered), Some(heard))
            }
            None => (None, None),
        };
        let token = registered.as_ref().map(|r| &*r.token);
        let params = Params::Stateless {
            params: StatelessBody::Call(call),
            name,
            token,
            headers: call.mirrored,
        };
        let answer = match (reports, heard_reports) {
            (Some(heard), Some(reports)) => {
                Self::hearing(self.call(Op::CallTool, params), reports, heard).await?
            }
            _ => self.call(Op::CallTool, params).await?,
        };
        if modelcontext::input_required(&answer) {
            return Ok(Round::InputRequired(answer));
        }
        modelcontext::tool_result(answer, *structured).map(Round::Done)
    }

    /// `tools/call` of a tool the upstream runs as a task, with the
    /// client's `task` params (its requested `ttl`): the upstream's
    /// `CreateTaskResult` as it gave it. Tasks outlive the session that
    /// created them, so they run on the upstream's own link, never on a
    /// session's child.
    pub async fn create_task(
        &self,
        tool: &ToolEntry,
        arguments: Json<'_>,
        task: Json<'_>,
    ) -> Result<JsonBuf, CallError> {
        let Route::ByName { name, .. } = &tool.route else {
            return Err(CallError::protocol("MCP v1.0 has no tasks"));
        };
        let name = serde_json::to_string(name).unwrap_or_default();
        let params = format!(
            r#"{{"name":{name},"arguments":{},"task":{}}}"#,
            arguments.get(),
            task.get()
        );
        let params: Box<RawValue> = serde_json::from_str(&params)
            .map_err(|_| CallError::protocol("the gateway wrote params that are not JSON"))?;
        self.call(Op::CallTool, Params::Json((&*params).into()))
            .await
    }

    /// One of the task requests (`tasks/get`, ...) with these params.
    pub async fn task_request(&self, op: TaskOp, params: Json<'_>) -> Result<JsonBuf, CallError> {
        self.call(Op::Task(op), Params::Json(params)).await
    }

    /// `completion/complete` with these params (the upstream's own names
    /// in its `ref`): its result as the upstream gave it.
    pub async fn complete(&self, params: Json<'_>) -> Result<JsonBuf, CallError> {
        self.call(Op::Complete, Params::Json(params)).await
    }

    /// `resources/read` of one of this upstream's uris, now: its result as the upstream gave it.
    pub async fn read_resource(&self, uri: &str) -> Result<JsonBuf, CallError> {
        let params = crate::modelcontext::uri_params(uri);
        let params: &serde_json::value::RawValue = serde_json::from_str(&params)
            .map_err(|_| CallError::protocol("the gateway wrote params that are not JSON"))?;
        self.call(Op::ReadResource, Params::Json(params.into()))
            .await
    }

    /// `prompts/get` of one of [`Self::own_prompts`] with the client's
    /// arguments: the upstream's result as it sent it.
    pub async fn get_prompt(&self, name: &str, arguments: Json<'_>) -> Result<JsonBuf, CallError> {
        self.call(
            Op::GetPrompt,
            Params::CallTool {
                name,
                arguments,
                progress: None,
            },
        )
        .await
    }

    /// Sends `op` with the upstream's timeout, counting the outcome.
    pub async fn call(&self, op: Op, params: Params<'_>) -> Result<JsonBuf, CallError> {
        let method = self.dialect().method(op);
        // A server of the 2026-07-28 revision alone takes every request in
        // that revision's envelope.
        let enveloped;
        let params = match self.mc.modern_only() && params.stateless().is_none() {
            false => params,
            true => {
                enveloped = Enveloped::of(method, params)?;
                enveloped.params(params.token())?
            }
        };
        let started = Instant::now();
        let in_flight = &self.hot().in_flight;
        in_flight.inc();
        self.calls.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        // Decremented however the call ends: answered, failed, timed out, or cancelled (dropped).
        let _in_flight = scopeguard(move || {
            in_flight.dec();
            self.calls.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        });
        // One clock read for the call's duration and its deadline.
        let deadline = tokio::time::Instant::from_std(started) + self.timeout;
        // The request's trace context goes out in its `_meta` (and an HTTP
        // link's headers).
        let traced = crate::telemetry::traces::client(method, params.name(), &self.name);
        let inner = params;
        let params = match &traced {
            Some(trace) => Params::Traced {
                params: &inner,
                trace,
            },
            None => inner,
        };
        // Made where it is awaited: a future bound to a name first would be
        // moved into place, a copy of the whole call's state.
        let result = || async {
            let _slot = match &self.slots {
                Some(slots) => Some(slots.enter(deadline).await?),
                None => None,
            };
            let link = self.ready_link().await?;
            // HTTP links are awaited in place: no boxed future to allocate
            // (their futures are small, so copying them with their callers'
            // is cheap). They keep the deadline themselves, with a timer per
            // pooled connection.
            if let Some(http) = link.as_http() {
                return http.call(method, params, started, Some(deadline)).await;
            }
            if let Some(streamable) = link.as_streamable() {
                return streamable
                    .call(method, params, started, Some(deadline))
                    .await;
            }
            tokio::time::timeout_at(deadline, link.request(method, params))
                .await
                .unwrap_or(Err(CallError::Timeout))
        };
        let result = match traced.as_ref().and_then(|t| t.span()) {
            None => result().await,
            // Boxed: a call with no span of its own to run in does not
            // carry the state of one that has.
            Some(cx) => {
                use opentelemetry::trace::FutureExt as _;
                let result = Box::pin(result().with_context(cx.clone())).await;
                crate::telemetry::traces::end(cx, result.as_ref().err().map(CallError::outcome));
                result
            }
        };
        self.account(op, method, started, &result);
        result
    }

    /// What a call's end tells: a failure of the gateway's own words marks
    /// the upstream suspect, and the call is counted with its duration.
    fn account(&self, op: Op, method: &str, started: Instant, result: &Result<JsonBuf, CallError>) {
        if let Err(e) = result {
            if let CallError::Unavailable(_) = e {
                self.suspect.notify_one();
            }
            // The gateway's words only: an upstream's own error or failed
            // tool is its answer, not a failure of the upstream.
            if let CallError::Unavailable(_) | CallError::Timeout | CallError::Protocol(_) = e {
                self.note_failure(&format!("{} failed: {e}", method));
            }
        }
        let seconds = started.elapsed().as_secs_f64();
        let labels = [&*self.name, method];
        match (result, op) {
            (Ok(_), Op::CallTool) => {
                let hot = self.hot();
                hot.execute_ok.inc();
                hot.execute_seconds.observe(seconds);
            }
            _ => {
                let outcome = result.as_ref().map_or_else(CallError::outcome, |_| "ok");
                self.metrics
                    .upstream_calls
                    .with_label_values(&[labels[0], labels[1], outcome])
                    .inc();
                self.metrics
                    .upstream_seconds
                    .with_label_values(&labels)
                    .observe(seconds);
            }
        }
    }
}
