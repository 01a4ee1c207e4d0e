//! A call that needs the user's consent to an upstream, told as the
//! client's revision can take it:
//! - a 2026-07-28 client that declares URL-mode elicitation gets
//!   `input_required` with one `elicitation/create` of mode `url` (the
//!   gateway's consent URL) and a sealed `requestState` of the gateway's
//!   own; its retry runs the call once connected, else asks again;
//! - a client of the 2025-11-25 revision gets its URL-mode elicitation
//!   error (-32042);
//! - every other client (MCP v1.0, earlier revisions, a 2026-07-28 client
//!   without URL elicitation) gets -32010 with the URL in its message and data.

use serde_json::json;

use super::*;

/// The first revision whose clients take URL-mode elicitation errors.
const URL_ELICITATION: &[u8] = b"2025-11-25";

/// How this request's client is told a consent is needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Told {
    /// -32010 (see `GatewayError::to_wire`).
    Plain,
    /// -32042.
    UrlError,
    /// `input_required`.
    InputRequired,
}

impl Told {
    pub(super) fn of(era: Era, via: &Via<'_>, capabilities: Option<Json<'_>>) -> Told {
        match era {
            Era::Stateless if declares_url(capabilities) => Told::InputRequired,
            Era::Stateless => Told::Plain,
            Era::Handshake => {
                let version = via.http.as_ref().and_then(|h| h.protocol_version);
                match version.is_some_and(|v| v == URL_ELICITATION) {
                    true => Told::UrlError,
                    false => Told::Plain,
                }
            }
        }
    }
}

/// Whether 2026-07-28 client capabilities hold `elicitation.url`.
fn declares_url(capabilities: Option<Json<'_>>) -> bool {
    #[derive(serde::Deserialize)]
    struct Caps {
        elicitation: Option<Elicitation>,
    }
    #[derive(serde::Deserialize)]
    struct Elicitation {
        url: Option<serde::de::IgnoredAny>,
    }
    capabilities
        .and_then(|c| serde_json::from_str::<Caps>(c.get()).ok())
        .and_then(|c| c.elicitation)
        .is_some_and(|e| e.url.is_some())
}

impl ModelContext<'_> {
    /// The answer to a `tools/call` that failed with `e`: a consent needed
    /// told as `told` says; anything else as it was.
    pub(super) fn told(&self, tenant: &Tenant, e: GatewayError, told: Told) -> Built {
        let (upstream, mut refusal) = match e {
            GatewayError::Upstream {
                upstream,
                error: CallError::Credential(refusal),
            } if told != Told::Plain => (upstream, refusal),
            e => return Err(e),
        };
        let Some(ask) = refusal.consent.take() else {
            let error = CallError::Credential(refusal);
            return Err(GatewayError::Upstream { upstream, error });
        };
        if told == Told::UrlError {
            return Err(GatewayError::UrlElicitation {
                upstream,
                url: ask.url,
                id: ask.id,
            });
        }
        let message = format!("Connect your account for {upstream} at {}", ask.url);
        Ok(Out::Value(json!({
            "resultType": "input_required",
            "inputRequests": {
                format!("consent-{}", ask.id): {
                    "method": "elicitation/create",
                    "params": {"mode": "url", "url": ask.url, "elicitationId": ask.id, "message": message},
                },
            },
            "requestState": self.core.own_round_state(&tenant.name, &upstream),
        })))
    }
}
