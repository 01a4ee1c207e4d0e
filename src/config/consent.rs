//! Per-user consent as validated: where the upstream's authorization server
//! is and the gateway's client there (`auth.user_consent`), and what every
//! consent shares (`gateway.upstream_auth`): the URL browsers reach the
//! gateway at, the keys records are sealed with, a flow's life, and the
//! login client of each identity provider that identifies browser users.

use std::time::Duration;

/// `gateway.upstream_auth.consent_ttl_s` when it is not set.
pub const DEFAULT_TTL: Duration = Duration::from_secs(600);

/// An upstream's `user_consent`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserConsent {
    pub server: ConsentServer,
    /// The gateway's client there; `None`: registered (RFC 7591).
    pub client: Option<ConsentClient>,
    pub scope: Option<String>,
    /// RFC 8707: the upstream's URL unless configured.
    pub resource: Option<String>,
}

/// Where the upstream's authorization server is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsentServer {
    /// As the upstream's protected resource metadata names it (RFC 9728),
    /// found from its URL.
    OfResource(String),
    /// Its issuer, whose metadata says the rest (RFC 8414, then OpenID).
    Issuer(String),
    /// Both endpoints, as configured.
    Endpoints {
        authorization: String,
        token: String,
    },
}

/// A client the gateway was given at an authorization server.
#[derive(Clone, PartialEq, Eq)]
pub struct ConsentClient {
    pub client_id: String,
    /// `None`: a public client (PKCE alone).
    pub client_secret: Option<String>,
    /// `client_secret_basic` (true) or `client_secret_post`.
    pub basic: bool,
}

impl std::fmt::Debug for ConsentClient {
    // The secret is never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsentClient")
            .field("client_id", &self.client_id)
            .field("basic", &self.basic)
            .finish_non_exhaustive()
    }
}

/// What every upstream's consent shares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsentSettings {
    /// The agent listener as browsers reach it, without a trailing `/`.
    pub public_url: String,
    /// The first seals; every one opens.
    pub keys: SealingKeys,
    /// How long a consent URL and its flow last.
    pub ttl: Duration,
    /// Each identity provider's login client, by issuer.
    pub logins: Vec<Login>,
}

/// The gateway's OpenID client at one identity provider.
#[derive(Clone, PartialEq, Eq)]
pub struct Login {
    pub issuer: String,
    pub client_id: String,
    pub client_secret: String,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

/// AES-256 keys with their ids; never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct SealingKeys(pub Vec<(String, [u8; 32])>);

impl std::fmt::Debug for SealingKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(id, _)| id))
            .finish()
    }
}

/// A key's text as 32 bytes: 64 hex digits, or base64 (standard or URL-safe,
/// padded or not).
pub fn key_bytes(text: &str) -> Option<[u8; 32]> {
    use base64::Engine;
    let text = text.trim();
    if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        let mut key = [0u8; 32];
        for (i, byte) in key.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
        }
        return Some(key);
    }
    let engines = [
        base64::engine::general_purpose::STANDARD,
        base64::engine::general_purpose::STANDARD_NO_PAD,
        base64::engine::general_purpose::URL_SAFE,
        base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ];
    engines
        .iter()
        .find_map(|e| e.decode(text).ok())
        .and_then(|bytes| bytes.try_into().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_32_bytes_of_hex_or_base64() {
        let hex = "00".repeat(31) + "ff";
        assert_eq!(key_bytes(&hex).map(|k| k[31]), Some(0xff));
        assert!(key_bytes(&"ab".repeat(16)).is_none());
        assert!(key_bytes("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=").is_some());
        assert!(key_bytes("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8").is_some());
        assert!(key_bytes("c2hvcnQ=").is_none());
    }
}
