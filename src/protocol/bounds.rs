//! What one upstream's listing may cost: each definition and the whole
//! listing (every page together) are bounded in bytes of the text the
//! upstream sent, checked on that text before anything is built from it,
//! so that a listing costs the gateway a small multiple of its bound,
//! whatever the upstream sends.

use serde_json::value::RawValue;

use crate::jsonrpc::Json;

/// Bytes one upstream's listing of one kind, and one definition in it, may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListingBounds {
    pub listing_bytes: usize,
    pub definition_bytes: usize,
}

impl Default for ListingBounds {
    fn default() -> Self {
        let limits = crate::config::Limits::default();
        ListingBounds {
            listing_bytes: limits.max_listing_bytes,
            definition_bytes: limits.max_definition_bytes,
        }
    }
}

/// A definition left out for its size: its name or id when it has one
/// that a quick look finds, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Oversized {
    pub id: Option<String>,
    pub why: String,
}

/// Definitions of one listing taken as they come, page after page, within the bounds.
#[derive(Debug)]
pub struct Taker {
    bounds: ListingBounds,
    used: usize,
    /// Once the listing's bound is reached, the rest is left out.
    pub full: bool,
    pub left: Vec<Oversized>,
}

impl Taker {
    pub fn new(bounds: ListingBounds) -> Self {
        Taker {
            bounds,
            used: 0,
            full: false,
            left: Vec::new(),
        }
    }

    /// The items of one page that fit: a definition over its bound is left
    /// out (and the rest taken); the first that would take the listing past
    /// its bound ends it (it and everything after it are left out, once).
    pub fn take<'a>(&mut self, items: Vec<&'a RawValue>) -> Vec<&'a RawValue> {
        let mut kept = Vec::with_capacity(items.len());
        for item in items {
            if self.full {
                break;
            }
            let size = item.get().len();
            if size > self.bounds.definition_bytes {
                self.left.push(Oversized {
                    id: id_of(item),
                    why: format!(
                        "a definition of {size} bytes, over the {}-byte bound (gateway.limits.max_definition_bytes)",
                        self.bounds.definition_bytes
                    ),
                });
                continue;
            }
            if self.used + size > self.bounds.listing_bytes {
                self.full = true;
                self.left.push(Oversized {
                    id: None,
                    why: format!(
                        "the listing is over the {}-byte bound (gateway.limits.max_listing_bytes); the rest is left out",
                        self.bounds.listing_bytes
                    ),
                });
                break;
            }
            self.used += size;
            kept.push(item);
        }
        kept
    }
}

/// A definition's `name` or `mcpId`, when a one-pass look finds a string.
fn id_of(item: &RawValue) -> Option<String> {
    let json = Json::from(item);
    if json.first_byte() != b'{' {
        return None;
    }
    let [name, id] = crate::jsonrpc::scan::members_of(json, ["name", "mcpId"])?;
    let text = id.or(name)?;
    serde_json::from_str::<String>(text.get())
        .ok()
        .map(|s| s.chars().take(128).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raws(text: &str) -> Vec<&RawValue> {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn definitions_and_listings_are_taken_within_their_bounds() {
        let mut taker = Taker::new(ListingBounds {
            listing_bytes: 60,
            definition_bytes: 25,
        });
        let page = r#"[{"name":"a","d":"1234"},{"name":"big","d":"12345678901234567890"},{"name":"b","d":"5678"}]"#;
        let kept = taker.take(raws(page));
        assert_eq!(kept.len(), 2, "the big one is left out, the rest taken");
        assert_eq!(taker.left[0].id.as_deref(), Some("big"));
        assert!(!taker.full);
        // A second page: one more fits (48 + 24 > 60: no).
        let kept = taker.take(raws(r#"[{"name":"c","d":"9999"},{"name":"d"}]"#));
        assert!(kept.is_empty());
        assert!(taker.full);
        assert_eq!(taker.left.len(), 2);
        assert!(taker.left[1].why.contains("max_listing_bytes"));
        // Full: nothing more, and said once.
        assert!(taker.take(raws(r#"[{"name":"e"}]"#)).is_empty());
        assert_eq!(taker.left.len(), 2);
    }
}
