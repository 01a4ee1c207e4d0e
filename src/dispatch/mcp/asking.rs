//! A handshake-era client that can be asked: what it declared it answers
//! (`initialize`'s `capabilities`: elicitation in its form and URL modes,
//! sampling, roots), and the requests of upstreams its calls forward to it
//! (`upstream::asks` keeps them until the client answers). A client that
//! cannot be asked something (MCP v1.0 agents, 2026-07-28 clients, a client
//! that did not declare the capability) never sees the request: the
//! upstream is answered -32601, and the call goes on.

use std::sync::{Arc, Mutex, PoisonError};

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::jsonrpc::{Json, JsonBuf};
use crate::upstream::asks::{Asks, Forwarded};
use crate::upstream::progress::Ask;

/// What a client declared it answers, as bits (kept in its session id).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientCan(pub u8);

impl ClientCan {
    pub const ELICIT_FORM: u8 = 1;
    pub const ELICIT_URL: u8 = 2;
    pub const SAMPLING: u8 = 4;
    pub const ROOTS: u8 = 8;

    /// What `initialize`'s params declare. `elicitation: {}` is the form
    /// mode alone (the revision that added the URL mode says so).
    pub fn of_initialize(params: Option<Json<'_>>) -> Self {
        #[derive(Deserialize)]
        struct Init<'a> {
            #[serde(borrow)]
            capabilities: Option<Caps<'a>>,
        }
        #[derive(Deserialize)]
        struct Caps<'a> {
            #[serde(borrow)]
            elicitation: Option<&'a RawValue>,
            sampling: Option<&'a RawValue>,
            roots: Option<&'a RawValue>,
        }
        #[derive(Deserialize)]
        struct Modes<'a> {
            #[serde(borrow)]
            form: Option<&'a RawValue>,
            url: Option<&'a RawValue>,
        }
        let Some(caps) = params
            .and_then(|p| serde_json::from_str::<Init<'_>>(p.get()).ok())
            .and_then(|i| i.capabilities)
        else {
            return ClientCan(0);
        };
        fn object(v: Option<&RawValue>) -> Option<&RawValue> {
            v.filter(|v| v.get().starts_with('{'))
        }
        let mut bits = 0;
        if let Some(elicitation) = object(caps.elicitation) {
            let modes = serde_json::from_str::<Modes<'_>>(elicitation.get()).ok();
            match modes {
                Some(Modes {
                    form: None,
                    url: None,
                })
                | None => bits |= Self::ELICIT_FORM,
                Some(m) => {
                    if object(m.form).is_some() {
                        bits |= Self::ELICIT_FORM;
                    }
                    if object(m.url).is_some() {
                        bits |= Self::ELICIT_URL;
                    }
                }
            }
        }
        if object(caps.sampling).is_some() {
            bits |= Self::SAMPLING;
        }
        if object(caps.roots).is_some() {
            bits |= Self::ROOTS;
        }
        ClientCan(bits)
    }

    /// Whether it can be asked anything (a `ping` aside).
    pub fn any(self) -> bool {
        self.0 != 0
    }

    /// Whether it answers `method` with these params.
    pub fn answers(self, method: &str, params: Option<Json<'_>>) -> bool {
        let has = |bit: u8| self.0 & bit != 0;
        match method {
            "ping" => true,
            "sampling/createMessage" => has(Self::SAMPLING),
            "roots/list" => has(Self::ROOTS),
            "elicitation/create" => {
                let [mode] = super::members(params, ["mode"]);
                match mode.map(Json::get) {
                    Some("\"url\"") => has(Self::ELICIT_URL),
                    None | Some("\"form\"") => has(Self::ELICIT_FORM),
                    Some(_) => false,
                }
            }
            _ => false,
        }
    }
}

/// Where a call's client can be asked: the scope its answers come back in
/// (its session id) and what it declared.
#[derive(Clone, Copy, Debug)]
pub struct Asking<'a> {
    pub scope: &'a [u8],
    pub can: ClientCan,
}

/// The requests one call forwarded to its client (each with the upstream's
/// own id, JSON text), left when the call ends.
#[derive(Default)]
pub(super) struct Forwards(Mutex<Vec<(JsonBuf, Forwarded)>>);

impl Forwards {
    /// Forwards `ask` to the call's client on `out` when it can answer it;
    /// otherwise the upstream is answered -32601.
    pub(super) fn ask(
        &self,
        asks: &Asks,
        tenant: &Arc<str>,
        asking: Option<Asking<'_>>,
        out: super::Outlet<'_>,
        ask: Ask,
    ) {
        let Some(asking) = asking else {
            return ask.refuse("the client of this call cannot be asked (no stream back to it)");
        };
        let params = ask.params.as_ref().map(|p| p.as_json());
        if !asking.can.answers(&ask.method, params) {
            return ask.refuse("the client of this call did not declare that capability");
        }
        let upstream_id = ask.id.clone();
        match asks.forward(asking.scope, tenant, ask) {
            Ok((message, forwarded)) => {
                // A client that does not read its stream is not asked: the
                // dropped entry answers the upstream with an error.
                if out.try_send(message, false).is_ok() {
                    self.0
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push((upstream_id, forwarded));
                }
            }
            Err(ask) => ask.refuse("too many requests wait for this tenant's clients"),
        }
    }
}

impl Forwards {
    /// The upstream withdrew its request `upstream_id`: when this call
    /// forwarded it, it waits no more, and the `notifications/cancelled` to
    /// send its client (naming the id the client was sent).
    pub(super) fn withdrawn(&self, upstream_id: &JsonBuf) -> Option<Vec<u8>> {
        let mut forwarded = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let at = forwarded.iter().position(|(id, _)| id == upstream_id)?;
        let (_, gone) = forwarded.remove(at);
        let mut message = Vec::with_capacity(128);
        message.extend_from_slice(
            br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"#,
        );
        message.extend_from_slice(gone.id().as_bytes());
        message.extend_from_slice(br#","reason":"the server withdrew its request"}}"#);
        Some(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn can(init: &str) -> ClientCan {
        let raw = RawValue::from_string(init.to_owned()).unwrap();
        ClientCan::of_initialize(Some(Json::from(&*raw)))
    }

    fn params(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap()
    }

    #[test]
    fn what_a_client_declared_is_what_it_is_asked() {
        assert_eq!(can(r#"{"capabilities":{}}"#), ClientCan(0));
        assert_eq!(can(r#"{"protocolVersion":"2025-11-25"}"#), ClientCan(0));
        let form = can(r#"{"capabilities":{"elicitation":{}}}"#);
        assert_eq!(form, ClientCan(ClientCan::ELICIT_FORM));
        let both = can(
            r#"{"capabilities":{"elicitation":{"form":{},"url":{}},"roots":{"listChanged":true}}}"#,
        );
        assert_eq!(
            both,
            ClientCan(ClientCan::ELICIT_FORM | ClientCan::ELICIT_URL | ClientCan::ROOTS)
        );
        let url_only = can(r#"{"capabilities":{"elicitation":{"url":{}}}}"#);
        let sampling = can(r#"{"capabilities":{"sampling":{}}}"#);
        let url = params(r#"{"mode":"url","url":"https://x","message":"m","elicitationId":"1"}"#);
        let plain = params(r#"{"message":"m","requestedSchema":{"type":"object"}}"#);
        let url = Some(Json::from(&*url));
        let plain = Some(Json::from(&*plain));
        assert!(form.answers("elicitation/create", plain));
        assert!(!form.answers("elicitation/create", url));
        assert!(url_only.answers("elicitation/create", url));
        assert!(!url_only.answers("elicitation/create", plain));
        assert!(!form.answers("sampling/createMessage", None));
        assert!(sampling.answers("sampling/createMessage", None));
        assert!(both.answers("roots/list", None));
        assert!(!sampling.answers("roots/list", None));
        assert!(ClientCan(0).answers("ping", None));
        assert!(!both.answers("tools/call", None));
        // Not objects: declared nothing.
        assert_eq!(
            can(r#"{"capabilities":{"sampling":true,"roots":null}}"#),
            ClientCan(0)
        );
    }

    #[tokio::test]
    async fn a_withdrawn_request_is_withdrawn_from_the_client_under_its_own_id() {
        let asks = Asks::default();
        let forwards = Forwards::default();
        let (out, mut sent) = tokio::sync::mpsc::channel(4);
        let (reply, _answered) = tokio::sync::oneshot::channel();
        let ask = Ask {
            id: JsonBuf::from(params("12")),
            method: "elicitation/create".into(),
            params: Some(JsonBuf::from(params(
                r#"{"message":"m","requestedSchema":{}}"#,
            ))),
            reply,
        };
        let asking = Asking {
            scope: b"session",
            can: ClientCan(ClientCan::ELICIT_FORM),
        };
        forwards.ask(
            &asks,
            &"t".into(),
            Some(asking),
            super::super::Outlet::Session(&out),
            ask,
        );
        let request: serde_json::Value =
            serde_json::from_slice(&sent.recv().await.unwrap()).unwrap();
        let given = request["id"].clone();
        assert!(asks.waits(b"session", &given.to_string()));
        // Another request's withdrawal is not this call's.
        assert!(forwards.withdrawn(&JsonBuf::from(params("13"))).is_none());
        let cancelled = forwards.withdrawn(&JsonBuf::from(params("12"))).unwrap();
        let cancelled: serde_json::Value = serde_json::from_slice(&cancelled).unwrap();
        assert_eq!(cancelled["method"], "notifications/cancelled");
        assert_eq!(cancelled["params"]["requestId"], given);
        assert!(!asks.waits(b"session", &given.to_string()));
    }
}
