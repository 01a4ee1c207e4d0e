//! Tools through the face: `tools/list` from each catalog's name index,
//! `tools/call` run as `mcp/executeTool` runs it (its result is rendered in
//! `rendering`).

use super::asking::Forwards;
use super::*;
use crate::dispatch::core::{CACHED, RoundIn};

impl ModelContext<'_> {
    /// The tool the tenant's listing names `name`: found in the name index
    /// of each of its upstreams' catalogs (made once per catalog).
    /// An upstream that is down keeps its last catalog: its tools are still
    /// found, and a call fails as MCP v1.0's does (-32001, the upstream is
    /// unavailable), not as a tool that does not exist.
    /// A name is its upstream's alone, so one found before upstreams still
    /// on their first start have finished it is the one found after; those
    /// are waited for only when the name is not found at once.
    pub(super) async fn tool_named(&self, tenant: &Tenant, name: &str) -> Option<Arc<FaceTool>> {
        if let Some(tool) = self.find_named(tenant, name) {
            return Some(tool);
        }
        self.core.wait_for_starting(tenant).await;
        self.find_named(tenant, name)
    }

    /// Whether a handshake-era `tools/call` with these params may log before
    /// its result: its tool's upstream declared `logging` and its lines of a
    /// call come on that call's own stream. Most tenants have no such
    /// upstream, which is known before the name is read.
    pub fn logs_during(&self, tenant: &Tenant, params: Option<Json<'_>>) -> bool {
        if !Upstream::some_may_log() {
            return false;
        }
        let any = self.core.visit_upstreams_of(tenant, |ups| {
            for u in ups {
                if u.logs_during_calls() {
                    return true;
                }
            }
            false
        });
        if !any {
            return false;
        }
        let [name] = members(params, ["name"]);
        let Some(tool) = name
            .and_then(string_of)
            .and_then(|name| self.find_named(tenant, &name))
        else {
            return false;
        };
        mcpid::upstream_of(self.core.gateway_id(), &tool.id)
            .and_then(|u| self.core.upstream(u))
            .is_some_and(|u| u.logs_during_calls())
    }

    fn find_named(&self, tenant: &Tenant, name: &str) -> Option<Arc<FaceTool>> {
        if let Some(curated) = &tenant.curation {
            return self.curated_names(tenant, curated).named(name);
        }
        self.core.visit_upstreams_of(tenant, |upstreams| {
            for u in upstreams {
                // The index is read in place once made; it is made on a share
                // of the catalog, outside the upstream's lock.
                let indexed = u.with_catalog(|c| match c.loaded {
                    false => Some(None),
                    true => c
                        .face_cached::<FaceIndex>()
                        .map(|index| index.by_name.get(name).cloned()),
                });
                let found = indexed.unwrap_or_else(|| {
                    let catalog = u.catalog();
                    let index = catalog.face_cache(|c| self.index(c))?;
                    index.by_name.get(name).cloned()
                });
                if found.is_some() {
                    return found;
                }
            }
            None
        })
    }

    /// `tools/list`: each tool the tenant sees, as its catalog's index wrote
    /// it; with discovery, a search listing (the meta-tools and the tools
    /// `always` names) where the mode asks for one, and what was listed in
    /// `_meta`.
    pub(super) async fn list_tools(
        &self,
        tenant: &Tenant,
        era: Era,
        session: Option<&dyn crate::dispatch::discovery::loaded::SessionTools>,
    ) -> Out {
        let mut out = String::from(r#"{"tools":["#);
        let mut first = true;
        let curated = match &tenant.curation {
            Some(curated) => {
                self.core.wait_for_starting(tenant).await;
                Some((curated, self.curated_names(tenant, curated)))
            }
            None => None,
        };
        let discovery = match curated.as_ref().and_then(|(c, _)| c.discovery.as_ref()) {
            Some(d) => {
                let visible = self.visible_tools(tenant).await;
                Some((d, visible, d.lists_search(visible)))
            }
            None => None,
        };
        // A search listing: the meta-tools, then only the tools `always`
        // names and those the session loaded.
        let mut loaded = std::collections::HashSet::new();
        let always = match discovery {
            Some((d, _, true)) => {
                out.push_str(&self.meta_entries(d, session.is_some()));
                first = false;
                if let Some(session) = session {
                    loaded = self.still_loaded(tenant, session).await;
                }
                Some(d.always.as_ref())
            }
            _ => None,
        };
        self.each_index(tenant, Kind::Tool, |_, index| {
            for listed in &index.listed {
                if !tenant
                    .policy
                    .as_ref()
                    .is_none_or(|p| p.allows(&listed.tool.id))
                {
                    continue;
                }
                if let Some(always) = always
                    && !always.is_some_and(|a| a.is_match(&*listed.tool.id))
                    && !loaded.contains(&*listed.tool.id)
                {
                    continue;
                }
                if !first {
                    out.push(',');
                }
                first = false;
                let text = match (era, &listed.stateless) {
                    (Era::Stateless, Some(s)) => s,
                    _ => &listed.handshake,
                };
                match &curated {
                    Some((curated, names)) => names.write(&mut out, curated, &listed.tool, text),
                    None => out.push_str(text),
                }
            }
        })
        .await;
        out.push(']');
        if let Some((_, visible, search)) = discovery {
            let mode = if search { "search" } else { "direct" };
            out.push_str(&format!(
                r#","_meta":{{"{}":{{"mode":"{mode}","visible":{visible}}}}}"#,
                crate::dispatch::discovery::DISCOVERY_META
            ));
        }
        out.push('}');
        Out::Written(out)
    }

    /// A catalog's tools by the names this face gives them.
    pub(super) fn index_tools(&self, catalog: &Catalog, index: &mut FaceIndex) {
        let listing = catalog.listing(Kind::Tool);
        for (id, range) in &listing.items {
            let Some(name) = self.name_of(Kind::Tool, id) else {
                continue;
            };
            let entry = catalog.tool(id);
            // The listing shows no envelope schema for a tool whose blocks pass through.
            let passthrough = entry.is_some_and(|t| t.produces_blocks());
            let Ok(def) = serde_json::from_str::<Map<String, Value>>(&listing.json[range.clone()])
            else {
                continue;
            };
            let output = def.get("outputSchema").filter(|_| !passthrough);
            let object_output =
                output.and_then(|s| s.get("type")).and_then(Value::as_str) == Some("object");
            // The stateless era takes an output schema of any root; the
            // handshake era's only an object's.
            let loose_output = output.is_some() && !object_output;
            let kept = entry.and_then(|t| t.kept.as_deref());
            let id: Arc<str> = id.as_str().into();
            let handshake = render_tool(&name, &def, kept, &id, output.filter(|_| object_output));
            let stateless = loose_output.then(|| render_tool(&name, &def, kept, &id, output));
            let tool = Arc::new(FaceTool {
                mirrors: def
                    .get("inputSchema")
                    .map(param_headers::mirrors)
                    .unwrap_or_default(),
                own: self.bare_name(&id),
                id,
                name: name.as_str().into(),
                structured: object_output,
                loose_output,
                as_task: entry.is_some_and(|e| e.as_task),
                task_only: entry.is_some_and(|e| e.task_only),
            });
            index.listed.push(Listed {
                tool: tool.clone(),
                handshake,
                stateless,
            });
            index.by_name.insert(name, tool);
        }
    }

    /// `tools/call`: the tool the tenant's listing names, run as
    /// `mcp/executeTool` runs it; audited whether it ran or was refused.
    /// `through`: the meta-tool the call came through (`call_tool`), for
    /// the audit line; `None` for a client's own call.
    pub(super) async fn call_named(
        &self,
        tenant: &Tenant,
        call: Call<'_>,
        era: Era,
        via: Via<'_>,
        started: std::time::Instant,
        through: Option<&'static str>,
    ) -> Built {
        // Boxed, and only for a tenant whose meta-tools exist: every other
        // call's future carries none of its state.
        if through.is_none()
            && self.searches(tenant).is_some()
            && let Some(meta) = Box::pin(self.meta_call(tenant, call, era, via, started)).await
        {
            return meta;
        }
        let mut audit = Audit::new(crate::dispatch::PROTOCOL_MCP);
        audit.via = through;
        let (tool, result) = match self.run_named(tenant, call, era, via, &mut audit).await {
            Ok(Ran::Called(tool, result)) => (tool, result),
            Ok(Ran::Task(created)) => {
                if audit.enabled() {
                    let outcome = created
                        .as_ref()
                        .map_or_else(GatewayError::outcome, |_| "task_created");
                    audit.log_outcome(tenant, outcome, started.elapsed());
                }
                return created.map(|created| task_created(created, era));
            }
            Err(refused) => {
                if audit.enabled() {
                    let name = call.name.and_then(string_of);
                    audit.refused(name.as_deref(), call.arguments);
                    audit.log_outcome(tenant, refused.outcome(), started.elapsed());
                }
                return Err(refused);
            }
        };
        // An upstream's round that needs the client's input is answered as
        // a result of its own kind, its state sealed (see `core::rounds`).
        let result = match result {
            Err(GatewayError::InputRequired(round)) => {
                if audit.enabled() {
                    audit.log_outcome(tenant, "input_required", started.elapsed());
                }
                return Ok(Out::Value(*round));
            }
            result => result,
        };
        if audit.enabled() {
            audit.log(tenant, &result, started.elapsed());
        }
        let structured = tool.structured || (tool.loose_output && era == Era::Stateless);
        let blocks = matches!(&result, Ok(r) if r.output().0 == Output::Blocks);
        let appended = result
            .as_ref()
            .ok()
            .and_then(ToolResult::cut_off)
            .map(|c| c.appended);
        let age = result.as_ref().ok().and_then(ToolResult::age_ms);
        let out = match call_result(result, structured)? {
            // Links the upstream's own blocks carry become uris the gateway serves.
            Out::Written(text) if blocks && holds!(text, "\"uri\"") => {
                self.with_links(tenant, &tool.id, text)
            }
            Out::Value(mut cut_blocks) if blocks && appended.is_some() => {
                let appended = appended.unwrap_or(0);
                self.rewrite_kept(tenant, &tool.id, &mut cut_blocks, appended);
                Out::Value(cut_blocks)
            }
            out => out,
        };
        // Answered from the cache: it says how long ago it was kept.
        Ok(match age {
            Some(age) => out.with_meta(CACHED, &format!(r#"{{"ageMs":{age}}}"#)),
            None => out,
        })
    }

    /// The links of a cut result's kept blocks rewritten in place; its last
    /// `appended` blocks (the note and the pages' links) are the gateway's
    /// own and stay as they are.
    fn rewrite_kept(&self, tenant: &Tenant, tool: &str, result: &mut Value, appended: usize) {
        let upstream =
            mcpid::upstream_of(self.core.gateway_id(), tool).and_then(|u| self.core.upstream(u));
        let Some(Value::Array(content)) = result.get_mut("content") else {
            return;
        };
        let kept = content.len().saturating_sub(appended);
        let mut ours = Value::Array(content.split_off(kept));
        let mut theirs = Value::Array(std::mem::take(content));
        if let Some(upstream) = upstream {
            self.core.rewrite_links(tenant, &upstream, &mut theirs);
        }
        if let (Value::Array(theirs), Value::Array(ours)) = (&mut theirs, &mut ours) {
            content.append(theirs);
            content.append(ours);
        }
    }

    /// A passed-through result (`{"content": [...]}`) with its links rewritten.
    pub(super) fn with_links(&self, tenant: &Tenant, tool: &str, text: String) -> Out {
        let upstream =
            mcpid::upstream_of(self.core.gateway_id(), tool).and_then(|u| self.core.upstream(u));
        let (Some(upstream), Ok(mut result)) = (upstream, serde_json::from_str::<Value>(&text))
        else {
            return Out::Written(text);
        };
        let rewritten = result
            .get_mut("content")
            .is_some_and(|content| self.core.rewrite_links(tenant, &upstream, content));
        if rewritten {
            Out::Value(result)
        } else {
            Out::Written(text)
        }
    }

    /// The checks of a `tools/call` that come before the tool runs (its
    /// name, its arguments' shape, the mirrored headers), then the call, or
    /// the task that runs it.
    async fn run_named(
        &self,
        tenant: &Tenant,
        call: Call<'_>,
        era: Era,
        via: Via<'_>,
        audit: &mut Audit,
    ) -> Result<Ran, GatewayError> {
        let name = call
            .name
            .and_then(string_of)
            .filter(|_| call.params.is_some_and(|p| p.get().starts_with('{')))
            .ok_or_else(|| {
                invalid("params must be an object {\"name\": string, \"arguments\"?: object}")
            })?;
        audit.named(&name);
        let Some(tool) = self.tool_named(tenant, &name).await else {
            return Err(self
                .core
                .unlisted(tenant, &name)
                .unwrap_or_else(|| GatewayError::UnknownTool(name.into_owned())));
        };
        let arguments = object_arguments(call.arguments)?;
        if era == Era::Stateless
            && !tool.mirrors.is_empty()
            && let Some(http) = via.http
        {
            let args: Value = serde_json::from_str(arguments.get()).unwrap_or(Value::Null);
            let sent = |name: &str| -> Vec<&[u8]> {
                http.all.map_or_else(Vec::new, |all| all.values(name))
            };
            param_headers::check(&tool.mirrors, &args, sent)
                .map_err(|why| header_mismatch(&why))?;
        }
        if (tool.as_task || call.task.is_some())
            && let Some(task) = task_asked(&tool, call, era)?
        {
            let created = self
                .core
                .create_task(tenant, &tool.id, arguments, task, audit)
                .await;
            return Ok(Ran::Task(created));
        }
        let id = Cow::Borrowed(&*tool.id);
        // A 2026-07-28 client's call reaches an upstream that takes that
        // revision in it (its `input_required` rounds with it).
        let round = (era == Era::Stateless).then_some(RoundIn {
            params: call.params,
            answers: call.answers,
            capabilities: call.capabilities,
            log_level: call.log_level,
            mirrors: &tool.mirrors,
            place: via.place,
        });
        let result = match via.progress {
            None => {
                self.core
                    .call_tool(tenant, id, arguments, audit, None, None, round.as_ref())
                    .await
            }
            // Boxed: a call whose client hears nothing before its result
            // does not carry the state of one that may.
            Some(out) => {
                let reported = Reported {
                    era,
                    out,
                    params: call.params,
                    round: round.as_ref(),
                };
                Box::pin(self.call_reported(tenant, id, arguments, audit, via, reported)).await
            }
        };
        Ok(Ran::Called(tool, result))
    }
}

/// What a `tools/call` came to once its checks passed.
enum Ran {
    /// The tool ran: its result.
    Called(Arc<FaceTool>, Result<ToolResult, GatewayError>),
    /// It runs as a task: the task created (its `CreateTaskResult`).
    Task(Result<Value, GatewayError>),
}

/// Where a call's reports can go, and what its request asked for.
struct Reported<'a> {
    era: Era,
    out: Outlet<'a>,
    params: Option<Json<'a>>,
    round: Option<&'a RoundIn<'a>>,
}

impl ModelContext<'_> {
    /// A call whose client can be told things before its result: its
    /// progress, when it asked, and the call's log lines at the level it set
    /// (2026-07-28: only when the request names one; the handshake era: its
    /// session's, every level if it set none). A handshake-era client that
    /// declared what it answers is also asked what the upstream asks during
    /// the call (see `asking`), and an upstream with a child per session
    /// runs the call on that client's child.
    async fn call_reported(
        &self,
        tenant: &Tenant,
        id: Cow<'_, str>,
        arguments: Json<'_>,
        audit: &mut Audit,
        via: Via<'_>,
        r: Reported<'_>,
    ) -> Result<ToolResult, GatewayError> {
        let forwarder =
            Forwarder::new(self.core.asks(), &tenant.name, r.era, r.out, r.params, &via);
        let forward = forwarder
            .wanted()
            .then_some(|report| forwarder.hear(report));
        let reports = forward.as_ref().map(|f| f as &(dyn Fn(Report) + Sync));
        let session = forwarder
            .asking
            .filter(|_| reports.is_some())
            .map(|a| a.scope);
        self.core
            .call_tool(tenant, id, arguments, audit, reports, session, r.round)
            .await
    }
}

/// Where what an upstream reports during a request goes: the client's
/// progress token (the reports carry it back), the level of log lines it
/// hears, and whether it can be asked what the upstream asks.
pub(super) struct Forwarder<'a> {
    token: Option<Value>,
    level: Option<LogLevel>,
    asking: Option<Asking<'a>>,
    out: Outlet<'a>,
    forwards: Forwards,
    asks: &'a crate::upstream::asks::Asks,
    tenant: &'a Arc<str>,
}

impl<'a> Forwarder<'a> {
    /// For a request of `era` with these `params`, whose reports go to `out`.
    pub(super) fn new(
        asks: &'a crate::upstream::asks::Asks,
        tenant: &'a Arc<str>,
        era: Era,
        out: Outlet<'a>,
        params: Option<Json<'_>>,
        via: &Via<'a>,
    ) -> Self {
        let (token, asked) = asked_reports(params);
        let level = match era {
            Era::Stateless => asked,
            Era::Handshake => Some(via.log_level.unwrap_or(LogLevel::Debug)),
        };
        Forwarder {
            token,
            level,
            asking: via.asks.filter(|_| era == Era::Handshake).copied(),
            out,
            forwards: Forwards::default(),
            asks,
            tenant,
        }
    }

    /// Whether the client hears anything at all.
    pub(super) fn wanted(&self) -> bool {
        self.token.is_some() || self.level.is_some() || self.asking.is_some()
    }

    pub(super) fn hear(&self, report: Report) {
        // Progress and log lines may be lost to a client that does not
        // read; the withdrawal of a request it was asked may not.
        let droppable = !matches!(report, Report::Withdrawn(_));
        let notification = match report {
            Report::Progress(report) => self
                .token
                .as_ref()
                .and_then(|token| progress_notification(&report, token)),
            Report::Message(line) => self
                .level
                .and_then(|level| message_notification(&line, level)),
            Report::Ask(ask) => {
                self.forwards
                    .ask(self.asks, self.tenant, self.asking, self.out, ask);
                None
            }
            Report::Withdrawn(id) => self.forwards.withdrawn(&id),
        };
        // A client that does not read loses reports (the oldest first),
        // not the call.
        if let Some(notification) = notification {
            let _ = self.out.try_send(notification, droppable);
        }
    }
}

/// A call's `arguments`: an object, `{}` when absent.
pub(super) fn object_arguments(arguments: Option<Json<'_>>) -> Result<Json<'_>, GatewayError> {
    let arguments = arguments.unwrap_or(Json::EMPTY_OBJECT);
    if arguments.get().starts_with('{') {
        Ok(arguments)
    } else {
        Err(invalid("params.arguments must be an object"))
    }
}
