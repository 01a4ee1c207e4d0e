//! This gateway as an OAuth protected resource (RFC 9728): its identifier,
//! where its metadata is, and the document itself.

/// This gateway as an OAuth protected resource (RFC 9728): its identifier,
/// where its metadata is, and the metadata document.
#[derive(Debug)]
pub struct ProtectedResource {
    pub resource: String,
    /// `https://host/.well-known/oauth-protected-resource/path`, as RFC 9728
    /// (3.1) forms it from the resource identifier.
    pub metadata_url: String,
    /// The paths on this listener that serve the document: the one above,
    /// and the bare well-known path clients also try.
    pub paths: [String; 2],
    pub document: String,
}

/// Where RFC 9728 puts a protected resource's metadata.
const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

impl ProtectedResource {
    /// `None` when `resource` is not an absolute http(s) URL.
    pub fn new(resource: &str, issuers: &[&str], scopes: &[&str]) -> Option<ProtectedResource> {
        let url = reqwest::Url::parse(resource).ok()?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return None;
        }
        let authority = &resource[url.scheme().len() + 3..];
        let authority = authority.split(['/', '?', '#']).next().unwrap_or(authority);
        let path = url.path().trim_end_matches('/');
        let mut document = serde_json::json!({
            "resource": resource,
            "authorization_servers": issuers,
            "bearer_methods_supported": ["header"],
        });
        if !scopes.is_empty() {
            document["scopes_supported"] = serde_json::json!(scopes);
        }
        Some(ProtectedResource {
            resource: resource.to_owned(),
            metadata_url: format!("{}://{authority}{WELL_KNOWN}{path}", url.scheme()),
            paths: [format!("{WELL_KNOWN}{path}"), WELL_KNOWN.to_owned()],
            document: document.to_string(),
        })
    }

    /// The `WWW-Authenticate` value of a 401 (RFC 6750, RFC 9728 5.1).
    pub fn challenge(&self, invalid_token: bool) -> String {
        let mut v = format!("Bearer resource_metadata=\"{}\"", self.metadata_url);
        if invalid_token {
            v.push_str(", error=\"invalid_token\"");
        }
        v
    }
}

#[cfg(test)]
mod resource_tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn the_metadata_url_inserts_the_well_known_path() {
        let r = ProtectedResource::new(
            "https://gateway.example.com/mcp",
            &["https://idp/realms/a"],
            &["files"],
        )
        .unwrap();
        assert_eq!(
            r.metadata_url,
            "https://gateway.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(r.paths[0], "/.well-known/oauth-protected-resource/mcp");
        let doc: Value = serde_json::from_str(&r.document).unwrap();
        assert_eq!(doc["resource"], "https://gateway.example.com/mcp");
        assert_eq!(doc["authorization_servers"][0], "https://idp/realms/a");
        assert_eq!(doc["scopes_supported"], serde_json::json!(["files"]));
        let root = ProtectedResource::new("http://127.0.0.1:8080", &[], &[]).unwrap();
        assert_eq!(
            root.metadata_url,
            "http://127.0.0.1:8080/.well-known/oauth-protected-resource"
        );
        assert!(ProtectedResource::new("gateway", &[], &[]).is_none());
        assert!(
            r.challenge(true)
                .ends_with("/mcp\", error=\"invalid_token\"")
        );
    }
}
