//! The 2026-07-28 revision's multi-round-trip requests through the gateway.
//!
//! An upstream that needs the client's input before a tool can answer ends
//! the call with `resultType: "input_required"`, its questions
//! (`inputRequests`) and a `requestState` the client echoes on its retry.
//! The client never sees the upstream's own state: it is handed
//! `{tag}.{payload}`, the payload (base64url JSON) naming the tool's
//! namespaced id, when the round ends and the upstream's state, the tag an
//! HMAC (`crate::seal`) binding the tenant and the payload. Any replica with
//! the same `gateway.session_secret` takes the retry on with no table; a
//! state of another tenant's, another tool's, an altered, forged or expired
//! one is refused (-32602) before the upstream hears of it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::GatewayError;
use crate::jsonrpc::Json;

/// A 2026-07-28 client's call, for an upstream that takes that revision
/// (see `Dispatcher::call_tool`): read only when one does.
pub struct RoundIn<'a> {
    /// The request's params as the client sent them.
    pub params: Option<Json<'a>>,
    /// The client's `inputResponses` and `requestState` (as the face found them).
    pub answers: [Option<Json<'a>>; 2],
    /// The client's capabilities and the log level it named, in `_meta`.
    pub capabilities: Option<Json<'a>>,
    pub log_level: Option<Json<'a>>,
    /// The arguments the tool mirrors into `Mcp-Param-*` headers.
    pub mirrors: &'a [crate::modelcontext::param_headers::Mirror],
    /// The request's place among its tenant's calls in flight (see
    /// [`super::held::Place`]); `None` where no request keeps one.
    pub place: Option<&'a super::place::Place>,
}

/// What the seal of a request state is for.
const PURPOSE: &str = "request_state";

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// What a sealed request state carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundState {
    /// The tool's namespaced id.
    #[serde(rename = "t")]
    pub tool: String,
    /// When the round ends, in seconds since the Unix epoch.
    #[serde(rename = "x")]
    pub expires: u64,
    /// The upstream's own `requestState`, if it gave one.
    #[serde(rename = "s", default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// The call held for the retry (see `held`), if the round is one.
    #[serde(rename = "h", default, skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
    /// The gateway's own round (a consent it asked for): the client's
    /// answers are its own and go to no upstream.
    #[serde(rename = "o", default, skip_serializing_if = "std::ops::Not::not")]
    pub own: bool,
}

impl RoundState {
    /// A round of the call of `tool` that ends `lifetime` from now.
    pub fn new(
        tool: &str,
        state: Option<String>,
        held: Option<String>,
        lifetime: Duration,
    ) -> Self {
        RoundState {
            tool: tool.to_owned(),
            expires: now_secs().saturating_add(lifetime.as_secs().max(1)),
            state,
            held,
            own: false,
        }
    }
}

/// How long the gateway's own round lasts at least: a user consenting in
/// a browser takes minutes, not a server request's seconds.
const OWN_ROUND: Duration = Duration::from_secs(600);

impl super::Dispatcher {
    /// The sealed state of a round of the gateway's own for `tenant`'s
    /// call of a tool of `upstream`: the client's retry with it runs the
    /// call again.
    pub fn own_round_state(&self, tenant: &str, upstream: &str) -> String {
        let lifetime = self.round_lifetime().max(OWN_ROUND);
        let mut round = RoundState::new(upstream, None, None, lifetime);
        round.own = true;
        seal(self.sealer(), tenant, &round)
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The state a client of `tenant` is handed for `round`.
pub fn seal(sealer: &crate::seal::Sealer, tenant: &str, round: &RoundState) -> String {
    let payload = B64.encode(serde_json::to_vec(round).unwrap_or_default());
    let tag = sealer.tag(PURPOSE, &[tenant, &payload]);
    format!("{tag}.{payload}")
}

/// The round a client's `requestState` names, when this gateway sealed it
/// for `tenant`'s call of `tool` (of `upstream`; a round of the gateway's
/// own is bound to the upstream, whose tools may not be listed yet when it
/// asks) and the round has not ended.
pub fn open(
    sealer: &crate::seal::Sealer,
    tenant: &str,
    (tool, upstream): (&str, Option<&str>),
    sealed: &str,
) -> Result<RoundState, GatewayError> {
    let refused = || {
        GatewayError::InvalidParams(
            "requestState is not one this gateway handed out for this call, or its round has ended"
                .into(),
        )
    };
    let (tag, payload) = sealed.split_once('.').ok_or_else(refused)?;
    if !sealer.verify(PURPOSE, &[tenant, payload], tag) {
        return Err(refused());
    }
    let round: RoundState = B64
        .decode(payload)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .ok_or_else(refused)?;
    let named = match round.own {
        true => upstream == Some(round.tool.as_str()),
        false => round.tool == tool,
    };
    if !named || round.expires < now_secs() {
        return Err(refused());
    }
    Ok(round)
}

/// An upstream's `input_required` result as its client is handed it: its
/// `requestState` sealed (see [`seal`]), and a state always present, so
/// that the retry names the round it answers.
pub fn sealed_result(
    sealer: &crate::seal::Sealer,
    tenant: &str,
    tool: &str,
    mut result: serde_json::Map<String, Value>,
    lifetime: Duration,
) -> Value {
    let state = match result.remove("requestState") {
        Some(Value::String(s)) => Some(s),
        _ => None,
    };
    let round = RoundState::new(tool, state, None, lifetime);
    result.insert("requestState".into(), seal(sealer, tenant, &round).into());
    Value::Object(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::KeyDigest;
    use crate::seal::Sealer;

    #[test]
    fn a_state_opens_only_for_its_tenant_and_tool_unaltered_and_in_time() {
        let sealer = Sealer::new(&KeyDigest::of(b"secret"));
        let long = Duration::from_secs(300);
        let round = RoundState::new("gw/up/t", Some("own".into()), Some("h1".into()), long);
        let sealed = seal(&sealer, "a", &round);
        let round = open(&sealer, "a", ("gw/up/t", None), &sealed).expect("opens");
        assert_eq!(round.state.as_deref(), Some("own"));
        assert_eq!(round.held.as_deref(), Some("h1"));
        // Another replica with the same secret opens it too.
        let replica = Sealer::new(&KeyDigest::of(b"secret"));
        assert!(open(&replica, "a", ("gw/up/t", None), &sealed).is_ok());
        // Another tenant, another tool, another secret, an altered payload.
        assert!(open(&sealer, "b", ("gw/up/t", None), &sealed).is_err());
        assert!(open(&sealer, "a", ("gw/up/u", None), &sealed).is_err());
        let other = Sealer::new(&KeyDigest::of(b"other"));
        assert!(open(&other, "a", ("gw/up/t", None), &sealed).is_err());
        let (tag, _) = sealed.split_once('.').unwrap();
        let forged = RoundState {
            tool: "gw/up/t".into(),
            expires: u64::MAX,
            state: Some("mine".into()),
            held: None,
            own: false,
        };
        let forged = format!("{tag}.{}", B64.encode(serde_json::to_vec(&forged).unwrap()));
        assert!(open(&sealer, "a", ("gw/up/t", None), &forged).is_err());
        for junk in ["", ".", "x", "a.b.c", "v1.mMroxtiy"] {
            assert!(
                open(&sealer, "a", ("gw/up/t", None), junk).is_err(),
                "{junk}"
            );
        }
        // A round that has ended.
        let ended = RoundState {
            tool: "gw/up/t".into(),
            expires: now_secs() - 1,
            state: None,
            held: None,
            own: false,
        };
        let payload = B64.encode(serde_json::to_vec(&ended).unwrap());
        let ended = format!("{}.{payload}", sealer.tag(PURPOSE, &["a", &payload]));
        assert!(open(&sealer, "a", ("gw/up/t", None), &ended).is_err());
    }

    #[test]
    fn the_client_is_handed_a_sealed_state_even_when_the_upstream_kept_none() {
        let sealer = Sealer::new(&KeyDigest::of(b"secret"));
        let long = Duration::from_secs(300);
        let result =
            serde_json::json!({"resultType": "input_required", "inputRequests": {"k": {}}});
        let Value::Object(result) = result else {
            unreachable!()
        };
        let sealed = sealed_result(&sealer, "a", "gw/up/t", result, long);
        let state = sealed["requestState"].as_str().unwrap();
        assert_eq!(
            open(&sealer, "a", ("gw/up/t", None), state).unwrap().state,
            None
        );
        assert_eq!(sealed["inputRequests"], serde_json::json!({"k": {}}));
    }

    #[test]
    fn a_round_of_the_gateways_own_is_bound_to_its_upstream_and_tenant() {
        let sealer = Sealer::new(&KeyDigest::of(b"k"));
        let mut round = RoundState::new("up", None, None, Duration::from_secs(60));
        round.own = true;
        let sealed = seal(&sealer, "a", &round);
        let opened = open(&sealer, "a", ("mcp://gw/up/tool/t", Some("up")), &sealed).unwrap();
        assert!(opened.own);
        assert!(
            open(
                &sealer,
                "a",
                ("mcp://gw/other/tool/t", Some("other")),
                &sealed
            )
            .is_err()
        );
        assert!(open(&sealer, "b", ("mcp://gw/up/tool/t", Some("up")), &sealed).is_err());
        // A tool's round does not open as another tool's of the same upstream.
        let theirs = seal(
            &sealer,
            "a",
            &RoundState::new("mcp://gw/up/tool/t", None, None, Duration::from_secs(60)),
        );
        assert!(open(&sealer, "a", ("mcp://gw/up/tool/u", Some("up")), &theirs).is_err());
    }
}
