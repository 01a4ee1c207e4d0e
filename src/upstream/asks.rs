//! Requests of upstreams forwarded to clients ([`Ask`]s), waiting for the
//! clients' answers. Each goes out under an id of the gateway's, random
//! (128 bits) and so unguessable, and is kept under that id and the scope
//! it was sent in (the client's session id, or its tenant where there is no
//! session): a client's answer is taken only in the scope the request went
//! out in, so no client can answer, or learn of, another's. An entry lives
//! until its answer comes or its call ends (the [`Forwarded`] guard the call
//! holds); a tenant holds at most [`PER_TENANT`] at once, past which an
//! upstream's request is refused rather than forwarded.
//!
//! With a session secret the id is also sealed to its scope and its
//! deadline (`mcp-gateway-{deadline}-{nonce}-{tag}`): any replica tells an
//! answer that may be waited for somewhere in the deployment from one that
//! cannot be (see [`Asks::may_wait_somewhere`]), without a table.

use std::sync::Arc;

use dashmap::DashMap;
use tokio::sync::oneshot;

use super::progress::{Ask, AskReply};
use crate::jsonrpc::Json;

/// Requests one tenant's clients may have waiting for their answers at once.
pub const PER_TENANT: usize = 256;

type Key = (Box<[u8]>, Box<str>);

/// A cheap clone.
#[derive(Clone, Default)]
pub struct Asks(Arc<Table>);

#[derive(Default)]
struct Table {
    waiting: DashMap<Key, Waiting>,
    per_tenant: DashMap<Arc<str>, usize>,
    /// The key ids are sealed with, and how long a request waits.
    seal: std::sync::OnceLock<(crate::seal::Sealer, std::time::Duration)>,
}

/// What a sealed ask id is for.
const PURPOSE: &str = "ask";

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

struct Waiting {
    reply: oneshot::Sender<AskReply>,
    tenant: Arc<str>,
}

/// A forwarded request's place in the table, left when dropped (its call
/// ended): an upstream still waiting is then answered with an error.
pub struct Forwarded {
    asks: Asks,
    key: Key,
}

/// What became of a client's answer.
#[derive(Debug, PartialEq, Eq)]
pub enum Taken {
    /// It answered a request waiting in its scope.
    Delivered,
    /// No request waits under that id in that scope.
    Stray,
}

impl Asks {
    /// Seals the ids of requests sent from now on with `sealer`, each good
    /// for `wait` (how long a request waits for its answer).
    pub fn seal_with(&self, sealer: crate::seal::Sealer, wait: std::time::Duration) {
        let _ = self.0.seal.set((sealer, wait));
    }

    /// A new id (JSON text) for a request sent in `scope`.
    fn mint(&self, scope: &[u8]) -> Box<str> {
        let mut nonce = [0u8; 16];
        let _ = getrandom::fill(&mut nonce);
        let nonce: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
        match self.0.seal.get() {
            None => format!("\"mcp-gateway-{nonce}\"").into(),
            Some((sealer, wait)) => {
                let deadline = (unix_now() + wait.as_secs() + 1).to_string();
                let scope = String::from_utf8_lossy(scope);
                let tag = sealer.tag(PURPOSE, &[&scope, &deadline, &nonce]);
                format!("\"mcp-gateway-{deadline}-{nonce}-{tag}\"").into()
            }
        }
    }

    /// Whether an answer under `id` (JSON text) in `scope` may be waited
    /// for on some replica: an id this deployment sealed for that scope,
    /// whose request's wait is not over. What fails this is delivered
    /// nowhere, so it is never passed to the other replicas.
    pub fn may_wait_somewhere(&self, scope: &[u8], id: &str) -> bool {
        let Some((sealer, _)) = self.0.seal.get() else {
            return false;
        };
        let Some(inner) = id
            .strip_prefix("\"mcp-gateway-")
            .and_then(|s| s.strip_suffix('"'))
        else {
            return false;
        };
        let mut parts = inner.splitn(3, '-');
        let (Some(deadline), Some(nonce), Some(tag)) = (parts.next(), parts.next(), parts.next())
        else {
            return false;
        };
        let in_time = deadline.parse::<u64>().is_ok_and(|d| d >= unix_now());
        in_time
            && sealer.verify(
                PURPOSE,
                &[&String::from_utf8_lossy(scope), deadline, nonce],
                tag,
            )
    }

    /// Enters `ask` for a client of `tenant` reached in `scope`: the
    /// request to send that client (a JSON-RPC request with the gateway's
    /// id), and the guard the call keeps. The ask back when the tenant has
    /// [`PER_TENANT`] waiting already.
    pub fn forward(
        &self,
        scope: &[u8],
        tenant: &Arc<str>,
        ask: Ask,
    ) -> Result<(Vec<u8>, Forwarded), Ask> {
        {
            let mut count = self.0.per_tenant.entry(tenant.clone()).or_default();
            if *count >= PER_TENANT {
                return Err(ask);
            }
            *count += 1;
        }
        let id = self.mint(scope);
        let mut message = Vec::with_capacity(96 + ask.params.as_ref().map_or(0, |p| p.get().len()));
        message.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
        message.extend_from_slice(id.as_bytes());
        message.extend_from_slice(br#","method":"#);
        let _ = serde_json::to_writer(&mut message, &*ask.method);
        if let Some(params) = &ask.params {
            message.extend_from_slice(br#","params":"#);
            message.extend_from_slice(params.get().as_bytes());
        }
        message.push(b'}');
        let key: Key = (scope.into(), id);
        self.0.waiting.insert(
            key.clone(),
            Waiting {
                reply: ask.reply,
                tenant: tenant.clone(),
            },
        );
        Ok((
            message,
            Forwarded {
                asks: self.clone(),
                key,
            },
        ))
    }

    /// Hands a client's answer (`result` or `error`, raw) to the request
    /// `id` (JSON text) waiting in `scope`.
    pub fn answer(&self, scope: &[u8], id: &str, outcome: Result<Json<'_>, Json<'_>>) -> Taken {
        let key: Key = (scope.into(), id.into());
        match self.0.waiting.remove(&key) {
            Some((_, waiting)) => {
                self.left(&waiting.tenant);
                let answer = outcome.map(Json::to_buf).map_err(Json::to_buf);
                let _ = waiting.reply.send(AskReply::Answered(answer));
                Taken::Delivered
            }
            None => Taken::Stray,
        }
    }

    /// Whether a request waits under `id` in `scope`.
    pub fn waits(&self, scope: &[u8], id: &str) -> bool {
        self.0.waiting.contains_key(&(scope.into(), id.into()))
    }

    fn left(&self, tenant: &Arc<str>) {
        if let Some(mut count) = self.0.per_tenant.get_mut(tenant) {
            *count = count.saturating_sub(1);
        }
        self.0.per_tenant.remove_if(tenant, |_, n| *n == 0);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.waiting.len()
    }
}

impl Forwarded {
    /// The id the client was sent (JSON text).
    pub fn id(&self) -> &str {
        &self.key.1
    }
}

impl Drop for Forwarded {
    fn drop(&mut self) {
        if let Some((_, waiting)) = self.asks.0.waiting.remove(&self.key) {
            self.asks.left(&waiting.tenant);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::JsonBuf;

    fn ask(method: &str) -> (Ask, oneshot::Receiver<AskReply>) {
        let (reply, rx) = oneshot::channel();
        let params = serde_json::value::RawValue::from_string(r#"{"message":"ok?"}"#.into())
            .map(JsonBuf::from)
            .ok();
        let ask = Ask {
            id: JsonBuf::from(raw("7")),
            method: method.into(),
            params,
            reply,
        };
        (ask, rx)
    }

    fn raw(text: &str) -> Box<serde_json::value::RawValue> {
        serde_json::value::RawValue::from_string(text.into()).unwrap()
    }

    fn id_of(message: &[u8]) -> String {
        let v: serde_json::Value = serde_json::from_slice(message).unwrap();
        v["id"].to_string()
    }

    #[test]
    fn an_answer_reaches_its_request_only_from_its_own_scope() {
        let asks = Asks::default();
        let tenant: Arc<str> = "a".into();
        let (one, mut heard) = ask("elicitation/create");
        let (message, guard) = asks.forward(b"session-1", &tenant, one).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&message).unwrap();
        assert_eq!(v["method"], "elicitation/create");
        assert_eq!(v["params"]["message"], "ok?");
        let id = id_of(&message);
        let result = raw(r#"{"action":"accept"}"#);
        let result = Json::from(&*result);
        // Another session, or an id never sent: stray, and the request still waits.
        assert_eq!(asks.answer(b"session-2", &id, Ok(result)), Taken::Stray);
        assert_eq!(asks.answer(b"session-1", "\"x\"", Ok(result)), Taken::Stray);
        assert!(heard.try_recv().is_err());
        assert_eq!(asks.answer(b"session-1", &id, Ok(result)), Taken::Delivered);
        assert!(
            matches!(heard.try_recv(), Ok(AskReply::Answered(Ok(r))) if r.get() == result.get())
        );
        // Answered once: the same answer again is stray.
        assert_eq!(asks.answer(b"session-1", &id, Ok(result)), Taken::Stray);
        drop(guard);
        assert_eq!(asks.len(), 0);
        assert!(asks.0.per_tenant.is_empty());
    }

    #[test]
    fn a_call_that_ends_leaves_its_requests_and_a_tenant_holds_a_bounded_number() {
        let asks = Asks::default();
        let tenant: Arc<str> = "a".into();
        let (one, mut heard) = ask("sampling/createMessage");
        let (message, guard) = asks.forward(b"s", &tenant, one).unwrap();
        drop(guard);
        // The upstream hears that nobody will answer.
        assert!(
            heard
                .try_recv()
                .is_err_and(|e| e == oneshot::error::TryRecvError::Closed)
        );
        assert_eq!(
            asks.answer(b"s", &id_of(&message), Ok(Json::EMPTY_OBJECT)),
            Taken::Stray
        );
        let mut guards = Vec::new();
        for _ in 0..PER_TENANT {
            guards.push(asks.forward(b"s", &tenant, ask("roots/list").0).unwrap().1);
        }
        assert!(asks.forward(b"s", &tenant, ask("roots/list").0).is_err());
        // Another tenant is not held back by this one.
        assert!(asks.forward(b"t", &"b".into(), ask("roots/list").0).is_ok());
        guards.pop();
        assert!(asks.forward(b"s", &tenant, ask("roots/list").0).is_ok());
    }

    #[test]
    fn a_sealed_id_says_whether_an_answer_may_be_waited_for_somewhere() {
        let asks = Asks::default();
        let tenant: Arc<str> = "a".into();
        assert!(!asks.may_wait_somewhere(b"s", "\"mcp-gateway-00\""));
        let sealer = crate::seal::Sealer::new(&crate::config::KeyDigest::of(b"secret"));
        asks.seal_with(sealer.clone(), std::time::Duration::from_secs(60));
        let (message, _guard) = asks.forward(b"s", &tenant, ask("roots/list").0).unwrap();
        let id = id_of(&message);
        assert!(asks.may_wait_somewhere(b"s", &id));
        // Another replica with the same secret says so too.
        let other = Asks::default();
        other.seal_with(sealer, std::time::Duration::from_secs(60));
        assert!(other.may_wait_somewhere(b"s", &id));
        // Another scope, an altered id, a made-up one, a past deadline: no.
        assert!(!asks.may_wait_somewhere(b"t", &id));
        let altered = id.replacen("mcp-gateway-", "mcp-gateway-1", 1);
        assert!(!asks.may_wait_somewhere(b"s", &altered));
        assert!(!asks.may_wait_somewhere(b"s", "7"));
        assert!(!asks.may_wait_somewhere(b"s", "\"mcp-gateway-1-00-x\""));
    }
}
