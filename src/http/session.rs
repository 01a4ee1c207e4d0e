//! Sessions over HTTP: the request body is read as it arrives, one message per
//! line; answers go out one per line, each flushed as soon as it is ready, over
//! a chunked response. When the client goes away, everything the session
//! started is cancelled.

use std::sync::Arc;

use crate::store::limits::Pool;
use axum::body::{Body, BodyDataStream};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use bytes::{Buf, Bytes, BytesMut};
use futures_util::StreamExt;
use serde_json::value::RawValue;
use tokio::sync::mpsc;
use tracing::Instrument;

use std::time::Duration;

use crate::dispatch::Dispatcher;
use crate::dispatch::session::Session;
use crate::error::GatewayError;
use crate::jsonrpc::stream::{Scan, ValueEnd};
use crate::tenant::{Credential, Place, Places, Tenant};

/// Answers queued for a slow reader before the session waits for it.
const OUT_BACKLOG: usize = 64;

/// The bounds on sessions: how many one tenant may hold open, how long one
/// may sit idle, how many calls one may have in flight. A cheap clone.
#[derive(Clone)]
pub struct SessionLimits {
    /// Sessions per tenant, unless the tenant sets its own `max_sessions`.
    pub per_tenant: usize,
    pub idle: Duration,
    pub in_flight: usize,
    /// Sessions open now, by tenant.
    open: Places,
}

impl SessionLimits {
    pub fn new(per_tenant: usize, idle: Duration, in_flight: usize) -> Self {
        Self {
            per_tenant,
            idle,
            in_flight,
            open: Places::default(),
        }
    }

    /// A place for one more session of `tenant`, or `Err(limit)` when it has
    /// as many open as it may: on this replica, or with a store on all of
    /// them together.
    pub(super) async fn enter(
        &self,
        tenant: &Tenant,
        shared: Option<&crate::store::limits::SharedLimits>,
    ) -> Result<Place, usize> {
        let limit = tenant.max_sessions.unwrap_or(self.per_tenant);
        enter(&self.open, &tenant.name, limit, shared, Pool::Sessions).await
    }
}

/// A place in `places` for `tenant`, within `limit`: this replica's count,
/// or with a store every replica's (this replica's count is then kept for
/// what it reports, and the store's pool bounds it).
pub(super) async fn enter(
    places: &crate::tenant::Places,
    tenant: &Arc<str>,
    limit: usize,
    shared: Option<&crate::store::limits::SharedLimits>,
    pool: Pool,
) -> Result<Place, usize> {
    let Some(shared) = shared else {
        return places.enter(tenant, limit);
    };
    let held = shared.enter(pool, tenant, limit).await.map_err(|_| limit)?;
    Ok(places.enter(tenant, usize::MAX)?.holding(held))
}

/// What a session starts with.
pub struct Opening {
    pub tenant: Arc<Tenant>,
    /// The key it was opened with: every message is admitted by the keys in force.
    pub credential: Option<Credential>,
    /// What was read of the body so far.
    pub buf: BytesMut,
    /// The rest of the body.
    pub body: BodyDataStream,
}

/// Starts a session, or answers 429 when its tenant has as many open as it may.
pub async fn start(
    dispatcher: Dispatcher,
    limits: &SessionLimits,
    opening: Opening,
    max_message: usize,
) -> Response {
    let Opening {
        tenant,
        credential,
        buf,
        body,
    } = opening;
    let slot = match limits.enter(&tenant, dispatcher.shared_limits()).await {
        Ok(slot) => slot,
        Err(limit) => {
            dispatcher
                .metrics()
                .requests_limited
                .with_label_values(&[&tenant.name, "sessions_limited"])
                .inc();
            tracing::info!(tenant = %tenant.name, limit, "session refused: the tenant has as many open as it may");
            return super::refusal::Refusal::OverCapacity(
                None,
                &GatewayError::TooManySessions { limit },
            )
            .reply()
            .with_header(header::RETRY_AFTER, HeaderValue::from_static("1"))
            .into_response();
        }
    };
    let (tx, rx) = mpsc::channel::<Vec<u8>>(OUT_BACKLOG);
    let mut session =
        Session::new(dispatcher, tenant, tx.clone()).with_max_in_flight(limits.in_flight);
    if let Some(credential) = credential {
        session = session.with_credential(credential);
    }
    let reading = Reading {
        buf,
        body,
        max_message,
        idle: limits.idle,
    };
    tokio::spawn(
        async move {
            let _slot = slot;
            run(session, tx, reading).await;
        }
        .in_current_span(),
    );
    let lines = futures_util::stream::unfold(rx, |mut rx| async move {
        let mut message = rx.recv().await?;
        message.push(b'\n');
        Some((Ok::<_, std::convert::Infallible>(Bytes::from(message)), rx))
    });
    let mut r = Response::new(Body::from_stream(lines));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// The body of a session as it is read.
struct Reading {
    buf: BytesMut,
    body: BodyDataStream,
    max_message: usize,
    /// Past this with nothing from the client and nothing in flight, the session ends.
    idle: Duration,
}

async fn run(mut session: Session, out: mpsc::Sender<Vec<u8>>, reading: Reading) {
    let Reading {
        mut buf,
        mut body,
        max_message,
        idle,
    } = reading;
    let mut reader = Lines::default();
    // One timer for the session's life, moved on only when it fires: a
    // client dripping tiny pieces costs no timer update per piece.
    let mut heard = tokio::time::Instant::now();
    let idle_timer = tokio::time::sleep(idle);
    tokio::pin!(idle_timer);
    // A session opened with a token ends when the token expires, whether or
    // not its client sends anything.
    let expires = session.token_expires().map(|exp| {
        tokio::time::Instant::now()
            + std::time::Duration::from_secs(exp.saturating_sub(crate::auth::now()))
    });
    let expiry =
        tokio::time::sleep_until(expires.unwrap_or_else(|| tokio::time::Instant::now() + idle));
    tokio::pin!(expiry);
    loop {
        if !reader.drain(&mut session, &mut buf).await {
            return;
        }
        if buf.len() > max_message {
            // One message larger than the limit: answer, and end the session.
            let _ = session.on_parse_error().await;
            tracing::warn!(
                limit = max_message,
                "a session message exceeded the size limit; ending the session"
            );
            return;
        }
        let chunk = tokio::select! {
            chunk = body.next() => chunk,
            // The client stopped reading (connection closed): cancel everything.
            _ = out.closed() => return,
            () = &mut expiry, if expires.is_some() => {
                tracing::info!("session ended: its token expired");
                return;
            }
            () = &mut idle_timer => {
                let now = tokio::time::Instant::now();
                if now < heard + idle {
                    idle_timer.as_mut().reset(heard + idle);
                } else if session.in_flight() == 0 {
                    tracing::info!(idle_ms = idle.as_millis() as u64, "session ended: idle");
                    return;
                } else {
                    idle_timer.as_mut().reset(now + idle);
                }
                continue;
            }
        };
        match chunk {
            Some(Ok(chunk)) => {
                heard = tokio::time::Instant::now();
                buf.extend_from_slice(&chunk);
            }
            // The connection broke mid-body: the client is gone.
            Some(Err(_)) => return,
            None => break,
        }
    }
    if !reader.finish(&mut session, &mut buf).await {
        return;
    }
    session.finish().await;
}

/// The reading of a session's messages out of its growing buffer. Each byte
/// is scanned once by [`ValueEnd`] and parsed once by serde, however the
/// body is cut into pieces.
#[derive(Default)]
struct Lines {
    /// After a syntax error: the rest of that line is skipped.
    skipping: bool,
    next: ValueEnd,
}

impl Lines {
    /// Handles every complete message in `buf`. After a syntax error, the
    /// rest of that line is skipped and reading resumes on the next. False:
    /// the peer is gone.
    async fn drain(&mut self, session: &mut Session, buf: &mut BytesMut) -> bool {
        loop {
            if self.skipping {
                match buf.iter().position(|&b| b == b'\n') {
                    Some(i) => {
                        buf.advance(i + 1);
                        self.skipping = false;
                        self.next.reset();
                    }
                    None => {
                        buf.clear();
                        return true;
                    }
                }
            }
            if self.next.scan(buf) == Scan::Incomplete {
                return true;
            }
            if !self.take(session, buf).await {
                return false;
            }
        }
    }

    /// The body ended: what is left is read as serde reads the end of a text
    /// (a number at the very end is complete there).
    async fn finish(&mut self, session: &mut Session, buf: &mut BytesMut) -> bool {
        loop {
            if !self.drain(session, buf).await {
                return false;
            }
            if buf.iter().all(u8::is_ascii_whitespace) {
                return true;
            }
            if !self.take(session, buf).await {
                return false;
            }
        }
    }

    /// Parses the message at the front of `buf`, once, and hands it on.
    async fn take(&mut self, session: &mut Session, buf: &mut BytesMut) -> bool {
        let mut values = serde_json::Deserializer::from_slice(buf).into_iter::<&RawValue>();
        match values.next() {
            Some(Ok(raw)) => {
                let end = values.byte_offset();
                if !session.on_message(raw).await {
                    return false;
                }
                buf.advance(end);
                self.next.reset();
                true
            }
            None => {
                buf.clear();
                self.next.reset();
                true
            }
            // Only at the end of the body: an unfinished message is answered
            // as not JSON.
            Some(Err(e)) if e.is_eof() => {
                self.skipping = true;
                buf.clear();
                session.on_parse_error().await
            }
            Some(Err(_)) => {
                // The line to skip is the one the bad message starts on, not
                // a line break before it.
                let gap = buf.iter().take_while(|b| b.is_ascii_whitespace()).count();
                buf.advance(gap);
                self.skipping = true;
                session.on_parse_error().await
            }
        }
    }
}
