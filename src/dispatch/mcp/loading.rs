//! `load_tools` in this face: a session adds tools it found to its search
//! listing, and hears that its listing changed. What a load does to the
//! session's list is `crate::dispatch::discovery::loaded`'s; this finds
//! the tools named, all or nothing, among those the caller sees.

use std::collections::HashSet;

use super::*;
use crate::config::curation::Discovery;
use crate::dispatch::discovery::loaded::{LoadArgs, SessionTools, after_load};

/// What a session's listing tells its client when its loaded tools change.
const TOOLS_CHANGED: &[u8] = br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#;

fn tool_error(why: String) -> Out {
    Out::ToolError(json!({"content": [{"type": "text", "text": why}], "isError": true}))
}

impl ModelContext<'_> {
    /// Whether a request's params name `load_tools` for a tenant whose
    /// meta-tools exist: such a call is answered as a stream, so that the
    /// change of the session's listing reaches the client before its answer.
    pub fn loads_tools(&self, tenant: &Tenant, params: Option<Json<'_>>) -> bool {
        if self.searches(tenant).is_none() {
            return false;
        }
        let [name] = crate::jsonrpc::scan::members(params, ["name"]);
        name.and_then(string_of).is_some_and(|n| {
            crate::dispatch::discovery::Meta::of(&n)
                .or_else(|| crate::dispatch::discovery::Meta::of_id(self.core.gateway_id(), &n))
                == Some(crate::dispatch::discovery::Meta::Load)
        })
    }

    /// `load_tools`: the named tools added to the session's listing (or in
    /// place of those loaded), all or nothing; outside a session it is
    /// unknown, as any tool the caller cannot call.
    pub(super) async fn load_tools(
        &self,
        tenant: &Tenant,
        d: &Discovery,
        arguments: &Value,
        via: Via<'_>,
    ) -> Built {
        let Some(session) = via.tools else {
            return Err(GatewayError::UnknownTool("load_tools".into()));
        };
        let args = match LoadArgs::read(arguments) {
            Ok(args) => args,
            Err(why) => return Ok(tool_error(why)),
        };
        let mut ids = Vec::with_capacity(args.names.len());
        for name in &args.names {
            // Hidden, denied, out of scope and made up alike: not one the caller sees.
            let tool = match self.tool_named(tenant, name).await {
                Some(tool) => Some(tool),
                None => self.tool_of_id(tenant, name).await,
            };
            match tool.filter(|t| tenant.may_use(&t.id)) {
                Some(tool) => ids.push(tool.id.to_string()),
                None => return Ok(tool_error(format!("unknown tool: {name}"))),
            }
        }
        let added = ids.len();
        let loaded = after_load(session.loaded().await, ids, args.replace, d.max_loaded);
        if let Err(why) = session.keep(loaded.clone()).await {
            return Ok(tool_error(why));
        }
        self.core
            .metrics()
            .discovery
            .loaded
            .with_label_values(&[&tenant.name])
            .inc_by(added as u64);
        if let Some(out) = via.progress {
            let _ = out.try_send(TOOLS_CHANGED.to_vec(), true);
        }
        let mut names = Vec::with_capacity(loaded.len());
        for id in &loaded {
            if let Some(tool) = self.tool_of_id(tenant, id).await {
                names.push(self.listed_name(tenant, &tool));
            }
        }
        let answer = json!({"loaded": names});
        Ok(Out::Value(json!({
            "content": [{"type": "text", "text": answer.to_string()}],
            "structuredContent": answer,
        })))
    }

    /// The ids a session loaded that the caller still sees; those it no
    /// longer sees leave the session's list.
    pub(super) async fn still_loaded(
        &self,
        tenant: &Tenant,
        session: &dyn SessionTools,
    ) -> HashSet<String> {
        let loaded = session.loaded().await;
        if loaded.is_empty() {
            return HashSet::new();
        }
        let wanted: HashSet<&str> = loaded.iter().map(String::as_str).collect();
        let mut seen = HashSet::with_capacity(loaded.len());
        self.each_index(tenant, Kind::Tool, |_, index| {
            for listed in &index.listed {
                if wanted.contains(&*listed.tool.id) && tenant.may_use(&listed.tool.id) {
                    seen.insert(listed.tool.id.to_string());
                }
            }
        })
        .await;
        if seen.len() < loaded.len() {
            let kept: Vec<String> = loaded.into_iter().filter(|l| seen.contains(l)).collect();
            if let Err(why) = session.keep(kept).await {
                tracing::debug!(error = %why, "a session's loaded tools not pruned");
            }
        }
        seen
    }
}
