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
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn readable_where_it_fits() {
        assert_eq!(
            tool_name("time", "get_current_time", 48),
            "time__get_current_time"
        );
        assert_eq!(
            tool_name("everything", "get-sum", 48),
            "everything__get-sum"
        );
        // An MCP v1.0 id holds characters a name cannot: hashed, still readable.
        let v1 = tool_name("files", "mcp://acme/tools/file-writer:v1", 48);
        assert!(v1.starts_with("files_file-writer_v1_"), "{v1}");
        assert!(is_valid(&v1) && !v1.contains("__"));
        // Too long for the budget: cut, with the hash.
        let long = tool_name("search", &"x".repeat(60), 48);
        assert_eq!(long.len(), 48);
        assert!(is_valid(&long));
        // The first `__` ends the upstream's name.
        assert_ne!(tool_name("a_b", "c", 48), tool_name("a", "b_c", 48));
        assert_ne!(tool_name("a_", "_b", 48), tool_name("a", "__b", 48));
    }

    fn upstream() -> impl Strategy<Value = String> {
        "[A-Za-z0-9_-]{1,64}"
    }

    fn tool() -> impl Strategy<Value = String> {
        prop_oneof![
            "[A-Za-z0-9_-]{1,80}",
            "mcp://[a-z]{1,8}/tools/[ -~]{1,40}",
            any::<String>(),
        ]
    }

    proptest! {
        #[test]
        fn names_follow_the_rule_and_the_budget(u in upstream(), t in tool(), budget in 0usize..100) {
            let name = tool_name(&u, &t, budget);
            prop_assert!(is_valid(&name), "{}", name);
            prop_assert!(name.len() <= budget.clamp(MIN_BUDGET, MAX_NAME));
            // A pure function: the same inputs, the same name.
            prop_assert_eq!(&name, &tool_name(&u, &t, budget));
        }

        #[test]
        fn distinct_tools_get_distinct_names(
            a in (upstream(), tool()),
            b in (upstream(), tool()),
            budget in MIN_BUDGET..=MAX_NAME,
        ) {
            prop_assume!(a != b);
            prop_assert_ne!(tool_name(&a.0, &a.1, budget), tool_name(&b.0, &b.1, budget));
        }

        #[test]
        fn near_misses_get_distinct_names(u in "[a-z]{1,6}", t in "[a-z]{1,6}") {
            // Pairs that differ only in where an underscore falls.
            let names = [
                tool_name(&u, &t, 48),
                tool_name(&format!("{u}_"), &t, 48),
                tool_name(&u, &format!("_{t}"), 48),
                tool_name(&format!("{u}_{t}"), "x", 48),
                tool_name(&u, &format!("{t}_x"), 48),
            ];
            let unique: std::collections::HashSet<_> = names.iter().collect();
            prop_assert_eq!(unique.len(), names.len(), "{:?}", names);
        }
    }
}
