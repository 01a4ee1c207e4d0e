//! Output budgets: a tool result larger than its tenant's budget is cut to
//! fit (see [`cut`]), and the whole of it kept for a while in pages (see
//! [`spill`]) the agent reads as resources, `mcp://{gateway}/~spill/{32
//! hex}/{k}`; readable by the tenant it was cut for and nobody else. What
//! was cut is said in the result's `_meta["dev.mcp-gateway/truncated"]`.

pub mod cut;
pub mod spill;

use serde_json::{Value, json};

/// The `_meta` key of a cut result's mark, and the one member of the stub
/// that stands for a structured value that could not be cut to fit.
pub const TRUNCATED: &str = "dev.mcp-gateway/truncated";

/// The path segment of spilled pages' uris.
const SPILL: &str = "~spill";

/// The schema of the stub: an object holding the mark alone.
pub fn stub_schema() -> Value {
    json!({
        "type": "object",
        "properties": {TRUNCATED: {"type": "object"}},
        "required": [TRUNCATED],
    })
}

/// A tool's outputSchema as listed with a budget: its own, or the stub's.
pub fn budgeted_schema(own: &Value) -> Value {
    json!({"type": "object", "anyOf": [own, stub_schema()]})
}

/// Where a cut result's pages are, once kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    /// `mcp://{gateway}/~spill/{32 hex}`; page k is `{uri}/{k}`.
    pub uri: String,
    /// RFC 3339.
    pub expires_at: String,
    /// The bytes of each page, in order.
    pub sizes: Vec<usize>,
    pub mime: &'static str,
}

/// What a cut result says of itself.
#[derive(Debug, Clone)]
pub struct Mark {
    /// The bytes the pages hold (all of the result).
    pub total_bytes: usize,
    /// The size of what was sent.
    pub kept_bytes: usize,
    /// `None`: over the tenant's spill quota, nothing kept.
    pub kept: Option<Kept>,
}

impl Mark {
    /// `_meta["dev.mcp-gateway/truncated"]`.
    pub fn to_value(&self) -> Value {
        let mut mark = json!({
            "totalBytes": self.total_bytes,
            "keptBytes": self.kept_bytes,
            "pages": self.kept.as_ref().map_or(0, |k| k.sizes.len()),
        });
        if let Some(kept) = &self.kept {
            mark["uri"] = Value::from(kept.uri.as_str());
            mark["expiresAt"] = Value::from(kept.expires_at.as_str());
        }
        mark
    }

    /// The blocks that follow what was kept: a text block saying how much
    /// was cut and where the rest is, and a `resource_link` per page.
    pub fn blocks(&self) -> Vec<Value> {
        let (kept, total) = (self.kept_bytes, self.total_bytes);
        let Some(pages) = &self.kept else {
            let text = format!(
                "[truncated] {kept} of {total} bytes sent; the rest was over this tenant's spill quota and was not kept"
            );
            return vec![json!({"type": "text", "text": text})];
        };
        let n = pages.sizes.len();
        let text = format!(
            "[truncated] {kept} of {total} bytes sent; all of it is in {n} page{} to read with resources/read until {}: {}/1{}",
            if n == 1 { "" } else { "s" },
            pages.expires_at,
            pages.uri,
            if n == 1 {
                String::new()
            } else {
                format!(" to {}/{n}", pages.uri)
            },
        );
        let mut blocks = vec![json!({"type": "text", "text": text})];
        for (i, size) in pages.sizes.iter().enumerate() {
            blocks.push(json!({
                "type": "resource_link",
                "uri": format!("{}/{}", pages.uri, i + 1),
                "name": format!("page {} of {n}", i + 1),
                "mimeType": pages.mime,
                "size": size,
            }));
        }
        blocks
    }
}

/// `mcp://{gateway}/~spill/{hex}` for a spill's id.
pub fn spill_uri(gateway: &str, hex: &str) -> String {
    format!("mcp://{gateway}/{SPILL}/{hex}")
}

/// The spill id and page number a page's uri names (`None`: not one of
/// this gateway's page uris).
pub fn parse_page<'a>(gateway: &str, uri: &'a str) -> Option<(&'a str, usize)> {
    let rest = uri
        .strip_prefix("mcp://")?
        .strip_prefix(gateway)?
        .strip_prefix('/')?
        .strip_prefix(SPILL)?
        .strip_prefix('/')?;
    let (hex, k) = rest.split_once('/')?;
    let hex_ok = hex.len() == 32 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let k_ok = !k.is_empty() && !k.starts_with('0') && k.bytes().all(|b| b.is_ascii_digit());
    (hex_ok && k_ok).then_some((hex, k.parse().ok()?))
}

/// Whether `uri` is in this gateway's spill space at all (a page or not).
pub fn is_spill(gateway: &str, uri: &str) -> bool {
    uri.strip_prefix("mcp://")
        .and_then(|r| r.strip_prefix(gateway))
        .and_then(|r| r.strip_prefix('/'))
        .is_some_and(|r| r.starts_with(SPILL) && r[SPILL.len()..].starts_with('/'))
}

#[cfg(test)]
mod tests;
