//! Our own accept loop. `axum::serve` sets no header-read timeout, so a client
//! that dribbles its headers would hold a connection forever; here hyper gets a
//! timer and a header-read timeout, connections are capped, and shutdown is
//! graceful (stop accepting, let requests in flight finish, up to a deadline).
//! The agent edge serves its common request itself (`h1.rs`) and hands the
//! rest of a connection to [`http1`]; the admin edge uses [`http1`] throughout.

use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioTimer;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub header_read_timeout: Duration,
    pub max_connections: usize,
    /// How long open connections may take to finish after `shutdown`.
    pub drain_deadline: Duration,
    /// Counts connections that could not be accepted.
    pub accept_errors: prometheus::IntCounter,
}

/// The first wait after a failed accept, and the longest.
const ACCEPT_BACKOFF: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(1));

/// Accepts on `listener` until `shutdown`, serving each connection with
/// `connection`, then drains.
pub async fn serve<F, Fut>(
    listener: TcpListener,
    opts: ServeOptions,
    shutdown: CancellationToken,
    connection: F,
) where
    F: Fn(TcpStream, CancellationToken) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let connections = TaskTracker::new();
    let permits = Arc::new(Semaphore::new(opts.max_connections));
    // The wait after the last failed accept, while accepts fail.
    let mut failing: Option<Duration> = None;
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            _ = shutdown.cancelled() => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    if failing.take().is_some() {
                        tracing::info!("accepting connections again");
                    }
                    stream
                }
                Err(e) => {
                    // EMFILE and friends: the connections already open are
                    // served on; new ones wait in the backlog while this
                    // backs off (doubling up to a second), so that a spell
                    // without descriptors is one log line and no busy loop.
                    opts.accept_errors.inc();
                    let wait = match failing {
                        None => {
                            tracing::warn!(error = %e, open = connections.len(), "accept failed; backing off until it succeeds");
                            ACCEPT_BACKOFF.0
                        }
                        Some(w) => (w * 2).min(ACCEPT_BACKOFF.1),
                    };
                    failing = Some(wait);
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = shutdown.cancelled() => break,
                    }
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        let served = connection(stream, shutdown.clone());
        connections.spawn(async move {
            let _permit = permit;
            served.await;
        });
    }
    drop(listener);
    connections.close();
    if tokio::time::timeout(opts.drain_deadline, connections.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            open = connections.len(),
            "connections still open at the drain deadline; closing them"
        );
    }
}

/// Serves one connection with hyper's HTTP/1.1 server: a header-read timeout,
/// and on `shutdown` a graceful end (the request in flight is answered).
pub async fn http1<I, S, B>(
    io: I,
    service: S,
    header_read_timeout: Duration,
    shutdown: CancellationToken,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: hyper::service::Service<
            hyper::Request<hyper::body::Incoming>,
            Response = hyper::Response<B>,
            Error = std::convert::Infallible,
        > + Send
        + 'static,
    S::Future: Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout)
        .serve_connection(io, service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.as_mut().await;
        }
    }
}
