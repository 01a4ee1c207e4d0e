//! Signing keys, JWKS files and tokens for the identity tests.

use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use ring::signature::{self, KeyPair};
use serde_json::{Value, json};

pub(crate) const ISSUER: &str = "http://127.0.0.1:1/realms/agents";

pub(crate) const RESOURCE: &str = "http://gateway.test/mcp";

pub(crate) fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A signing key and its public JWK.
pub(crate) struct SigningKey {
    pub(crate) kid: String,
    pub(crate) alg: Algorithm,
    pub(crate) der: Vec<u8>,
    pub(crate) jwk: Value,
}

impl SigningKey {
    pub(crate) fn es256(kid: &str) -> SigningKey {
        let rng = ring::rand::SystemRandom::new();
        let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = signature::EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
        let pair = signature::EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).unwrap();
        let point = pair.public_key().as_ref(); // 0x04 || x || y
        SigningKey {
            kid: kid.into(),
            alg: Algorithm::ES256,
            der: pkcs8.as_ref().to_vec(),
            jwk: json!({"kty": "EC", "crv": "P-256", "kid": kid, "use": "sig",
                        "x": b64(&point[1..33]), "y": b64(&point[33..])}),
        }
    }

    pub(crate) fn ed25519(kid: &str) -> SigningKey {
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = signature::Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
        let pair = signature::Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
        SigningKey {
            kid: kid.into(),
            alg: Algorithm::EdDSA,
            der: pkcs8.as_ref().to_vec(),
            jwk: json!({"kty": "OKP", "crv": "Ed25519", "kid": kid, "alg": "EdDSA",
                        "x": b64(pair.public_key().as_ref())}),
        }
    }

    pub(crate) fn encoding(&self) -> EncodingKey {
        match self.alg {
            Algorithm::EdDSA => EncodingKey::from_ed_der(&self.der),
            _ => EncodingKey::from_ec_der(&self.der),
        }
    }

    pub(crate) fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(self.alg);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.encoding()).unwrap()
    }
}

pub(crate) fn now() -> i64 {
    jsonwebtoken::get_current_timestamp() as i64
}

pub(crate) fn write_jwks(path: &std::path::Path, keys: &[&SigningKey]) {
    let doc = json!({"keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>()});
    std::fs::write(path, doc.to_string()).unwrap();
}

/// The mcpIds of an MCP v1.0 listing.
pub(crate) fn ids(listing: &[Value]) -> Vec<String> {
    listing
        .iter()
        .map(|t| t["mcpId"].as_str().unwrap().to_owned())
        .collect()
}
