//! Tool names as clients of the Model Context Protocol see them: matching
//! `^[A-Za-z0-9_-]{1,64}$`, a pure function of the owning upstream's name and
//! the tool's own id (the same on every replica, after restarts, whatever
//! other tools exist), readable, and unique within a tenant's listing.
//!
//! Two forms, told apart by whether the name holds `__`:
//!
//! * **readable**: `{upstream}__{tool}` when the upstream's name has no `__`
//!   and does not end with `_`, the tool's own name (the Model Context
//!   Protocol's `name`, or an MCP v1.0 mcpId) is made of `[A-Za-z0-9_-]`
//!   only, and the whole fits the budget. The first `__` then always ends the
//!   upstream's name, so two different pairs never meet;
//! * **hashed** otherwise: a readable part (the upstream's name and the
//!   tool's last path segment, every other character `_`, runs of `_`
//!   collapsed) cut to fit, then `_` and 12 hex digits of the SHA-256 of the
//!   pair. No hashed name holds `__`, so the two forms never meet either, and
//!   two hashed names meet only if 48 bits of SHA-256 do.
//!
//! The budget (48 by default) leaves room for the prefix a host puts before
//! tool names, since LLM APIs cap them at 64.

use sha2::{Digest, Sha256};

pub use crate::config::tool_names::{DEFAULT_BUDGET, MAX_NAME, MIN_BUDGET, allowed, is_valid};
/// Hex digits of the hash in a hashed name.
const HASH_DIGITS: usize = 12;

/// The tool's own name within an id: for an MCP v1.0 mcpId
/// (`mcp://acme/tools/echo:v1`), its last path segment; a plain name as it is.
fn own_part(tool: &str) -> &str {
    tool.rsplit('/').find(|s| !s.is_empty()).unwrap_or(tool)
}

/// The name a tool of `upstream` whose own id is `tool` is listed under,
/// within `budget` characters (clamped to [`MIN_BUDGET`]..=[`MAX_NAME`]).
pub fn tool_name(upstream: &str, tool: &str, budget: usize) -> String {
    let budget = budget.clamp(MIN_BUDGET, MAX_NAME);
    let readable = !upstream.is_empty()
        && upstream.bytes().all(allowed)
        && !upstream.contains("__")
        && !upstream.ends_with('_')
        && !tool.is_empty()
        && tool.bytes().all(allowed)
        && upstream.len() + 2 + tool.len() <= budget;
    if readable {
        return format!("{upstream}__{tool}");
    }
    hashed(upstream, tool, budget)
}

fn hashed(upstream: &str, tool: &str, budget: usize) -> String {
    let mut digest = Sha256::new();
    // Lengths first: ("ab", "c") and ("a", "bc") hash apart.
    digest.update((upstream.len() as u64).to_be_bytes());
    digest.update(upstream.as_bytes());
    digest.update(tool.as_bytes());
    let hash = digest.finalize();
    let mut hex = String::with_capacity(HASH_DIGITS);
    for b in &hash[..HASH_DIGITS / 2] {
        hex.push_str(&format!("{b:02x}"));
    }
    let room = budget - HASH_DIGITS - 1;
    let mut part = String::with_capacity(room);
    for c in upstream
        .chars()
        .chain(std::iter::once('_'))
        .chain(own_part(tool).chars())
    {
        let c = if c.is_ascii_alphanumeric() || c == '-' {
            c
        } else {
            '_'
        };
        if c == '_' && (part.is_empty() || part.ends_with('_')) {
            continue;
        }
        if part.len() == room {
            break;
        }
        part.push(c);
    }
    let part = part.trim_end_matches('_');
    if part.is_empty() {
        return format!("t_{hex}");
    }
    format!("{part}_{hex}")
}

#[cfg(test)]
mod tests;
