//! Prompts through the face: an upstream of the protocol's own prompts,
//! listed and fetched as it listed them, beside MCP v1.0's.

use super::*;

impl ModelContext<'_> {
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
