//! Unit tests of `names`.

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
