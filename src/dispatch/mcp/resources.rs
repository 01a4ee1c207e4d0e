//! Resources and templates through the face: templates offered namespaced,
//! reads of their expansions, completions routed to the owning upstream.

use super::*;

impl ModelContext<'_> {
    /// `resources/read`: a spilled page, a listed resource's text, or one
    /// read through a template.
    pub(super) async fn read_resource(&self, tenant: &Tenant, params: Option<Json<'_>>) -> Built {
        let read = params
            .and_then(|p| serde_json::from_str::<ByUri<'_>>(p.get()).ok())
            .ok_or_else(|| invalid("params must be an object {\"uri\": string}"))?;
        if crate::output::is_spill(self.core.gateway_id(), &read.uri) {
            return self.core.read_page(tenant, &read.uri).await.map(Out::Value);
        }
        let Some(def) = self
            .listed_definition(tenant, Kind::Resource, &read.uri)
            .await
        else {
            return match self.read_by_template(tenant, &read.uri).await {
                Some(answer) => answer.map(Out::Value),
                None => Err(GatewayError::ResourceNotFound(read.uri.into_owned())),
            };
        };
        Ok(Out::Value(json!({"contents": [{
            "uri": read.uri,
            "mimeType": def.get("mediaType"),
            "text": def.get("content"),
        }]})))
    }

    /// The upstream and its own `uriTemplate` of a template the tenant is
    /// offered as `offered` (the namespaced template, as listed).
    pub(super) fn own_template_offered(
        &self,
        tenant: &Tenant,
        offered: &str,
    ) -> Option<(Arc<Upstream>, String)> {
        self.core
            .own_templates(tenant)
            .into_iter()
            .find_map(|(u, templates)| {
                let prefix = mcpid::namespace(
                    self.core.gateway_id(),
                    &u.name,
                    &mc::original_id(Kind::Resource, ""),
                );
                let own = templates.iter().find_map(|t| {
                    let own = t.get("uriTemplate")?.as_str()?;
                    (mc::namespaced_template(&prefix, own).as_deref() == Some(offered))
                        .then(|| own.to_owned())
                })?;
                Some((u, own))
            })
    }

    /// `completion/complete` of an argument of a prompt or resource template
    /// of an upstream of the protocol: sent to that upstream with its own
    /// name or template in `ref`, its answer passed back; no values when
    /// the upstream offers no completions.
    pub(super) async fn complete(
        &self,
        tenant: &Tenant,
        params: Option<Json<'_>>,
    ) -> Result<Value, GatewayError> {
        let shape = "params must be an object {\"ref\": {\"type\": \"ref/prompt\", \"name\"} or {\"type\": \"ref/resource\", \"uri\"}, \"argument\": {\"name\", \"value\"}}";
        let mut params: Map<String, Value> = params
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .ok_or_else(|| invalid(shape))?;
        self.core.wait_for_starting(tenant).await;
        let reference = params
            .get_mut("ref")
            .and_then(Value::as_object_mut)
            .ok_or_else(|| invalid(shape))?;
        let kind = reference.get("type").and_then(Value::as_str).unwrap_or("");
        let (field, found) = match kind {
            "ref/prompt" => {
                let name = reference
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid(shape))?;
                let found = self.own_prompt_named(tenant, name);
                if found.is_none() {
                    return Err(invalid(&format!("Unknown prompt: {name}")));
                }
                ("name", found)
            }
            "ref/resource" => {
                let uri = reference
                    .get("uri")
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid(shape))?;
                let found = self.own_template_offered(tenant, uri);
                if found.is_none() {
                    return Err(invalid(&format!("Unknown resource template: {uri}")));
                }
                ("uri", found)
            }
            _ => return Err(invalid(shape)),
        };
        let Some((upstream, own)) = found else {
            return Err(invalid(shape));
        };
        if !upstream.completes() {
            return Ok(json!({"completion": {"values": [], "hasMore": false}}));
        }
        reference.insert(field.into(), own.into());
        // The client's envelope is its own: the upstream gets its request.
        params.remove("_meta");
        let text = Value::Object(params).to_string();
        let raw: &serde_json::value::RawValue =
            serde_json::from_str(&text).map_err(|_| invalid(shape))?;
        let upstream_error = |error| GatewayError::Upstream {
            upstream: upstream.name.clone(),
            error,
        };
        let answer = upstream
            .instance(&tenant.name, tenant.user.as_ref(), None)
            .map_err(upstream_error)?
            .complete(Json::from(raw))
            .await
            .map_err(upstream_error)?;
        serde_json::from_str::<Value>(answer.get())
            .ok()
            .filter(Value::is_object)
            .ok_or_else(|| GatewayError::InvalidOutput {
                upstream: upstream.name.clone(),
                detail: "completion/complete answered something that is not an object".into(),
            })
    }

    /// The resource templates of the tenant's ready upstreams of the
    /// protocol, each as its upstream listed it but with a template whose
    /// expansions are namespaced ids (see `modelcontext::namespaced_template`;
    /// the upstream's own is in `_meta`); those it cannot offer so are left out.
    pub(in crate::dispatch) fn templates(&self, tenant: &Tenant) -> Vec<Value> {
        let mut out = Vec::new();
        for (u, templates) in self.core.own_templates(tenant) {
            let prefix = mcpid::namespace(
                self.core.gateway_id(),
                &u.name,
                &mc::original_id(Kind::Resource, ""),
            );
            for t in templates.iter() {
                let Some(own) = t.get("uriTemplate").and_then(Value::as_str) else {
                    continue;
                };
                let Some(template) = mc::namespaced_template(&prefix, own) else {
                    continue;
                };
                let mut offered = Map::new();
                offered.insert("uriTemplate".into(), template.into());
                copy_members(
                    t,
                    &mut offered,
                    &[
                        "name",
                        "title",
                        "description",
                        "mimeType",
                        "annotations",
                        "icons",
                    ],
                );
                offered.insert(
                    "_meta".into(),
                    meta_with(t.get("_meta"), TEMPLATE_META, own.into()),
                );
                out.push(Value::Object(offered));
            }
        }
        out
    }

    /// `resources/read` of an expansion of one of those templates, or of a
    /// link a tool result gave this tenant: read from its upstream now.
    /// `None` when `uri` is neither.
    pub(super) async fn read_by_template(
        &self,
        tenant: &Tenant,
        uri: &str,
    ) -> Option<Result<Value, GatewayError>> {
        let (upstream, own) = self
            .core
            .template_target(tenant, uri)
            .or_else(|| self.core.link_target(tenant, uri))?;
        Some(self.core.read_upstream(tenant, &upstream, &own).await)
    }
}
