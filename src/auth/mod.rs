//! Bearer tokens from an identity provider: JWTs verified against each
//! configured issuer's keys (its JWKS), beside API keys.
//!
//! A token is accepted when its issuer is configured (`iss` exactly), its
//! signature verifies with a key of that issuer's JWKS under the algorithm
//! the key is for (never the token's choice: `none`, and an HMAC "signed"
//! with a public key, cannot verify), `aud` holds one of the audiences, and
//! `exp`/`nbf` hold within a small leeway. The cryptography is
//! `jsonwebtoken`'s (ring).
//!
//! Keys are fetched at start and cached; refetched on a schedule and when a
//! token names a key id the cache does not hold, at most once per
//! [`MIN_REFETCH`] per issuer, so unknown ids cannot make the gateway hammer
//! the provider. A fetch that fails leaves the cached keys in force.
//!
//! A JWKS document is read by `jwks`; the gateway's own protected resource
//! metadata (RFC 9728) is `resource`'s.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};

mod jwks;
mod resource;

use jwks::parse_jwks;
pub use resource::ProtectedResource;

/// The least time between two fetches of one issuer's keys.
pub const MIN_REFETCH: Duration = Duration::from_secs(10);

/// How long a fetch of keys may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// Largest JWKS document read.
const MAX_JWKS_BYTES: usize = 1 << 20;

/// Where an issuer's keys are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// `jwks_url`: `https://`, or plain `http://` (in-cluster providers).
    Url(String),
    /// `jwks_file` (re-read on every refetch, so a rotated file is followed).
    File(PathBuf),
}

/// Which tenant a token of this issuer is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TenantFrom {
    /// The value of this claim names the tenant.
    Claim(String),
    /// Every token of the issuer is this tenant.
    Fixed(String),
}

/// One trusted issuer, as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuerSpec {
    /// Must equal `iss`.
    pub issuer: String,
    /// `aud` must hold one of these.
    pub audiences: Vec<String>,
    pub keys: KeySource,
    pub tenant: TenantFrom,
    /// The tenants a tenant claim may name (`tenants`); empty: any tenant
    /// that no other issuer is bound to (see `KeyStore`).
    pub tenants: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway: Duration,
    /// How often the keys are refetched.
    pub refresh: Duration,
}

/// A key of an issuer, with the one algorithm it verifies.
struct Key {
    kid: Option<String>,
    alg: Algorithm,
    key: DecodingKey,
    /// What the key is (its JWK's text, hashed): a token verified by it is
    /// trusted only while the issuer still publishes it.
    print: u64,
}

/// One issuer, its keys cached.
pub struct Issuer {
    pub spec: IssuerSpec,
    keys: ArcSwap<Vec<Key>>,
    /// When a token's unknown key id last made the keys be fetched; held
    /// while any fetch runs, so that callers who all miss a key wait for
    /// one fetch.
    on_demand: tokio::sync::Mutex<Option<Instant>>,
    client: reqwest::Client,
}

/// What a verified token says.
#[derive(Debug, Clone)]
pub struct Verified {
    pub tenant: String,
    /// `sub`, when the token has one.
    pub subject: Option<String>,
    /// `scope` (space-separated) or `scp` (a list).
    pub scopes: HashSet<String>,
    /// The same, as the token wrote them, space-separated.
    pub scope: String,
    /// `exp`, seconds since the epoch.
    pub expires: u64,
    /// The issuer (`iss`) that signed it.
    pub issuer: Arc<Issuer>,
    /// The key that verified it (see [`Issuer::publishes`]).
    pub key: u64,
}

/// Why a token was refused (for the log; the client hears `invalid_token`).
pub type Refused = &'static str;

impl std::fmt::Debug for Issuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issuer")
            .field("issuer", &self.spec.issuer)
            .field("keys", &self.key_count())
            .finish_non_exhaustive()
    }
}

impl Issuer {
    pub fn new(spec: IssuerSpec, client: reqwest::Client) -> Arc<Issuer> {
        Arc::new(Issuer {
            spec,
            keys: ArcSwap::from_pointee(Vec::new()),
            on_demand: tokio::sync::Mutex::new(None),
            client,
        })
    }

    /// How many keys are cached.
    pub fn key_count(&self) -> usize {
        self.keys.load().len()
    }

    /// Fetches the keys now. `on_demand` (a token named a key id the cache
    /// does not hold): unless such a fetch ran less than [`MIN_REFETCH`]
    /// ago. A failure keeps the keys cached.
    pub async fn refetch(&self, on_demand: bool) {
        let mut last = self.on_demand.lock().await;
        if on_demand {
            if last.is_some_and(|at| at.elapsed() < MIN_REFETCH) {
                return;
            }
            *last = Some(Instant::now());
        }
        match self.fetch().await {
            Ok(keys) => {
                tracing::info!(issuer = %self.spec.issuer, keys = keys.len(), "issuer keys fetched");
                self.keys.store(Arc::new(keys));
            }
            Err(e) => tracing::warn!(
                issuer = %self.spec.issuer,
                error = %e,
                kept = self.key_count(),
                "issuer keys could not be fetched; the cached keys stay in force"
            ),
        }
    }

    async fn fetch(&self) -> Result<Vec<Key>, String> {
        let text = match &self.spec.keys {
            KeySource::File(path) => tokio::fs::read(path)
                .await
                .map_err(|e| format!("{}: {e}", path.display()))?,
            KeySource::Url(url) => {
                let response = self
                    .client
                    .get(url)
                    .timeout(FETCH_TIMEOUT)
                    .send()
                    .await
                    .map_err(|e| format!("GET {url}: {e}"))?;
                if !response.status().is_success() {
                    return Err(format!("GET {url}: HTTP {}", response.status()));
                }
                let mut body = Vec::new();
                let mut response = response;
                while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
                    body.extend_from_slice(&chunk);
                    if body.len() > MAX_JWKS_BYTES {
                        return Err(format!("GET {url}: larger than {MAX_JWKS_BYTES} bytes"));
                    }
                }
                body
            }
        };
        parse_jwks(&text)
    }

    /// The cached keys a token with this header may be verified with.
    fn candidates(&self, kid: Option<&str>, alg: Algorithm) -> Vec<(Algorithm, DecodingKey, u64)> {
        self.keys
            .load()
            .iter()
            .filter(|k| kid.is_none_or(|kid| k.kid.as_deref() == Some(kid)))
            .filter(|k| k.alg == alg)
            .map(|k| (k.alg, k.key.clone(), k.print))
            .collect()
    }

    /// Whether the key with this print is among the issuer's keys now: a
    /// key the provider withdrew verifies nothing any more, not even the
    /// tokens it verified before.
    pub fn publishes(&self, print: u64) -> bool {
        self.keys.load().iter().any(|k| k.print == print)
    }

    /// Whether any cached key has this id.
    fn knows(&self, kid: Option<&str>) -> bool {
        let keys = self.keys.load();
        match kid {
            Some(kid) => keys.iter().any(|k| k.kid.as_deref() == Some(kid)),
            None => !keys.is_empty(),
        }
    }
}

/// Whether a bearer token has a JWT's shape (three base64url parts): only
/// then is it verified as one; anything else is an API key.
pub fn looks_like_jwt(token: &str) -> bool {
    let mut parts = 0;
    for part in token.split('.') {
        parts += 1;
        if part.is_empty() && parts < 3
            || !part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return false;
        }
    }
    parts == 3
}

/// The configured issuers, for one configuration.
#[derive(Default)]
pub struct Issuers {
    pub list: Vec<Arc<Issuer>>,
}

impl Issuers {
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Verifies a JWT; fetches its issuer's keys again first when the token
    /// names a key id the cache does not hold.
    pub async fn verify(&self, token: &str) -> Result<Verified, Refused> {
        let header =
            jsonwebtoken::decode_header(token).map_err(|_| "not a JWT this gateway can verify")?;
        let issuer = self.issuer_of(token)?;
        let kid = header.kid.as_deref();
        if !issuer.knows(kid) {
            issuer.refetch(true).await;
        }
        verify_with(issuer, token, kid, header.alg)
    }

    /// [`Self::verify`] with the keys cached, fetching none.
    pub fn verify_cached(&self, token: &str) -> Result<Verified, Refused> {
        let header =
            jsonwebtoken::decode_header(token).map_err(|_| "not a JWT this gateway can verify")?;
        verify_with(
            self.issuer_of(token)?,
            token,
            header.kid.as_deref(),
            header.alg,
        )
    }

    /// The configured issuer that the token's unverified `iss` names.
    fn issuer_of(&self, token: &str) -> Result<&Arc<Issuer>, Refused> {
        let mut peek = Validation::new(Algorithm::RS256);
        peek.insecure_disable_signature_validation();
        peek.validate_exp = false;
        peek.validate_aud = false;
        peek.required_spec_claims.clear();
        #[derive(serde::Deserialize)]
        struct Iss {
            iss: Option<String>,
        }
        let claims = jsonwebtoken::decode::<Iss>(token, &DecodingKey::from_secret(&[]), &peek)
            .map_err(|_| "claims are not JSON")?
            .claims;
        let iss = claims.iss.ok_or("no iss")?;
        self.list
            .iter()
            .find(|i| i.spec.issuer == iss)
            .ok_or("issuer not configured")
    }
}

fn verify_with(
    issuer: &Arc<Issuer>,
    token: &str,
    kid: Option<&str>,
    alg: Algorithm,
) -> Result<Verified, Refused> {
    let keys = issuer.candidates(kid, alg);
    if keys.is_empty() {
        return Err(if issuer.knows(kid) {
            "the token's algorithm is not its key's"
        } else {
            "unknown key id"
        });
    }
    let spec = &issuer.spec;
    let mut last = "signature does not verify";
    for (alg, key, print) in keys {
        let mut v = Validation::new(alg);
        v.set_issuer(&[&spec.issuer]);
        v.set_audience(&spec.audiences);
        v.set_required_spec_claims(&["exp", "iss", "aud"]);
        v.validate_nbf = true;
        v.leeway = spec.leeway.as_secs();
        match jsonwebtoken::decode::<Map<String, Value>>(token, &key, &v) {
            Ok(data) => return claims(issuer, print, data.claims),
            Err(e) => {
                use jsonwebtoken::errors::ErrorKind as K;
                last = match e.kind() {
                    K::ExpiredSignature => "expired",
                    K::ImmatureSignature => "not valid yet (nbf)",
                    K::InvalidAudience => "audience is not this gateway's",
                    K::InvalidIssuer => "wrong issuer",
                    K::MissingRequiredClaim(_) => "a required claim (exp, iss, aud) is missing",
                    K::InvalidSignature => "signature does not verify",
                    _ => "not a valid token",
                };
                if !matches!(e.kind(), K::InvalidSignature) {
                    break;
                }
            }
        }
    }
    Err(last)
}

/// The tenant, subject, scopes and expiry of claims that `key` of `issuer` verified.
fn claims(issuer: &Arc<Issuer>, key: u64, claims: Map<String, Value>) -> Result<Verified, Refused> {
    let spec = &issuer.spec;
    let tenant = match &spec.tenant {
        TenantFrom::Fixed(t) => t.clone(),
        TenantFrom::Claim(name) => claims
            .get(name)
            .and_then(Value::as_str)
            .ok_or("the tenant claim is missing")?
            .to_owned(),
    };
    let mut scopes = HashSet::new();
    if let Some(s) = claims.get("scope").and_then(Value::as_str) {
        scopes.extend(s.split_whitespace().map(str::to_owned));
    }
    if let Some(list) = claims.get("scp") {
        match list {
            Value::Array(items) => {
                scopes.extend(items.iter().filter_map(Value::as_str).map(str::to_owned))
            }
            Value::String(s) => scopes.extend(s.split_whitespace().map(str::to_owned)),
            _ => {}
        }
    }
    let mut scope: Vec<&str> = scopes.iter().map(String::as_str).collect();
    scope.sort_unstable();
    let scope = scope.join(" ");
    Ok(Verified {
        tenant,
        scope,
        subject: claims.get("sub").and_then(Value::as_str).map(str::to_owned),
        scopes,
        expires: claims.get("exp").and_then(Value::as_u64).unwrap_or(0),
        issuer: issuer.clone(),
        key,
    })
}

/// Seconds since the epoch.
pub fn now() -> u64 {
    jsonwebtoken::get_current_timestamp()
}

/// Keeps an issuer's keys fresh: fetched now, then again on its schedule
/// (every 10 s while it has no keys yet), until `stop`.
pub async fn keep_fresh(issuer: Arc<Issuer>, stop: tokio_util::sync::CancellationToken) {
    loop {
        issuer.refetch(false).await;
        let wait = if issuer.key_count() == 0 {
            MIN_REFETCH
        } else {
            issuer.spec.refresh
        };
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

#[cfg(test)]
mod tests;
