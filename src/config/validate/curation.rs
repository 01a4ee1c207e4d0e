//! A tenant's `tools.hide`, `tools.bare_names` and `tools.overrides`: each
//! override names one tool of an upstream the tenant sees, each name is one
//! the Model Context Protocol allows and no other tool of the tenant is
//! given, each hide glob compiles and can match one of its tools.

use std::sync::Arc;

use super::*;
use crate::config::curation::{CacheChoice, CacheSettings, Curation, OutputSettings, Override};
use crate::config::raw::{RawCache, RawCacheChoice, RawOutput, RawToolPolicy};

pub(super) fn curation(
    policy: &mut RawToolPolicy,
    reach: &Reach<'_>,
    p: &mut Problems,
) -> Option<Arc<Curation>> {
    let at = reach.at;
    let mut out = Curation {
        bare_names: policy.bare_names,
        output: policy
            .output
            .as_ref()
            .map(|o| output(o, &format!("{at}.tools.output"), p)),
        cache: policy
            .cache
            .as_ref()
            .map(|c| cache(c, &format!("{at}.tools.cache"), p)),
        discovery: policy
            .discovery
            .as_ref()
            .and_then(|d| super::discovery::discovery(d, policy, reach, p)),
        ..Curation::default()
    };
    let mut hide = globset::GlobSetBuilder::new();
    for (i, pattern) in policy.hide.iter().enumerate() {
        let hat = format!("{at}.tools.hide[{i}]");
        match globset::Glob::new(pattern) {
            Err(e) => p.add(hat, format!("'{pattern}' is not a glob: {}", e.kind())),
            Ok(_) if !reachable(pattern, reach) => {
                p.add(hat, super::never_matches(pattern, reach.prefixes));
            }
            Ok(glob) => {
                hide.add(glob);
                out.hide_globs.push(pattern.clone());
            }
        }
    }
    if !policy.hide.is_empty() {
        out.hide = hide.build().ok();
    }
    // Each name given, and the first override that gave it.
    let mut named: HashMap<String, String> = HashMap::new();
    for (id, raw) in std::mem::take(&mut policy.overrides) {
        if let Some(over) = override_of(&id, raw, reach, &mut named, p) {
            out.overrides.insert(id, over);
        }
    }
    let asks = out.hide.is_some()
        || out.bare_names
        || !out.overrides.is_empty()
        || out.output.is_some()
        || out.cache.is_some()
        || out.discovery.is_some();
    out.digest = {
        use std::hash::{Hash, Hasher};
        let mut h = std::hash::DefaultHasher::new();
        (&policy.hide, out.bare_names, out.output, out.cache).hash(&mut h);
        if let Some(d) = &out.discovery {
            let always = policy.discovery.as_ref().map(|r| &r.always);
            (d.mode, always, d.limit, d.max_limit, d.max_loaded).hash(&mut h);
        }
        let mut overrides: Vec<_> = out.overrides.iter().collect();
        overrides.sort();
        overrides.hash(&mut h);
        h.finish()
    };
    asks.then(|| Arc::new(out))
}

/// One override, checked: an exact id of a tool the tenant sees, a name
/// nobody else of the tenant is given; `None` when it is wrong or asks
/// for nothing.
fn override_of(
    id: &str,
    raw: crate::config::raw::RawOverride,
    reach: &Reach<'_>,
    named: &mut HashMap<String, String>,
    p: &mut Problems,
) -> Option<Override> {
    let oat = format!("{}.tools.overrides.{id}", reach.at);
    if id.contains(['*', '?', '[', '{', '\\']) {
        p.add(
            &oat,
            "an override names one tool by its exact namespaced id, not a glob",
        );
        return None;
    }
    if reach.gateway_id.is_some() {
        // `mcp://{gateway}/{upstream}/` and more: a tool of an upstream it sees
        // (an upstream's name holds no `/`, so the prefix names one).
        let sees = |prefix: &String| id.len() > prefix.len() && id.starts_with(prefix.as_str());
        if !reach.prefixes.iter().any(sees) {
            let why = match reach.prefixes {
                [] => "the tenant sees no upstream".to_owned(),
                prefixes => format!("its tools' ids start with {}", prefixes.join(" or ")),
            };
            p.add(
                &oat,
                format!("'{id}' matches no tool of this tenant: {why}"),
            );
            return None;
        }
    }
    if let Some(name) = &raw.name {
        if let Some(why) = bad_name(name, reach.name_budget) {
            p.add(format!("{oat}.name"), why);
        } else if let Some(first) = named.get(name) {
            p.add(
                format!("{oat}.name"),
                format!("'{name}' is given to two tools: {first} and {id}"),
            );
        } else {
            named.insert(name.clone(), id.to_owned());
        }
    }
    let over = Override {
        output: raw
            .output
            .as_ref()
            .map(|o| output(o, &format!("{oat}.output"), p)),
        cache: raw.cache.as_ref().map(|c| match c {
            RawCacheChoice::Switch(true) => CacheChoice::On,
            RawCacheChoice::Switch(false) => CacheChoice::Off,
            RawCacheChoice::For(f) => {
                if f.ttl_ms == 0 {
                    p.add(format!("{oat}.cache.ttl_ms"), "must be greater than 0");
                }
                CacheChoice::For(f.ttl_ms.max(1))
            }
        }),
        name: raw.name,
        title: raw.title,
        description: raw.description,
    };
    (over != Override::default()).then_some(over)
}

/// A result budget's keys, each checked: none may be 0, and a page holds
/// at least 1024 bytes.
fn output(raw: &RawOutput, at: &str, p: &mut Problems) -> OutputSettings {
    let mut positive = |key: &str, v: Option<u64>| {
        if v == Some(0) {
            p.add(format!("{at}.{key}"), "must be greater than 0");
        }
        v.filter(|v| *v > 0)
    };
    let out = OutputSettings {
        max_bytes: positive("max_bytes", raw.max_bytes),
        max_tokens: positive("max_tokens", raw.max_tokens),
        page_bytes: raw.page_bytes,
        spill_ttl_ms: positive("spill_ttl_ms", raw.spill_ttl_ms),
        spill_quota_bytes: positive("spill_quota_bytes", raw.spill_quota_bytes),
    };
    if let Some(page) = raw.page_bytes.filter(|b| *b < 1024) {
        p.add(
            format!("{at}.page_bytes"),
            format!("{page} is under 1024: a page holds at least 1024 bytes"),
        );
    }
    out
}

/// A tenant's result cache, checked: no key may be 0.
fn cache(raw: &RawCache, at: &str, p: &mut Problems) -> CacheSettings {
    for (key, v) in [("ttl_ms", raw.ttl_ms), ("max_entries", raw.max_entries)] {
        if v == Some(0) {
            p.add(format!("{at}.{key}"), "must be greater than 0");
        }
    }
    CacheSettings {
        ttl_ms: raw.ttl_ms.filter(|v| *v > 0),
        max_entries: raw.max_entries.filter(|v| *v > 0),
        hints: raw.hints,
    }
}

/// Why `name` cannot be a tool's name for agents, if it cannot.
fn bad_name(name: &str, budget: usize) -> Option<String> {
    if !crate::config::tool_names::is_valid(name) {
        return Some(format!(
            "'{name}' is no tool name: 1 to 64 of letters, digits, '-' and '_'"
        ));
    }
    if name.len() > budget {
        return Some(format!(
            "'{name}' is longer than gateway.tool_name_budget ({budget})"
        ));
    }
    if name.contains("__") {
        return Some(format!(
            "'{name}' holds '__', which marks the gateway's own upstream__tool names"
        ));
    }
    None
}

fn reachable(pattern: &str, reach: &Reach<'_>) -> bool {
    reach.gateway_id.is_none() || super::can_match(pattern, reach.prefixes)
}
