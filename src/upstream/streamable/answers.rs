//! A POST's answer: JSON or an event stream, read as it arrives and resumed
//! where the stream broke (`Last-Event-ID`); what the server says on a
//! call's stream besides its answer (notifications, its own requests,
//! answered within bounds).

use super::*;

impl StreamableLink {
    /// One request and its answer: through the plain-http pool when there
    /// is one (a session over http://), through reqwest otherwise.
    pub(super) async fn exchange_any(
        &self,
        method_name: &str,
        params: Params<'_>,
        id: u64,
        started: std::time::Instant,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<JsonBuf, Failure> {
        let answer = self
            .exchange_once(method_name, params, id, started, deadline)
            .await;
        let Err(Failure::Ended(resume)) = answer else {
            return answer;
        };
        // The stream ended before the answer (the server closed it, as the
        // 2025-11-25 revision lets it): resumed from its last event.
        let mut digits = [0; 20];
        let id_text = crate::upstream::decimal(id, &mut digits);
        let resumed = self.resume(resume, id_text);
        match deadline {
            Some(at) => tokio::time::timeout_at(at, resumed)
                .await
                .unwrap_or(Err(Failure::Call(CallError::Timeout))),
            None => resumed.await,
        }
    }

    /// [`Self::exchange_any`] without resuming.
    pub(super) async fn exchange_once(
        &self,
        method_name: &str,
        params: Params<'_>,
        id: u64,
        started: std::time::Instant,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<JsonBuf, Failure> {
        let Some(pool) = read(&self.0.fast) else {
            let body = encode_request(Some(id), method_name, params);
            let exchange = self.exchange(body, id, params.trace());
            return match deadline {
                Some(at) => tokio::time::timeout_at(at, exchange)
                    .await
                    .unwrap_or(Err(Failure::Call(CallError::Timeout))),
                None => exchange.await,
            };
        };
        let mut digits = [0; 20];
        let scan = StreamScan::new(self, crate::upstream::decimal(id, &mut digits));
        pool.post_until(
            started,
            deadline,
            (
                |out: &mut Vec<u8>| write_request(out, Some(id), method_name, params),
                64 + params.len_hint(),
                params.trace(),
            ),
            &[],
            self.0.max_bytes,
            |body| scan.holds_answer(body),
            |status, body| self.read_answer(status, body, id, &scan),
        )
        .await
        .map_err(Failure::Call)?
    }

    /// Resumes an answer's stream that ended early: a GET with
    /// `Last-Event-ID` after the wait the server asked for, as many times
    /// as it ends again (up to [`MAX_RESUMES`]) while it says where it is.
    pub(super) async fn resume(&self, mut at: Resume, id_text: &[u8]) -> Result<JsonBuf, Failure> {
        for _ in 0..MAX_RESUMES {
            let Some(last) = at.last_id.clone() else {
                break;
            };
            let wait = at.retry.unwrap_or(RESUME_WAIT.0).min(RESUME_WAIT.1);
            tokio::time::sleep(wait).await;
            let req = self
                .0
                .client
                .get(self.0.url.clone())
                .headers(self.headers())
                .header(ACCEPT, "text/event-stream")
                .header("last-event-id", last);
            let response = self
                .with_session(req)
                .send()
                .await
                .map_err(|_| CallError::unavailable("connection failed"))?;
            match response.status() {
                StatusCode::OK if is_event_stream(response.headers()) => {}
                StatusCode::NOT_FOUND => return Err(Failure::Expired),
                s => {
                    return Err(CallError::protocol(format!(
                        "HTTP {} to the stream's resumption",
                        s.as_u16()
                    ))
                    .into());
                }
            }
            let (found, next) = self
                .read_stream(response, at, |data| self.hear(data, id_text))
                .await?;
            if let Some(found) = found {
                return found.map_err(Failure::Call);
            }
            at = next;
        }
        Err(ended_without_answer().into())
    }

    /// A whole answer read by the pool: a JSON body, or an event stream.
    pub(super) fn read_answer(
        &self,
        status: StatusCode,
        body: &[u8],
        id: u64,
        scan: &StreamScan<'_>,
    ) -> Result<JsonBuf, Failure> {
        match status.as_u16() {
            200 => {}
            // The session is gone (a server without sessions has no such answer).
            404 if read(&self.0.session).is_some() => return Err(Failure::Expired),
            401 if self.0.credentials.is_some() => {
                return Err(crate::upstream::credentials::rejected().into());
            }
            code @ 502..=504 => return Err(CallError::unavailable(format!("HTTP {code}")).into()),
            code => return Err(CallError::protocol(format!("HTTP {code} to a request")).into()),
        }
        if matches!(
            body.iter().find(|b| !b.is_ascii_whitespace()),
            Some(b'{' | b'[')
        ) {
            return crate::upstream::http::find_answer(body, id).map_err(Failure::Call);
        }
        // Events that came in one piece with the end of the body.
        scan.holds_answer(body);
        match scan.take_answer() {
            Some(answer) => answer.map_err(Failure::Call),
            None => Err(Failure::Ended(scan.resume())),
        }
    }

    /// One message of an event stream: a notification is queued for the
    /// supervisor, a request of the server answered; the response to
    /// `id_text` is returned.
    pub(super) fn hear(&self, data: &[u8], id_text: &[u8]) -> Option<Result<JsonBuf, CallError>> {
        let skipped = || {
            tracing::debug!(url = %crate::redact::url(&self.0.url), "an event that is not JSON skipped");
            None
        };
        let Ok(text) = std::str::from_utf8(data) else {
            return skipped();
        };
        // One pass for the usual event (one object); serde for the rest.
        let message = match crate::jsonrpc::message::parse_upstream_text(text) {
            Some(message) => message,
            None => match serde_json::from_str::<&RawValue>(text) {
                Ok(raw) => parse_upstream(raw),
                Err(_) => return skipped(),
            },
        };
        match message {
            // Progress goes to the call waiting for it, ahead of its answer.
            Ok(UpstreamMessage::Notification { method, params })
                if method == "notifications/progress" =>
            {
                if let Some(params) = params {
                    self.0.progress.deliver(params);
                }
                None
            }
            // A log line on a call's own stream is that call's, when its
            // caller can hear it; any other is the upstream's (see `run`).
            Ok(UpstreamMessage::Notification { method, params })
                if method == "notifications/message" && self.message_of_call(id_text, params) =>
            {
                None
            }
            // The upstream withdrawing a request it forwarded to a client.
            Ok(UpstreamMessage::Notification {
                method,
                params: Some(params),
            }) if method == "notifications/cancelled" && self.0.progress.withdraw(params) => None,
            Ok(UpstreamMessage::Notification { method, params }) => {
                let event = (method.to_string(), params.map(Json::to_buf));
                // Queued for the supervisor, which relists (coalesced) as
                // fast as it hears: a flood past the queue loses only what
                // the relisting already covers, so it is not logged per message.
                if self.0.events.try_send(event).is_err() {
                    tracing::debug!(url = %crate::redact::url(&self.0.url), "notification dropped: too many queued");
                }
                None
            }
            Ok(UpstreamMessage::Request { id, method, params }) => {
                if let Err(()) = self.ask_of_call(id_text, id, &method, params) {
                    self.answer(answer_server_request(Dialect::ModelContext, id, &method));
                }
                None
            }
            Ok(UpstreamMessage::Response { id, outcome }) if id.get().as_bytes() == id_text => {
                Some(
                    outcome
                        .map(Json::to_buf)
                        .map_err(|e| CallError::Remote(e.to_buf())),
                )
            }
            Err(broken) if broken.id.is_some_and(|i| i.get().as_bytes() == id_text) => {
                Some(Err(CallError::protocol(broken.why)))
            }
            _ => None,
        }
    }

    /// Hands a log line heard on the stream of call `id_text` to that call;
    /// whether it was taken.
    pub(super) fn message_of_call(&self, id_text: &[u8], params: Option<Json<'_>>) -> bool {
        let (Some(params), Some(id)) = (
            params,
            std::str::from_utf8(id_text)
                .ok()
                .and_then(|t| t.parse::<u64>().ok()),
        ) else {
            return false;
        };
        let tokens = self
            .0
            .tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        tokens
            .get(&id)
            .is_some_and(|token| self.0.progress.deliver_message(token, params))
    }

    /// Hands a request heard on the stream of call `id_text` to that call,
    /// for its client to answer, and answers the upstream when the client
    /// has (within [`ServerAnswers`]' wait); `Err` when no call of a client
    /// that can hear it waits there, or it is not a request a client answers.
    pub(super) fn ask_of_call(
        &self,
        id_text: &[u8],
        id: Json<'_>,
        method: &str,
        params: Option<Json<'_>>,
    ) -> Result<(), ()> {
        if !crate::upstream::progress::ASKED.contains(&method) {
            return Err(());
        }
        let link_id = std::str::from_utf8(id_text)
            .ok()
            .and_then(|t| t.parse::<u64>().ok())
            .ok_or(())?;
        let token = self
            .0
            .tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&link_id)
            .cloned()
            .ok_or(())?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| ())?;
        let (reply, answered) = tokio::sync::oneshot::channel();
        let ask = crate::upstream::progress::Ask {
            id: id.to_buf(),
            method: method.into(),
            params: params.map(Json::to_buf),
            reply,
        };
        self.0.progress.deliver_ask(&token, ask).map_err(|_| ())?;
        let (link, id) = (self.clone(), id.to_buf());
        let withdrawn = self.0.progress.asked(&id);
        runtime.spawn(async move { link.answer_when_asked(id, answered, withdrawn).await });
        Ok(())
    }

    /// Waits for what becomes of a forwarded request (at most the wait of
    /// [`ServerAnswers`]) and POSTs the upstream its answer.
    pub(super) async fn answer_when_asked(
        &self,
        id: JsonBuf,
        answered: tokio::sync::oneshot::Receiver<crate::upstream::progress::AskReply>,
        withdrawn: CancellationToken,
    ) {
        use crate::metrics::ServerRequest;
        let answers = &self.0.answers;
        let waiting = &answers.metrics.server_requests_waiting;
        let (reply, outcome) =
            crate::upstream::progress::answer_of(&id, answered, answers.wait, waiting, &withdrawn)
                .await;
        self.0.progress.answered(&id);
        if outcome == ServerRequest::Withdrawn {
            answers.metrics.server_request(outcome);
            return;
        }
        let sent = tokio::time::timeout(answers.within, self.post_message(reply)).await;
        let outcome = match sent {
            Ok(Ok(())) => outcome,
            Ok(Err(_)) | Err(_) => ServerRequest::Failed,
        };
        answers.metrics.server_request(outcome);
    }

    /// POSTs the answer to a server's request, within the bounds of [`ServerAnswers`].
    pub(super) fn answer(&self, (reply, outcome): (Vec<u8>, crate::metrics::ServerRequest)) {
        use crate::metrics::ServerRequest;
        let answers = &self.0.answers;
        let Ok(slot) = answers.slots.clone().try_acquire_owned() else {
            answers.metrics.server_request(ServerRequest::Dropped);
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let link = self.clone();
        // Ends within `within` whatever the server does; the slot goes with it.
        runtime.spawn(async move {
            let _slot = slot;
            let answers = &link.0.answers;
            let sent = tokio::time::timeout(answers.within, link.post_message(reply)).await;
            let outcome = match sent {
                Ok(Ok(())) => outcome,
                Ok(Err(_)) | Err(_) => ServerRequest::Failed,
            };
            answers.metrics.server_request(outcome);
        });
    }
}

/// The answer to a 2026-07-28 request `id` in a whole JSON body of this
/// status: that revision's errors may come with a 4xx status.
pub(super) fn stateless_answer(
    status: u16,
    body: &[u8],
    id: u64,
    authed: bool,
) -> Result<JsonBuf, CallError> {
    match status {
        200 => crate::upstream::http::find_answer(body, id),
        401 if authed => Err(crate::upstream::credentials::rejected()),
        502..=504 => Err(CallError::unavailable(format!("HTTP {status}"))),
        _ => match crate::upstream::http::find_answer(body, id) {
            Err(remote @ CallError::Remote(_)) => Err(remote),
            _ => Err(CallError::protocol(format!("HTTP {status} to a request"))),
        },
    }
}

pub(super) fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        })
}

pub(super) async fn read_body(
    mut response: reqwest::Response,
    max: usize,
) -> Result<BytesMut, CallError> {
    let mut out = BytesMut::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|_| CallError::unavailable("connection lost while reading the answer"))?
    {
        if out.len() + chunk.len() > max {
            return Err(CallError::protocol("answer larger than the frame limit"));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// An event stream read by the pool as it arrives: each complete event is
/// heard once, and the answer to the call kept when it comes.
pub(super) struct StreamScan<'a> {
    link: &'a StreamableLink,
    id_text: &'a [u8],
    /// Where the events not yet heard start.
    scanned: AtomicUsize,
    answer: std::sync::Mutex<Option<Result<JsonBuf, CallError>>>,
    /// Where to resume the stream if it ends before the answer.
    resume: std::sync::Mutex<Resume>,
}

impl<'a> StreamScan<'a> {
    /// A scan of the answer to request `id_text` on `link`, nothing heard yet.
    pub(super) fn new(link: &'a StreamableLink, id_text: &'a [u8]) -> Self {
        StreamScan {
            link,
            id_text,
            scanned: AtomicUsize::new(0),
            answer: std::sync::Mutex::new(None),
            resume: std::sync::Mutex::new(Resume::default()),
        }
    }

    /// Hears the complete events of `body` not heard yet; whether the answer is in.
    pub(super) fn holds_answer(&self, body: &[u8]) -> bool {
        let mut answer = self
            .answer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut resume = self
            .resume
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let from = self.scanned.load(Ordering::Relaxed);
        let rest = each_event(body, from, |event| {
            resume.saw(&event);
            if let Some(found) = event
                .data
                .and_then(|data| self.link.hear(&data, self.id_text))
            {
                answer.get_or_insert(found);
            }
        });
        self.scanned.store(rest, Ordering::Relaxed);
        answer.is_some()
    }

    pub(super) fn resume(&self) -> Resume {
        self.resume
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub(super) fn take_answer(&self) -> Option<Result<JsonBuf, CallError>> {
        self.answer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn an_answer_is_found_in_a_stream_as_it_grows() {
        let client = crate::upstream::http::client().unwrap();
        let spec = HttpSpec {
            url: "http://127.0.0.1:1/mcp".into(),
            headers: Default::default(),
            notifications: false,
        };
        let answers = ServerAnswers::new(
            4,
            Duration::from_secs(1),
            Duration::from_secs(1),
            Default::default(),
        );
        let (link, mut heard) =
            StreamableLink::new(client, &spec, 1 << 20, answers, Arc::default(), None).unwrap();
        let scan = |id: &'static [u8]| StreamScan::new(&link, id);
        let seven = scan(b"7");
        let mut body =
            b"id: 1\ndata: \n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"n\"}\n\n"
                .to_vec();
        assert!(!seven.holds_answer(&body));
        assert_eq!(heard.try_recv().unwrap().0, "n");
        body.extend_from_slice(b"data: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}");
        assert!(!seven.holds_answer(&body), "not complete yet");
        body.extend_from_slice(b"\n\n");
        assert!(!scan(b"8").holds_answer(&body));
        assert!(seven.holds_answer(&body));
        assert_eq!(seven.take_answer().unwrap().unwrap().get(), "{}");
        // Each event was heard once.
        assert_eq!(
            heard.try_recv().unwrap().0,
            "n",
            "the other scan heard it too"
        );
        assert!(heard.try_recv().is_err());
    }
}
