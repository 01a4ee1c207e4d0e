//! A child's link: calls written to its stdin (coalesced into one write
//! where several wait) and their answers matched back through its pending
//! table; started with the reader of its stdout (see `reader`).

use super::framing::Framing;
use super::reader::Reader;
use super::*;

/// A live connection to one child.
pub struct StdioLink {
    pub(super) outbox: mpsc::Sender<Bytes>,
    pub(super) pending: Arc<Pending>,
    pub(super) next_id: AtomicU64,
    /// Cancelled when the reader or writer stops: the connection is dead.
    pub(super) dead: CancellationToken,
    pub(super) dialect: Dialect,
}

/// Tells a Model Context Protocol child that a call it was sent is no longer
/// waited for (timed out, or its agent went away), unless disarmed first.
struct CancelOnDrop<'a> {
    outbox: &'a mpsc::Sender<Bytes>,
    id: Option<u64>,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            let params = crate::modelcontext::cancelled_params(id, "the gateway stopped waiting");
            if let Ok(params) = serde_json::from_str::<&RawValue>(&params) {
                let frame =
                    encode_request(None, crate::modelcontext::method::CANCELLED, params.into());
                // A full outbox loses the cancellation, never the caller's time.
                let _ = self.outbox.try_send(Bytes::from(frame));
            }
        }
    }
}

impl Transport for StdioLink {
    fn request<'a>(
        &'a self,
        method: &'a str,
        params: Params<'a>,
    ) -> BoxFuture<'a, Result<JsonBuf, CallError>> {
        Box::pin(async move {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let (answer, _registration) = self.pending.register(id)?;
            let frame = Bytes::from(encode_request(Some(id), method, params));
            self.outbox
                .send(frame)
                .await
                .map_err(|_| CallError::unavailable("connection closed"))?;
            // `initialize` is never cancelled (the protocol forbids it).
            let cancellable = self.dialect == Dialect::ModelContext && method != "initialize";
            let mut cancel = CancelOnDrop {
                outbox: &self.outbox,
                id: cancellable.then_some(id),
            };
            let answer = answer
                .await
                .unwrap_or_else(|_| Err(CallError::unavailable("connection closed")));
            cancel.id = None;
            answer
        })
    }

    fn notify<'a>(
        &'a self,
        method: &'a str,
        params: &'a RawValue,
    ) -> BoxFuture<'a, Result<(), CallError>> {
        Box::pin(async move {
            let frame = Bytes::from(encode_request(None, method, params.into()));
            self.outbox
                .send(frame)
                .await
                .map_err(|_| CallError::unavailable("connection closed"))
        })
    }
}

impl StdioLink {
    /// Requests waiting for an answer (for tests and diagnostics).
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }
}

pub(super) fn start_link(
    up: &Arc<Upstream>,
    stdin: ChildStdin,
    stdout: ChildStdout,
    events: mpsc::Sender<Event>,
    max_frame: usize,
    dialect: Dialect,
) -> (Arc<StdioLink>, tokio::task::JoinHandle<()>) {
    let (outbox, rx) = mpsc::channel(OUTBOX);
    let link = Arc::new(StdioLink {
        outbox: outbox.clone(),
        pending: Arc::new(Pending::default()),
        // 1 is the handshake's `initialize`, as the spec requires.
        next_id: AtomicU64::new(1),
        dead: CancellationToken::new(),
        dialect,
    });
    let writer = tokio::spawn(write_frames(
        stdin,
        rx,
        Framing::new(dialect, max_frame),
        link.dead.clone(),
    ));
    let reader = Reader {
        up: up.clone(),
        pending: link.pending.clone(),
        outbox,
        events,
        dialect,
    };
    let dead = link.dead.clone();
    tokio::spawn(async move {
        let why = reader.run(stdout, max_frame).await;
        reader
            .pending
            .close(CallError::unavailable("upstream connection closed"));
        tracing::debug!(upstream = %reader.up.name, why, "reader stopped");
        dead.cancel();
    });
    (link, writer)
}

async fn write_frames(
    stdin: ChildStdin,
    mut rx: mpsc::Receiver<Bytes>,
    framing: Framing,
    dead: CancellationToken,
) {
    let mut sink = FramedWrite::new(stdin, framing);
    while let Some(frame) = rx.recv().await {
        // Coalesce what is already queued into one write.
        let mut ok = sink.feed(frame).await.is_ok();
        while ok {
            match rx.try_recv() {
                Ok(frame) => ok = sink.feed(frame).await.is_ok(),
                Err(_) => break,
            }
        }
        if !ok || sink.flush().await.is_err() {
            break;
        }
    }
    dead.cancel();
}
