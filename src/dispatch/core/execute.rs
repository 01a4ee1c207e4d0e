//! A tool call, whatever protocol the agent and the upstream speak: resolve
//! the namespaced id, policy and quarantine, validate the arguments, call,
//! check the output; the audit line. (MCP v1.0's `params` are read by `v1`.)

use std::borrow::Cow;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::Dispatcher;
use super::audit::{Audit, MAX_AUDITED_ID, args_digest, truncated};
use super::rounds::RoundIn;
use crate::error::GatewayError;
use crate::jsonrpc::Json;
use crate::jsonrpc::scan;
use crate::protocol::instance::Instance;
use crate::protocol::tool_result::{Answer, Output, ToolResult};
use crate::protocol::{Method, ToolEntry, mcpid, schema};
use crate::tenant::Tenant;
use crate::upstream::progress::Report;
use crate::upstream::{CallError, Round, StatelessCall, Status, Upstream};

#[derive(Deserialize)]
struct ExecuteResult<'a> {
    #[serde(borrow)]
    output: Option<&'a RawValue>,
}

/// The `output` of a result: `None` when the result is not a JSON object (or
/// cannot be read), `Some(None)` when it has none (`null` is none). Found in
/// one pass over the (valid) text; read by serde where the scan declines.
fn execute_output(result: Json<'_>) -> Option<Option<Json<'_>>> {
    if result.first_byte() != b'{' {
        return None;
    }
    let output = match scan::members_of(result, ["output"]) {
        Some([output]) => output,
        None => serde_json::from_str::<ExecuteResult<'_>>(result.get())
            .ok()?
            .output
            .map(Json::from),
    };
    Some(output.filter(|o| o.get() != "null"))
}

impl Dispatcher {
    /// Calls the tool with this namespaced id for `tenant`: its result, the
    /// output checked against the tool's outputSchema. With `reports`, what
    /// the upstream reports of the call before its answer (progress, log
    /// lines, its requests) is handed to it as it comes, all before the
    /// result. `session`: the scope of a client session that can be asked
    /// (an upstream with a child per session runs the call on that child).
    /// `round`: a 2026-07-28 client's call, which an upstream that takes
    /// that revision is sent in it (see `rounds`): its `input_required`
    /// comes back as [`GatewayError::InputRequired`], its state sealed.
    #[allow(clippy::too_many_arguments)]
    pub async fn call_tool(
        &self,
        tenant: &Tenant,
        id: Cow<'_, str>,
        arguments: Json<'_>,
        audit: &mut Audit,
        reports: Option<&(dyn Fn(Report) + Sync)>,
        session: Option<&[u8]>,
        round: Option<&RoundIn<'_>>,
    ) -> Result<ToolResult, GatewayError> {
        let (up, entry) = self.checked_tool(tenant, &id, arguments, audit).await?;
        if entry.task_only {
            return Err(GatewayError::TaskOnly {
                upstream: up.name.clone(),
            });
        }
        if !up.capabilities().is_some_and(|c| c.can_execute()) {
            return Err(GatewayError::CapabilityMissing {
                upstream: up.name.clone(),
                method: Method::ExecuteTool,
            });
        }

        // Curation (budgets, caching) is the tenant's to ask for: without
        // it, a call is not slowed by either.
        let curated = tenant.curation.is_some();
        let slot = match curated {
            true => {
                self.cache_slot(tenant, &id, &up, &entry, arguments, round)
                    .await
            }
            false => None,
        };
        if let Some(slot) = &slot
            && let Some(hit) = self.cached_result(slot).await
        {
            audit.cached = true;
            return Ok(hit);
        }
        let upstream_error = |error| GatewayError::Upstream {
            upstream: up.name.clone(),
            error,
        };
        let answer = match round {
            // In place, not boxed: its state overlaps the other arms', so
            // the call's future is no larger for it, and a box would cost
            // an allocation and a copy of the state.
            Some(round) if up.speaks_stateless() => {
                if let Some(place) = round.place {
                    place.ensure(self, tenant).await?;
                }
                self.call_round(tenant, &id, &up, &entry, arguments, reports, round)
                    .await?
            }
            // An upstream of the handshake era that may ask during the
            // call: held across the client's rounds (see `held`).
            Some(round) if super::held::may_hold(&up, round) => {
                Box::pin(self.call_held(tenant, &id, &up, &entry, arguments, reports, round))
                    .await?
            }
            _ if up.auth_mode().is_some() => {
                // A credential obtained while the call ran was obtained for
                // it (or it waited for that one).
                let instance = up
                    .instance(&tenant.name, tenant.user.as_ref(), session)
                    .map_err(upstream_error)?;
                let before = instance.credential_fetches();
                let answer = instance.call_tool(&entry, arguments, reports).await;
                if audit.enabled {
                    audit.upstream_auth = up.auth_mode();
                    let fetched = instance.credential_fetches() != before;
                    audit.credential = Some(match fetched {
                        true if instance.credential_refreshed() => "refreshed",
                        true => "fetched",
                        false => "cached",
                    });
                }
                answer.map_err(upstream_error)?
            }
            _ => up
                .instance(&tenant.name, tenant.user.as_ref(), session)
                .map_err(upstream_error)?
                .call_tool(&entry, arguments, reports)
                .await
                .map_err(upstream_error)?,
        };
        let result = check_output(&up, &entry, &id, answer)?;
        if !curated {
            return Ok(result);
        }
        let result = self.within_budget(tenant, &id, &entry, result, audit).await;
        if let Some(slot) = &slot {
            self.keep_result(slot, &result).await;
        }
        Ok(result)
    }

    /// The round a client's `requestState` names, opened (see `rounds`);
    /// `None` when it sent none.
    pub(super) fn opened_round(
        &self,
        tenant: &Tenant,
        id: &str,
        state: Option<Json<'_>>,
    ) -> Result<Option<super::rounds::RoundState>, GatewayError> {
        let Some(state) = state else {
            return Ok(None);
        };
        let sealed: Option<String> = serde_json::from_str(state.get()).ok();
        let sealed = sealed
            .ok_or_else(|| GatewayError::InvalidParams("requestState must be a string".into()))?;
        let upstream = mcpid::upstream_of(self.gateway_id(), id);
        super::rounds::open(self.sealer(), &tenant.name, (id, upstream), &sealed).map(Some)
    }

    /// One round of a 2026-07-28 client's call, sent to the upstream in
    /// that revision: its `requestState` opened (refused unless this
    /// gateway sealed it for this tenant's call of this tool, in time), and
    /// an `input_required` answer handed back with its own state sealed.
    #[allow(clippy::too_many_arguments)]
    async fn call_round(
        &self,
        tenant: &Tenant,
        id: &str,
        up: &Upstream,
        entry: &ToolEntry,
        arguments: Json<'_>,
        reports: Option<&(dyn Fn(Report) + Sync)>,
        round: &RoundIn<'_>,
    ) -> Result<Answer, GatewayError> {
        let [responses, state] = round.answers;
        let (capabilities, log_level) = (round.capabilities, round.log_level);
        let opened = self.opened_round(tenant, id, state)?;
        let mirrored = if round.mirrors.is_empty() {
            Vec::new()
        } else {
            let args = serde_json::from_str(arguments.get()).unwrap_or_default();
            crate::modelcontext::param_headers::headers_for(round.mirrors, &args)
        };
        let call = StatelessCall {
            arguments,
            capabilities,
            log_level,
            // The answers to a round of the gateway's own are not the upstream's.
            input_responses: responses.filter(|_| !opened.as_ref().is_some_and(|o| o.own)),
            request_state: opened.as_ref().and_then(|o| o.state.as_deref()),
            mirrored: &mirrored,
        };
        let upstream_error = |error| GatewayError::Upstream {
            upstream: up.name.clone(),
            error,
        };
        match up
            .instance(&tenant.name, tenant.user.as_ref(), None)
            .map_err(upstream_error)?
            .call_stateless(entry, &call, reports)
            .await
            .map_err(upstream_error)?
        {
            Round::Done(answer) => Ok(answer),
            Round::InputRequired(result) => {
                let Ok(result) = serde_json::from_str(result.get()) else {
                    return Err(upstream_error(CallError::protocol(
                        "an input_required result that is not an object",
                    )));
                };
                Err(GatewayError::InputRequired(Box::new(
                    super::rounds::sealed_result(
                        self.sealer(),
                        &tenant.name,
                        id,
                        result,
                        self.round_lifetime(),
                    ),
                )))
            }
        }
    }

    /// The checks of a call before its upstream hears of it, whether it
    /// runs now or as a task: the tool the tenant may use by this id, and
    /// arguments its input schema takes. Fills in the audit line's tool,
    /// upstream and argument digest.
    pub(super) async fn checked_tool(
        &self,
        tenant: &Tenant,
        id: &str,
        arguments: Json<'_>,
        audit: &mut Audit,
    ) -> Result<(Arc<Upstream>, Arc<ToolEntry>), GatewayError> {
        // The audit line's fields cost a copy and a digest: only when it is written.
        if audit.enabled {
            audit.tool = Some(truncated(id, MAX_AUDITED_ID).to_owned());
            audit.args_hmac = Some(args_digest(arguments.get().as_bytes()));
        }
        let up = self.resolve(tenant, id)?;
        if audit.enabled {
            audit.upstream = Some(up.name.clone());
        }
        crate::telemetry::traces::record("mcp_gateway.upstream", &up.name);
        let entry = self.tool_entry(tenant, &up, id).await?;
        if !tenant.may_use(id) {
            if let Some(scope) = tenant.missing_scope(id) {
                return Err(GatewayError::ScopeMissing {
                    id: id.to_owned(),
                    scope,
                });
            }
            return Err(GatewayError::ToolDenied(id.to_owned()));
        }
        let args = Instance::parse(arguments.get())
            // serde_json bounds nesting (128 levels): deeper arguments are refused here.
            .map_err(|e| {
                GatewayError::InvalidParams(format!("params.arguments cannot be read: {e}"))
            })?;
        // It compiled when the catalog was built; compiling is deterministic.
        let input = entry.input().map_err(|e| GatewayError::Upstream {
            upstream: up.name.clone(),
            error: CallError::protocol(format!("the tool's inputSchema does not compile: {e}")),
        })?;
        if let Err(e) = input.validate(&args) {
            crate::telemetry::traces::event("arguments refused by the tool's input schema");
            return Err(GatewayError::InvalidArguments(schema::explain(
                &e,
                "arguments",
                id,
            )));
        }
        crate::telemetry::traces::event("arguments validated");
        Ok((up, entry))
    }

    /// Why a tool name this tenant does not find may be one it cannot see
    /// yet: its upstream acts for the user and could not be listed with
    /// this caller's credential (`{upstream}__{tool}` or an mcpId names
    /// it). The reason is the answer, never an unknown tool.
    pub(in crate::dispatch) fn unlisted(
        &self,
        tenant: &Tenant,
        name: &str,
    ) -> Option<GatewayError> {
        let owner = crate::protocol::mcpid::upstream_of(&self.inner.gateway_id, name)
            .map(str::to_owned)
            .or_else(|| name.split_once("__").map(|(u, _)| u.to_owned()))?;
        if !tenant.sees(&owner) {
            return None;
        }
        let up = self.upstream(&owner)?;
        let error = up.unlisted_error(tenant.user.as_ref())?;
        Some(GatewayError::Upstream {
            upstream: up.name.clone(),
            error,
        })
    }

    /// The upstream a namespaced id names, if this tenant sees it. Anything
    /// else (another gateway's, another tenant's) is one and the same error.
    fn resolve(&self, tenant: &Tenant, id: &str) -> Result<Arc<Upstream>, GatewayError> {
        let unknown = || GatewayError::UnknownTool(id.to_owned());
        let upstream = mcpid::upstream_of(&self.inner.gateway_id, id).ok_or_else(unknown)?;
        // A tool curation hides is, to the tenant, one that does not exist.
        if !tenant.sees(upstream) || tenant.hides(id) {
            return Err(unknown());
        }
        self.upstream(upstream).ok_or_else(unknown)
    }

    /// The tool's entry in its upstream's catalog, found by the namespaced id
    /// as sent. A freshly started gateway may not have the catalog yet: wait for
    /// the handshake (within the call timeout). A tool the upstream added since
    /// the last listing triggers one refresh; a malformed id does not.
    async fn tool_entry(
        &self,
        tenant: &Tenant,
        up: &Upstream,
        id: &str,
    ) -> Result<Arc<ToolEntry>, GatewayError> {
        let unavailable = |why: &'static str| GatewayError::Upstream {
            upstream: up.name.clone(),
            error: CallError::unavailable(why),
        };
        let quarantined = || GatewayError::Quarantined(id.to_owned());
        let mut catalog = up.catalog();
        if !catalog.loaded {
            // One that acts for the user lists with this caller's credential.
            up.list_for(&tenant.name, tenant.user.as_ref());
            if let Some(error) = up
                .unlisted_error(tenant.user.as_ref())
                .filter(|_| up.status() == Status::Down)
            {
                return Err(GatewayError::Upstream {
                    upstream: up.name.clone(),
                    error,
                });
            }
            if up.wait_started().await != Status::Ready {
                return Err(match up.refusal() {
                    Some(error) => GatewayError::Upstream {
                        upstream: up.name.clone(),
                        error,
                    },
                    None => unavailable("not running"),
                });
            }
            catalog = up.catalog();
        }
        if let Some(entry) = catalog.tool(id) {
            return Ok(entry.clone());
        }
        // Not routed: a malformed id, a quarantined tool, or one added since.
        let Some((_, original)) = mcpid::parse(&self.inner.gateway_id, id) else {
            return Err(GatewayError::UnknownTool(id.to_owned()));
        };
        if catalog.is_quarantined(&original) {
            // An approval may have happened since: look again (at most once a second).
            up.refresh_on_demand().await;
            return up.catalog().tool(id).cloned().ok_or_else(quarantined);
        }
        if up.status() != Status::Ready {
            return Err(unavailable("not running"));
        }
        up.refresh_on_demand().await;
        up.catalog()
            .tool(id)
            .cloned()
            .ok_or_else(|| GatewayError::UnknownTool(id.to_owned()))
    }
}

/// The answer as a result, once its output satisfies the tool's listed
/// outputSchema.
fn check_output(
    up: &Upstream,
    entry: &ToolEntry,
    id: &str,
    answer: Answer,
) -> Result<ToolResult, GatewayError> {
    let bad = |detail: String| GatewayError::InvalidOutput {
        upstream: up.name.clone(),
        detail,
    };
    let validator = || {
        entry
            .output()
            .map_err(|e| bad(format!("the tool's outputSchema does not compile: {e}")))
    };
    let check = |value: &str| {
        let value =
            Instance::parse(value).map_err(|e| bad(format!("the result cannot be read: {e}")))?;
        validator()?
            .validate(&value)
            .map_err(|e| bad(schema::explain(&e, "output", id)))
    };
    let no_output = || bad("the result has no output".into());
    match answer {
        Answer::Object(answer) => {
            let output = execute_output(answer.as_json())
                .ok_or_else(|| {
                    // Why it cannot be read (not an object, a member named twice, ...).
                    bad(
                        match serde_json::from_str::<ExecuteResult<'_>>(answer.get()) {
                            Err(e) => format!("the result cannot be read: {e}"),
                            Ok(_) => "the result is not an object".into(),
                        },
                    )
                })?
                .ok_or_else(no_output)?;
            check(output.get())?;
            let at = answer.range_of(output);
            Ok(ToolResult::new(answer, at, Output::Value, true))
        }
        Answer::Value(_, None) => Err(no_output()),
        Answer::Value(answer, Some(at)) => {
            check(answer.sub(at.clone()).get())?;
            Ok(ToolResult::new(answer, at, Output::Value, false))
        }
        Answer::Blocks(answer, at) => {
            // The listed schema of a tool without its own is the envelope of
            // blocks, which blocks that each have a string `type` satisfy;
            // anything else is checked against it, to say what is wrong.
            if !blocks_typed(answer.sub(at.clone())) {
                check(&format!(
                    r#"{{"content":{}}}"#,
                    answer.sub(at.clone()).get()
                ))?;
            }
            Ok(ToolResult::new(answer, at, Output::Blocks, false))
        }
    }
}

/// Whether every element of `blocks`, an array, is an object with a string
/// `type` (read in one pass; `false` where the scan declines).
fn blocks_typed(blocks: Json<'_>) -> bool {
    scan::elements_of(blocks).is_some_and(|mut each| {
        each.all(|block| {
            matches!(
                scan::members_of(block, ["type"]),
                Some([Some(kind)]) if kind.first_byte() == b'"'
            )
        })
    })
}

#[cfg(test)]
mod tests;
