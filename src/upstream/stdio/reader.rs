//! What a child writes: its stdout read frame by frame (answers to their
//! calls, its notifications and requests, garbage counted and skipped), and
//! its stderr copied into the gateway log, rate-limited.

use std::borrow::Cow;

use super::framing::Framing;
use super::*;

pub(super) struct Reader {
    pub(super) up: Arc<Upstream>,
    pub(super) pending: Arc<Pending>,
    pub(super) outbox: mpsc::Sender<Bytes>,
    pub(super) events: mpsc::Sender<Event>,
    pub(super) dialect: Dialect,
}

impl Reader {
    pub(super) async fn run(&self, stdout: ChildStdout, max_frame: usize) -> &'static str {
        let mut frames = FramedRead::new(stdout, Framing::new(self.dialect, max_frame));
        while let Some(frame) = frames.next().await {
            for _ in 0..frames.decoder_mut().take_skipped() {
                self.protocol_error("non-protocol output on stdout skipped");
            }
            match frame {
                Ok(body) => self.on_frame(&body),
                Err(e) if e.is_io() => return "stdout read failed",
                Err(e) => {
                    self.protocol_error(&e.to_string());
                    return "framing error";
                }
            }
        }
        "stdout closed"
    }

    fn protocol_error(&self, why: &str) {
        tracing::warn!(upstream = %self.up.name, error = why, "upstream broke the protocol");
        self.up
            .metrics()
            .upstream_protocol_errors
            .with_label_values(&[&self.up.name])
            .inc();
    }

    /// One message from the child. A bad message costs that message, not the connection.
    fn on_frame(&self, body: &[u8]) {
        let Ok(raw) = serde_json::from_slice::<&RawValue>(body) else {
            return self.protocol_error("a frame is not valid JSON");
        };
        match parse_upstream(raw) {
            Ok(UpstreamMessage::Response { id, outcome }) => {
                let Ok(id) = id.get().parse::<u64>() else {
                    return self.protocol_error("a response has an id the gateway never sent");
                };
                let outcome = outcome
                    .map(Json::to_buf)
                    .map_err(|e| CallError::Remote(e.to_buf()));
                if !self.pending.complete(id, outcome) {
                    tracing::debug!(upstream = %self.up.name, id, "answer for a call nobody waits for (timed out or cancelled)");
                }
            }
            Ok(UpstreamMessage::Notification { method, params }) => {
                self.on_notification(method, params)
            }
            Ok(UpstreamMessage::Request { id, method, params }) => {
                self.on_request(id, &method, params)
            }
            Err(broken) => {
                self.protocol_error(broken.why);
                // A broken answer to a call is still its answer: the call
                // fails now instead of waiting for its timeout.
                if let Some(id) = broken.id.and_then(|id| id.get().parse::<u64>().ok()) {
                    self.pending
                        .complete(id, Err(CallError::protocol(broken.why)));
                }
            }
        }
    }

    /// A notification from the child: progress and a session's log go to
    /// the call or client they belong to, the rest to the upstream's events.
    fn on_notification(&self, method: Cow<'_, str>, params: Option<Json<'_>>) {
        // Progress goes to the call waiting for it, ahead of its answer.
        if method == "notifications/progress" {
            if let Some(params) = params {
                self.up.progress().deliver(params);
            }
            return;
        }
        // A child of one client session logs for that client.
        if method == "notifications/message"
            && self.up.serves_one_session().is_some()
            && params.is_some_and(|p| self.up.progress().deliver_message_any(p))
        {
            return;
        }
        // The child withdrawing a request it forwarded to a client.
        if method == "notifications/cancelled"
            && params.is_some_and(|p| self.up.progress().withdraw(p))
        {
            return;
        }
        if self
            .events
            .try_send((method.into_owned(), params.map(Json::to_buf)))
            .is_err()
        {
            tracing::warn!(upstream = %self.up.name, "notification dropped: too many queued");
        }
    }

    /// A request from the child: a child of one client session asks that
    /// client; any other request gets the gateway's own answer.
    fn on_request(&self, id: Json<'_>, method: &str, params: Option<Json<'_>>) {
        tracing::debug!(upstream = %self.up.name, method = %method, "upstream sent a request");
        if self.ask_client(id, method, params) {
            return;
        }
        let (out, outcome) = answer_server_request(self.dialect, id, method);
        // The outbox is bounded: a child that asks faster than it
        // reads its answers loses answers, never the gateway's memory.
        let outcome = match self.outbox.try_send(Bytes::from(out)) {
            Ok(()) => outcome,
            Err(_) => crate::metrics::ServerRequest::Dropped,
        };
        self.up.metrics().server_request(outcome);
    }

    /// Forwards a child's request to its one client session, through one of
    /// its calls in flight, and sends the answer back when it comes; false
    /// when the child serves no one session or no call could take it.
    fn ask_client(&self, id: Json<'_>, method: &str, params: Option<Json<'_>>) -> bool {
        let Some((wait, counted)) = self.up.serves_one_session() else {
            return false;
        };
        if !crate::upstream::progress::ASKED.contains(&method) {
            return false;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        let (reply, answered) = tokio::sync::oneshot::channel();
        let ask = crate::upstream::progress::Ask {
            id: id.to_buf(),
            method: method.into(),
            params: params.map(Json::to_buf),
            reply,
        };
        if self.up.progress().deliver_ask_any(ask).is_err() {
            return false;
        }
        let (wait, counted) = (*wait, counted.clone());
        let (outbox, id, up) = (self.outbox.clone(), id.to_buf(), self.up.clone());
        let withdrawn = up.progress().asked(&id);
        runtime.spawn(async move {
            use crate::metrics::ServerRequest;
            let waiting = &counted.server_requests_waiting;
            let (out, outcome) =
                crate::upstream::progress::answer_of(&id, answered, wait, waiting, &withdrawn)
                    .await;
            up.progress().answered(&id);
            let outcome = if outcome == ServerRequest::Withdrawn {
                outcome
            } else {
                match outbox.try_send(Bytes::from(out)) {
                    Ok(()) => outcome,
                    Err(_) => ServerRequest::Failed,
                }
            };
            counted.server_request(outcome);
        });
        true
    }
}

/// Copies the child's stderr into the gateway log, line by line, labelled with
/// the upstream. A flood is rate-limited (a token bucket): excess lines are
/// counted, summarised in one line, and never slow the child down.
pub(super) async fn log_stderr(
    name: Arc<str>,
    stderr: tokio::process::ChildStderr,
    dropped: prometheus::IntCounter,
) {
    let mut lines = BufReader::new(stderr);
    let mut line = Vec::new();
    let mut tokens = LOG_BURST;
    let mut refilled = Instant::now();
    let mut suppressed = 0u64;
    loop {
        line.clear();
        match (&mut lines)
            .take(MAX_LOG_LINE as u64)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        tokens = (tokens + refilled.elapsed().as_secs_f64() * LOG_LINES_PER_SECOND).min(LOG_BURST);
        refilled = Instant::now();
        if tokens < 1.0 {
            suppressed += 1;
            dropped.inc();
            continue;
        }
        tokens -= 1.0;
        if suppressed > 0 {
            tracing::warn!(target: "upstream_stderr", upstream = %name, suppressed, "stderr lines suppressed: the upstream writes too fast");
            suppressed = 0;
        }
        let text = String::from_utf8_lossy(&line);
        tracing::info!(target: "upstream_stderr", upstream = %name, "{}", text.trim_end());
    }
    if suppressed > 0 {
        tracing::warn!(target: "upstream_stderr", upstream = %name, suppressed, "stderr lines suppressed: the upstream writes too fast");
    }
}
