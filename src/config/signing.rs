//! The gateway's own signing keys (`gateway.upstream_auth.signing_keys`):
//! PKCS#8 PEM keys, P-256, RSA of 2048 bits or more, or Ed25519. The first
//! signs the JWTs the gateway issues (identity assertions, actor tokens);
//! all of them are published as a JWKS, so that a verifier keeps trusting
//! tokens of a key being rotated out. A key's id is its RFC 7638
//! thumbprint: the same key has the same id on every replica.
//!
//! The cryptography is ring's (the provider the gateway already installs
//! for TLS). Nothing here prints a key: parse errors say what kind of key
//! was expected, never what was read.

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use ring::signature::{self, KeyPair};
use serde_json::{Value, json};
use sha2::Digest;

/// One private key and how it signs.
enum Pair {
    Es256(signature::EcdsaKeyPair),
    Rs256(signature::RsaKeyPair),
    EdDsa(signature::Ed25519KeyPair),
}

/// A signing key: the pair, its id and its public JWK.
pub struct SigningKey {
    pair: Pair,
    pub kid: String,
    jwk: Value,
}

impl SigningKey {
    /// A PKCS#8 PEM private key (`-----BEGIN PRIVATE KEY-----`).
    pub fn from_pem(pem: &str) -> Result<Self, &'static str> {
        let der = pem_body(pem).ok_or("is not a PEM PKCS#8 private key (BEGIN PRIVATE KEY)")?;
        let rng = ring::rand::SystemRandom::new();
        let pair = if let Ok(p) = signature::EcdsaKeyPair::from_pkcs8(
            &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            &der,
            &rng,
        ) {
            Pair::Es256(p)
        } else if let Ok(p) = signature::Ed25519KeyPair::from_pkcs8_maybe_unchecked(&der) {
            Pair::EdDsa(p)
        } else if let Ok(p) = signature::RsaKeyPair::from_pkcs8(&der) {
            if p.public().modulus_len() < 256 {
                return Err("is an RSA key shorter than 2048 bits");
            }
            Pair::Rs256(p)
        } else {
            return Err("is not a P-256, RSA (2048 bits or more) or Ed25519 PKCS#8 key");
        };
        // RFC 7638: the required members, in lexicographic order.
        let thumbprinted = match &pair {
            Pair::Es256(p) => {
                let point = p.public_key().as_ref();
                let (x, y) = (B64.encode(&point[1..33]), B64.encode(&point[33..65]));
                json!({"crv": "P-256", "kty": "EC", "x": x, "y": y})
            }
            Pair::Rs256(p) => {
                let public = p.public();
                let components: ring::rsa::PublicKeyComponents<Vec<u8>> = public.into();
                json!({"e": B64.encode(&components.e), "kty": "RSA", "n": B64.encode(&components.n)})
            }
            Pair::EdDsa(p) => {
                json!({"crv": "Ed25519", "kty": "OKP", "x": B64.encode(p.public_key().as_ref())})
            }
        };
        let kid = B64.encode(sha2::Sha256::digest(thumbprinted.to_string().as_bytes()));
        let mut jwk = thumbprinted;
        jwk["kid"] = json!(kid);
        jwk["alg"] = json!(alg(&pair));
        jwk["use"] = json!("sig");
        Ok(SigningKey { pair, kid, jwk })
    }

    /// A new P-256 key, its own (for a check that stands in for keys
    /// that are elsewhere).
    pub fn generated() -> Result<Self, &'static str> {
        let rng = ring::rand::SystemRandom::new();
        let der = signature::EcdsaKeyPair::generate_pkcs8(
            &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            &rng,
        )
        .map_err(|_| "cannot be generated")?;
        let b64 = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
        Self::from_pem(&format!(
            "-----BEGIN PRIVATE KEY-----\n{b64}\n-----END PRIVATE KEY-----"
        ))
    }

    /// The JWS `alg` it signs with.
    pub fn alg(&self) -> &'static str {
        alg(&self.pair)
    }

    /// A compact JWS of `claims`, with `kid` and `typ: JWT` in its header;
    /// `None` only when the system's random source fails.
    pub fn sign(&self, claims: &Value) -> Option<String> {
        let header = json!({"alg": self.alg(), "kid": self.kid, "typ": "JWT"});
        let mut jws = format!(
            "{}.{}",
            B64.encode(header.to_string()),
            B64.encode(claims.to_string())
        );
        let rng = ring::rand::SystemRandom::new();
        let signed = jws.as_bytes();
        let sig = match &self.pair {
            Pair::Es256(p) => p.sign(&rng, signed).map(|s| s.as_ref().to_vec()),
            Pair::EdDsa(p) => Ok(p.sign(signed).as_ref().to_vec()),
            Pair::Rs256(p) => {
                let mut out = vec![0; p.public().modulus_len()];
                p.sign(&signature::RSA_PKCS1_SHA256, &rng, signed, &mut out)
                    .map(|()| out)
            }
        };
        // Signing with a key ring accepted fails only when the system's
        // random source does.
        let sig = sig.ok()?;
        jws.push('.');
        jws.push_str(&B64.encode(sig));
        Some(jws)
    }
}

fn alg(pair: &Pair) -> &'static str {
    match pair {
        Pair::Es256(_) => "ES256",
        Pair::Rs256(_) => "RS256",
        Pair::EdDsa(_) => "EdDSA",
    }
}

/// The DER between a PKCS#8 PEM's armour lines.
fn pem_body(pem: &str) -> Option<Vec<u8>> {
    let body = pem
        .trim()
        .strip_prefix("-----BEGIN PRIVATE KEY-----")?
        .strip_suffix("-----END PRIVATE KEY-----")?;
    let b64: String = body.split_whitespace().collect();
    base64::engine::general_purpose::STANDARD.decode(b64).ok()
}

/// The gateway's signing keys: the first signs; all are published.
#[derive(Clone)]
pub struct SigningKeys(pub Arc<[SigningKey]>);

impl SigningKeys {
    pub fn signer(&self) -> &SigningKey {
        &self.0[0]
    }

    /// The JWKS document (`/.well-known/jwks.json`).
    pub fn jwks(&self) -> Value {
        json!({"keys": self.0.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>()})
    }
}

impl PartialEq for SigningKeys {
    fn eq(&self, other: &Self) -> bool {
        self.0
            .iter()
            .map(|k| &k.kid)
            .eq(other.0.iter().map(|k| &k.kid))
    }
}

impl Eq for SigningKeys {}

impl std::fmt::Debug for SigningKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|k| &k.kid))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pem(der: &[u8]) -> String {
        let b64 = base64::engine::general_purpose::STANDARD.encode(der);
        format!("-----BEGIN PRIVATE KEY-----\n{b64}\n-----END PRIVATE KEY-----\n")
    }

    #[test]
    fn a_p256_key_signs_what_its_jwk_verifies() {
        let rng = ring::rand::SystemRandom::new();
        let der = signature::EcdsaKeyPair::generate_pkcs8(
            &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            &rng,
        )
        .unwrap();
        let key = SigningKey::from_pem(&pem(der.as_ref())).unwrap();
        let jws = key.sign(&json!({"sub": "u"})).unwrap();
        let jwk: jsonwebtoken::jwk::Jwk = serde_json::from_value(key.jwk.clone()).unwrap();
        let decoding = jsonwebtoken::DecodingKey::from_jwk(&jwk).unwrap();
        let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::ES256);
        validation.required_spec_claims.clear();
        validation.validate_exp = false;
        let data = jsonwebtoken::decode::<Value>(&jws, &decoding, &validation).unwrap();
        assert_eq!(data.claims["sub"], "u");
        assert_eq!(data.header.kid.as_deref(), Some(key.kid.as_str()));
    }

    #[test]
    fn an_ed25519_key_signs_what_its_jwk_verifies() {
        let rng = ring::rand::SystemRandom::new();
        let der = signature::Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
        let key = SigningKey::from_pem(&pem(der.as_ref())).unwrap();
        let jws = key.sign(&json!({"sub": "u"})).unwrap();
        let jwk: jsonwebtoken::jwk::Jwk = serde_json::from_value(key.jwk.clone()).unwrap();
        let decoding = jsonwebtoken::DecodingKey::from_jwk(&jwk).unwrap();
        let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::EdDSA);
        validation.required_spec_claims.clear();
        validation.validate_exp = false;
        assert!(jsonwebtoken::decode::<Value>(&jws, &decoding, &validation).is_ok());
        assert_eq!(key.alg(), "EdDSA");
    }

    #[test]
    fn what_is_not_a_key_is_refused_without_being_echoed() {
        let e = SigningKey::from_pem(
            "-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----",
        )
        .err()
        .unwrap();
        assert!(!e.contains("c2VjcmV0"));
        assert!(SigningKey::from_pem("secret").is_err());
    }
}
