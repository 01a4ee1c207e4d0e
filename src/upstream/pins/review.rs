//! What a reviewer reads of the quarantined definitions: for each, the
//! pinned definition it is compared with (if any), the one waiting, and a
//! unified diff of the two (`-` pinned, `+` pending) over their canonical
//! JSON pretty-printed, a member a line.

use serde::Serialize;
use serde_json::Value;

use super::record::{Pin, Reason, UpstreamPins};
use crate::protocol::fingerprint::pretty;

/// `GET /pins` and `mcp-gateway pins list`.
#[derive(Debug, Default, Serialize)]
pub struct Review {
    pub quarantined: Vec<Quarantined>,
}

#[derive(Debug, Serialize)]
pub struct Quarantined {
    pub upstream: String,
    /// The upstream's own id.
    pub tool: String,
    /// The namespaced id agents would call it by.
    pub id: String,
    pub state: &'static str,
    pub reason: &'static str,
    pub pinned: Option<Pinned>,
    pub pending: Waiting,
    pub diff: String,
}

#[derive(Debug, Serialize)]
pub struct Pinned {
    /// The id it is pinned under.
    pub tool: String,
    pub fingerprint: String,
    pub definition: Value,
}

#[derive(Debug, Serialize)]
pub struct Waiting {
    pub fingerprint: String,
    pub definition: Value,
}

/// Adds what waits for review among an upstream's pins to `review`.
pub fn add(review: &mut Review, gateway: &str, upstream: &str, pins: &UpstreamPins) {
    for (tool, pin) in pins {
        let Some(pending) = &pin.pending else {
            continue;
        };
        let compared = match pending.reason {
            Reason::Changed => Some((tool, pin)),
            Reason::Renamed => pending
                .compared
                .as_ref()
                .and_then(|c| pins.get_key_value(c)),
            Reason::New => None,
        };
        let pinned = compared.and_then(|(id, p): (&String, &Pin)| {
            Some(Pinned {
                tool: id.clone(),
                fingerprint: p.fingerprint.clone()?,
                definition: p.definition.clone().unwrap_or(Value::Null),
            })
        });
        let definition = pending.definition.clone().unwrap_or(Value::Null);
        let diff = unified(pinned.as_ref().map(|p| &p.definition), &definition);
        review.quarantined.push(Quarantined {
            upstream: upstream.to_owned(),
            tool: tool.clone(),
            id: crate::protocol::mcpid::namespace(gateway, upstream, tool),
            state: pending.state.as_str(),
            reason: pending.reason.as_str(),
            pinned,
            pending: Waiting {
                fingerprint: pending.fingerprint.clone(),
                definition,
            },
            diff,
        });
    }
}

/// A unified diff of the pinned definition (none: every line is new) and
/// the pending one.
pub fn unified(pinned: Option<&Value>, pending: &Value) -> String {
    let old = pinned.map(pretty).unwrap_or_default();
    let new = pretty(pending);
    let (old, new) = (with_newline(old), with_newline(new));
    similar::TextDiff::from_lines(&old, &new)
        .unified_diff()
        .context_radius(3)
        .header("pinned", "pending")
        .to_string()
}

fn with_newline(mut text: String) -> String {
    if !text.is_empty() {
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_diff_takes_out_the_pinned_lines_and_adds_the_pending_ones() {
        let diff = unified(
            Some(&json!({"description": "Reads.", "inputSchema": {"type": "object"}})),
            &json!({"description": "Reads, and mails it out.", "inputSchema": {"type": "object"}}),
        );
        assert!(diff.starts_with("--- pinned\n+++ pending\n@@"), "{diff}");
        assert!(
            diff.contains("\n-  \"description\": \"Reads.\",\n"),
            "{diff}"
        );
        assert!(
            diff.contains("\n+  \"description\": \"Reads, and mails it out.\",\n"),
            "{diff}"
        );
        assert!(diff.contains("\n   \"inputSchema\": {\n"), "{diff}");
        let new = unified(None, &json!({"a": 1}));
        assert!(new.contains("\n+{\n+  \"a\": 1\n+}\n"), "{new}");
    }
}
