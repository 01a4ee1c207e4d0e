//! Which traces are recorded: the sampler's decision made once per trace
//! (a parent's flag, or a ratio of the trace id), unsampled contexts that
//! still carry on, and the ids of new spans.

use std::sync::OnceLock;

use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};

use super::*;

/// The trace of a request that is not sampled and carries no state or
/// baggage: all its upstream calls pass on is this trace and its flags,
/// under span ids of their own. Its span would record nothing, so none is
/// made.
#[derive(Debug, Clone, Copy)]
pub struct Unsampled {
    pub(super) trace: TraceId,
    pub(super) flags: TraceFlags,
}

thread_local! {
    /// The [`Unsampled`] trace of the request being polled on this thread.
    pub(super) static UNSAMPLED: std::cell::Cell<Option<Unsampled>> = const { std::cell::Cell::new(None) };
}

impl Unsampled {
    /// Runs `request` with this the trace of its upstream calls: current on
    /// the thread while it is polled, and what was current before after.
    /// (Pinned where it was made: a request's future is large, and moving
    /// it here would copy it.)
    pub fn run<F: std::future::Future>(
        self,
        mut request: std::pin::Pin<&mut F>,
    ) -> impl std::future::Future<Output = F::Output> + '_ {
        std::future::poll_fn(move |task| {
            struct Restore(Option<Unsampled>);
            impl Drop for Restore {
                fn drop(&mut self) {
                    UNSAMPLED.set(self.0);
                }
            }
            let _restore = Restore(UNSAMPLED.replace(Some(self)));
            request.as_mut().poll(task)
        })
    }
}

/// Whether the request polled on this thread is an [`Unsampled`] one
/// (which has no span to record anything on).
pub(super) fn in_unsampled() -> bool {
    UNSAMPLED.with(|u| u.get().is_some())
}

/// The sampler spans are made with (set once, at start).
pub(super) static SAMPLER: OnceLock<SamplerSpec> = OnceLock::new();

thread_local! {
    /// The trace id the SDK's next root span takes: the one [`unsampled`]
    /// decided its sampling on.
    pub(super) static NEXT_TRACE: std::cell::Cell<Option<TraceId>> = const { std::cell::Cell::new(None) };
}

/// The SDK's random ids, except a root's trace id when [`unsampled`] drew
/// it (so that the SDK's sampler decides on the same id).
#[derive(Debug)]
pub(super) struct Ids;

impl IdGenerator for Ids {
    fn new_trace_id(&self) -> TraceId {
        NEXT_TRACE
            .with(std::cell::Cell::take)
            .unwrap_or_else(|| RandomIdGenerator::default().new_trace_id())
    }

    fn new_span_id(&self) -> SpanId {
        RandomIdGenerator::default().new_span_id()
    }
}

/// The trace of a child of `parent` that the sampler would not sample
/// (the parent's, or a new one for a root); `None` when it would be
/// sampled, and the SDK makes the span (a root's trace id waiting for it
/// in [`NEXT_TRACE`]). The decisions are those of the SDK's samplers, made
/// without a span.
pub(super) fn unsampled(parent: &SpanContext) -> Option<TraceId> {
    unsampled_by(*SAMPLER.get()?, parent)
}

pub(super) fn unsampled_by(spec: SamplerSpec, parent: &SpanContext) -> Option<TraceId> {
    let valid = parent.is_valid();
    let trace = || {
        if valid {
            parent.trace_id()
        } else {
            RandomIdGenerator::default().new_trace_id()
        }
    };
    let ratio = |r: f64| {
        let trace = trace();
        if sampled_at(r, trace) {
            if !valid {
                NEXT_TRACE.with(|next| next.set(Some(trace)));
            }
            None
        } else {
            Some(trace)
        }
    };
    match spec {
        SamplerSpec::AlwaysOn => None,
        SamplerSpec::AlwaysOff => Some(trace()),
        SamplerSpec::Ratio(r) => ratio(r),
        SamplerSpec::ParentBased(_) if valid => (!parent.is_sampled()).then(|| parent.trace_id()),
        SamplerSpec::ParentBased(Root::AlwaysOn) => None,
        SamplerSpec::ParentBased(Root::AlwaysOff) => Some(trace()),
        SamplerSpec::ParentBased(Root::Ratio(r)) => ratio(r),
    }
}

/// `TraceIdRatioBased`'s decision: the trace id's low 63 bits under the ratio.
pub(super) fn sampled_at(ratio: f64, trace: TraceId) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    let bound = (ratio.max(0.0) * (1u64 << 63) as f64) as u64;
    let bytes = trace.to_bytes();
    let low = u64::from_be_bytes([
        bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15],
    ]);
    (low >> 1) < bound
}

pub(super) fn new_span_id() -> SpanId {
    RandomIdGenerator::default().new_span_id()
}

/// An unsampled child of `parent` in `trace`: a new span id, the state
/// carried on.
pub(super) fn child(parent: &SpanContext, trace: TraceId) -> SpanContext {
    SpanContext::new(
        trace,
        new_span_id(),
        parent.trace_flags().with_sampled(false),
        false,
        parent.trace_state().clone(),
    )
}
