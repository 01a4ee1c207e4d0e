//! Our own accept loop. `axum::serve` sets no header-read timeout, so a client
//! that dribbles its headers would hold a connection forever; here hyper gets a
//! timer and a header-read timeout, connections are capped, and shutdown is
//! graceful (stop accepting, let requests in flight finish, up to a deadline).

use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

#[derive(Debug, Clone, Copy)]
pub struct ServeOptions {
    pub header_read_timeout: Duration,
    pub max_connections: usize,
    /// How long open connections may take to finish after `shutdown`.
    pub drain_deadline: Duration,
}

/// Serves `app` on `listener` until `shutdown`, then drains.
pub async fn serve<S, B>(
    listener: TcpListener,
    app: S,
    opts: ServeOptions,
    shutdown: CancellationToken,
) where
    S: hyper::service::Service<
            hyper::Request<hyper::body::Incoming>,
            Response = hyper::Response<B>,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let connections = TaskTracker::new();
    let permits = Arc::new(Semaphore::new(opts.max_connections));
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            _ = shutdown.cancelled() => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(e) => {
                    // EMFILE and friends: back off briefly instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        let service = app.clone();
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            let _permit = permit;
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(opts.header_read_timeout)
                .serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = shutdown.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.as_mut().await;
                }
            }
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
