//! The session's own requests: the session id kept and echoed, a 404
//! answered by initialising again, the 2026-07-28 revision's calls, the GET
//! stream of the server's notifications, a cancellation, DELETE at the end.

use super::*;

impl StreamableLink {
    pub(super) fn with_session(&self, mut req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        if let Some(session) = read(&self.0.session) {
            req = req.header(SESSION, session);
        }
        if let Some(revision) = read(&self.0.revision) {
            req = req.header(REVISION, revision);
        }
        req
    }

    /// POSTs `body` through reqwest with the session's headers (and those
    /// of the `trace` it carries).
    pub(super) async fn send_post(
        &self,
        body: Vec<u8>,
        trace: Option<&Outbound>,
    ) -> Result<reqwest::Response, CallError> {
        let req = self
            .0
            .client
            .post(self.0.url.clone())
            .headers(self.headers())
            .headers(crate::upstream::http::trace_headers(trace))
            .body(body);
        self.with_session(req)
            .send()
            .await
            .map_err(|_| CallError::unavailable("connection failed"))
    }

    /// POSTs one request and reads its answer, from a JSON body or an SSE stream.
    pub(super) async fn exchange(
        &self,
        body: Vec<u8>,
        id: u64,
        trace: Option<&Outbound>,
    ) -> Result<JsonBuf, Failure> {
        let had_session = read(&self.0.session).is_some();
        let response = self.send_post(body, trace).await?;
        match response.status() {
            StatusCode::OK => {}
            StatusCode::NOT_FOUND if had_session => return Err(Failure::Expired),
            StatusCode::UNAUTHORIZED if self.0.credentials.is_some() => {
                return Err(crate::upstream::credentials::rejected().into());
            }
            s if matches!(s.as_u16(), 502..=504) => {
                return Err(CallError::unavailable(format!("HTTP {}", s.as_u16())).into());
            }
            s => {
                return Err(
                    CallError::protocol(format!("HTTP {} to a request", s.as_u16())).into(),
                );
            }
        }
        if let Some(session) = response.headers().get(SESSION) {
            if id == 1 {
                write(&self.0.session, Some(session.clone()));
            }
        }
        self.read_response(response, id).await
    }

    /// The answer to request `id` in a response of status 200.
    pub(super) async fn read_response(
        &self,
        response: reqwest::Response,
        id: u64,
    ) -> Result<JsonBuf, Failure> {
        if is_event_stream(response.headers()) {
            let mut id_digits = [0; 20];
            let id_text = crate::upstream::decimal(id, &mut id_digits).to_vec();
            let (found, resume) = self
                .read_stream(response, Resume::default(), |data| {
                    self.hear(data, &id_text)
                })
                .await?;
            return match found {
                Some(found) => found.map_err(Failure::Call),
                None => Err(Failure::Ended(resume)),
            };
        }
        let body = read_body(response, self.0.max_bytes).await?;
        crate::upstream::http::find_answer(&body, id).map_err(Failure::Call)
    }

    /// A request of the 2026-07-28 revision (see [`Params::Stateless`]):
    /// POSTed without the session, with that revision's headers, through
    /// the plain-http pool when the upstream is http://. The revision
    /// cancels a request by closing its connection, which dropping this
    /// does. Its errors may come with a 4xx status and the JSON-RPC error
    /// as the body: that error is the answer.
    pub(super) async fn call_stateless(
        &self,
        method_name: &str,
        params: Params<'_>,
        mirrored: &[(String, String)],
        started: std::time::Instant,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<JsonBuf, CallError> {
        let id = self.0.next_id.fetch_add(1, Ordering::Relaxed);
        let _token = params.token().map(|token| TokenOf::new(self, id, token));
        // `server/discover` names nothing.
        let name = params
            .name()
            .filter(|n| !n.is_empty())
            .map(crate::modelcontext::param_headers::encode);
        let authed;
        let pool = match &self.0.credentials {
            None => self.0.stateless.as_deref(),
            Some(_) => {
                authed = self.0.stateless_authed.load_full();
                authed.as_deref()
            }
        };
        let Some(pool) = pool else {
            let exchange = self.call_stateless_slow(method_name, params, name, mirrored, id);
            return match deadline {
                Some(at) => tokio::time::timeout_at(at, exchange)
                    .await
                    .unwrap_or(Err(CallError::Timeout)),
                None => exchange.await,
            };
        };
        let named: [(&str, &[u8]); 2] = [
            ("mcp-method", method_name.as_bytes()),
            ("mcp-name", name.as_deref().unwrap_or("").as_bytes()),
        ];
        let named = &named[..if name.is_some() { 2 } else { 1 }];
        // The mirrored arguments' headers, for the few tools that have some.
        let all: Vec<(&str, &[u8])>;
        let extra = if mirrored.is_empty() {
            named
        } else {
            all = named
                .iter()
                .copied()
                .chain(mirrored.iter().map(|(n, v)| (n.as_str(), v.as_bytes())))
                .collect();
            &all
        };
        let mut digits = [0; 20];
        let scan = StreamScan::new(self, crate::upstream::decimal(id, &mut digits));
        let authed = self.0.credentials.is_some();
        pool.post_until(
            started,
            deadline,
            (
                |out: &mut Vec<u8>| write_request(out, Some(id), method_name, params),
                64 + params.len_hint(),
                params.trace(),
            ),
            extra,
            self.0.max_bytes,
            |body| scan.holds_answer(body),
            |status, body| {
                let json = matches!(
                    body.iter().find(|b| !b.is_ascii_whitespace()),
                    Some(b'{' | b'[')
                );
                if status == StatusCode::OK && !json {
                    scan.holds_answer(body);
                    return scan
                        .take_answer()
                        .unwrap_or_else(|| Err(ended_without_answer()));
                }
                stateless_answer(status.as_u16(), body, id, authed)
            },
        )
        .await?
    }

    /// [`Self::call_stateless`] through reqwest (an https:// upstream).
    pub(super) async fn call_stateless_slow(
        &self,
        method_name: &str,
        params: Params<'_>,
        name: Option<std::borrow::Cow<'_, str>>,
        mirrored: &[(String, String)],
        id: u64,
    ) -> Result<JsonBuf, CallError> {
        let mut req = self
            .0
            .client
            .post(self.0.url.clone())
            .headers(self.headers())
            .headers(crate::upstream::http::trace_headers(params.trace()))
            .header(REVISION, HeaderValue::from_static(mc::STATELESS_REVISION))
            .header(MCP_METHOD, method_name);
        if let Some(name) = name {
            req = req.header(MCP_NAME, &*name);
        }
        for (name, value) in mirrored {
            req = req.header(name.as_str(), value.as_str());
        }
        let body = encode_request(Some(id), method_name, params);
        let response = req
            .body(body)
            .send()
            .await
            .map_err(|_| CallError::unavailable("connection failed"))?;
        let status = response.status().as_u16();
        if status == 200 {
            return match self.read_response(response, id).await {
                Ok(answer) => Ok(answer),
                Err(Failure::Call(e)) => Err(e),
                Err(Failure::Ended(_) | Failure::Expired) => Err(ended_without_answer()),
            };
        }
        let body = read_body(response, self.0.max_bytes).await?;
        stateless_answer(status, &body, id, self.0.credentials.is_some())
    }

    /// Reads an SSE stream, handing each event's data to `answer` until it
    /// returns something; also where to resume it (from `at` on).
    pub(super) async fn read_stream<T>(
        &self,
        mut response: reqwest::Response,
        at: Resume,
        mut answer: impl FnMut(&[u8]) -> Option<T>,
    ) -> Result<(Option<T>, Resume), CallError> {
        let mut events = EventBuffer::resuming(at);
        loop {
            let chunk = response
                .chunk()
                .await
                .map_err(|_| CallError::unavailable("the event stream broke"))?;
            let Some(chunk) = chunk else {
                return Ok((None, events.resume));
            };
            events.push(&chunk);
            for data in events.take_data() {
                if let Some(found) = answer(&data) {
                    return Ok((Some(found), events.resume));
                }
            }
            if events.len() > self.0.max_bytes {
                return Err(CallError::protocol("an event over the frame limit"));
            }
        }
    }

    /// POSTs a notification or a response: 202 (or 200, 204) expected.
    pub(super) async fn post_message(&self, body: Vec<u8>) -> Result<(), CallError> {
        let response = self.send_post(body, None).await?;
        match response.status().as_u16() {
            200 | 202 | 204 => Ok(()),
            code => Err(CallError::protocol(format!(
                "HTTP {code} to a notification"
            ))),
        }
    }

    /// The session the server forgot (`stale`) is replaced by a new one, once
    /// however many calls found it gone.
    pub(super) async fn reinitialize(&self, stale: Option<HeaderValue>) -> Result<(), CallError> {
        let _one = self.0.reinit.lock().await;
        if read(&self.0.session) != stale {
            return Ok(());
        }
        tracing::info!(url = %crate::redact::url(&self.0.url), "the upstream ended the session; initialising again");
        // Whatever the server numbered in the forgotten session (a restart
        // forgets them all) is never taken for what it numbers in the next.
        self.0.renewed.fetch_add(1, Ordering::AcqRel);
        write(&self.0.session, None);
        write(&self.0.fast, None);
        let params = mc::initialize_params(true);
        let params: &RawValue = serde_json::from_str(&params)
            .map_err(|_| CallError::protocol("initialize params are not JSON"))?;
        let result = match self
            .exchange(
                encode_request(Some(1), method::INITIALIZE, params.into()),
                1,
                None,
            )
            .await
        {
            Ok(result) => result,
            Err(Failure::Expired) => return Err(CallError::unavailable("the session was refused")),
            Err(Failure::Ended(_)) => return Err(ended_without_answer()),
            Err(Failure::Call(e)) => return Err(e),
        };
        self.learn_revision(&result)?;
        let done = encode_request(
            None,
            method::INITIALIZED,
            crate::upstream::empty_object().into(),
        );
        self.post_message(done).await
    }

    pub(super) fn learn_revision(&self, initialize: &JsonBuf) -> Result<(), CallError> {
        let handshake = mc::read_initialize(initialize.get()).map_err(CallError::protocol)?;
        let value = HeaderValue::from_str(&handshake.revision)
            .map_err(|_| CallError::protocol("the revision is not a header value"))?;
        write(&self.0.revision, Some(value));
        self.rebuild_fast();
        Ok(())
    }

    /// Holds the GET stream open and hears the server's notifications on
    /// it; returns at once when the server offers none (405).
    pub(super) async fn listen(&self, shutdown: &CancellationToken) {
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
        while !shutdown.is_cancelled() {
            let started = std::time::Instant::now();
            let req = self
                .0
                .client
                .get(self.0.url.clone())
                .headers(self.headers())
                .header(ACCEPT, "text/event-stream");
            let sent = self.with_session(req).send().await;
            self.0.answered_get.send_replace(true);
            match sent {
                Ok(r) if r.status() == StatusCode::METHOD_NOT_ALLOWED => {
                    tracing::debug!(url = %crate::redact::url(&self.0.url), "the upstream offers no GET stream");
                    return;
                }
                Ok(r) if r.status() == StatusCode::OK && is_event_stream(r.headers()) => {
                    let ended = self
                        .read_stream(r, Resume::default(), |data| self.hear(data, b""))
                        .await;
                    tracing::debug!(url = %crate::redact::url(&self.0.url), ended = ?ended.err(), "GET stream ended; opening it again");
                }
                Ok(r) => {
                    tracing::debug!(url = %crate::redact::url(&self.0.url), status = r.status().as_u16(), "GET stream refused");
                }
                Err(_) => {}
            }
            if started.elapsed() > Duration::from_secs(30) {
                backoff.reset();
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff.next_delay()) => {}
                _ = shutdown.cancelled() => return,
            }
        }
    }

    /// Ends the session (DELETE), if there is one; a server that does not
    /// let clients end sessions answers 405, which is fine.
    pub async fn close(&self) {
        let Some(session) = read(&self.0.session) else {
            return;
        };
        let req = self
            .0
            .client
            .delete(self.0.url.clone())
            .headers(self.headers())
            .header(SESSION, session);
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, req.send()).await;
        write(&self.0.session, None);
        write(&self.0.fast, None);
    }

    /// Tells the server that request `id` is no longer waited for.
    pub(super) fn cancel(&self, id: u64) {
        let params = mc::cancelled_params(id, "the gateway stopped waiting");
        let Ok(params) = serde_json::from_str::<&RawValue>(&params) else {
            return;
        };
        let body = encode_request(None, method::CANCELLED, params.into());
        let link = self.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = tokio::time::timeout(CLOSE_TIMEOUT, link.post_message(body)).await;
            });
        }
    }
}

/// Cancels the request upstream when dropped before it is disarmed.
/// A call's progress token known by its id on the link, until dropped.
pub(super) struct TokenOf<'a> {
    pub(super) link: &'a StreamableLink,
    pub(super) id: u64,
}

impl<'a> TokenOf<'a> {
    pub(super) fn new(link: &'a StreamableLink, id: u64, token: &str) -> Self {
        link.0
            .tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(id, token.into());
        TokenOf { link, id }
    }
}

impl Drop for TokenOf<'_> {
    fn drop(&mut self) {
        self.link
            .0
            .tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.id);
    }
}

pub(super) struct CancelOnDrop<'a> {
    pub(super) link: &'a StreamableLink,
    pub(super) id: Option<u64>,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.link.cancel(id);
        }
    }
}
