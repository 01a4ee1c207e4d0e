//! What the other replicas ask of this one through the store's bus,
//! carried out here.

use crate::dispatch::Dispatcher;

/// This replica as the store's change channel acts on it: its upstreams
/// (relisted when another replica heard them change) and its edge's calls
/// (cancelled when their client's cancellation reached another replica).
#[derive(Clone)]
pub(super) struct Here {
    pub(super) dispatcher: Dispatcher,
    pub(super) calls: crate::http::calls::Calls,
}

impl crate::store::bus::Here for Here {
    fn relist_soon(&self, upstream: &str, changed: Option<&str>) {
        if let Some(up) = self.dispatcher.upstream(upstream) {
            up.relist_soon(changed);
        }
    }

    fn changed_for(&self, tenant: &str, upstream: &str, changed: &str) {
        if let Some(up) = self.dispatcher.upstream(upstream) {
            up.announce_change_to(tenant, changed);
        }
    }

    fn recheck_pins(&self) {
        for upstream in self.dispatcher.upstreams() {
            if upstream.pins_fell_back() {
                upstream.relist_soon(None);
            }
        }
    }

    fn cancel_call(&self, session: &[u8], id: &str) {
        if let Ok(nonce) = std::str::from_utf8(session) {
            self.calls.cancel(nonce, id);
        }
    }

    fn answer_ask(&self, session: &[u8], id: &str, outcome: Result<&str, &str>) {
        // Only text that is one JSON value is taken (the publishing replica
        // parsed it as such; this one does not trust the channel more).
        fn raw(t: &str) -> Option<&serde_json::value::RawValue> {
            serde_json::from_str(t).ok()
        }
        let outcome = match outcome {
            Ok(result) => raw(result).map(|r| Ok(crate::jsonrpc::Json::from(r))),
            Err(error) => raw(error).map(|e| Err(crate::jsonrpc::Json::from(e))),
        };
        if let Some(outcome) = outcome {
            self.dispatcher.asks().answer(session, id, outcome);
        }
    }

    fn continue_round(&self, origin: &str, round: crate::store::bus::RoundAsked) {
        self.dispatcher.continue_round(origin, round);
    }

    fn round_news(&self, waiter: &str, news: &str) {
        if !self.dispatcher.held().news(waiter, news) {
            self.dispatcher.task_news(waiter, news);
        }
    }

    fn task_asked(&self, origin: &str, asked: crate::store::bus::TaskAsked) {
        self.dispatcher.answer_task_asked(origin, asked);
    }

    fn task_status(&self, tenant: &str, status: &str) {
        // Only one JSON object is taken (this replica does not trust the
        // channel more than the one that published it).
        if serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(status).is_ok() {
            self.dispatcher.tell_task_status(tenant, status);
        }
    }
}
