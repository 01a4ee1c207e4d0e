//! Links in tool results. A `resource_link` block, or an embedded
//! `resource`, names a uri of the upstream that answered: the client can
//! follow it only through the gateway, under a namespaced uri. A uri the
//! tenant can read anyway (listed, or an expansion of an offered template)
//! becomes its ordinary namespaced id; any other becomes a link id that
//! carries a tag sealing it to the tenant and the upstream (`crate::seal`),
//! `mcp://{gateway.id}/{upstream}/link/{tag}/{encoded uri}`, which reads
//! from the upstream for that tenant only, on any replica with the secret.

use percent_encoding::{percent_decode_str, utf8_percent_encode};

use super::ESCAPED;

/// What the seal of a link is for.
pub const PURPOSE: &str = "link";

/// The original id (before namespacing) of a link to `uri` with `tag`.
pub fn link_original(tag: &str, uri: &str) -> String {
    format!("mcp://link/{tag}/{}", utf8_percent_encode(uri, ESCAPED))
}

/// The tag and uri of a link's original id; `None` for anything else.
pub fn parse_link(original: &str) -> Option<(&str, String)> {
    let rest = original.strip_prefix("mcp://link/")?;
    let (tag, encoded) = rest.split_once('/')?;
    let uri = percent_decode_str(encoded).decode_utf8().ok()?.into_owned();
    Some((tag, uri))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_id_gives_back_its_tag_and_uri() {
        for uri in ["file:///a/b c.txt", "demo://x/y?z=1#f", "urn:é/~"] {
            let original = link_original("T4g-_", uri);
            assert!(
                !original["mcp://link/T4g-_/".len()..].contains('/'),
                "{original}"
            );
            assert_eq!(parse_link(&original), Some(("T4g-_", uri.to_owned())));
        }
        assert_eq!(parse_link("mcp://resource/x"), None);
        assert_eq!(parse_link("mcp://link/no-slash"), None);
    }
}
