//! Prompts through the face: an upstream of the protocol's own prompts,
//! listed and fetched as it listed them, beside MCP v1.0's.

use super::answer::push_all;
use super::*;

impl ModelContext<'_> {
    /// `prompts/list`: MCP v1.0's prompts, then the protocol's own as their
    /// upstreams listed them.
    pub(super) async fn list_prompts(&self, tenant: &Tenant) -> Out {
        let mut out = String::from(r#"{"prompts":["#);
        self.each_index(tenant, Kind::Prompt, |_, index| {
            push_all(&mut out, &index.prompts)
        })
        .await;
        // Upstreams of the protocol have their prompts listed as they listed them.
        for (upstream, own) in self.core.own_prompts(tenant) {
            for p in own.iter().filter_map(|p| self.own_prompt(&upstream, p)) {
                push_all(&mut out, &[p.to_string()]);
            }
        }
        out.push_str("]}");
        Out::Written(out)
    }

    /// `prompts/get`: an upstream's own prompt, or an MCP v1.0 prompt as one
    /// message (a system prompt carried as the user's, said in `_meta`).
    pub(super) async fn get_prompt(
        &self,
        tenant: &Tenant,
        params: Option<Json<'_>>,
        arguments: Option<Json<'_>>,
    ) -> Built {
        let get = params
            .and_then(|p| serde_json::from_str::<Named<'_>>(p.get()).ok())
            .ok_or_else(|| invalid("params must be an object {\"name\": string}"))?;
        if let Some(answer) = self.get_own_prompt(tenant, &get.name, arguments).await {
            return answer.map(Out::Value);
        }
        let def = self
            .prompt_named(tenant, &get.name)
            .await
            .ok_or_else(|| invalid(&format!("Unknown prompt: {}", get.name)))?;
        let role = def.get("role").and_then(Value::as_str).unwrap_or("user");
        // The protocol has no system role: a system prompt is carried
        // as the user's, and says what it was in `_meta`.
        let message = match role {
            "assistant" => {
                json!({"role": "assistant", "content": {"type": "text", "text": def.get("content")}})
            }
            "user" => {
                json!({"role": "user", "content": {"type": "text", "text": def.get("content")}})
            }
            _ => {
                json!({"role": "user", "content": {"type": "text", "text": def.get("content")}, "_meta": {"dev.mcp-gateway/role": role}})
            }
        };
        let mut result = json!({ "messages": [message] });
        if let Some(d) = def.get("description") {
            result["description"] = d.clone();
        }
        Ok(Out::Value(result))
    }

    /// A prompt as its upstream (of the protocol) listed it, arguments and
    /// all, under the face's name, with its namespaced id in `_meta`.
    pub(super) fn own_prompt(
        &self,
        upstream: &Upstream,
        prompt: &Map<String, Value>,
    ) -> Option<Value> {
        let own = prompt.get("name")?.as_str()?;
        let id = mcpid::namespace(
            self.core.gateway_id(),
            &upstream.name,
            &mc::original_id(Kind::Prompt, own),
        );
        let mut out = Map::new();
        out.insert("name".into(), self.name_of(Kind::Prompt, &id)?.into());
        out.insert(
            "title".into(),
            prompt.get("title").cloned().unwrap_or_else(|| own.into()),
        );
        copy_members(prompt, &mut out, &["description", "arguments", "icons"]);
        out.insert(
            "_meta".into(),
            meta_with(prompt.get("_meta"), MCPID_META, id.into()),
        );
        Some(Value::Object(out))
    }

    /// `prompts/get` of a prompt of an upstream of the protocol: sent on with
    /// the client's arguments, its result as the upstream gave it. `None`
    /// when no such prompt of the tenant's has this name.
    /// The upstream (of the protocol) and its own name of the prompt the
    /// tenant's listing names `name`.
    pub(super) fn own_prompt_named(
        &self,
        tenant: &Tenant,
        name: &str,
    ) -> Option<(Arc<Upstream>, String)> {
        self.core
            .own_prompts(tenant)
            .into_iter()
            .find_map(|(u, own)| {
                let found = own
                    .iter()
                    .filter_map(|p| p.get("name")?.as_str())
                    .find(|p| {
                        let id = mcpid::namespace(
                            self.core.gateway_id(),
                            &u.name,
                            &mc::original_id(Kind::Prompt, p),
                        );
                        self.name_of(Kind::Prompt, &id).as_deref() == Some(name)
                    })?
                    .to_owned();
                Some((u, found))
            })
    }

    pub(super) async fn get_own_prompt(
        &self,
        tenant: &Tenant,
        name: &str,
        arguments: Option<Json<'_>>,
    ) -> Option<Result<Value, GatewayError>> {
        self.core.wait_for_starting(tenant).await;
        let (upstream, own) = self.own_prompt_named(tenant, name)?;
        let arguments = match object_arguments(arguments) {
            Ok(a) => a,
            Err(e) => return Some(Err(e)),
        };
        let upstream_error = |error| GatewayError::Upstream {
            upstream: upstream.name.clone(),
            error,
        };
        let instance = match upstream.instance(&tenant.name, tenant.user.as_ref(), None) {
            Ok(instance) => instance,
            Err(e) => return Some(Err(upstream_error(e))),
        };
        let result = instance
            .get_prompt(&own, arguments)
            .await
            .map_err(upstream_error)
            .and_then(|r| {
                serde_json::from_str::<Value>(r.get())
                    .ok()
                    .filter(Value::is_object)
                    .ok_or_else(|| GatewayError::InvalidOutput {
                        upstream: upstream.name.clone(),
                        detail: "prompts/get answered something that is not an object".into(),
                    })
            });
        Some(result)
    }
}
