//! Credentials → tenant. A tenant sees only its own upstreams.

use std::collections::HashMap;
use std::sync::Arc;

use globset::{Glob, GlobSet, GlobSetBuilder};

use crate::config::{KeyDigest, TenantSpec};

/// A tenant as dispatch sees it.
#[derive(Debug)]
pub struct Tenant {
    pub name: Arc<str>,
    /// The upstreams this tenant sees, in listing order.
    pub upstreams: Vec<Arc<str>>,
    /// Which of their tools it may see and run; `None`: all of them.
    pub policy: Option<ToolPolicy>,
}

impl Tenant {
    pub fn sees(&self, upstream: &str) -> bool {
        self.upstreams.iter().any(|u| &**u == upstream)
    }

    /// Whether the policy lets this tenant see and run the tool with this namespaced id.
    pub fn may_use(&self, tool: &str) -> bool {
        self.policy.as_ref().is_none_or(|p| p.allows(tool))
    }
}

/// Allow and deny globs on namespaced tool ids (`*` matches any characters, `/` included).
#[derive(Debug)]
pub struct ToolPolicy {
    allow: Option<GlobSet>,
    deny: GlobSet,
}

impl ToolPolicy {
    /// `None` when there is nothing to enforce. Patterns were checked with the config.
    pub fn new(allow: &[String], deny: &[String]) -> Option<ToolPolicy> {
        if allow.is_empty() && deny.is_empty() {
            return None;
        }
        let set = |patterns: &[String]| {
            let mut b = GlobSetBuilder::new();
            for p in patterns {
                if let Ok(g) = Glob::new(p) {
                    b.add(g);
                }
            }
            b.build().unwrap_or_else(|_| GlobSet::empty())
        };
        Some(ToolPolicy {
            allow: (!allow.is_empty()).then(|| set(allow)),
            deny: set(deny),
        })
    }

    pub fn allows(&self, tool: &str) -> bool {
        self.allow.as_ref().is_none_or(|a| a.is_match(tool)) && !self.deny.is_match(tool)
    }
}

/// Every API key's digest, mapped to its tenant. Lookup hashes the presented
/// token once (SHA-256) and compares digests in constant time, so neither the
/// number of tenants nor the key's bytes shape the time an attempt takes.
#[derive(Debug, Default)]
pub struct KeyStore {
    by_digest: HashMap<KeyDigest, Arc<Tenant>>,
    tenants: Vec<Arc<Tenant>>,
}

impl KeyStore {
    pub fn new(specs: &[TenantSpec]) -> Self {
        let mut store = KeyStore::default();
        for spec in specs {
            let tenant = Arc::new(Tenant {
                name: spec.name.as_str().into(),
                upstreams: spec.upstreams.iter().map(|u| u.as_str().into()).collect(),
                policy: ToolPolicy::new(&spec.allow, &spec.deny),
            });
            for key in &spec.keys {
                store.by_digest.insert(*key, tenant.clone());
            }
            store.tenants.push(tenant);
        }
        store
    }

    /// The tenant a bearer token belongs to.
    pub fn authenticate(&self, token: &str) -> Option<&Arc<Tenant>> {
        self.by_digest.get(&KeyDigest::of(token.as_bytes()))
    }

    pub fn tenants(&self) -> &[Arc<Tenant>] {
        &self.tenants
    }
}

/// The token of an `Authorization: Bearer <token>` header value (scheme case-insensitive).
pub fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authenticates_by_key() {
        let specs = vec![
            TenantSpec {
                name: "a".into(),
                keys: vec![KeyDigest::of(b"ka"), KeyDigest::of(b"ka2")],
                upstreams: vec!["x".into()],
                allow: vec![],
                deny: vec![],
            },
            TenantSpec {
                name: "b".into(),
                keys: vec![KeyDigest::of(b"kb")],
                upstreams: vec![],
                allow: vec!["mcp://g/x/*".into()],
                deny: vec!["*/delete*".into()],
            },
        ];
        let store = KeyStore::new(&specs);
        assert_eq!(&*store.authenticate("ka2").unwrap().name, "a");
        assert_eq!(&*store.authenticate("kb").unwrap().name, "b");
        assert!(store.authenticate("kc").is_none());
        assert!(store.authenticate("").is_none());
        assert!(store.authenticate("ka").unwrap().sees("x"));
        let b = store.authenticate("kb").unwrap();
        assert!(b.may_use("mcp://g/x/a/tools/read"));
        assert!(!b.may_use("mcp://g/x/a/tools/delete-all"));
        assert!(!b.may_use("mcp://g/y/a/tools/read"));
        assert!(store.authenticate("ka").unwrap().may_use("anything"));
    }

    #[test]
    fn parses_bearer() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer   abc "), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer"), None);
        assert_eq!(bearer_token("Bearer "), None);
    }
}
