//! HTTP upstreams: one pooled reqwest client, a handshake POST at start, then
//! one POST per call. Redirects are never followed and answers are read up to
//! the frame limit only.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::BytesMut;
use futures_util::future::BoxFuture;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;

use super::backoff::Backoff;
use super::credentials::Credentials;
use super::http_pool::Pool;
use super::{CallError, Params, Transport, Upstream, write_request};
use crate::config::HttpSpec;
use crate::jsonrpc::message::{Malformed, UpstreamMessage, parse_upstream, parse_upstream_text};
use crate::jsonrpc::{Json, JsonBuf};
use crate::telemetry::traces::Outbound;

/// A client for one HTTP upstream.
pub struct HttpLink {
    client: reqwest::Client,
    url: reqwest::Url,
    headers: HeaderMap,
    next_id: AtomicU64,
    max_bytes: usize,
    notifications: bool,
    /// Plain http:// upstreams are called through our own pool of hyper
    /// connections (see `http_pool`); https:// and the notification session use reqwest.
    fast: Option<Pool>,
    /// The credential each request carries, when the upstream has `auth`.
    credentials: Option<Arc<Credentials>>,
}

/// The shared client: pooled keep-alive connections, no redirects, bounded
/// connect, and no proxy: `HTTP_PROXY` and the like are ignored here as they
/// are by the plain-http pool, so both paths reach an upstream the same way.
pub fn client() -> Result<reqwest::Client, reqwest::Error> {
    crate::install_crypto_provider();
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(5))
        .pool_idle_timeout(Duration::from_secs(60))
        .tcp_nodelay(true)
        .build()
}

impl HttpLink {
    pub fn new(client: reqwest::Client, spec: &HttpSpec, max_bytes: usize) -> Result<Self, String> {
        let url = reqwest::Url::parse(&spec.url).map_err(|e| e.to_string())?;
        let mut headers = HeaderMap::new();
        for (k, v) in &spec.headers {
            let name = HeaderName::from_bytes(k.as_bytes()).map_err(|e| e.to_string())?;
            let value = HeaderValue::from_str(v).map_err(|e| e.to_string())?;
            headers.insert(name, value);
        }
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let fast = Pool::new(&url, &headers);
        Ok(Self {
            client,
            url,
            headers,
            // 1 is the handshake's `initialize`, every time it is made.
            next_id: AtomicU64::new(2),
            max_bytes,
            notifications: spec.notifications,
            fast,
            credentials: None,
        })
    }

    /// Sends `credentials`' credential with every request.
    pub fn with_credentials(mut self, credentials: Option<Arc<Credentials>>) -> Self {
        self.credentials = credentials;
        self
    }

    /// POSTs the request `encode` writes (about `len_hint` bytes), with the
    /// headers of its `trace`; what `answer` makes of the status and the
    /// whole answer. Past `deadline`, if there is one, `CallError::Timeout`.
    async fn post<T>(
        &self,
        now: std::time::Instant,
        deadline: Option<tokio::time::Instant>,
        (encode, len_hint, trace): (impl FnOnce(&mut Vec<u8>), usize, Option<&Outbound>),
        credential: Option<&HeaderValue>,
        answer: impl FnOnce(reqwest::StatusCode, &[u8]) -> T,
    ) -> Result<T, CallError> {
        if let Some(pool) = &self.fast {
            let header = self.credentials.as_ref().map(|c| c.header().as_str());
            // Written as the header's bytes: a HeaderValue holds none that
            // may not go in a request head.
            let Some(extra) = header.zip(credential.map(HeaderValue::as_bytes)) else {
                return pool
                    .post(
                        now,
                        deadline,
                        (encode, len_hint, trace),
                        self.max_bytes,
                        answer,
                    )
                    .await;
            };
            return pool
                .post_until(
                    now,
                    deadline,
                    (encode, len_hint, trace),
                    &[extra],
                    self.max_bytes,
                    |_| false,
                    answer,
                )
                .await;
        }
        let post = self.post_reqwest(encode, len_hint, trace, credential, answer);
        match deadline {
            Some(at) => tokio::time::timeout_at(at, post)
                .await
                .unwrap_or(Err(CallError::Timeout)),
            None => post.await,
        }
    }

    /// `post` through reqwest (https:// upstreams).
    async fn post_reqwest<T>(
        &self,
        encode: impl FnOnce(&mut Vec<u8>),
        len_hint: usize,
        trace: Option<&Outbound>,
        credential: Option<&HeaderValue>,
        answer: impl FnOnce(reqwest::StatusCode, &[u8]) -> T,
    ) -> Result<T, CallError> {
        let mut body = Vec::with_capacity(len_hint);
        encode(&mut body);
        let mut request = self
            .client
            .post(self.url.clone())
            .headers(self.headers.clone())
            .headers(trace_headers(trace));
        if let (Some(c), Some(value)) = (&self.credentials, credential) {
            request = request.header(c.header(), value);
        }
        let mut response = request.body(body).send().await.map_err(|e| {
            if e.is_timeout() {
                CallError::Timeout
            } else {
                CallError::unavailable("connection failed")
            }
        })?;
        let status = response.status();
        let mut out = BytesMut::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|_| CallError::unavailable("connection lost while reading the answer"))?
        {
            if out.len() + chunk.len() > self.max_bytes {
                return Err(CallError::protocol("answer larger than the frame limit"));
            }
            out.extend_from_slice(&chunk);
        }
        Ok(answer(status, &out))
    }

    /// Sends a request and reads its answer, within `deadline` if there is
    /// one (`CallError::Timeout` past it). `started` is when the call started
    /// (the caller has read the clock).
    pub(crate) async fn call(
        &self,
        method: &str,
        params: Params<'_>,
        started: std::time::Instant,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<JsonBuf, CallError> {
        let Some(credentials) = &self.credentials else {
            return self
                .call_with(method, params, started, deadline, None)
                .await;
        };
        super::credentials::retried(credentials, started, |value| async move {
            self.call_with(method, params, started, deadline, Some(&value))
                .await
        })
        .await
    }

    /// [`Self::call`] with this credential.
    async fn call_with(
        &self,
        method: &str,
        params: Params<'_>,
        started: std::time::Instant,
        deadline: Option<tokio::time::Instant>,
        credential: Option<&HeaderValue>,
    ) -> Result<JsonBuf, CallError> {
        // `initialize` has id 1 (the spec requires it), also when the
        // handshake is made again after the upstream was down; each POST is
        // its own exchange, so the id cannot meet another call's answer.
        let id = if method == "initialize" {
            1
        } else {
            self.next_id.fetch_add(1, Ordering::Relaxed)
        };
        // The answer is read where it arrived, in the connection's buffer.
        self.post(
            started,
            deadline,
            (
                |out: &mut Vec<u8>| write_request(out, Some(id), method, params),
                64 + params.len_hint(),
                params.trace(),
            ),
            credential,
            |status, body| match status.as_u16() {
                200 => find_answer(body, id),
                401 if credential.is_some() => Err(super::credentials::rejected()),
                502..=504 => Err(CallError::unavailable(format!("HTTP {}", status.as_u16()))),
                code => Err(CallError::protocol(format!("HTTP {code} to a request"))),
            },
        )
        .await?
    }

    /// Closes pooled connections that have been idle too long.
    pub fn sweep(&self) {
        if let Some(pool) = &self.fast {
            pool.sweep();
        }
    }
}

/// Finds the answer to request `id` in a body holding one message, or several
/// newline-delimited ones (an upstream may answer `initialize` as a session).
pub(super) fn find_answer(body: &[u8], id: u64) -> Result<JsonBuf, CallError> {
    let mut digits = [0; 20];
    let id_text = super::decimal(id, &mut digits);
    let answer = |message: Result<UpstreamMessage<'_>, Malformed<'_>>| match message {
        Ok(UpstreamMessage::Response { id, outcome }) if id.get().as_bytes() == id_text => Some(
            outcome
                .map(Json::to_buf)
                .map_err(|e| CallError::Remote(e.to_buf())),
        ),
        Ok(_) => None,
        Err(broken) => Some(Err(CallError::protocol(broken.why))),
    };
    // The usual body, one answer, is read in one pass.
    let text = std::str::from_utf8(body)
        .map_err(|_| CallError::protocol("the answer is not valid JSON"))?;
    if let Some(found) = parse_upstream_text(text).and_then(answer) {
        return found;
    }
    let stream = serde_json::Deserializer::from_str(text).into_iter::<&RawValue>();
    for value in stream {
        let value = value.map_err(|_| CallError::protocol("the answer is not valid JSON"))?;
        if let Some(found) = answer(parse_upstream(value)) {
            return found;
        }
    }
    Err(CallError::protocol(
        "no answer to the request in the response body",
    ))
}

impl Transport for HttpLink {
    fn request<'a>(
        &'a self,
        method: &'a str,
        params: Params<'a>,
    ) -> BoxFuture<'a, Result<JsonBuf, CallError>> {
        // No deadline here: the caller sets it.
        Box::pin(self.call(method, params, std::time::Instant::now(), None))
    }

    fn as_http(&self) -> Option<&HttpLink> {
        Some(self)
    }

    fn notify<'a>(
        &'a self,
        method: &'a str,
        params: &'a RawValue,
    ) -> BoxFuture<'a, Result<(), CallError>> {
        Box::pin(async move {
            let params = Params::from(params);
            let credential = match &self.credentials {
                Some(c) => Some(
                    c.current()
                        .await
                        .map_err(|r| CallError::Credential(Box::new(r)))?
                        .0,
                ),
                None => None,
            };
            self.post(
                std::time::Instant::now(),
                None,
                (
                    |out: &mut Vec<u8>| write_request(out, None, method, params),
                    64 + params.len_hint(),
                    None,
                ),
                credential.as_ref(),
                |status, _| match status.as_u16() {
                    200 | 202 | 204 => Ok(()),
                    code => Err(CallError::protocol(format!(
                        "HTTP {code} to a notification"
                    ))),
                },
            )
            .await?
        })
    }
}

/// How often a serving upstream is looked at when no call says anything of it.
const PROBE_EVERY: Duration = Duration::from_secs(5);
/// How long a probe's connection may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest a handshake may take, whatever the call timeout.
pub(super) const MAX_HANDSHAKE: Duration = Duration::from_secs(10);

/// Runs one HTTP upstream until `shutdown`: handshake (retried with backoff,
/// each attempt under a deadline), then serve while it is reachable; once it
/// is not, it is down (left out of listings, `upstream_up` 0) and the
/// handshake starts again, so it comes back by itself.
pub async fn run(up: Arc<Upstream>, link: Arc<HttpLink>, shutdown: CancellationToken) {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
    let handshake_deadline = up.timeout().min(MAX_HANDSHAKE);
    let mut first = true;
    loop {
        loop {
            let attempt = tokio::select! {
                r = tokio::time::timeout(handshake_deadline, up.connect(link.clone())) => {
                    r.unwrap_or(Err(CallError::Timeout))
                }
                _ = shutdown.cancelled() => return,
            };
            up.note_refusal(attempt.as_ref().err());
            match attempt {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(upstream = %up.name, url = %crate::redact::url(&link.url), error = %e, "handshake failed; retrying");
                    up.disconnect();
                    tokio::select! {
                        _ = tokio::time::sleep(backoff.next_delay()) => {}
                        // A caller brought the credential it lacked.
                        () = up.user_came() => backoff.reset(),
                        _ = shutdown.cancelled() => return,
                    }
                }
            }
        }
        if !first {
            up.metrics()
                .upstream_restarts
                .with_label_values(&[&up.name])
                .inc();
        }
        first = false;
        backoff.reset();
        let serving = async {
            let sweeper = async {
                let mut every = tokio::time::interval(Duration::from_secs(30));
                loop {
                    every.tick().await;
                    link.sweep();
                }
            };
            let listener = async {
                if link.notifications {
                    listen(&up, &link, &shutdown).await;
                }
                std::future::pending::<()>().await;
            };
            tokio::select! {
                () = listener => {}
                () = sweeper => {}
                () = up.relister() => {}
                () = watch_health(&up, &link.url) => {}
            }
        };
        tokio::select! {
            () = serving => {
                tracing::warn!(upstream = %up.name, url = %crate::redact::url(&link.url), "upstream unreachable; down until a handshake succeeds again");
                up.disconnect();
            }
            _ = shutdown.cancelled() => {
                up.disconnect();
                return;
            }
        }
    }
}

/// Returns once the upstream cannot be reached: looked at every
/// [`PROBE_EVERY`], and at once when a call found it unreachable.
pub(super) async fn watch_health(up: &Upstream, url: &reqwest::Url) {
    loop {
        tokio::select! {
            () = up.suspected() => {}
            () = tokio::time::sleep(PROBE_EVERY) => {}
        }
        if !reachable(url).await {
            return;
        }
    }
}

/// A light probe: whether a TCP connection to the upstream's address opens.
/// It costs the upstream nothing at the protocol level, and a server that
/// has gone away refuses it.
async fn reachable(url: &reqwest::Url) -> bool {
    let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let Ok(Ok(addrs)) =
        tokio::time::timeout(PROBE_TIMEOUT, tokio::net::lookup_host((host, port))).await
    else {
        return false;
    };
    for addr in addrs {
        if let Ok(Ok(_)) =
            tokio::time::timeout(PROBE_TIMEOUT, tokio::net::TcpStream::connect(addr)).await
        {
            return true;
        }
    }
    false
}

/// Holds a session open to the upstream (a POST whose body stays open) and hands
/// every notification it sends to `up`; reconnects with backoff when it drops.
async fn listen(up: &Upstream, link: &HttpLink, shutdown: &CancellationToken) {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
    while !shutdown.is_cancelled() {
        let started = std::time::Instant::now();
        match tokio::select! {
            r = notification_session(up, link) => r,
            _ = shutdown.cancelled() => return,
        } {
            Ok(()) => {
                tracing::info!(upstream = %up.name, "notification session ended; reconnecting")
            }
            Err(e) => {
                tracing::warn!(upstream = %up.name, error = %e, "notification session failed; reconnecting")
            }
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

async fn notification_session(up: &Upstream, link: &HttpLink) -> Result<(), CallError> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(2);
    let hello = concat!(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientCapabilities":{}}}"#,
        "\n",
        r#"{"jsonrpc":"2.0","method":"initialized","params":{}}"#,
        "\n"
    );
    let _ = tx.send(Ok(hello.as_bytes().to_vec())).await;
    // `tx` stays alive for as long as this function runs: the body stays open.
    let body = reqwest::Body::wrap_stream(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    }));
    let mut request = link
        .client
        .post(link.url.clone())
        .headers(link.headers.clone());
    if let Some(c) = &link.credentials {
        let (value, _) = c
            .current()
            .await
            .map_err(|r| CallError::Credential(Box::new(r)))?;
        request = request.header(c.header(), value);
    }
    let mut response = request
        .body(body)
        .send()
        .await
        .map_err(|_| CallError::unavailable("connection failed"))?;
    if response.status() != reqwest::StatusCode::OK {
        return Err(CallError::protocol(format!(
            "HTTP {} to a session",
            response.status().as_u16()
        )));
    }
    tracing::info!(upstream = %up.name, "notification session open");
    let mut buf: Vec<u8> = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|_| CallError::unavailable("notification session broke"))?
    {
        buf.extend_from_slice(&chunk);
        while let Some(nl) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=nl).collect();
            let Ok(raw) = serde_json::from_slice::<&RawValue>(&line) else {
                continue;
            };
            if let Ok(UpstreamMessage::Notification { method, params }) = parse_upstream(raw) {
                up.on_notification(&method, params);
            }
        }
        if buf.len() > link.max_bytes {
            return Err(CallError::protocol("a session line over the frame limit"));
        }
    }
    drop(tx);
    Ok(())
}

/// The headers of the trace context a request carries (none outside a trace).
pub(super) fn trace_headers(trace: Option<&Outbound>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in trace.into_iter().flat_map(Outbound::fields) {
        if let Ok(value) = HeaderValue::from_bytes(value) {
            headers.insert(name, value);
        }
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_answer_among_lines() {
        let body = b"{\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"a\":1}}\n";
        assert_eq!(find_answer(body, 1).unwrap().get(), "{\"a\":1}");
        assert!(matches!(find_answer(body, 2), Err(CallError::Protocol(_))));
        assert!(matches!(
            find_answer(b"nope", 1),
            Err(CallError::Protocol(_))
        ));
        let err = b"{\"jsonrpc\":\"2.0\",\"id\":5,\"error\":{\"code\":-5,\"message\":\"m\"}}";
        assert!(matches!(find_answer(err, 5), Err(CallError::Remote(_))));
        // One answer, read in one pass; the same answer for another id is not it.
        let one = b"\n {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":[1]} \n";
        assert_eq!(find_answer(one, 3).unwrap().get(), "[1]");
        assert!(matches!(find_answer(one, 4), Err(CallError::Protocol(_))));
        assert!(matches!(
            find_answer(b"{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":\"\xff\"}", 3),
            Err(CallError::Protocol(_))
        ));
        let dup = b"{\"jsonrpc\":\"2.0\",\"id\":3,\"id\":3,\"result\":1}";
        assert!(matches!(find_answer(dup, 3), Err(CallError::Protocol(_))));
    }
}
