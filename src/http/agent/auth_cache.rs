//! A connection's last authentication, remembered: a keep-alive client
//! sends the same `Authorization` on every request, and its tenant is
//! found once while the key set (and a JWT's trust) holds.

use super::*;

/// The tenant that a connection's last `Authorization` value named, kept while
/// the key set it was found in is the current one: the key's digest is
/// computed once per connection, not once per request.
/// A JWT's tenant is kept while the key set still trusts the token (not
/// expired, its key still published by its issuer).
#[derive(Default)]
pub(super) struct AuthCache(Option<Cached>);

struct Cached {
    store: Arc<KeyStore>,
    value: Vec<u8>,
    tenant: Arc<Tenant>,
    /// A JWT's digest, looked up again at each request; `None` for an API key.
    jwt: Option<crate::config::KeyDigest>,
}

impl AuthCache {
    pub(super) async fn authenticate(
        &mut self,
        keys: &arc_swap::ArcSwap<KeyStore>,
        authorization: Option<&[u8]>,
    ) -> Result<Arc<Tenant>, Denied> {
        let sent = authorization.ok_or(Denied::Unknown)?;
        if let Some(c) = &self.0
            && Arc::ptr_eq(&c.store, &keys.load())
            && c.value.as_slice() == sent
            && c.jwt.is_none_or(|d| c.store.by_digest(&d).is_some())
        {
            return Ok(c.tenant.clone());
        }
        let current = keys.load_full();
        let token = header_str(sent)
            .and_then(bearer_token)
            .ok_or(Denied::Unknown)?;
        let tenant = current.authenticate_token(token).await?;
        self.0 = Some(Cached {
            jwt: current
                .expiry_of(token)
                .map(|_| crate::config::KeyDigest::of(token.as_bytes())),
            store: current,
            value: sent.to_vec(),
            tenant: tenant.clone(),
        });
        Ok(tenant)
    }
}
