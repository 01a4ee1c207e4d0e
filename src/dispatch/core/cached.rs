//! Tool results answered from the tenant's cache (see `crate::cache`):
//! looked up once a call has passed every check, kept once its upstream
//! answered it successfully and whole. A call that continues a round (it
//! carries a client's answers) is never looked up or kept: its result
//! depends on them.

use serde_json::Value;

use super::Dispatcher;
use super::rounds::RoundIn;
use crate::cache::{Entry, Slot};
use crate::jsonrpc::Json;
use crate::protocol::ToolEntry;
use crate::protocol::tool_result::ToolResult;
use crate::tenant::Tenant;
use crate::upstream::{Status, Upstream};

/// The `_meta` key a cached result carries: `{"ageMs": N}`.
pub const CACHED: &str = "dev.mcp-gateway/cached";

impl Dispatcher {
    /// Where this call's result is cached, when its tool's results are for
    /// the tenant.
    pub(super) async fn cache_slot(
        &self,
        tenant: &Tenant,
        id: &str,
        up: &Upstream,
        entry: &ToolEntry,
        arguments: Json<'_>,
        round: Option<&RoundIn<'_>>,
    ) -> Option<Slot> {
        let curation = tenant.curation.as_ref()?;
        if round.is_some_and(|r| r.answers.iter().any(Option::is_some)) {
            return None;
        }
        // An upstream that is not running answers as it would uncached:
        // whatever its last process answered may be gone with it.
        if up.status() != Status::Ready {
            return None;
        }
        let ttl = curation.cache_ttl(id, || hinted(entry))?;
        let most = curation.cache.map_or(1024, |c| c.max_entries());
        self.results()
            .check_incarnation(&up.name, up.incarnation())
            .await;
        Slot::new(
            tenant,
            &up.name,
            id,
            &entry.fingerprint,
            arguments.get(),
            ttl,
            most,
        )
    }

    /// The result kept in `slot`, as a result that says its age.
    pub(super) async fn cached_result(&self, slot: &Slot) -> Option<ToolResult> {
        let hit = self.results().get(slot).await?;
        let age = hit.age_ms();
        Some(ToolResult::aged(
            hit.answer, hit.at, hit.output, hit.object, age,
        ))
    }

    /// Keeps `result` in `slot` if it is whole (a cut one is not kept).
    pub(super) async fn keep_result(&self, slot: &Slot, result: &ToolResult) {
        if result.cut_off().is_some() {
            return;
        }
        let (answer, at, output, object) = result.parts();
        let entry = Entry {
            answer: answer.clone(),
            at,
            output,
            object,
            stored: std::time::SystemTime::now(),
        };
        self.results().put(slot, entry).await;
    }
}

/// Whether the tool's upstream marks it both read-only and idempotent.
fn hinted(entry: &ToolEntry) -> bool {
    let Some(kept) = entry.kept.as_deref() else {
        return false;
    };
    let Ok(kept) = serde_json::from_str::<Value>(kept) else {
        return false;
    };
    let hint = |name: &str| kept["annotations"][name] == Value::Bool(true);
    hint("readOnlyHint") && hint("idempotentHint")
}

/// `result`, a result object's JSON text, with `_meta[key]` set to
/// `value` (JSON text): written in place when the object has no `_meta`
/// of its own (the usual case), read and written again otherwise.
pub fn with_meta(result: Json<'_>, key: &str, value: &str) -> String {
    let has_meta = crate::jsonrpc::scan::members_of(result, ["_meta"]);
    let result = result.get();
    let key_text = Value::from(key).to_string();
    if let (Some([None]), Some(rest)) = (has_meta, result.trim_start().strip_prefix('{')) {
        let rest = rest.trim_start();
        let comma = if rest.starts_with('}') { "" } else { "," };
        return format!(r#"{{"_meta":{{{key_text}:{value}}}{comma}{rest}"#);
    }
    let mut whole: Value =
        serde_json::from_str(result).unwrap_or_else(|_| Value::Object(Default::default()));
    if let (Value::Object(members), Ok(value)) = (&mut whole, serde_json::from_str(value)) {
        let meta = members
            .entry("_meta")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Value::Object(meta) = meta {
            meta.insert(key.to_owned(), value);
        }
    }
    whole.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_is_written_in_or_merged() {
        let age = r#"{"ageMs":3}"#;
        let with_meta = |text: &'static str, key, value| {
            let raw: &serde_json::value::RawValue = serde_json::from_str(text).unwrap();
            super::with_meta(raw.into(), key, value)
        };
        let plain: Value =
            serde_json::from_str(&with_meta(r#"{"output":{"t":1}}"#, CACHED, age)).unwrap();
        assert_eq!(
            plain,
            serde_json::json!({"_meta": {CACHED: {"ageMs": 3}}, "output": {"t": 1}})
        );
        let empty: Value = serde_json::from_str(&with_meta("{ }", CACHED, age)).unwrap();
        assert_eq!(empty, serde_json::json!({"_meta": {CACHED: {"ageMs": 3}}}));
        let own = with_meta(r#"{"output":1,"_meta":{"x":true}}"#, CACHED, age);
        let own: Value = serde_json::from_str(&own).unwrap();
        assert_eq!(
            own["_meta"],
            serde_json::json!({"x": true, CACHED: {"ageMs": 3}})
        );
    }
}
