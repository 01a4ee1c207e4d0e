//! A tenant's `tools.discovery`: a known mode, bounds in range, `always`
//! globs that compile and can match one of its tools, and no override
//! giving a tool a meta-tool's name while the meta-tools exist.

use super::*;
use crate::config::curation::{Discovery, DiscoveryMode, META_TOOLS};
use crate::config::raw::{RawDiscovery, RawToolPolicy};

pub(super) fn discovery(
    raw: &RawDiscovery,
    policy: &RawToolPolicy,
    reach: &Reach<'_>,
    p: &mut Problems,
) -> Option<Discovery> {
    let at = format!("{}.tools.discovery", reach.at);
    let mode = match raw.mode.as_deref() {
        None | Some("direct") => DiscoveryMode::Direct,
        Some("search") => DiscoveryMode::Search,
        Some("auto") => DiscoveryMode::Auto {
            threshold: match raw.threshold {
                None => 40,
                Some(0) => {
                    p.add(format!("{at}.threshold"), "must be at least 1");
                    return None;
                }
                Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
            },
        },
        Some(other) => {
            p.add(
                format!("{at}.mode"),
                format!("'{other}' is not direct, search or auto"),
            );
            return None;
        }
    };
    if raw.threshold.is_some() && !matches!(mode, DiscoveryMode::Auto { .. }) {
        p.add(
            format!("{at}.threshold"),
            "means something only with mode: auto",
        );
    }
    let bounded =
        |key: &str, value: Option<u64>, default: u64, max: u64, p: &mut Problems| match value {
            None => Some(default),
            Some(n) if (1..=max).contains(&n) => Some(n),
            Some(_) => {
                p.add(format!("{at}.{key}"), format!("must be from 1 to {max}"));
                None
            }
        };
    // Each bound checked, every problem said.
    let max_limit = bounded("max_limit", raw.max_limit, 50, 200, p);
    let limit = bounded(
        "limit",
        raw.limit,
        5.min(max_limit.unwrap_or(50)),
        u64::MAX,
        p,
    );
    let max_loaded = bounded("max_loaded", raw.max_loaded, 32, 256, p);
    if let (Some(limit), Some(max)) = (limit, max_limit)
        && limit > max
    {
        p.add(format!("{at}.limit"), format!("is over max_limit ({max})"));
    }
    let mut always = globset::GlobSetBuilder::new();
    for (i, pattern) in raw.always.iter().enumerate() {
        let gat = format!("{at}.always[{i}]");
        match globset::Glob::new(pattern) {
            Err(e) => p.add(gat, format!("'{pattern}' is not a glob: {}", e.kind())),
            Ok(_) if reach.gateway_id.is_some() && !super::can_match(pattern, reach.prefixes) => {
                p.add(gat, super::never_matches(pattern, reach.prefixes));
            }
            Ok(glob) => {
                always.add(glob);
            }
        }
    }
    if mode != DiscoveryMode::Direct {
        for (id, over) in &policy.overrides {
            if let Some(name) = over.name.as_deref().filter(|n| META_TOOLS.contains(n)) {
                p.add(
                    format!("{}.tools.overrides.{id}.name", reach.at),
                    format!("'{name}' is a meta-tool's name while discovery searches"),
                );
            }
        }
    }
    let (Some(limit), Some(max_limit), Some(max_loaded)) = (limit, max_limit, max_loaded) else {
        return None;
    };
    let as_usize = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    Some(Discovery {
        mode,
        always: (!raw.always.is_empty())
            .then(|| always.build().ok())
            .flatten(),
        limit: as_usize(limit),
        max_limit: as_usize(max_limit),
        max_loaded: as_usize(max_loaded),
    })
}
