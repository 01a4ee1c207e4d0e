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

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::propagation::{
    Extractor, Injector, TextMapCompositePropagator, TextMapPropagator,
};
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
    TraceState, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use opentelemetry_sdk::trace::{
    IdGenerator, RandomIdGenerator, Sampler, SdkTracer, SdkTracerProvider, SpanExporter as _,
};

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

/// What the config file says (`telemetry.traces`); the environment overrides it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TracesFile {
    /// The collector: a base URL (`http://collector:4318`) as
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` takes it.
    pub endpoint: Option<String>,
    /// `grpc` or `http/protobuf`.
    pub protocol: Option<String>,
    pub headers: Vec<(String, String)>,
    pub service_name: Option<String>,
    pub sampler: Option<String>,
    pub sampler_arg: Option<String>,
}

/// The OTLP protocols the exporter speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Grpc,
    HttpProtobuf,
}

/// Where and how spans are exported, once the environment and the file are read.
#[derive(Debug, Clone, PartialEq)]
pub struct TracesSettings {
    /// The full URL spans are sent to (HTTP: ending in `/v1/traces`).
    pub endpoint: String,
    pub protocol: Protocol,
    pub headers: Vec<(String, String)>,
    pub service_name: String,
    pub resource: Vec<(String, String)>,
    pub sampler: SamplerSpec,
    pub timeout: Duration,
    /// Characters an attribute value (and a span's name) keeps at most
    /// (`OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT`, else
    /// `OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT`, else 1024).
    pub attribute_value_limit: usize,
}

/// A sampler as `OTEL_TRACES_SAMPLER` names them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SamplerSpec {
    AlwaysOn,
    AlwaysOff,
    Ratio(f64),
    ParentBased(Root),
}

/// The root sampler of a parent-based one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Root {
    AlwaysOn,
    AlwaysOff,
    Ratio(f64),
}

impl SamplerSpec {
    fn parse(name: &str, arg: Option<&str>) -> Result<SamplerSpec, String> {
        let ratio = || -> Result<f64, String> {
            match arg {
                None => Ok(1.0),
                Some(a) => a
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|r| (0.0..=1.0).contains(r))
                    .ok_or_else(|| {
                        format!("the sampler's argument {a:?} is not a ratio from 0 to 1")
                    }),
            }
        };
        Ok(match name.trim() {
            "always_on" => SamplerSpec::AlwaysOn,
            "always_off" => SamplerSpec::AlwaysOff,
            "traceidratio" => SamplerSpec::Ratio(ratio()?),
            "parentbased_always_on" => SamplerSpec::ParentBased(Root::AlwaysOn),
            "parentbased_always_off" => SamplerSpec::ParentBased(Root::AlwaysOff),
            "parentbased_traceidratio" => SamplerSpec::ParentBased(Root::Ratio(ratio()?)),
            other => return Err(format!("unknown sampler {other:?}")),
        })
    }

    fn sampler(self) -> Sampler {
        let root = |r: Root| match r {
            Root::AlwaysOn => Sampler::AlwaysOn,
            Root::AlwaysOff => Sampler::AlwaysOff,
            Root::Ratio(r) => Sampler::TraceIdRatioBased(r),
        };
        match self {
            SamplerSpec::AlwaysOn => Sampler::AlwaysOn,
            SamplerSpec::AlwaysOff => Sampler::AlwaysOff,
            SamplerSpec::Ratio(r) => Sampler::TraceIdRatioBased(r),
            SamplerSpec::ParentBased(r) => Sampler::ParentBased(Box::new(root(r))),
        }
    }
}

/// `k=v,k2=v2` (values percent-encoded), as `OTEL_EXPORTER_OTLP_HEADERS`
/// and `OTEL_RESOURCE_ATTRIBUTES` write them.
fn pairs(text: &str) -> Vec<(String, String)> {
    text.split(',')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            let v = percent_encoding::percent_decode_str(v.trim())
                .decode_utf8()
                .ok()?;
            Some((k.trim().to_owned(), v.into_owned())).filter(|(k, _)| !k.is_empty())
        })
        .collect()
}

/// The settings the environment (`env`) and the file give; `None` when
/// nothing names an endpoint or `OTEL_TRACES_EXPORTER` is `none`. The
/// environment wins over the file, key by key.
pub fn settings(
    file: &TracesFile,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<TracesSettings>, String> {
    let env = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    if let Some(exporter) = env("OTEL_TRACES_EXPORTER") {
        match exporter.trim() {
            "none" => return Ok(None),
            "otlp" => {}
            other => {
                return Err(format!(
                    "OTEL_TRACES_EXPORTER={other:?}: only otlp and none are supported"
                ));
            }
        }
    }
    let protocol = env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .or_else(|| file.protocol.clone());
    let protocol = match protocol.as_deref().map(str::trim) {
        None | Some("http/protobuf") => Protocol::HttpProtobuf,
        Some("grpc") => Protocol::Grpc,
        Some(other) => {
            return Err(format!(
                "the OTLP protocol {other:?} is not supported (grpc, http/protobuf)"
            ));
        }
    };
    // A signal's own endpoint is used as it is; a base gets the signal's path over HTTP.
    let base = |url: String| match protocol {
        Protocol::Grpc => url,
        Protocol::HttpProtobuf => format!("{}/v1/traces", url.trim_end_matches('/')),
    };
    let endpoint = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT").map(base))
        .or_else(|| file.endpoint.clone().map(base));
    let Some(endpoint) = endpoint else {
        return Ok(None);
    };
    if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
        return Err("the OTLP endpoint must be an http:// or https:// URL".into());
    }
    let mut headers = file.headers.clone();
    for var in [
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    ] {
        for (k, v) in env(var).as_deref().map(pairs).unwrap_or_default() {
            headers.retain(|(have, _)| !have.eq_ignore_ascii_case(&k));
            headers.push((k, v));
        }
    }
    let sampler = env("OTEL_TRACES_SAMPLER").or_else(|| file.sampler.clone());
    let arg = env("OTEL_TRACES_SAMPLER_ARG").or_else(|| file.sampler_arg.clone());
    let sampler = match sampler {
        Some(name) => SamplerSpec::parse(&name, arg.as_deref())?,
        None => SamplerSpec::ParentBased(Root::AlwaysOn),
    };
    let timeout = env("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
        .or_else(|| env("OTEL_EXPORTER_OTLP_TIMEOUT"))
        .and_then(|ms| ms.trim().parse::<u64>().ok())
        .map_or(EXPORT_TIMEOUT, Duration::from_millis);
    let attribute_value_limit = env("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT")
        .or_else(|| env("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT"))
        .and_then(|n| n.trim().parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(ATTRIBUTE_VALUE_LIMIT);
    Ok(Some(TracesSettings {
        endpoint,
        protocol,
        headers,
        service_name: env("OTEL_SERVICE_NAME")
            .or_else(|| file.service_name.clone())
            .unwrap_or_else(|| "mcp-gateway".into()),
        resource: env("OTEL_RESOURCE_ATTRIBUTES")
            .as_deref()
            .map(pairs)
            .unwrap_or_default(),
        sampler,
        timeout,
        attribute_value_limit,
    }))
}

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

/// The trace of a request that is not sampled and carries no state or
/// baggage: all its upstream calls pass on is this trace and its flags,
/// under span ids of their own. Its span would record nothing, so none is
/// made.
#[derive(Debug, Clone, Copy)]
pub struct Unsampled {
    trace: TraceId,
    flags: TraceFlags,
}

thread_local! {
    /// The [`Unsampled`] trace of the request being polled on this thread.
    static UNSAMPLED: std::cell::Cell<Option<Unsampled>> = const { std::cell::Cell::new(None) };
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
fn in_unsampled() -> bool {
    UNSAMPLED.with(|u| u.get().is_some())
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

/// The sampler spans are made with (set once, at start).
static SAMPLER: OnceLock<SamplerSpec> = OnceLock::new();

thread_local! {
    /// The trace id the SDK's next root span takes: the one [`unsampled`]
    /// decided its sampling on.
    static NEXT_TRACE: std::cell::Cell<Option<TraceId>> = const { std::cell::Cell::new(None) };
}

/// The SDK's random ids, except a root's trace id when [`unsampled`] drew
/// it (so that the SDK's sampler decides on the same id).
#[derive(Debug)]
struct Ids;

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
fn unsampled(parent: &SpanContext) -> Option<TraceId> {
    unsampled_by(*SAMPLER.get()?, parent)
}

fn unsampled_by(spec: SamplerSpec, parent: &SpanContext) -> Option<TraceId> {
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
fn sampled_at(ratio: f64, trace: TraceId) -> bool {
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

fn new_span_id() -> SpanId {
    RandomIdGenerator::default().new_span_id()
}

/// An unsampled child of `parent` in `trace`: a new span id, the state
/// carried on.
fn child(parent: &SpanContext, trace: TraceId) -> SpanContext {
    SpanContext::new(
        trace,
        new_span_id(),
        parent.trace_flags().with_sampled(false),
        false,
        parent.trace_state().clone(),
    )
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
const TRACEPARENT_AT: usize = 15;

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
fn write_traceparent(sc: &SpanContext, out: &mut [u8]) {
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
pub(super) fn add_ids(out: &mut String, trace: &str, span: &str) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_cut_between_characters_to_the_limit() {
        // The default limit: the process sets no other in unit tests.
        assert_eq!(bounded("short"), "short");
        let long = "é".repeat(ATTRIBUTE_VALUE_LIMIT + 10);
        let cut = bounded(&long);
        assert_eq!(cut.chars().count(), ATTRIBUTE_VALUE_LIMIT);
        assert!(long.starts_with(&cut));
    }

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| vars.get(k).cloned()
    }

    #[test]
    fn the_environment_wins_over_the_file_and_nothing_is_exported_without_an_endpoint() {
        let file = TracesFile {
            endpoint: Some("http://file:4318".into()),
            service_name: Some("from-file".into()),
            headers: vec![("x-a".into(), "1".into())],
            ..TracesFile::default()
        };
        assert_eq!(settings(&TracesFile::default(), env(&[])), Ok(None));
        let s = settings(&file, env(&[])).unwrap().unwrap();
        assert_eq!(s.endpoint, "http://file:4318/v1/traces");
        assert_eq!(s.protocol, Protocol::HttpProtobuf);
        assert_eq!(s.service_name, "from-file");
        assert_eq!(s.sampler, SamplerSpec::ParentBased(Root::AlwaysOn));
        let s = settings(
            &file,
            env(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4317"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ("OTEL_SERVICE_NAME", "gw-1"),
                (
                    "OTEL_EXPORTER_OTLP_HEADERS",
                    "x-a=2,authorization=Bearer%20t",
                ),
                ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test"),
                ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
            ]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.endpoint, "http://env:4317");
        assert_eq!(s.protocol, Protocol::Grpc);
        assert_eq!(s.service_name, "gw-1");
        assert_eq!(
            s.headers,
            [
                ("x-a".to_owned(), "2".to_owned()),
                ("authorization".into(), "Bearer t".into())
            ]
        );
        assert_eq!(
            s.resource,
            [("deployment.environment".to_owned(), "test".to_owned())]
        );
        assert_eq!(s.sampler, SamplerSpec::ParentBased(Root::Ratio(0.25)));
        let own = settings(
            &file,
            env(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:4318/custom")]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(own.endpoint, "http://t:4318/custom");
        assert_eq!(
            settings(&file, env(&[("OTEL_TRACES_EXPORTER", "none")])),
            Ok(None)
        );
        for bad in [
            ("OTEL_TRACES_EXPORTER", "zipkin"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_TRACES_SAMPLER", "sometimes"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317"),
        ] {
            assert!(settings(&file, env(&[bad])).is_err(), "{bad:?}");
        }
        assert!(
            settings(
                &file,
                env(&[
                    ("OTEL_TRACES_SAMPLER", "traceidratio"),
                    ("OTEL_TRACES_SAMPLER_ARG", "2")
                ])
            )
            .is_err()
        );
    }

    #[test]
    fn sampling_is_decided_as_the_sdk_decides_it() {
        use opentelemetry::trace::{TraceFlags, TraceState};
        use opentelemetry_sdk::trace::ShouldSample as _;
        let sdk = |spec: SamplerSpec, parent: &SpanContext, trace: TraceId| {
            // A root comes with no span at all.
            let cx = if parent.is_valid() {
                Context::new().with_remote_span_context(parent.clone())
            } else {
                Context::new()
            };
            let decided = spec.sampler().should_sample(
                Some(&cx),
                trace,
                "request",
                &SpanKind::Server,
                &[],
                &[],
            );
            decided.decision == opentelemetry_sdk::trace::SamplingDecision::RecordAndSample
        };
        let parent = |flags: u8| {
            SpanContext::new(
                RandomIdGenerator::default().new_trace_id(),
                RandomIdGenerator::default().new_span_id(),
                TraceFlags::new(flags),
                true,
                TraceState::from_key_value([("k", "v")]).unwrap(),
            )
        };
        let specs = [
            SamplerSpec::AlwaysOn,
            SamplerSpec::AlwaysOff,
            SamplerSpec::Ratio(0.3),
            SamplerSpec::ParentBased(Root::AlwaysOn),
            SamplerSpec::ParentBased(Root::AlwaysOff),
            SamplerSpec::ParentBased(Root::Ratio(0.3)),
        ];
        let mut sampled = 0;
        for _ in 0..200 {
            for spec in specs {
                for p in [parent(1), parent(0), SpanContext::empty_context()] {
                    NEXT_TRACE.with(|next| next.set(None));
                    let own = unsampled_by(spec, &p);
                    // The trace the decision was made on: the parent's, or the
                    // root's that the SDK's next span takes.
                    let trace = match own {
                        Some(own) => own,
                        None if p.is_valid() => p.trace_id(),
                        None => NEXT_TRACE
                            .with(std::cell::Cell::get)
                            .unwrap_or_else(|| RandomIdGenerator::default().new_trace_id()),
                    };
                    assert_eq!(own.is_none(), sdk(spec, &p, trace), "{spec:?} {p:?}");
                    if let Some(own) = own {
                        let own = child(&p, own);
                        assert!(!own.is_sampled() && own.is_valid());
                        assert_ne!(own.span_id(), p.span_id());
                        if p.is_valid() {
                            assert_eq!(own.trace_id(), p.trace_id());
                            assert_eq!(own.trace_state().header(), "k=v");
                        }
                    } else {
                        sampled += 1;
                    }
                }
            }
        }
        // Ratios decided both ways over the 200 rounds.
        assert!(sampled > 200 * 4 && sampled < 200 * 10, "{sampled}");
    }

    #[test]
    fn context_comes_from_meta_before_headers_and_goes_out_as_it_came_when_off() {
        let meta_parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let header_parent = "00-11111111111111111111111111111111-2222222222222222-01";
        let header = |k: &str| (k == "traceparent").then_some(header_parent);
        let from_meta =
            incoming([Some(meta_parent.into()), Some("k=v".into()), None], header).unwrap();
        let sc = from_meta.span().span_context().clone();
        assert_eq!(
            sc.trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(sc.span_id().to_string(), "b7ad6b7169203331");
        assert!(sc.is_remote() && sc.is_sampled());
        let out = {
            let _in = from_meta.clone().attach();
            client("tools/call", Some("echo"), "up").unwrap()
        };
        assert_eq!(
            out.fields().collect::<Vec<_>>(),
            [
                ("traceparent", meta_parent.as_bytes()),
                ("tracestate", b"k=v".as_slice())
            ]
        );
        let mut head = Vec::new();
        out.write_head(|b| head.extend_from_slice(b));
        assert_eq!(
            String::from_utf8(head.clone()).unwrap(),
            format!("traceparent: {meta_parent}\r\ntracestate: k=v\r\n")
        );
        assert_eq!(head.len(), out.head_len());
        let from_header = incoming([None, None, None], header).unwrap();
        assert_eq!(
            from_header.span().span_context().trace_id().to_string(),
            "11111111111111111111111111111111"
        );
        // Nothing came, tracing is off: nothing to do.
        assert!(incoming([None, None, None], |_| None).is_none());
    }
}
