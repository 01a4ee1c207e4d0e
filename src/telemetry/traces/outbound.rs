//! The CLIENT span of a request to an upstream, and the context it
//! carries out (`params._meta`, an HTTP upstream's `traceparent`).

use opentelemetry::propagation::{Injector, TextMapPropagator};
use opentelemetry::trace::{
    Span as _, SpanContext, SpanKind, TraceContextExt, TraceState, Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::BaggagePropagator;

use super::*;

/// What an upstream request carries of its trace: the context of a CLIENT
/// span, child of the current one, named `{method} {name}` (a span of the
/// SDK's only when it records); `None` when there is no context to carry
/// (no request context, tracing off).
pub fn client(method: &str, name: Option<&str>, upstream: &str) -> Option<Outbound> {
    if !active() {
        return None;
    }
    if let Some(u) = UNSAMPLED.get() {
        let own = SpanContext::new(u.trace, new_span_id(), u.flags, false, TraceState::NONE);
        return Outbound::new(None, &own, None);
    }
    Context::map_current(|parent| {
        let Some(tracer) = TRACER.get() else {
            // Off: what came in flows on unchanged.
            return Outbound::new(None, parent.span().span_context(), Some(parent));
        };
        if !parent.has_active_span() {
            return None;
        }
        // A request that is not sampled has no span that records: its
        // upstream calls pass on a span id of their own and the flags as
        // they are, without a span of the SDK's (which would record nothing).
        let own = {
            let parent_span = parent.span();
            let sc = parent_span.span_context();
            (!sc.is_sampled()).then(|| child(sc, sc.trace_id()))
        };
        if let Some(own) = own {
            return Outbound::new(None, &own, Some(parent));
        }
        let mut started = tracer
            .span_builder("upstream request")
            .with_kind(SpanKind::Client)
            .start_with_context(tracer, parent);
        if started.is_recording() {
            started.update_name(match name {
                Some(n) => bounded(&format!("{method} {}", bounded(n))),
                None => bounded(method),
            });
            let mut attributes = vec![
                KeyValue::new("mcp.method.name", bounded(method)),
                KeyValue::new("mcp_gateway.upstream", upstream.to_owned()),
            ];
            if let Some(n) = name.filter(|_| is_tool_call(method)) {
                attributes.push(KeyValue::new("gen_ai.tool.name", bounded(n)));
                attributes.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
            }
            started.set_attributes(attributes);
        }
        let cx = parent.with_span(started);
        let sc = cx.span().span_context().clone();
        Outbound::new(Some(cx.clone()), &sc, Some(&cx))
    })
}

/// The trace context one upstream request carries, written once for its
/// `params._meta` and (over HTTP) its headers; and the span it runs in,
/// when that records.
#[derive(Debug)]
pub struct Outbound {
    span: Option<Context>,
    /// `"traceparent":"00-{trace}-{span}-{flags}"`: a member of `_meta`.
    member: [u8; 71],
    /// `tracestate` and `baggage`, when the context has any.
    more: Option<Box<[Option<String>; 2]>>,
}

/// Where the `traceparent` value sits in [`Outbound::member`].
pub(super) const TRACEPARENT_AT: usize = 15;

impl Outbound {
    /// The W3C fields of `sc` (and the baggage of `cx`); `None` when `sc`
    /// is not a valid context.
    fn new(span: Option<Context>, sc: &SpanContext, cx: Option<&Context>) -> Option<Outbound> {
        if !sc.is_valid() {
            return None;
        }
        let state = if sc.trace_state() == &TraceState::NONE {
            None
        } else {
            Some(sc.trace_state().header()).filter(|s| !s.is_empty())
        };
        use opentelemetry::baggage::BaggageExt as _;
        let baggage = match cx {
            Some(cx) if !cx.baggage().is_empty() => {
                struct One(Option<String>);
                impl Injector for One {
                    fn set(&mut self, _: &str, value: String) {
                        self.0 = Some(value);
                    }
                }
                let mut baggage = One(None);
                BaggagePropagator::new().inject_context(cx, &mut baggage);
                baggage.0
            }
            _ => None,
        };
        let more = (state.is_some() || baggage.is_some()).then(|| Box::new([state, baggage]));
        let mut member =
            *b"\"traceparent\":\"00-00000000000000000000000000000000-0000000000000000-00\"";
        write_traceparent(sc, &mut member[TRACEPARENT_AT..TRACEPARENT_AT + 55]);
        Some(Outbound { span, member, more })
    }

    /// The CLIENT span the request runs in, when it records.
    pub fn span(&self) -> Option<&Context> {
        self.span.as_ref()
    }

    /// `"traceparent":"…"`: the member of `_meta` every traced request has.
    pub fn traceparent_member(&self) -> &[u8] {
        &self.member
    }

    /// `tracestate` and `baggage` as the propagators wrote them, when there
    /// are any (never trusted to hold no line breaks: a value with a
    /// control character is left out).
    pub fn more(&self) -> impl Iterator<Item = (&'static str, &str)> {
        let clean = |v: &&str| !v.bytes().any(|b| b.is_ascii_control());
        self.more.iter().flat_map(move |more| {
            ["tracestate", "baggage"]
                .into_iter()
                .zip(more.iter())
                .filter_map(move |(k, v)| v.as_deref().filter(clean).map(|v| (k, v)))
        })
    }

    /// The `traceparent` value (hex digits and dashes).
    pub fn traceparent(&self) -> &[u8] {
        &self.member[TRACEPARENT_AT..TRACEPARENT_AT + 55]
    }

    /// The HTTP headers the request carries: `traceparent`, then
    /// [`Outbound::more`].
    pub fn fields(&self) -> impl Iterator<Item = (&'static str, &[u8])> {
        std::iter::once(("traceparent", self.traceparent()))
            .chain(self.more().map(|(k, v)| (k, v.as_bytes())))
    }

    /// The length of the head lines [`Outbound::write_head`] writes.
    pub fn head_len(&self) -> usize {
        let more: usize = match self.more {
            None => 0,
            Some(_) => self.more().map(|(k, v)| k.len() + v.len() + 4).sum(),
        };
        "traceparent: \r\n".len() + 55 + more
    }

    /// Writes the request's HTTP head lines (`traceparent: …\r\n`, …),
    /// [`Outbound::head_len`] bytes, through `put`.
    pub fn write_head(&self, mut put: impl FnMut(&[u8])) {
        put(b"traceparent: ");
        put(self.traceparent());
        put(b"\r\n");
        if self.more.is_none() {
            return;
        }
        for (name, value) in self.more() {
            put(name.as_bytes());
            put(b": ");
            put(value.as_bytes());
            put(b"\r\n");
        }
    }
}

/// Writes `00-{trace id}-{span id}-{flags}` in lowercase hex, as W3C
/// writes it, over the 55 bytes of `out` (which hold its dashes already).
pub(super) fn write_traceparent(sc: &SpanContext, out: &mut [u8]) {
    /// Each byte's two hex digits.
    const PAIRS: [[u8; 2]; 256] = {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut pairs = [[0; 2]; 256];
        let mut b = 0;
        while b < 256 {
            pairs[b] = [HEX[b >> 4], HEX[b & 15]];
            b += 1;
        }
        pairs
    };
    fn hex(out: &mut [u8], bytes: &[u8]) {
        for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
            pair.copy_from_slice(&PAIRS[usize::from(*b)]);
        }
    }
    hex(&mut out[3..35], &sc.trace_id().to_bytes());
    hex(&mut out[36..52], &sc.span_id().to_bytes());
    hex(&mut out[53..55], &[sc.trace_flags().to_u8()]);
}

/// The trace and span ids of the span the current request runs in, when it records.
pub fn ids() -> Option<(String, String)> {
    if !enabled() {
        return None;
    }
    let cx = Context::current();
    let span = cx.span();
    if !span.is_recording() {
        return None;
    }
    let sc = span.span_context();
    Some((sc.trace_id().to_string(), sc.span_id().to_string()))
}

/// `,"trace_id":"…","span_id":"…"` (hex digits: nothing to escape).
pub(in crate::telemetry) fn add_ids(out: &mut String, trace: &str, span: &str) {
    out.push_str(",\"trace_id\":\"");
    out.push_str(trace);
    out.push_str("\",\"span_id\":\"");
    out.push_str(span);
    out.push('"');
}

/// What an upstream request made in the context `traceparent` names carries.
#[cfg(test)]
pub(crate) fn outbound_for(traceparent: &str) -> Outbound {
    let cx = incoming([Some(traceparent.into()), None, None], |_| None);
    let _in = cx.map(Context::attach);
    client("tools/call", None, "up").unwrap_or_else(|| panic!("{traceparent} is not valid"))
}
