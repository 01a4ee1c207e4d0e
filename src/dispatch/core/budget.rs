//! A tool result within its tenant's output budget (`tools.output`): a
//! result that fits passes as it came; a larger one is cut to fit (see
//! `output::cut`), all of it kept in pages the tenant reads as resources
//! (`output::spill`), and marked, counted and audited as cut.

use serde_json::{Value, json};

use super::Dispatcher;
use super::audit::Audit;
use crate::config::curation::Budget;
use crate::error::GatewayError;
use crate::jsonrpc::JsonBuf;
use crate::output::{Mark, TRUNCATED, cut};
use crate::protocol::ToolEntry;
use crate::protocol::instance::Instance;
use crate::protocol::tool_result::{Cut, Output, ToolResult};
use crate::tenant::Tenant;

/// What the pages of a cut result hold, and its media type.
struct Whole {
    text: String,
    mime: &'static str,
}

impl Dispatcher {
    /// `result`, within the tenant's budget for the tool `id`.
    pub(super) async fn within_budget(
        &self,
        tenant: &Tenant,
        id: &str,
        entry: &ToolEntry,
        result: ToolResult,
        audit: &mut Audit,
    ) -> ToolResult {
        let Some(budget) = tenant.curation.as_ref().and_then(|c| c.budget(id)) else {
            return result;
        };
        let (kind, output) = result.output();
        // The text as it came is never smaller than its compact form.
        if output.get().len() <= budget.max_bytes {
            return result;
        }
        let Ok(value) = serde_json::from_str::<Value>(output.get()) else {
            return result;
        };
        if cut::size(&value) <= budget.max_bytes {
            return result;
        }
        let cut = match kind {
            Output::Blocks => self.cut_blocks(tenant, &budget, &value).await,
            Output::Value => {
                let whole = whole_value(output.get(), &value);
                self.cut_value(tenant, &budget, entry, &value, whole).await
            }
        };
        let Some(cut) = cut else {
            return result;
        };
        audit.truncated = true;
        self.metrics()
            .results_truncated
            .with_label_values(&[&tenant.name])
            .inc();
        cut
    }

    async fn cut_blocks(
        &self,
        tenant: &Tenant,
        budget: &Budget,
        value: &Value,
    ) -> Option<ToolResult> {
        let blocks = value.as_array()?;
        let mut kept = cut::blocks(blocks, budget.max_bytes);
        let kept_bytes = cut::size(&Value::Array(kept.clone()));
        let mark = self
            .spilled(tenant, budget, whole_blocks(blocks, value), kept_bytes)
            .await;
        let appended = mark.blocks();
        let cut = Cut {
            mark: mark.to_value(),
            tail: Vec::new(),
            appended: appended.len(),
        };
        kept.extend(appended);
        let answer = serde_json::value::to_raw_value(&kept).ok()?;
        Some(ToolResult::cut(JsonBuf::from(answer), Output::Blocks, cut))
    }

    /// A structured value cut to fit, if the cut still satisfies the
    /// tool's outputSchema; otherwise the stub, which holds the mark alone.
    async fn cut_value(
        &self,
        tenant: &Tenant,
        budget: &Budget,
        entry: &ToolEntry,
        value: &Value,
        whole: Whole,
    ) -> Option<ToolResult> {
        let valid = |v: &Value| {
            let text = v.to_string();
            let validator = entry.output().ok();
            Instance::parse(&text).is_ok_and(|i| validator.is_some_and(|s| s.is_valid(&i)))
        };
        let kept = cut::value(value, budget.max_bytes).filter(valid);
        let kept_bytes = kept.as_ref().map_or(0, cut::size);
        let mark = self.spilled(tenant, budget, whole, kept_bytes).await;
        let mark_value = mark.to_value();
        let output = kept.unwrap_or_else(|| json!({ TRUNCATED: mark_value.clone() }));
        let answer = serde_json::value::to_raw_value(&output).ok()?;
        let cut = Cut {
            mark: mark_value,
            tail: mark.blocks(),
            appended: 0,
        };
        Some(ToolResult::cut(JsonBuf::from(answer), Output::Value, cut))
    }

    /// The mark of a cut result whose whole is kept in pages if the
    /// tenant's quota allows.
    async fn spilled(
        &self,
        tenant: &Tenant,
        budget: &Budget,
        whole: Whole,
        kept_bytes: usize,
    ) -> Mark {
        let pages = cut::pages(&whole.text, budget.page_bytes);
        let kept = self
            .spills()
            .keep(
                self.gateway_id(),
                &tenant.name,
                pages,
                whole.mime,
                budget.spill_ttl,
                budget.spill_quota,
            )
            .await;
        Mark {
            total_bytes: whole.text.len(),
            kept_bytes,
            kept,
        }
    }
}

/// What the pages of cut blocks hold: their texts one after another when
/// every block is text, else the JSON of `{"content": blocks}`.
fn whole_blocks(blocks: &[Value], value: &Value) -> Whole {
    let texts: Option<Vec<&str>> = blocks
        .iter()
        .map(|b| match b.get("type").and_then(Value::as_str) {
            Some("text") => b.get("text").and_then(Value::as_str),
            _ => None,
        })
        .collect();
    match texts {
        Some(texts) => Whole {
            text: texts.concat(),
            mime: "text/plain",
        },
        None => Whole {
            text: json!({ "content": value }).to_string(),
            mime: "application/json",
        },
    }
}

/// What the pages of a cut value hold: the result as the gateway would
/// have sent it whole, a text block of the value and the value itself.
fn whole_value(text: &str, value: &Value) -> Whole {
    Whole {
        text: json!({
            "content": [{"type": "text", "text": text}],
            "structuredContent": value,
        })
        .to_string(),
        mime: "application/json",
    }
}

impl Dispatcher {
    /// `resources/read` of a cut result's page: one text content, for the
    /// tenant it was cut for while it is kept; unknown otherwise.
    pub async fn read_page(&self, tenant: &Tenant, uri: &str) -> Result<Value, GatewayError> {
        let unknown = || GatewayError::ResourceNotFound(uri.to_owned());
        let (hex, k) = crate::output::parse_page(self.gateway_id(), uri).ok_or_else(unknown)?;
        let page = self
            .spills()
            .page(&tenant.name, hex, k)
            .await
            .ok_or_else(unknown)?;
        Ok(json!({"contents": [{"uri": uri, "mimeType": page.mime, "text": page.text}]}))
    }
}
