//! Ended spans on their way to the collector: a queue bounded in spans and
//! in bytes, and one exporting task. A span that finds the queue full (either
//! bound), or whose batch the collector refuses or does not take in time, is
//! dropped and counted; no call ever waits for the collector. The bytes a
//! span holds are counted until its batch's export is over, so that a
//! collector that hangs holds at most [`QUEUE_BYTES`] of spans in the
//! gateway, queued or being sent. The first failed export is logged as a
//! warning naming the endpoint, later ones at most once a minute with how
//! many failed between.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use opentelemetry::Context;
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _};
use tokio::sync::{mpsc, oneshot};

/// Spans waiting for the exporter at most; past it they are dropped.
const QUEUE: usize = 2048;
/// Bytes the spans waiting for (or in) an export hold at most.
pub const QUEUE_BYTES: usize = 16 << 20;
/// Spans sent to the collector in one export at most.
const BATCH: usize = 512;
/// How long spans wait to fill a batch.
const DELAY: Duration = Duration::from_millis(500);
/// How long an export may take before its spans count as dropped.
const EXPORT_WAIT: Duration = Duration::from_secs(20);
/// The least time between two warnings of failed exports.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// Hands ended spans to the exporting task, never waiting.
#[derive(Debug)]
pub struct Queue {
    spans: mpsc::Sender<(SpanData, usize)>,
    held: Arc<AtomicUsize>,
    dropped: prometheus::IntCounter,
}

/// A flush's request: the exporting task sends what is queued, answers, and ends.
pub type Flush = mpsc::Sender<oneshot::Sender<()>>;

/// Starts the exporting task; the span processor that feeds it, and where a
/// flush is asked for.
pub fn start(
    exporter: opentelemetry_otlp::SpanExporter,
    dropped: prometheus::IntCounter,
    endpoint: String,
) -> (Queue, Flush) {
    let (spans, queued) = mpsc::channel(QUEUE);
    let (flush, flushes) = mpsc::channel(1);
    let held = Arc::new(AtomicUsize::new(0));
    let exporting = Exporting {
        exporter,
        dropped: dropped.clone(),
        held: held.clone(),
        endpoint,
        warned: None,
        failed: 0,
    };
    tokio::spawn(exporting.run(queued, flushes));
    (
        Queue {
            spans,
            held,
            dropped,
        },
        flush,
    )
}

/// About the bytes `span` holds: its name, attributes, events, links and
/// status text, and what every span holds besides.
pub fn weight(span: &SpanData) -> usize {
    let attributes = |kvs: &[opentelemetry::KeyValue]| -> usize {
        kvs.iter()
            .map(|kv| kv.key.as_str().len() + kv.value.as_str().len() + 32)
            .sum()
    };
    let events: usize = span
        .events
        .iter()
        .map(|e| e.name.len() + attributes(&e.attributes) + 48)
        .sum();
    let links: usize = span
        .links
        .iter()
        .map(|l| attributes(&l.attributes) + l.span_context.trace_state().header().len() + 48)
        .sum();
    let status = match &span.status {
        opentelemetry::trace::Status::Error { description } => description.len(),
        _ => 0,
    };
    256 + span.name.len()
        + attributes(&span.attributes)
        + events
        + links
        + status
        + span.span_context.trace_state().header().len()
}

impl opentelemetry_sdk::trace::SpanProcessor for Queue {
    fn on_start(&self, _: &mut opentelemetry_sdk::trace::Span, _: &Context) {}

    fn on_end(&self, span: SpanData) {
        let size = weight(&span);
        if self.held.fetch_add(size, Ordering::AcqRel) + size > QUEUE_BYTES {
            self.held.fetch_sub(size, Ordering::AcqRel);
            self.dropped.inc();
            return;
        }
        if self.spans.try_send((span, size)).is_err() {
            self.held.fetch_sub(size, Ordering::AcqRel);
            self.dropped.inc();
        }
    }

    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _: Duration) -> opentelemetry_sdk::error::OTelSdkResult {
        Ok(())
    }
}

/// The exporting task's state.
struct Exporting {
    exporter: opentelemetry_otlp::SpanExporter,
    dropped: prometheus::IntCounter,
    held: Arc<AtomicUsize>,
    endpoint: String,
    /// When the last warning was logged.
    warned: Option<Instant>,
    /// Exports failed since.
    failed: u64,
}

impl Exporting {
    /// Batches of at most [`BATCH`] spans, sent when full or [`DELAY`]
    /// after the first, one export at a time, until a flush.
    async fn run(
        mut self,
        mut queued: mpsc::Receiver<(SpanData, usize)>,
        mut flushes: mpsc::Receiver<oneshot::Sender<()>>,
    ) {
        let mut batch = Vec::with_capacity(BATCH);
        loop {
            tokio::select! {
                span = queued.recv() => {
                    let Some(span) = span else { break };
                    batch.push(span);
                    let deadline = tokio::time::Instant::now() + DELAY;
                    while batch.len() < BATCH {
                        match tokio::time::timeout_at(deadline, queued.recv()).await {
                            Ok(Some(span)) => batch.push(span),
                            _ => break,
                        }
                    }
                    self.send(std::mem::take(&mut batch)).await;
                }
                done = flushes.recv() => {
                    while let Ok(span) = queued.try_recv() {
                        batch.push(span);
                    }
                    if !batch.is_empty() {
                        self.send(std::mem::take(&mut batch)).await;
                    }
                    if let Some(done) = done {
                        let _ = done.send(());
                    }
                    break;
                }
            }
        }
    }

    /// Exports one batch; its spans' bytes are given back once it is over.
    async fn send(&mut self, batch: Vec<(SpanData, usize)>) {
        let n = batch.len() as u64;
        let bytes: usize = batch.iter().map(|(_, size)| size).sum();
        let spans = batch.into_iter().map(|(span, _)| span).collect();
        let outcome = tokio::time::timeout(EXPORT_WAIT, self.exporter.export(spans)).await;
        self.held.fetch_sub(bytes, Ordering::AcqRel);
        let error = match outcome {
            Ok(Ok(())) => return,
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {} s", EXPORT_WAIT.as_secs()),
        };
        self.dropped.inc_by(n);
        self.failed += 1;
        if self.warned.is_some_and(|at| at.elapsed() < WARN_EVERY) {
            return;
        }
        let endpoint = crate::redact::written(&self.endpoint);
        tracing::warn!(endpoint = %endpoint, error = %error, failed_exports = self.failed, spans_dropped = n, "spans could not be exported to the trace collector; dropped (said again at most once a minute)");
        self.warned = Some(Instant::now());
        self.failed = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::KeyValue;
    use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status};
    use opentelemetry_sdk::trace::SpanProcessor as _;

    fn span(value_bytes: usize) -> SpanData {
        SpanData {
            span_context: SpanContext::empty_context(),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Server,
            name: "tools/call".into(),
            start_time: std::time::SystemTime::now(),
            end_time: std::time::SystemTime::now(),
            attributes: vec![KeyValue::new("jsonrpc.request.id", "x".repeat(value_bytes))],
            dropped_attributes_count: 0,
            events: Default::default(),
            links: Default::default(),
            status: Status::Unset,
            instrumentation_scope: Default::default(),
        }
    }

    #[test]
    fn the_queue_holds_spans_within_its_bytes_and_counts_the_rest() {
        let (spans, mut queued) = mpsc::channel(QUEUE);
        let queue = Queue {
            spans,
            held: Arc::default(),
            dropped: prometheus::IntCounter::new("d", "d").unwrap(),
        };
        assert!(weight(&span(1 << 20)) > 1 << 20);
        // Sixteen spans of a mebibyte fill the bytes, far within the count.
        for _ in 0..40 {
            queue.on_end(span(1 << 20));
        }
        let mut taken = 0;
        while let Ok((_, size)) = queued.try_recv() {
            taken += size;
        }
        assert!(taken <= QUEUE_BYTES, "{taken}");
        assert_eq!(queue.held.load(Ordering::Acquire), taken);
        assert_eq!(queue.dropped.get(), 40 - 15);
        // Small spans still pass once the exporter gave the bytes back.
        queue.held.fetch_sub(taken, Ordering::AcqRel);
        queue.on_end(span(10));
        assert!(queued.try_recv().is_ok());
        assert_eq!(queue.dropped.get(), 25);
    }
}
