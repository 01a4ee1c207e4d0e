//! An issuer's JWKS document, read: the keys that verify signatures, each
//! with the algorithm it is for (never the token's choice).

use super::*;

/// The keys of a JWKS document that verify signatures: RSA, P-256/P-384
/// and Ed25519 public keys, each with its algorithm (the key's `alg` when
/// given and consistent with its type). Symmetric keys, keys for
/// encryption and keys this gateway cannot use are left out.
pub(super) fn parse_jwks(text: &[u8]) -> Result<Vec<Key>, String> {
    let doc: Value = serde_json::from_slice(text).map_err(|e| format!("not JSON: {e}"))?;
    let Some(list) = doc.get("keys").and_then(Value::as_array) else {
        return Err("not a JWKS: no \"keys\" array".into());
    };
    let mut keys = Vec::new();
    for item in list {
        let Ok(jwk) = serde_json::from_value::<Jwk>(item.clone()) else {
            continue;
        };
        if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
            continue;
        }
        let Some(alg) = key_algorithm(&jwk) else {
            continue;
        };
        let Ok(key) = DecodingKey::from_jwk(&jwk) else {
            continue;
        };
        let print = {
            use std::hash::{Hash, Hasher};
            let mut h = std::hash::DefaultHasher::new();
            item.to_string().hash(&mut h);
            h.finish()
        };
        keys.push(Key {
            kid: jwk.common.key_id.clone(),
            alg,
            key,
            print,
        });
    }
    Ok(keys)
}

/// The algorithm a public key verifies.
fn key_algorithm(jwk: &Jwk) -> Option<Algorithm> {
    let by_type = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => [
            Algorithm::RS256,
            Algorithm::RS384,
            Algorithm::RS512,
            Algorithm::PS256,
            Algorithm::PS384,
            Algorithm::PS512,
        ]
        .as_slice(),
        AlgorithmParameters::EllipticCurve(ec) => match ec.curve {
            EllipticCurve::P256 => [Algorithm::ES256].as_slice(),
            EllipticCurve::P384 => [Algorithm::ES384].as_slice(),
            _ => return None,
        },
        AlgorithmParameters::OctetKeyPair(okp) => match okp.curve {
            EllipticCurve::Ed25519 => [Algorithm::EdDSA].as_slice(),
            _ => return None,
        },
        // A shared secret is never a key this gateway trusts.
        AlgorithmParameters::OctetKey(_) => return None,
    };
    let declared = match jwk.common.key_algorithm {
        None => return Some(by_type[0]),
        Some(KeyAlgorithm::RS256) => Algorithm::RS256,
        Some(KeyAlgorithm::RS384) => Algorithm::RS384,
        Some(KeyAlgorithm::RS512) => Algorithm::RS512,
        Some(KeyAlgorithm::PS256) => Algorithm::PS256,
        Some(KeyAlgorithm::PS384) => Algorithm::PS384,
        Some(KeyAlgorithm::PS512) => Algorithm::PS512,
        Some(KeyAlgorithm::ES256) => Algorithm::ES256,
        Some(KeyAlgorithm::ES384) => Algorithm::ES384,
        Some(KeyAlgorithm::EdDSA) => Algorithm::EdDSA,
        Some(_) => return None,
    };
    by_type.contains(&declared).then_some(declared)
}
