//! Traces: OpenTelemetry spans, exported over OTLP (gRPC or HTTP/protobuf)
//! when the config file (`telemetry.traces`) or the standard `OTEL_*`
//! environment variables name an endpoint; nothing otherwise.
//!
//! A SERVER span per request a face answers, a CLIENT span per request to an
//! upstream, its child; the context comes in from `params._meta`
//! (`traceparent`, `tracestate`, `baggage`) or else the HTTP headers, and
//! goes out in every upstream request's `params._meta` (and an HTTP
//! upstream's `traceparent` header). The request's future carries its
//! context ([`opentelemetry::trace::FutureExt`]), so the upstream call finds
//! its parent where it runs. With tracing off, an incoming context still
//! flows to upstreams unchanged; with nothing to carry, nothing is done.
//!
//! Spans leave through a queue bounded in spans and bytes to one exporting
//! task (`super::export`): a span that finds the queue full, or whose batch
//! the collector refuses or does not take in time, is dropped and counted;
//! no call ever waits for the collector. Every value a client chose (its
//! request id, method and tool names) is cut to the attribute value limit,
//! and what it carries in (`tracestate`, `baggage`) is read only within the
//! W3C bounds.

mod outbound;
mod sampling;
mod settings;

pub use outbound::*;
use sampling::*;
pub use settings::*;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::propagation::{Extractor, TextMapCompositePropagator, TextMapPropagator};
use opentelemetry::trace::{
    SpanKind, Status, TraceContextExt, TraceState, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, SpanExporter as _};

/// The default for `OTEL_EXPORTER_OTLP_TIMEOUT`.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The keys of `params._meta` (SEP-414's, unprefixed) and HTTP headers that carry context.
const KEYS: [&str; 3] = ["traceparent", "tracestate", "baggage"];
/// The longest of each that is read (W3C Trace Context: a `traceparent`
/// is 55 bytes in version 00, more in a later one; a `tracestate`
/// holds at most 32 members of at most 256 bytes each, and may be dropped
/// past 512; W3C Baggage: at most 8192 bytes); a longer one is read as absent.
const CARRIED_BYTES: [usize; 3] = [256, 512, 8192];
/// The default for `OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT`: a value a client
/// chose (a request id, a tool's name) is cut to this many characters.
const ATTRIBUTE_VALUE_LIMIT: usize = 1024;

/// Characters an attribute value keeps at most (set when export starts).
static VALUE_LIMIT: OnceLock<usize> = OnceLock::new();

/// `value` as a span keeps it: cut to the attribute value limit, between
/// characters, so that what a client chose costs the export queue a
/// bounded amount whatever its size.
fn bounded(value: &str) -> String {
    let limit = VALUE_LIMIT.get().copied().unwrap_or(ATTRIBUTE_VALUE_LIMIT);
    match value.char_indices().nth(limit) {
        Some((cut, _)) => value[..cut].to_owned(),
        None => value.to_owned(),
    }
}

/// The gateway's tracer, once traces are exported.
static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// Whether spans are made (an exporter is configured).
pub fn enabled() -> bool {
    TRACER.get().is_some()
}

/// Whether any request has brought a context to carry on (so far).
static CARRIED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether an upstream request may have a context to carry: until a
/// request brings one or spans are made, there is nothing to look up.
fn active() -> bool {
    enabled() || CARRIED.load(std::sync::atomic::Ordering::Relaxed)
}

/// A running exporter; flushed and stopped by [`Traces::shutdown`].
pub struct Traces {
    provider: SdkTracerProvider,
    flush: tokio::sync::mpsc::Sender<tokio::sync::oneshot::Sender<()>>,
}

impl Traces {
    /// Exports what is queued (within `within`), then stops.
    pub async fn shutdown(self, within: Duration) {
        let (done, flushed) = tokio::sync::oneshot::channel();
        if self.flush.send(done).await.is_ok() {
            let _ = tokio::time::timeout(within, flushed).await;
        }
        let _ = self.provider.shutdown();
    }
}

/// Starts exporting with `settings` (within a Tokio runtime); `dropped`
/// counts the spans that never reached the collector.
pub fn start(settings: &TracesSettings, dropped: prometheus::IntCounter) -> Result<Traces, String> {
    use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _, WithTonicConfig as _};
    // The HTTP exporter's client is the gateway's reqwest, which needs the
    // process's TLS provider even for http:// (a gateway with only stdio
    // upstreams may not have installed it yet).
    crate::install_crypto_provider();
    let mut exporter = match settings.protocol {
        Protocol::Grpc => {
            let mut headers = axum::http::HeaderMap::new();
            for (k, v) in &settings.headers {
                let name = axum::http::HeaderName::from_bytes(k.to_ascii_lowercase().as_bytes())
                    .map_err(|_| format!("the OTLP header name {k:?} is not valid"))?;
                let value = axum::http::HeaderValue::from_str(v)
                    .map_err(|_| format!("the value of OTLP header {k:?} is not valid"))?;
                headers.insert(name, value);
            }
            let metadata =
                opentelemetry_otlp::tonic_types::metadata::MetadataMap::from_headers(headers);
            opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(&settings.endpoint)
                .with_timeout(settings.timeout)
                .with_metadata(metadata)
                .build()
        }
        Protocol::HttpProtobuf => opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(&settings.endpoint)
            .with_timeout(settings.timeout)
            .with_headers(settings.headers.iter().cloned().collect::<HashMap<_, _>>())
            .build(),
    }
    .map_err(|e| format!("the OTLP exporter cannot be built: {e}"))?;
    let resource = opentelemetry_sdk::Resource::builder_empty()
        .with_attributes(
            settings
                .resource
                .iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
        )
        .with_service_name(settings.service_name.clone())
        .build();
    exporter.set_resource(&resource);
    let _ = VALUE_LIMIT.set(settings.attribute_value_limit);
    let (queue, flush) = super::export::start(exporter, dropped, settings.endpoint.clone());
    let provider = SdkTracerProvider::builder()
        .with_resource(resource)
        .with_sampler(settings.sampler.sampler())
        .with_id_generator(Ids)
        .with_span_processor(queue)
        .build();
    let _ = SAMPLER.set(settings.sampler);
    let _ = TRACER.set(provider.tracer("mcp-gateway"));
    Ok(Traces { provider, flush })
}

/// A request's context as it came: from `params._meta` when that carries a
/// `traceparent`, else from the HTTP headers.
struct Carried<'a> {
    meta: [Option<Cow<'a, str>>; 3],
}

impl Extractor for Carried<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        let at = KEYS.iter().position(|k| *k == key)?;
        self.meta[at].as_deref()
    }

    fn keys(&self) -> Vec<&str> {
        KEYS.iter()
            .zip(&self.meta)
            .filter(|(_, v)| v.is_some())
            .map(|(k, _)| *k)
            .collect()
    }
}

fn propagator() -> &'static TextMapCompositePropagator {
    static P: OnceLock<TextMapCompositePropagator> = OnceLock::new();
    P.get_or_init(|| {
        TextMapCompositePropagator::new(vec![
            Box::new(TraceContextPropagator::new()),
            Box::new(BaggagePropagator::new()),
        ])
    })
}

/// The context a request brings: `meta` is its `params._meta` members
/// named in [`KEYS`], `header` reads an HTTP header. `None` when it brings
/// none (and tracing is off, so there is nothing to do either).
pub fn incoming<'a>(
    meta: [Option<Cow<'a, str>>; 3],
    header: impl Fn(&str) -> Option<&'a str>,
) -> Option<Context> {
    let mut carried = if meta[0].is_some() {
        Carried { meta }
    } else {
        Carried {
            meta: KEYS.map(|k| header(k).map(Cow::Borrowed)),
        }
    };
    for (value, most) in carried.meta.iter_mut().zip(CARRIED_BYTES) {
        if value.as_ref().is_some_and(|v| v.len() > most) {
            *value = None;
        }
    }
    if carried.meta.iter().all(Option::is_none) {
        // A root: nothing to read, and nothing to carry unless spans are made.
        return enabled().then(Context::new);
    }
    if carried.meta[0].is_none() && !enabled() {
        return None;
    }
    CARRIED.store(true, std::sync::atomic::Ordering::Relaxed);
    Some(propagator().extract(&carried))
}

/// What a SERVER span records.
pub struct ServerSpan<'a> {
    /// `mcp.method.name`, and what the span is named after.
    pub method: &'a str,
    /// The tool's (or prompt's) name as the client gave it.
    pub target: Option<&'a str>,
    pub protocol_version: Option<&'a str>,
    pub session: Option<&'a str>,
    pub request_id: &'a str,
    pub tenant: &'a str,
}

/// The trace a request runs in.
pub enum InTrace {
    /// A context of OpenTelemetry's: a SERVER span of the gateway's, or,
    /// with tracing off, what came in.
    Context(Context),
    /// A request that is not sampled and carries nothing but its trace.
    Unsampled(Unsampled),
}

/// The trace a request runs in: a SERVER span of the gateway's, child of
/// what came in (when not sampled, an [`Unsampled`] trace or a span context
/// of the gateway's own: the context still flows); without tracing, what
/// came in, unchanged.
pub fn server(parent: Context) -> InTrace {
    let Some(tracer) = TRACER.get() else {
        return InTrace::Context(parent);
    };
    // A span the sampler would drop records nothing: it is not made.
    let unsampled = unsampled(parent.span().span_context());
    if let Some(trace) = unsampled {
        use opentelemetry::baggage::BaggageExt as _;
        let own = {
            let span = parent.span();
            let sc = span.span_context();
            if sc.trace_state() == &TraceState::NONE && parent.baggage().is_empty() {
                let flags = sc.trace_flags().with_sampled(false);
                return InTrace::Unsampled(Unsampled { trace, flags });
            }
            child(sc, trace)
        };
        return InTrace::Context(parent.with_remote_span_context(own));
    }
    // Named and described by [`describe`] once it is known to record.
    let started = tracer
        .span_builder("request")
        .with_kind(SpanKind::Server)
        .start_with_context(tracer, &parent);
    InTrace::Context(parent.with_span(started))
}

/// Whether the span of `cx` records (what describes it is then worth
/// reading). The samplers record exactly what they sample, so an
/// unsampled span is known not to record without asking it.
pub fn records(cx: &Context) -> bool {
    let span = cx.span();
    span.span_context().is_sampled() && span.is_recording()
}

/// Names the SERVER span of `cx` and gives it its attributes.
pub fn describe(cx: &Context, span: &ServerSpan<'_>) {
    let started = cx.span();
    started.update_name(match span.target {
        Some(t) => bounded(&format!("{} {}", span.method, bounded(t))),
        None => bounded(span.method),
    });
    let mut attributes = Vec::with_capacity(8);
    attributes.push(KeyValue::new("mcp.method.name", bounded(span.method)));
    attributes.push(KeyValue::new(
        "jsonrpc.request.id",
        bounded(span.request_id),
    ));
    attributes.push(KeyValue::new("mcp_gateway.tenant", span.tenant.to_owned()));
    if let Some(v) = span.protocol_version {
        attributes.push(KeyValue::new("mcp.protocol.version", bounded(v)));
    }
    if let Some(s) = span.session {
        attributes.push(KeyValue::new("mcp.session.id", bounded(s)));
    }
    if let Some(t) = span.target.filter(|_| is_tool_call(span.method)) {
        attributes.push(KeyValue::new("gen_ai.tool.name", bounded(t)));
        attributes.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
    }
    started.set_attributes(attributes);
}

fn is_tool_call(method: &str) -> bool {
    method == "tools/call" || method == "mcp/executeTool"
}

/// Ends the span of `cx` (if it has one of the gateway's), with
/// `error.type` when the request failed.
pub fn end(cx: &Context, error: Option<&str>) {
    if !enabled() {
        return;
    }
    if !records(cx) {
        return;
    }
    let span = cx.span();
    if let Some(error) = error {
        span.set_attribute(KeyValue::new("error.type", bounded(error)));
        span.set_status(Status::error(bounded(error)));
    }
    span.end();
}

/// Marks the span the current request runs in as failed by the tool
/// itself (a result with `isError: true`): `error.type` is `tool_error`, as
/// the semantic conventions for MCP say.
pub fn tool_error() {
    if !enabled() || in_unsampled() {
        return;
    }
    Context::map_current(|cx| {
        let span = cx.span();
        if span.span_context().is_sampled() && span.is_recording() {
            span.set_attribute(KeyValue::new("error.type", "tool_error"));
            span.set_status(Status::error("tool_error"));
        }
    });
}

/// Records `key` on the span the current request runs in, when it records.
pub fn record(key: &'static str, value: &str) {
    if !enabled() || in_unsampled() {
        return;
    }
    Context::map_current(|cx| {
        let span = cx.span();
        if span.span_context().is_sampled() && span.is_recording() {
            span.set_attribute(KeyValue::new(key, bounded(value)));
        }
    });
}

/// An event on the span the current request runs in (a queue waited on,
/// arguments checked), when it records.
pub fn event(name: &'static str) {
    if !enabled() || in_unsampled() {
        return;
    }
    Context::map_current(|cx| {
        let span = cx.span();
        if span.span_context().is_sampled() && span.is_recording() {
            span.add_event(name, Vec::new());
        }
    });
}

#[cfg(test)]
mod tests;
