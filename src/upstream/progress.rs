//! What calls in flight on one upstream report before their answers. A call
//! whose caller can hear reports is sent with a progress token of the
//! gateway's own, unique on the upstream (`"mcp-gateway/<n>"`), never the
//! client's: two clients' tokens cannot collide there, and a client cannot
//! name another's call. The upstream's `notifications/progress` naming such
//! a token, and its `notifications/message` on that call's own response
//! stream, are handed as the link hears them to the call, which is still
//! waiting for its answer; what names no call in flight is dropped. So is
//! a request the upstream sends on a call's stream for the call's client to
//! answer (an [`Ask`]).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::jsonrpc::{Json, JsonBuf};
use crate::tenant::reports::{ReportReceiver, ReportSender, report_queue};

/// One report of a call, its params object as the upstream sent it.
#[derive(Debug)]
pub enum Report {
    /// `notifications/progress` (the gateway's token in it).
    Progress(JsonBuf),
    /// `notifications/message`, a log line of the call.
    Message(JsonBuf),
    /// A request of the upstream's for the call's client to answer.
    Ask(Ask),
    /// The upstream cancelled its request with this id (JSON text): a call
    /// that forwarded it tells its client so.
    Withdrawn(JsonBuf),
}

impl Report {
    /// About the bytes it holds while queued.
    pub fn weight(&self) -> usize {
        match self {
            Report::Progress(r) | Report::Message(r) | Report::Withdrawn(r) => r.get().len() + 32,
            Report::Ask(ask) => {
                ask.id.get().len()
                    + ask.method.len()
                    + ask.params.as_ref().map_or(0, |p| p.get().len())
                    + 96
            }
        }
    }

    /// Whether it may be lost to a caller that does not read: progress and
    /// log lines may; a request, or its withdrawal, may not.
    pub fn droppable(&self) -> bool {
        matches!(self, Report::Progress(_) | Report::Message(_))
    }
}

/// The methods an upstream may ask a call's client, through the gateway.
pub const ASKED: [&str; 4] = [
    "elicitation/create",
    "sampling/createMessage",
    "roots/list",
    "ping",
];

/// A request an upstream sent on a call's own stream (one of [`ASKED`]),
/// for the call's client: its answer goes back through `reply`; one
/// dropped unanswered (the call ended, the client cannot be asked) is
/// answered to the upstream as an error.
#[derive(Debug)]
pub struct Ask {
    /// The upstream's own id for it.
    pub id: JsonBuf,
    pub method: Box<str>,
    pub params: Option<JsonBuf>,
    pub reply: tokio::sync::oneshot::Sender<AskReply>,
}

/// What becomes of an [`Ask`].
#[derive(Debug)]
pub enum AskReply {
    /// The client's answer: its `result`, or its `error` object.
    Answered(Result<JsonBuf, JsonBuf>),
    /// The gateway's refusal (-32601): the call's client cannot be asked this.
    Refused(&'static str),
}

impl Ask {
    /// Answers the upstream -32601 with `why`.
    pub fn refuse(self, why: &'static str) {
        let _ = self.reply.send(AskReply::Refused(why));
    }
}

/// Waits (at most `wait`, counted in `waiting`) for what becomes of a
/// forwarded [`Ask`]: the answer to send the upstream under its own `id`,
/// and how to count it; nothing to send (`Withdrawn`) once the upstream
/// withdrew it (`withdrawn`).
pub async fn answer_of(
    id: &JsonBuf,
    answered: tokio::sync::oneshot::Receiver<AskReply>,
    wait: std::time::Duration,
    waiting: &prometheus::IntGauge,
    withdrawn: &tokio_util::sync::CancellationToken,
) -> (Vec<u8>, crate::metrics::ServerRequest) {
    use crate::jsonrpc::message::{Reply, write_reply};
    use crate::jsonrpc::{ErrorObject, codes};
    use crate::metrics::ServerRequest;
    waiting.inc();
    let got = {
        // Decremented however the wait ends (a withdrawn request's is dropped).
        let _waiting = super::scopeguard(|| waiting.dec());
        // A withdrawal first: the call it came in may end right after it
        // (dropping the reply), and the upstream must then get no answer.
        tokio::select! {
            biased;
            () = withdrawn.cancelled() => return (Vec::new(), ServerRequest::Withdrawn),
            got = tokio::time::timeout(wait, answered) => got,
        }
    };
    let mut reply = Vec::new();
    let id = Some(id.as_json());
    let outcome = match got {
        Ok(Ok(AskReply::Answered(Ok(result)))) => {
            write_reply(&mut reply, id, Reply::Result(result.get().as_bytes()));
            ServerRequest::Forwarded
        }
        Ok(Ok(AskReply::Answered(Err(error)))) => {
            write_reply(&mut reply, id, Reply::RawError(error.get().as_bytes()));
            ServerRequest::Forwarded
        }
        Ok(Ok(AskReply::Refused(why))) => {
            let error = ErrorObject::new(codes::METHOD_NOT_FOUND, why);
            write_reply(&mut reply, id, Reply::Error(&error));
            ServerRequest::Refused
        }
        Ok(Err(_)) | Err(_) => {
            let error = ErrorObject::new(
                codes::INTERNAL_ERROR,
                "the client did not answer in time, or its call ended",
            );
            write_reply(&mut reply, id, Reply::Error(&error));
            ServerRequest::Unanswered
        }
    };
    (reply, outcome)
}

/// What a call's caller is handed of its reports, in order: bounded in
/// bytes (`crate::tenant::reports`), so that an upstream reporting faster
/// than the caller takes them loses its oldest progress, never the gateway's
/// memory.
pub type Heard = ReportReceiver<Report>;

/// Queues `report` for its call: whether it was taken (an ask is handed
/// back when it was not).
pub fn queue(to: &ReportSender<Report>, report: Report) -> Result<(), Report> {
    let (bytes, droppable) = (report.weight(), report.droppable());
    to.push(report, bytes, droppable)
}

/// The upstream's calls waiting for progress, by the token text they were sent with.
#[derive(Default)]
pub struct Progress {
    next: AtomicU64,
    waiting: Mutex<HashMap<Box<str>, ReportSender<Report>>>,
    /// Requests of the upstream's forwarded to clients, by the upstream's
    /// id (JSON text): cancelled when the upstream withdraws one.
    asked: Mutex<HashMap<Box<str>, tokio_util::sync::CancellationToken>>,
    /// Where the reports a call's queue drops are counted.
    dropped: Option<prometheus::IntCounter>,
}

/// A call's place in the table, left when dropped.
pub struct Registered<'a> {
    table: &'a Progress,
    /// The token as JSON text (a string).
    pub token: Box<str>,
}

impl Progress {
    /// A table whose calls' queues count what they drop in `dropped`.
    pub fn counting(dropped: prometheus::IntCounter) -> Self {
        Progress {
            dropped: Some(dropped),
            ..Progress::default()
        }
    }

    /// A new token for one call, and where its progress arrives.
    pub fn register(&self) -> (Registered<'_>, Heard) {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let token: Box<str> = format!("\"mcp-gateway/{n}\"").into();
        let (tx, rx) = report_queue(None, self.dropped.clone());
        self.lock().insert(token.clone(), tx);
        (Registered { table: self, token }, rx)
    }

    /// Hands a `notifications/progress` params object to the call its token
    /// names; whether one was waiting.
    pub fn deliver(&self, params: Json<'_>) -> bool {
        let Some([Some(token)]) = crate::jsonrpc::scan::members_of(params, ["progressToken"])
        else {
            return false;
        };
        let waiting = self.lock();
        match waiting.get(token.get()) {
            // A call whose queue is full loses its oldest progress (see `Heard`).
            Some(call) => {
                let _ = queue(call, Report::Progress(params.to_buf()));
                true
            }
            None => false,
        }
    }

    /// Hands a `notifications/message` params object to the call registered
    /// with `token` (its JSON text); whether one was waiting.
    pub fn deliver_message(&self, token: &str, params: Json<'_>) -> bool {
        match self.lock().get(token) {
            Some(call) => {
                let _ = queue(call, Report::Message(params.to_buf()));
                true
            }
            None => false,
        }
    }

    /// Hands an upstream's request to the call registered with `token`;
    /// the ask back when no call waits under it (or its queue is full).
    pub fn deliver_ask(&self, token: &str, ask: Ask) -> Result<(), Ask> {
        let waiting = self.lock();
        let Some(call) = waiting.get(token) else {
            return Err(ask);
        };
        queue(call, Report::Ask(ask)).map_err(|back| match back {
            Report::Ask(ask) => ask,
            _ => unreachable!("the report sent was an ask"),
        })
    }

    /// A log line of a child that serves one client session: every call
    /// in flight on it is that client's, so the line goes to one of them
    /// (the only one, on a child of one request chain). `false`: none is
    /// in flight, or none asked to hear lines.
    pub fn deliver_message_any(&self, params: Json<'_>) -> bool {
        let waiting = self.lock();
        waiting
            .values()
            .any(|call| queue(call, Report::Message(params.to_buf())).is_ok())
    }

    /// Hands an upstream's request to any call waiting here (on a child
    /// that serves one client session, every call is that client's); the
    /// ask back when none waits (or every queue is full).
    pub fn deliver_ask_any(&self, mut ask: Ask) -> Result<(), Ask> {
        let waiting = self.lock();
        for call in waiting.values() {
            match queue(call, Report::Ask(ask)) {
                Ok(()) => return Ok(()),
                Err(Report::Ask(back)) => ask = back,
                Err(_) => unreachable!("the report sent was an ask"),
            }
        }
        Err(ask)
    }

    /// Enters a forwarded request the upstream may withdraw: the token its
    /// waiter ends on. [`Self::answered`] leaves it.
    pub fn asked(&self, id: &JsonBuf) -> tokio_util::sync::CancellationToken {
        let token = tokio_util::sync::CancellationToken::new();
        self.asked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(id.get().into(), token.clone());
        token
    }

    /// The forwarded request `id` has had its answer (or was withdrawn).
    pub fn answered(&self, id: &JsonBuf) {
        self.asked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(id.get());
    }

    /// An upstream's `notifications/cancelled`: when it names a request
    /// forwarded to a client, that request's wait ends (unanswered) and the
    /// call that forwarded it is told; whether it named one.
    pub fn withdraw(&self, params: Json<'_>) -> bool {
        let Some([Some(id)]) = crate::jsonrpc::scan::members_of(params, ["requestId"]) else {
            return false;
        };
        let token = self
            .asked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(id.get());
        let Some(token) = token else {
            return false;
        };
        token.cancel();
        // The call that forwarded it knows it by this id; the others ignore it.
        for call in self.lock().values() {
            let _ = queue(call, Report::Withdrawn(id.to_buf()));
        }
        true
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Box<str>, ReportSender<Report>>> {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.table.lock().remove(&self.token);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(text: &str) -> Box<serde_json::value::RawValue> {
        serde_json::value::RawValue::from_string(text.to_owned()).unwrap()
    }

    #[test]
    fn progress_reaches_the_call_its_token_names_and_only_while_it_waits() {
        let table = Progress::default();
        let (one, mut heard_one) = table.register();
        let (two, mut heard_two) = table.register();
        assert_ne!(one.token, two.token);
        let report = json(&format!(
            r#"{{"progressToken":{},"progress":1}}"#,
            one.token
        ));
        assert!(table.deliver(Json::from(&*report)));
        assert!(
            matches!(heard_one.try_recv(), Some(Report::Progress(r)) if r.get() == report.get())
        );
        let line = json(r#"{"level":"info","data":"x"}"#);
        assert!(table.deliver_message(&two.token, Json::from(&*line)));
        assert!(matches!(heard_two.try_recv(), Some(Report::Message(m)) if m.get() == line.get()));
        assert!(heard_two.try_recv().is_none());
        // A token the gateway never gave, or no token: nobody hears it.
        let foreign = json(r#"{"progressToken":"mcp-gateway/99","progress":1}"#);
        assert!(!table.deliver(Json::from(&*foreign)));
        assert!(!table.deliver(Json::from(&*json(r#"{"progress":1}"#))));
        // A call that ended hears nothing more.
        drop(one);
        assert!(!table.deliver(Json::from(&*report)));
        drop(two);
        assert!(table.lock().is_empty());
    }

    #[test]
    fn a_caller_that_does_not_read_costs_at_most_its_bytes() {
        let table = Progress::default();
        let (call, mut heard) = table.register();
        // A megabyte-sized report, as an upstream may send at the frame limit.
        let big = "x".repeat(256 << 10);
        let report = json(&format!(
            r#"{{"progressToken":{},"progress":1,"message":"{big}"}}"#,
            call.token
        ));
        for _ in 0..64 {
            table.deliver(Json::from(&*report));
        }
        let mut kept = 0;
        while heard.try_recv().is_some() {
            kept += 1;
        }
        // The newest that fit in a call's bytes, the oldest dropped.
        assert_eq!(kept, crate::tenant::reports::PER_CALL / report.get().len());
        // A request still finds room once the caller read.
        let (reply, _answered) = tokio::sync::oneshot::channel();
        let ask = Ask {
            id: JsonBuf::from(json("1")),
            method: "roots/list".into(),
            params: None,
            reply,
        };
        assert!(table.deliver_ask(&call.token, ask).is_ok());
    }

    #[test]
    fn an_ask_reaches_its_call_and_a_withdrawal_ends_its_wait() {
        let table = Progress::default();
        let (call, mut heard) = table.register();
        let (reply, _answered) = tokio::sync::oneshot::channel();
        let ask = Ask {
            id: JsonBuf::from(json("3")),
            method: "elicitation/create".into(),
            params: None,
            reply,
        };
        assert!(table.deliver_ask(&call.token, ask).is_ok());
        let Some(Report::Ask(ask)) = heard.try_recv() else {
            panic!("no ask")
        };
        let waiting = table.asked(&ask.id);
        // A cancellation naming another request, or none: nothing withdrawn.
        assert!(!table.withdraw(Json::from(&*json(r#"{"requestId":4}"#))));
        assert!(!table.withdraw(Json::from(&*json(r#"{"reason":"x"}"#))));
        assert!(!waiting.is_cancelled());
        assert!(table.withdraw(Json::from(&*json(r#"{"requestId":3,"reason":"x"}"#))));
        assert!(waiting.is_cancelled());
        assert!(matches!(heard.try_recv(), Some(Report::Withdrawn(id)) if id.get() == "3"));
        // Once withdrawn, the same id names nothing.
        assert!(!table.withdraw(Json::from(&*json(r#"{"requestId":3}"#))));
        // With no call waiting, an ask is handed back (and refused by the link).
        drop(call);
        let (reply, _) = tokio::sync::oneshot::channel();
        let again = Ask {
            id: JsonBuf::from(json("5")),
            method: "roots/list".into(),
            params: None,
            reply,
        };
        assert!(table.deliver_ask_any(again).is_err());
    }
}
