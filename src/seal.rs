//! Values the gateway hands a client and takes back later (a link in a tool
//! result, ...), bound to the tenant they were given to and to what they
//! name by an HMAC-SHA256 under the key the sessions are sealed with: a
//! client can neither forge one nor present another tenant's, and every
//! replica with the same `gateway.session_secret` takes them back, with
//! no table of what was handed out.

use base64::Engine as _;
use hmac::{KeyInit, Mac};

use crate::config::KeyDigest;

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// Bytes of the MAC a tag keeps: 128 bits, beyond any guessing.
const TAG_BYTES: usize = 16;

/// Seals and checks; a cheap clone.
#[derive(Clone)]
pub struct Sealer {
    key: [u8; 32],
}

impl Sealer {
    pub fn new(key: &KeyDigest) -> Self {
        Sealer { key: key.0 }
    }

    fn mac(&self, purpose: &str, parts: &[&str]) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("any key length"));
        mac.update(b"mcp-gateway seal\n");
        mac.update(purpose.as_bytes());
        for part in parts {
            // Each part's length first: ("ab", "c") and ("a", "bc") differ.
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part.as_bytes());
        }
        mac
    }

    /// The tag that binds `parts` for `purpose` (base64url, 22 characters).
    pub fn tag(&self, purpose: &str, parts: &[&str]) -> String {
        let full = self.mac(purpose, parts).finalize().into_bytes();
        B64.encode(&full[..TAG_BYTES])
    }

    /// Whether `tag` is the tag of `parts` for `purpose` (compared in constant time).
    pub fn verify(&self, purpose: &str, parts: &[&str], tag: &str) -> bool {
        let Ok(tag) = B64.decode(tag) else {
            return false;
        };
        tag.len() == TAG_BYTES && self.mac(purpose, parts).verify_truncated_left(&tag).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_binds_its_purpose_parts_and_key() {
        let one = Sealer::new(&KeyDigest::of(b"one secret"));
        let tag = one.tag("link", &["tenant-a", "up", "file:///x"]);
        assert_eq!(tag.len(), 22);
        assert!(one.verify("link", &["tenant-a", "up", "file:///x"], &tag));
        assert!(Sealer::new(&KeyDigest::of(b"one secret")).verify(
            "link",
            &["tenant-a", "up", "file:///x"],
            &tag
        ));
        for (purpose, parts) in [
            ("link", ["tenant-b", "up", "file:///x"]),
            ("link", ["tenant-a", "up2", "file:///x"]),
            ("link", ["tenant-a", "up", "file:///y"]),
            ("task", ["tenant-a", "up", "file:///x"]),
            ("link", ["tenant-au", "p", "file:///x"]),
        ] {
            assert!(!one.verify(purpose, &parts, &tag), "{purpose} {parts:?}");
        }
        let other = Sealer::new(&KeyDigest::of(b"another secret"));
        assert!(!other.verify("link", &["tenant-a", "up", "file:///x"], &tag));
        assert!(!one.verify("link", &["tenant-a", "up", "file:///x"], "not base64!"));
        assert!(!one.verify("link", &["tenant-a", "up", "file:///x"], &tag[..20]));
    }
}
