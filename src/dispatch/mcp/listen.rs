//! `subscriptions/listen` (2026-07-28): what a listen hears, and the
//! notifications of its stream.

use super::*;

/// What a `subscriptions/listen` hears: the listings it asked for, and the
/// resources it asked for that the tenant can read (their bytes held in the
/// tenant's subscription budget while the listen is open).
#[derive(Default)]
pub struct Filter {
    pub tools_list_changed: bool,
    pub prompts_list_changed: bool,
    pub resources_list_changed: bool,
    pub resources: Subscribed,
    /// Tasks of the tenant's whose status it hears (the tasks extension's
    /// `notifications/tasks`), by the ids the tenant holds.
    pub task_ids: Vec<Box<str>>,
}

impl Filter {
    /// Whether a listen with this filter hears `change`.
    pub fn hears(&self, change: &Change) -> bool {
        match change {
            Change::Listing(Kind::Tool) => self.tools_list_changed,
            Change::Listing(Kind::Prompt) => self.prompts_list_changed,
            Change::Listing(Kind::Resource) => self.resources_list_changed,
            Change::Resource(uri) => self.resources.contains(uri),
            Change::TaskStatus(params) => {
                let Ok(raw) = serde_json::from_str::<&serde_json::value::RawValue>(params) else {
                    return false;
                };
                let [id] = members(Some(Json::from(raw)), ["taskId"]);
                id.and_then(string_of)
                    .is_some_and(|id| self.task_ids.iter().any(|t| **t == *id))
            }
        }
    }

    /// The subset honoured, as the acknowledgment states it (fields not asked for are left out).
    pub(super) fn honoured(&self) -> Value {
        let mut m = Map::new();
        for (key, on) in [
            ("toolsListChanged", self.tools_list_changed),
            ("promptsListChanged", self.prompts_list_changed),
            ("resourcesListChanged", self.resources_list_changed),
        ] {
            if on {
                m.insert(key.into(), true.into());
            }
        }
        if !self.resources.is_empty() {
            let mut uris: Vec<&str> = self.resources.iter().collect();
            uris.sort_unstable();
            m.insert("resourceSubscriptions".into(), json!(uris));
        }
        if !self.task_ids.is_empty() {
            m.insert("taskIds".into(), json!(self.task_ids));
        }
        Value::Object(m)
    }
}

impl ModelContext<'_> {
    /// The checks of a `subscriptions/listen` request (those of every
    /// stateless request), then what it will hear. The uris it asks for are
    /// bounded in bytes (with its id, as a session's subscriptions are)
    /// before they are read; those the tenant cannot read are left out of
    /// what is honoured, and the rest is held in the tenant's budget.
    pub fn open_listen(
        &self,
        tenant: &Tenant,
        id: Json<'_>,
        params: Option<Json<'_>>,
        http: Option<&Mirrored<'_>>,
    ) -> Result<Filter, GatewayError> {
        let envelope = members(meta_of(params), [VERSION_META, CAPABILITIES_META]);
        check_stateless("subscriptions/listen", None, envelope, http)?;
        #[derive(Deserialize, Default)]
        #[serde(rename_all = "camelCase")]
        struct Asked<'a> {
            #[serde(default)]
            tools_list_changed: bool,
            #[serde(default)]
            prompts_list_changed: bool,
            #[serde(default)]
            resources_list_changed: bool,
            #[serde(borrow, default)]
            resource_subscriptions: Option<&'a serde_json::value::RawValue>,
            #[serde(borrow, default)]
            task_ids: Option<&'a serde_json::value::RawValue>,
        }
        #[derive(Deserialize)]
        struct Params<'a> {
            #[serde(borrow, default)]
            notifications: Option<Asked<'a>>,
        }
        let shape = "params.notifications must be an object of booleans, resourceSubscriptions (a list of uris) and taskIds (a list of task ids)";
        let asked = params
            .map(|p| serde_json::from_str::<Params<'_>>(p.get()))
            .transpose()
            .map_err(|_| invalid(shape))?
            .and_then(|p| p.notifications)
            .unwrap_or_default();
        let budget = self.core.subscription_budget();
        let mut filter = Filter {
            tools_list_changed: asked.tools_list_changed,
            prompts_list_changed: asked.prompts_list_changed,
            resources_list_changed: asked.resources_list_changed,
            resources: Subscribed::default(),
            task_ids: Vec::new(),
        };
        let text = |raw: Option<&serde_json::value::RawValue>| raw.map_or(0, |r| r.get().len());
        // The text bounds what reading it can cost.
        if id.get().len() + text(asked.resource_subscriptions) + text(asked.task_ids)
            > budget.per_session
        {
            return Err(invalid(&format!(
                "a listen's id, resourceSubscriptions and taskIds take at most {} bytes",
                budget.per_session
            )));
        }
        if let Some(raw) = asked.task_ids {
            let ids: Vec<Cow<'_, str>> =
                serde_json::from_str(raw.get()).map_err(|_| invalid(shape))?;
            // The extension's notifications are for clients that declared it.
            if !ids.is_empty() && !declares_tasks(params) {
                return Err(GatewayError::TasksExtensionMissing);
            }
            // Only the tenant's own tasks are honoured; another's id, or a
            // made-up one, is left out of the acknowledgment.
            filter.task_ids = ids
                .into_iter()
                .filter(|t| self.core.task_is_tenants(tenant, t))
                .map(|t| t.into_owned().into_boxed_str())
                .collect();
        }
        let Some(raw) = asked.resource_subscriptions else {
            return Ok(filter);
        };
        let uris: Vec<Cow<'_, str>> =
            serde_json::from_str(raw.get()).map_err(|_| invalid(shape))?;
        for uri in uris {
            if !self.core.readable(tenant, &uri) {
                continue;
            }
            filter
                .resources
                .add(budget, &tenant.name, &uri)
                .map_err(|refused| match refused {
                    subscriptions::Refused::Session(_) => invalid(&refused.explain()),
                    subscriptions::Refused::Tenant(_) => GatewayError::OverCapacity {
                        reason: "subscription budget",
                        retry_after_secs: 1,
                    },
                })?;
        }
        Ok(filter)
    }
}

pub(super) fn notification(method: &str, params: &str) -> Vec<u8> {
    format!(r#"{{"jsonrpc":"2.0","method":"{method}","params":{params}}}"#).into_bytes()
}

/// The `_meta` that tags every message of a listen: written once, from its id's text.
pub fn listen_tag(id: Json<'_>) -> Box<str> {
    format!(r#"{{"{SUBSCRIPTION_META}":{}}}"#, id.get()).into_boxed_str()
}

/// The first message of a listen: what it will hear, tagged with its id.
pub fn acknowledged(tag: &str, filter: &Filter) -> Vec<u8> {
    notification(
        "notifications/subscriptions/acknowledged",
        &format!(r#"{{"_meta":{tag},"notifications":{}}}"#, filter.honoured()),
    )
}

/// The answer that ends a listen gracefully (the gateway is shutting down).
pub fn listen_ended(id: Json<'_>, tag: &str) -> Vec<u8> {
    format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{"resultType":"complete","_meta":{tag}}}}}"#,
        id.get()
    )
    .into_bytes()
}

/// The notification `change` becomes; on a listen, tagged (see [`listen_tag`]).
pub fn change_notification(change: &Change, tag: Option<&str>) -> Vec<u8> {
    let (method, uri) = match change {
        Change::TaskStatus(params) => return notification("notifications/tasks/status", params),
        Change::Listing(Kind::Tool) => ("notifications/tools/list_changed", None),
        Change::Listing(Kind::Prompt) => ("notifications/prompts/list_changed", None),
        Change::Listing(Kind::Resource) => ("notifications/resources/list_changed", None),
        Change::Resource(uri) => ("notifications/resources/updated", Some(&**uri)),
    };
    let mut params = String::from("{");
    if let Some(uri) = uri {
        params.push_str(r#""uri":"#);
        params.push_str(&serde_json::to_string(uri).unwrap_or_default());
    }
    if let Some(tag) = tag {
        if uri.is_some() {
            params.push(',');
        }
        params.push_str(r#""_meta":"#);
        params.push_str(tag);
    }
    params.push('}');
    notification(method, &params)
}
