//! Consent records sealed with AES-256-GCM (ring): a random 96-bit nonce
//! per record, the id of the key that sealed it, and what the record is
//! for (its user and upstream) as associated data, so that a record copied
//! under another user's or upstream's key opens for nobody. Written
//! `<key id>.<base64url(nonce | ciphertext | tag)>`; the first key seals,
//! every key opens (rotation).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};

use crate::config::consent::SealingKeys;

/// `plain` sealed for `aad` with the first key; `None` only without a key
/// (`check` requires one) or a random source.
pub fn seal(keys: &SealingKeys, aad: &str, plain: &[u8]) -> Option<String> {
    let (id, key) = keys.0.first()?;
    let key = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, key).ok()?);
    let mut nonce = [0u8; NONCE_LEN];
    getrandom::fill(&mut nonce).ok()?;
    let mut sealed = plain.to_vec();
    key.seal_in_place_append_tag(
        Nonce::assume_unique_for_key(nonce),
        Aad::from(aad.as_bytes()),
        &mut sealed,
    )
    .ok()?;
    let mut out = nonce.to_vec();
    out.append(&mut sealed);
    Some(format!("{id}.{}", B64.encode(out)))
}

/// What `sealed` holds, when a key of `keys` sealed it for `aad`.
pub fn open(keys: &SealingKeys, aad: &str, sealed: &str) -> Option<Vec<u8>> {
    let (id, text) = sealed.split_once('.')?;
    let (_, key) = keys.0.iter().find(|(k, _)| k == id)?;
    let key = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, key).ok()?);
    let bytes = B64.decode(text).ok()?;
    if bytes.len() < NONCE_LEN {
        return None;
    }
    let (nonce, rest) = bytes.split_at(NONCE_LEN);
    let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
    let mut rest = rest.to_vec();
    let plain = key
        .open_in_place(nonce, Aad::from(aad.as_bytes()), &mut rest)
        .ok()?;
    Some(plain.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(ids: &[(&str, u8)]) -> SealingKeys {
        SealingKeys(
            ids.iter()
                .map(|(id, b)| ((*id).to_owned(), [*b; 32]))
                .collect(),
        )
    }

    #[test]
    fn a_record_opens_only_for_what_it_was_sealed_for() {
        let k = keys(&[("k1", 1)]);
        let sealed = seal(&k, "a\nalice\nlinear", b"token").unwrap();
        assert!(sealed.starts_with("k1."));
        assert_eq!(
            open(&k, "a\nalice\nlinear", &sealed).as_deref(),
            Some(&b"token"[..])
        );
        assert_eq!(open(&k, "a\nbob\nlinear", &sealed), None);
        assert_ne!(
            Some(sealed),
            seal(&k, "a\nalice\nlinear", b"token"),
            "a nonce per record"
        );
    }

    #[test]
    fn every_key_opens_and_the_first_seals() {
        let old = keys(&[("k1", 1)]);
        let sealed = seal(&old, "x", b"v").unwrap();
        let rotated = keys(&[("k2", 2), ("k1", 1)]);
        assert_eq!(open(&rotated, "x", &sealed).as_deref(), Some(&b"v"[..]));
        assert!(seal(&rotated, "x", b"v").unwrap().starts_with("k2."));
        assert_eq!(open(&keys(&[("k2", 2)]), "x", &sealed), None);
        assert_eq!(open(&rotated, "x", "k1.AAAA"), None);
    }
}
