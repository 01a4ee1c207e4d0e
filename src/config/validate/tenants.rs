//! Each of `tenants:`: its keys, the upstreams it sees, its tool policy
//! (globs that can match something) and its limits.

use super::*;

/// Whether a tool glob can match an id that starts with one of `prefixes`
/// (`mcp://{gateway.id}/{upstream}/` of the tenant's upstreams): its literal
/// start (up to its first wildcard) must agree with one of them. A typo in
/// the gateway's id or an upstream's name makes a glob that matches nothing:
/// an allow list that lets nothing through, a deny that denies nothing.
pub(super) fn can_match(pattern: &str, prefixes: &[String]) -> bool {
    let literal = pattern
        .find(['*', '?', '[', '{', '\\'])
        .map_or(pattern, |at| &pattern[..at]);
    prefixes
        .iter()
        .any(|prefix| prefix.starts_with(literal) || literal.starts_with(prefix.as_str()))
}

pub(super) fn never_matches(pattern: &str, prefixes: &[String]) -> String {
    if prefixes.is_empty() {
        return format!("'{pattern}' can match no tool: the tenant sees no upstream");
    }
    format!(
        "'{pattern}' can match no tool of this tenant: their ids start with {}",
        prefixes.join(" or ")
    )
}

pub(super) fn tenants(
    raw: BTreeMap<String, RawTenant>,
    upstreams: &[String],
    by_token: &[String],
    gateway_id: Option<&str>,
    name_budget: usize,
    secrets: &dyn Secrets,
    p: &mut Problems,
) -> Vec<TenantSpec> {
    if raw.is_empty() {
        p.add(
            "tenants",
            "at least one tenant is needed, or no agent can connect",
        );
    }
    let mut owners: HashMap<KeyDigest, String> = HashMap::new();
    let mut out = Vec::new();
    for (name, t) in raw {
        let at = format!("tenants.{name}");
        // Its settings as written, digested: equal for equal settings in
        // every replica, so what is kept for the tenant (cached results)
        // is told apart from what a reload that changed it would keep.
        let digest = {
            use sha2::Digest;
            let sum = sha2::Sha256::digest(format!("{name}{t:?}").as_bytes());
            sum[..8].iter().fold(0u64, |n, b| (n << 8) | u64::from(*b))
        };
        if !is_name(&name) {
            p.add(
                &at,
                "tenant names use only letters, digits, '-' and '_' (at most 64)",
            );
        }
        if t.api_keys.is_empty() && !by_token.contains(&name) {
            p.add(
                format!("{at}.api_keys"),
                "at least one key is needed (or a gateway.auth.jwt issuer whose tokens name this tenant)",
            );
        }
        let keys = tenant_keys(&t.api_keys, &at, &mut owners, secrets, p);
        let seen = tenant_upstreams(&t.upstreams, &at, upstreams, p);
        let rate_limit = match t.rate_limit {
            Some(r) if r.per_second == 0 || r.burst == Some(0) => {
                p.add(
                    format!("{at}.rate_limit"),
                    "per_second and burst must be greater than 0",
                );
                None
            }
            Some(r) => {
                let clamp = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
                Some((clamp(r.per_second), clamp(r.burst.unwrap_or(r.per_second))))
            }
            None => None,
        };
        if t.max_concurrency == Some(0) {
            p.add(format!("{at}.max_concurrency"), "must be greater than 0");
        }
        let mut policy = t.tools.unwrap_or_default();
        // The ids this tenant's tools can have start with one of these.
        let prefixes: Vec<String> = gateway_id
            .map(|id| seen.iter().map(|u| format!("mcp://{id}/{u}/")).collect())
            .unwrap_or_default();
        let tools = tool_globs(&policy, &at, &prefixes, gateway_id, p);
        let reach = Reach {
            at: &at,
            prefixes: &prefixes,
            gateway_id,
            name_budget,
        };
        let curation = super::curation::curation(&mut policy, &reach, p);
        if t.max_sessions == Some(0) {
            p.add(format!("{at}.max_sessions"), "must be greater than 0");
        }
        out.push(TenantSpec {
            name,
            keys,
            upstreams: seen,
            tools,
            rate_limit,
            max_concurrency: t
                .max_concurrency
                .filter(|n| *n > 0)
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            max_sessions: t
                .max_sessions
                .filter(|n| *n > 0)
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            curation,
            digest,
        });
    }
    out
}

/// A tenant's API keys as digests: each a key no other tenant (or entry)
/// has; `owners` says where each was first given.
fn tenant_keys(
    api_keys: &[String],
    at: &str,
    owners: &mut HashMap<KeyDigest, String>,
    secrets: &dyn Secrets,
    p: &mut Problems,
) -> Vec<KeyDigest> {
    let mut keys = Vec::new();
    for (i, key) in api_keys.iter().enumerate() {
        let kat = format!("{at}.api_keys[{i}]");
        if let Some(digest) = key_digest(key, secrets, &kat, p) {
            match owners.get(&digest) {
                Some(other) => p.add(&kat, format!("the same key is already given at {other}")),
                None => {
                    owners.insert(digest, kat);
                    keys.push(digest);
                }
            }
        }
    }
    keys
}

/// A tenant's upstreams: each a declared one, once.
fn tenant_upstreams(
    listed: &[String],
    at: &str,
    upstreams: &[String],
    p: &mut Problems,
) -> Vec<String> {
    let mut seen = Vec::new();
    for (i, up) in listed.iter().enumerate() {
        let uat = format!("{at}.upstreams[{i}]");
        if !upstreams.contains(up) {
            p.add(&uat, format!("unknown upstream '{up}'"));
        } else if seen.contains(up) {
            p.add(&uat, format!("upstream '{up}' is listed twice"));
        } else {
            seen.push(up.clone());
        }
    }
    seen
}

/// A tenant's `tools.allow`, `deny` and `scopes`, compiled: each pattern
/// checked on its own (so that each bad one is reported), and one that no
/// id of the tenant's upstreams (`prefixes`) can match refused.
fn tool_globs(
    policy: &crate::config::raw::RawToolPolicy,
    at: &str,
    prefixes: &[String],
    gateway_id: Option<&str>,
    p: &mut Problems,
) -> ToolGlobs {
    let mut tools = ToolGlobs::default();
    let reachable = |pattern: &str| gateway_id.is_none() || can_match(pattern, prefixes);
    // Every pattern on its own, so that each bad one is reported.
    for (list, patterns) in [("allow", &policy.allow), ("deny", &policy.deny)] {
        let mut good = true;
        for (i, pattern) in patterns.iter().enumerate() {
            let pat = format!("{at}.tools.{list}[{i}]");
            match globset::Glob::new(pattern) {
                Err(e) => {
                    p.add(pat, format!("'{pattern}' is not a glob: {}", e.kind()));
                    good = false;
                }
                Ok(_) if !reachable(pattern) => {
                    p.add(pat, never_matches(pattern, prefixes));
                    good = false;
                }
                Ok(_) => {}
            }
        }
        if !good {
            continue;
        }
        let none: &[String] = &[];
        let (allow, deny) = if list == "allow" {
            (&patterns[..], none)
        } else {
            (none, &patterns[..])
        };
        match ToolGlobs::compile(allow, deny) {
            Ok(compiled) if list == "allow" => tools.allow = compiled.allow,
            Ok(compiled) => {
                tools.deny = compiled.deny;
                tools.deny_globs = compiled.deny_globs;
            }
            Err((list, i, why)) => p.add(format!("{at}.tools.{list}[{i}]"), why),
        }
    }
    for (pattern, scope) in &policy.scopes {
        let sat = format!("{at}.tools.scopes.{pattern}");
        match globset::Glob::new(pattern) {
            Ok(_) if scope.is_empty() || scope.contains(char::is_whitespace) => p.add(
                &sat,
                "a scope is one word (as in a token's space-separated scope)",
            ),
            Ok(_) if !reachable(pattern) => p.add(&sat, never_matches(pattern, prefixes)),
            Ok(glob) => tools.scoped.push((glob.compile_matcher(), scope.clone())),
            Err(e) => p.add(&sat, format!("'{pattern}' is not a glob: {}", e.kind())),
        }
    }
    tools
}
