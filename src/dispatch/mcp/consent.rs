//! A call that needs the user's consent to an upstream, told as the
//! client's revision can take it: the 2025-11-25 revision's URL-mode
//! elicitation error (-32042, its one elicitation the gateway's consent
//! URL); every other client (MCP v1.0, earlier revisions, and for now the
//! 2026-07-28 revision) gets -32010 with the URL in its message and data.

use super::{Era, Via};
use crate::error::GatewayError;
use crate::upstream::CallError;

/// The first revision whose clients take URL-mode elicitation errors.
const URL_ELICITATION: &[u8] = b"2025-11-25";

/// Whether this request's client takes -32042: a handshake-era client
/// of the 2025-11-25 revision (as its `MCP-Protocol-Version` says).
pub(super) fn takes_url_errors(era: Era, via: &Via<'_>) -> bool {
    era == Era::Handshake
        && via
            .http
            .as_ref()
            .and_then(|h| h.protocol_version)
            .is_some_and(|v| v == URL_ELICITATION)
}

/// `e` as the client is told it: a consent needed becomes -32042 for a
/// client that takes it; everything else is as it was.
pub(super) fn for_client(e: GatewayError, url_errors: bool) -> GatewayError {
    match e {
        GatewayError::Upstream {
            upstream,
            error: CallError::Credential(mut refusal),
        } if url_errors => match refusal.consent.take() {
            Some(ask) => GatewayError::UrlElicitation {
                upstream,
                url: ask.url,
                id: ask.id,
            },
            None => GatewayError::Upstream {
                upstream,
                error: CallError::Credential(refusal),
            },
        },
        e => e,
    }
}
