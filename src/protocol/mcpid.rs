//! The namespaced mcpId scheme: how an upstream's own ids appear to agents.
//!
//! Given the gateway's id `G` and an upstream's configured name `U`:
//!
//! * an id of the form `mcp://REST`, where `REST` does not begin with `/`,
//!   becomes exactly `mcp://G/U/REST`
//!   (`mcp://acme-corp/tools/file-writer:v1` → `mcp://gateway/files/acme-corp/tools/file-writer:v1`);
//! * every other id `X` (`urn:x:y`, `tool-1`, `mcp:///odd`) becomes
//!   `mcp://G/U//` followed by `X` percent-encoded (every byte outside
//!   `A-Z a-z 0-9 - . _ ~` as `%HH`, upper-case hex).
//!
//! The two forms cannot collide: after the `mcp://G/U/` prefix the first is
//! followed by a character other than `/`, the second always by `/`. Upstream
//! names contain no `/`, so the upstream is the text up to the next `/`.
//! The mapping is injective and reversed without any state: `parse` inverts
//! `namespace`, and accepts only the canonical spelling, so every namespaced
//! id names exactly one (upstream, id) pair and every replica agrees.

use std::borrow::Cow;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

const MCP_SCHEME: &str = "mcp://";

/// Everything but RFC 3986's unreserved characters is escaped.
const ESCAPED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The part after `mcp://` when `id` takes the direct form.
fn direct_rest(id: &str) -> Option<&str> {
    id.strip_prefix(MCP_SCHEME)
        .filter(|rest| !rest.starts_with('/'))
}

/// The namespaced form of `original`, an id of upstream `upstream`.
pub fn namespace(gateway: &str, upstream: &str, original: &str) -> String {
    let mut out = String::with_capacity(
        MCP_SCHEME.len() + gateway.len() + upstream.len() + original.len() + 4,
    );
    out.push_str(MCP_SCHEME);
    out.push_str(gateway);
    out.push('/');
    out.push_str(upstream);
    out.push('/');
    match direct_rest(original) {
        Some(rest) => out.push_str(rest),
        None => {
            out.push('/');
            out.extend(utf8_percent_encode(original, ESCAPED));
        }
    }
    out
}

/// The upstream named by a namespaced id of this gateway (whatever follows it,
/// which [`parse`] checks); `None` when it names none.
pub fn upstream_of<'a>(gateway: &str, namespaced: &'a str) -> Option<&'a str> {
    let (upstream, _) = namespaced
        .strip_prefix(MCP_SCHEME)?
        .strip_prefix(gateway)?
        .strip_prefix('/')?
        .split_once('/')?;
    (!upstream.is_empty()).then_some(upstream)
}

/// Inverts [`namespace`]: the upstream name and the original id, or `None` when
/// `namespaced` is not an id this gateway could have produced.
pub fn parse<'a>(gateway: &str, namespaced: &'a str) -> Option<(&'a str, Cow<'a, str>)> {
    let rest = namespaced
        .strip_prefix(MCP_SCHEME)?
        .strip_prefix(gateway)?
        .strip_prefix('/')?;
    let (upstream, tail) = rest.split_once('/')?;
    if upstream.is_empty() {
        return None;
    }
    match tail.strip_prefix('/') {
        None => Some((upstream, Cow::Owned([MCP_SCHEME, tail].concat()))),
        Some(encoded) => {
            let decoded = percent_decode_str(encoded).decode_utf8().ok()?;
            // Only the canonical spelling is accepted, and never an id of the direct form.
            let canonical = utf8_percent_encode(&decoded, ESCAPED).to_string() == encoded;
            (canonical && direct_rest(&decoded).is_none())
                .then(|| (upstream, Cow::Owned(decoded.into_owned())))
        }
    }
}

#[cfg(test)]
mod tests;
