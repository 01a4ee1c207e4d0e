//! Credentials → tenant. A tenant sees only its own upstreams.

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::{KeyDigest, TenantSpec};

/// A tenant as dispatch sees it.
#[derive(Debug)]
pub struct Tenant {
    pub name: Arc<str>,
    /// The upstreams this tenant sees, in listing order.
    pub upstreams: Vec<Arc<str>>,
}

impl Tenant {
    pub fn sees(&self, upstream: &str) -> bool {
        self.upstreams.iter().any(|u| &**u == upstream)
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
            },
            TenantSpec {
                name: "b".into(),
                keys: vec![KeyDigest::of(b"kb")],
                upstreams: vec![],
            },
        ];
        let store = KeyStore::new(&specs);
        assert_eq!(&*store.authenticate("ka2").unwrap().name, "a");
        assert_eq!(&*store.authenticate("kb").unwrap().name, "b");
        assert!(store.authenticate("kc").is_none());
        assert!(store.authenticate("").is_none());
        assert!(store.authenticate("ka").unwrap().sees("x"));
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
