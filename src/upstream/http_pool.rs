//! Calls to plain http:// upstreams over a small pool of HTTP/1.1 connections
//! (hyper's connection-level client) that each call drives itself.
//!
//! hyper-util's pooled client runs every connection as a task of its own and
//! spawns one more task per request to hand the connection back to its pool:
//! each call crossed tasks three times. Here the calling task polls its
//! connection while it waits for the answer and puts it back when the body is
//! read, so a call is one task, two system calls and no channel hops.
//!
//! A connection the upstream closed while it sat idle hands the request back
//! unsent (hyper's `try_send_request`), and the call moves on to the next
//! connection or a new one: a request is never sent twice. A call that is
//! dropped half way drops its connection with it; only connections whose
//! exchange completed return to the pool.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::client::conn::http1;
use hyper::header::{HOST, HeaderMap, HeaderValue};
use hyper::{Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::CallError;

type Body = Full<Bytes>;
type Connection = http1::Connection<TokioIo<TcpStream>, Body>;

/// One open connection: the half that sends and the half that must be polled.
struct Open {
    sender: http1::SendRequest<Body>,
    conn: Connection,
}

struct Idle {
    open: Open,
    since: Instant,
}

pub(super) struct Pool {
    /// `host:port`, as `TcpStream::connect` takes it.
    authority: String,
    /// Origin form (`/path?query`): what an HTTP/1.1 request line carries.
    path: Uri,
    /// The configured headers, `Content-Type` and `Host`, built once.
    headers: HeaderMap,
    idle: Mutex<Vec<Idle>>,
    max_idle: usize,
    idle_timeout: Duration,
    connect_timeout: Duration,
}

/// How an exchange on one connection ended.
enum Failure {
    /// The connection was closed before the request went out: it can go on another.
    Unsent(Box<Request<Body>>),
    Failed(CallError),
}

impl Pool {
    /// `None` unless `url` is plain `http://` with a host.
    pub(super) fn new(url: &reqwest::Url, headers: &HeaderMap) -> Option<Pool> {
        if url.scheme() != "http" {
            return None;
        }
        let host = url.host_str()?;
        let port = url.port_or_known_default()?;
        let authority = format!("{host}:{port}");
        let path = match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_owned(),
        };
        let mut headers = headers.clone();
        let host_header = match url.port() {
            Some(p) => format!("{host}:{p}"),
            None => host.to_owned(),
        };
        headers.insert(HOST, HeaderValue::from_str(&host_header).ok()?);
        Some(Pool {
            authority,
            path: path.parse().ok()?,
            headers,
            idle: Mutex::new(Vec::new()),
            max_idle: 256,
            // Below the usual server keep-alive timeouts (60 s and more), so
            // that an idle connection is rarely found closed.
            idle_timeout: Duration::from_secs(50),
            connect_timeout: Duration::from_secs(5),
        })
    }

    /// POSTs `body`; the status and the whole answer, up to `max_bytes`.
    pub(super) async fn post(
        &self,
        body: Vec<u8>,
        max_bytes: usize,
    ) -> Result<(StatusCode, Bytes), CallError> {
        let mut request = Request::new(Full::new(Bytes::from(body)));
        *request.method_mut() = hyper::Method::POST;
        *request.uri_mut() = self.path.clone();
        *request.headers_mut() = self.headers.clone();
        loop {
            let (open, pooled) = match self.take() {
                Some(open) => (open, true),
                None => (self.connect().await?, false),
            };
            match exchange(open, request, max_bytes).await {
                Ok((status, bytes, open)) => {
                    if let Some(open) = open {
                        self.put(open);
                    }
                    return Ok((status, bytes));
                }
                // Found closed after sitting in the pool: try the next one.
                Err(Failure::Unsent(r)) if pooled => request = *r,
                Err(Failure::Unsent(_)) => {
                    return Err(CallError::unavailable("connection closed at once"));
                }
                Err(Failure::Failed(e)) => return Err(e),
            }
        }
    }

    fn take(&self) -> Option<Open> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        // The most recently used first: the likeliest to be open still.
        while let Some(i) = idle.pop() {
            if i.since.elapsed() < self.idle_timeout {
                return Some(i.open);
            }
        }
        None
    }

    fn put(&self, open: Open) {
        if open.sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < self.max_idle {
            idle.push(Idle {
                open,
                since: Instant::now(),
            });
        }
    }

    /// Closes connections idle for longer than the idle timeout.
    pub(super) fn sweep(&self) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.retain(|i| i.since.elapsed() < self.idle_timeout);
    }

    async fn connect(&self) -> Result<Open, CallError> {
        let failed = || CallError::unavailable("connection failed");
        let stream = tokio::time::timeout(
            self.connect_timeout,
            TcpStream::connect(self.authority.as_str()),
        )
        .await
        .map_err(|_| failed())?
        .map_err(|_| failed())?;
        let _ = stream.set_nodelay(true);
        let (sender, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|_| failed())?;
        Ok(Open { sender, conn })
    }
}

/// One request and its answer on `open`, polling the connection meanwhile.
/// The connection comes back when it can carry another request.
async fn exchange(
    open: Open,
    request: Request<Body>,
    max_bytes: usize,
) -> Result<(StatusCode, Bytes, Option<Open>), Failure> {
    let Open { mut sender, conn } = open;
    let mut conn = Some(conn);
    // Ready for a request, or closed (the upstream hung up while it was idle).
    if drive(sender.ready(), &mut conn).await.is_err() || conn.is_none() {
        return Err(Failure::Unsent(Box::new(request)));
    }
    let response = drive(sender.try_send_request(request), &mut conn).await;
    let response = match response {
        Ok(r) => r,
        Err(mut e) => {
            return Err(match e.take_message() {
                Some(r) => Failure::Unsent(Box::new(r)),
                None => Failure::Failed(CallError::unavailable("connection lost")),
            });
        }
    };
    let status = response.status();
    let collected = drive(
        Limited::new(response.into_body(), max_bytes).collect(),
        &mut conn,
    )
    .await;
    match collected {
        Ok(c) => {
            let open = conn.map(|conn| Open { sender, conn });
            Ok((status, c.to_bytes(), open))
        }
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(Failure::Failed(
            CallError::protocol("answer larger than the frame limit"),
        )),
        Err(_) => Err(Failure::Failed(CallError::unavailable(
            "connection lost while reading the answer",
        ))),
    }
}

/// Awaits `fut` while polling the connection, which does the reading and
/// writing. A connection that ends is dropped at once: that settles whatever
/// still waits on it (a request not yet sent comes back, a body ends).
async fn drive<F: Future>(fut: F, conn: &mut Option<Connection>) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    loop {
        let Some(c) = conn.as_mut() else {
            return fut.await;
        };
        tokio::select! {
            biased;
            r = &mut fut => return r,
            _ = c => {}
        }
        *conn = None;
    }
}
