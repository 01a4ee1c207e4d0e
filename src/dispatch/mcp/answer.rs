//! One request of the protocol answered: its era found and checked, its
//! method routed, its result given the era's fields; and the capabilities offered.

use super::*;

impl ModelContext<'_> {
    /// Answers one request of the Model Context Protocol for `tenant`,
    /// counting it; also says which era it was in.
    pub async fn request(
        &self,
        tenant: &Tenant,
        method: &str,
        params: Option<Json<'_>>,
        via: Via<'_>,
    ) -> (Answer, Era) {
        let started = std::time::Instant::now();
        let Scanned {
            call,
            named,
            envelope,
            ..
        } = match via.scanned {
            Some(scanned) => *scanned,
            None => Scanned::of(method, params),
        };
        let era = Era::given(method, envelope[0].is_some(), via.http.as_ref());
        let result = match era {
            Era::Handshake => {
                self.answer_mcp(tenant, method, call, era, via, started)
                    .await
            }
            // What the revision removed does not exist in it, whatever else
            // the request carries (-32601, HTTP 404).
            Era::Stateless if HANDSHAKE_ONLY.contains(&method) => Err(GatewayError::MethodNotFound),
            Era::Stateless => match check_stateless(method, named, envelope, via.http.as_ref()) {
                Err(e) => Err(e),
                Ok(()) => self
                    .answer_mcp(tenant, method, call, era, via, started)
                    .await
                    .map(|out| stateless_result(method, out))
                    // That revision's "not found" is invalid params.
                    .map_err(|e| match e {
                        GatewayError::ResourceNotFound(uri) => {
                            invalid(&format!("Unknown resource: {uri}"))
                        }
                        e => e,
                    }),
            },
        };
        let outcome = match &result {
            Ok(Out::ToolError(_)) => {
                crate::telemetry::traces::tool_error();
                "tool_error"
            }
            Ok(_) => "ok",
            Err(e) => e.outcome(),
        };
        let result = result.map(|out| Payload::Text(out.into_text()));
        let label = METHODS
            .iter()
            .find(|m| **m == method)
            .copied()
            .unwrap_or("other");
        let metrics = &self.core.metrics();
        let series = || {
            metrics
                .requests
                .with_label_values(&[&tenant.name, label, outcome])
        };
        // A call's series are resolved once: every call counts in them.
        let seconds = started.elapsed().as_secs_f64();
        if method == "tools/call" {
            match outcome {
                "ok" => tenant.called.get_or_init(series).inc(),
                _ => series().inc(),
            }
            metrics.call_seconds.observe(seconds);
        } else {
            series().inc();
            metrics
                .request_seconds
                .with_label_values(&[label])
                .observe(seconds);
        }
        (result, era)
    }

    /// What the face offers `tenant`, as both eras declare it.
    pub(super) async fn offers(
        &self,
        tenant: &Tenant,
        era: Era,
        notifies: bool,
    ) -> Map<String, Value> {
        let caps = self.core.hello(tenant).await;
        let mut capabilities = Map::new();
        if caps.list_tools_provider {
            capabilities.insert("tools".into(), json!({ "listChanged": notifies }));
        }
        if caps.list_resources_provider {
            capabilities.insert(
                "resources".into(),
                json!({ "listChanged": notifies, "subscribe": notifies }),
            );
        }
        if caps.list_prompts_provider {
            capabilities.insert("prompts".into(), json!({ "listChanged": notifies }));
        }
        if era == Era::Handshake {
            capabilities.insert("logging".into(), json!({}));
        }
        let completes = self
            .core
            .upstreams_of(tenant)
            .iter()
            .any(|u| u.status() == Status::Ready && u.completes());
        if completes {
            capabilities.insert("completions".into(), json!({}));
        }
        let tasks = self
            .core
            .upstreams_of(tenant)
            .iter()
            .any(|u| u.status() == Status::Ready && u.tasks().tool_calls);
        if tasks {
            offer_tasks(&mut capabilities, era);
        }
        capabilities
    }

    pub(super) async fn answer_mcp(
        &self,
        tenant: &Tenant,
        method: &str,
        call: Call<'_>,
        era: Era,
        via: Via<'_>,
        started: std::time::Instant,
    ) -> Built {
        match method {
            "tools/call" => {
                let told = super::consent::Told::of(era, &via, call.capabilities);
                return match self.call_named(tenant, call, era, via, started, None).await {
                    Err(e) => self.told(tenant, e, told),
                    answered => answered,
                };
            }
            "tools/list" => return Ok(self.list_tools(tenant, era, via.tools).await),
            "tasks/get" | "tasks/result" | "tasks/list" | "tasks/cancel" | "tasks/update" => {
                return self
                    .answer_task(tenant, method, call.params, era, via)
                    .await;
            }
            _ => {}
        }
        let params = call.params;
        let answer: Result<Value, GatewayError> = match method {
            "initialize" => Ok(json!({
                "protocolVersion": negotiated(params),
                "capabilities": self.offers(tenant, era, via.notifies).await,
                "serverInfo": server_info(),
            })),
            "server/discover" => Ok(json!({
                "supportedVersions": SUPPORTED,
                "capabilities": self.offers(tenant, era, true).await,
            })),
            "ping" => Ok(json!({})),
            // Kept by the session that carries it (stdio's, or the HTTP
            // session table); checked here either way.
            "logging/setLevel" => match level_of(params) {
                Some(_) => Ok(json!({})),
                None => Err(invalid(LEVEL_PARAMS)),
            },
            "completion/complete" => self.complete(tenant, params).await,
            "resources/list" => {
                let mut out = String::from(r#"{"resources":["#);
                self.each_index(tenant, Kind::Resource, |_, index| {
                    push_all(&mut out, &index.resources)
                })
                .await;
                out.push_str("]}");
                return Ok(Out::Written(out));
            }
            "resources/templates/list" => {
                self.core.wait_for_starting(tenant).await;
                Ok(json!({"resourceTemplates": self.templates(tenant)}))
            }
            "resources/read" => return self.read_resource(tenant, params).await,
            "prompts/list" => return Ok(self.list_prompts(tenant).await),
            "prompts/get" => return self.get_prompt(tenant, params, call.arguments).await,
            _ => Err(GatewayError::MethodNotFound),
        };
        answer.map(Out::Value)
    }
}

/// Items of a JSON array, appended after those `out` holds (which ends in
/// `[` or an item).
pub(super) fn push_all(out: &mut String, items: &[impl AsRef<str>]) {
    for item in items {
        if !out.ends_with('[') {
            out.push(',');
        }
        out.push_str(item.as_ref());
    }
}
