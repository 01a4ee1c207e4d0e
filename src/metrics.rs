//! Prometheus metrics. One registry per gateway instance (tests run several in
//! one process). Labels come from closed sets or configured names only.

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder,
};

const PREFIX: &str = "mcp_gateway";

/// The `protocol` label's values: MCP v1.0, the Model Context Protocol.
pub const PROTOCOLS: [&str; 2] = ["v1", "modelcontextprotocol"];

/// Latency buckets from 100 µs to 60 s: tool calls range from echo to long jobs.
const BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0,
];

/// Every metric the gateway exports; a cheap clone.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    /// Agent requests by tenant, method, outcome.
    pub requests: IntCounterVec,
    /// Agent requests by the protocol they came in (closed set: v1, modelcontextprotocol).
    pub requests_by_protocol: IntCounterVec,
    /// `requests_by_protocol` of each of [`PROTOCOLS`], resolved once.
    pub by_protocol: [prometheus::IntCounter; 2],
    pub request_seconds: HistogramVec,
    /// `request_seconds` of MCP v1.0's `mcp/executeTool`, resolved once:
    /// every tool call of that face observes it.
    pub execute_seconds: prometheus::Histogram,
    /// `request_seconds` of the Model Context Protocol's `tools/call`, resolved once.
    pub call_seconds: prometheus::Histogram,
    /// HTTP responses on the agent listener by status code (closed set).
    pub http_responses: IntCounterVec,
    /// Upstream calls by upstream, method, outcome.
    pub upstream_calls: IntCounterVec,
    pub upstream_seconds: HistogramVec,
    pub upstream_up: IntGaugeVec,
    pub upstream_restarts: IntCounterVec,
    pub upstream_protocol_errors: IntCounterVec,
    pub definitions_listed: IntGaugeVec,
    pub definitions_dropped: IntCounterVec,
    pub definitions_unmapped: IntGaugeVec,
    pub sessions_open: IntGaugeVec,
    pub upstream_log_lines_dropped: IntCounterVec,
    pub requests_limited: IntCounterVec,
    /// Audit lines of refused calls left out: a tenant's beyond its share of the log.
    pub audit_lines_dropped: IntCounterVec,
    pub definitions_quarantined: IntGaugeVec,
    /// Review decisions on quarantined definitions (`approved`, `rejected`).
    pub pin_decisions: IntCounterVec,
    /// Tool results cut to their tenant's output budget.
    pub results_truncated: IntCounterVec,
    /// Bytes of cut results' pages a tenant holds (on this replica, or in the store).
    pub spill_bytes: IntGaugeVec,
    /// Cached results looked up, by outcome (`hit`, `miss`).
    pub result_cache: IntCounterVec,
    /// Cached results a tenant holds on this replica (or in the store).
    pub result_cache_entries: IntGaugeVec,
    /// Requests to upstreams' authorization servers, by grant and outcome.
    pub upstream_token_requests: IntCounterVec,
    pub upstream_token_seconds: HistogramVec,
    /// Upstream credentials looked up, by result (`hit`, `miss`).
    pub upstream_token_cache: IntCounterVec,
    /// Upstream credentials held.
    pub upstream_tokens_cached: IntGaugeVec,
    /// Users' consents, by outcome (started, connected, refused, revoked).
    pub upstream_consents: IntCounterVec,
    pub config_reloads: IntCounterVec,
    pub upstream_in_flight: IntGaugeVec,
    /// Requests upstreams sent the gateway (a `ping`, ...), by what became of them.
    pub server_requests: IntCounterVec,
    /// Requests of upstreams forwarded to a client, waiting for its answer.
    pub server_requests_waiting: prometheus::IntGauge,
    /// Children running for client sessions, per upstream (`per_session`).
    pub session_children: IntGaugeVec,
    /// Children (or HTTP sessions) running for one tenant each, per upstream.
    pub tenant_children: IntGaugeVec,
    /// Answers clients sent to requests they were never sent (or no longer wait), dropped.
    pub stray_answers: prometheus::IntCounter,
    /// Reports (progress, log lines) a call dropped because its client did
    /// not read them within its bytes or its tenant's.
    pub reports_dropped: prometheus::IntCounter,
    /// Spans that never reached the collector (queue full, export failed).
    pub trace_spans_dropped: prometheus::IntCounter,
    /// Connections the agent listener failed to accept (descriptors exhausted, ...).
    pub accept_errors: IntCounterVec,
    /// 1 while the shared store answers (0 without one).
    pub store_up: prometheus::IntGauge,
    /// Replicas seen alive in the shared store at its last beat.
    pub store_replicas: prometheus::IntGauge,
    /// 1 when a shared store is configured.
    pub store_configured: prometheus::IntGauge,
    /// Time a call to the shared store took.
    pub store_seconds: prometheus::Histogram,
    /// Calls to the shared store that failed, by kind (timeout, connection, error).
    pub store_errors: IntCounterVec,
    /// Admissions decided on this replica's share because the store could not be asked, by limit.
    pub store_fallbacks: IntCounterVec,
    /// Tokens of a tenant's shared rate this replica holds in its lease.
    pub store_leased_tokens: IntGaugeVec,
    /// Places this replica borrowed from a tenant's pool in the store, by pool.
    pub store_borrowed: IntGaugeVec,
    /// Follows the log writer's count (`telemetry::writer::dropped`).
    log_lines_dropped: IntCounterVec,
    /// Progressive discovery's (`tools.discovery`).
    pub discovery: DiscoveryMetrics,
}

/// What progressive discovery counts.
#[derive(Clone)]
pub struct DiscoveryMetrics {
    /// `search_tools` calls, by tenant and outcome (`hits`, `empty`).
    pub searches: IntCounterVec,
    pub search_seconds: prometheus::Histogram,
    /// `call_tool` calls, by tenant and outcome (as requests').
    pub calls: IntCounterVec,
    /// Tools loaded into sessions (`load_tools`), by tenant.
    pub loaded: IntCounterVec,
    /// Tools in a tenant's search index.
    pub indexed: IntGaugeVec,
}

impl DiscoveryMetrics {
    fn new(r: &Registry) -> Self {
        let search_seconds = histogram(
            r,
            "discovery_search_duration_seconds",
            "How long search_tools took to answer (tools.discovery).",
            &[],
        )
        .with_label_values(&[] as &[&str]);
        DiscoveryMetrics {
            searches: counter(
                r,
                "discovery_searches_total",
                "search_tools calls, by outcome (hits, empty).",
                &["tenant", "outcome"],
            ),
            search_seconds,
            calls: counter(
                r,
                "discovery_calls_total",
                "call_tool calls, by outcome (as requests').",
                &["tenant", "outcome"],
            ),
            loaded: counter(
                r,
                "discovery_loaded_total",
                "Tools loaded into sessions' listings (load_tools).",
                &["tenant"],
            ),
            indexed: gauge(
                r,
                "discovery_indexed_tools",
                "Tools in the tenant's search index.",
                &["tenant"],
            ),
        }
    }
}

fn counter(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help).namespace(PREFIX), labels)
        .unwrap_or_else(|e| unreachable!("static metric definition: {e}"));
    let _ = r.register(Box::new(c.clone()));
    c
}

fn gauge(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help).namespace(PREFIX), labels)
        .unwrap_or_else(|e| unreachable!("static metric definition: {e}"));
    let _ = r.register(Box::new(g.clone()));
    g
}

fn int_gauge(r: &Registry, name: &str, help: &str) -> prometheus::IntGauge {
    let g = prometheus::IntGauge::with_opts(Opts::new(name, help).namespace(PREFIX))
        .unwrap_or_else(|e| unreachable!("static metric definition: {e}"));
    let _ = r.register(Box::new(g.clone()));
    g
}

fn int_counter(r: &Registry, name: &str, help: &str) -> prometheus::IntCounter {
    let c = prometheus::IntCounter::with_opts(Opts::new(name, help).namespace(PREFIX))
        .unwrap_or_else(|e| unreachable!("static metric definition: {e}"));
    let _ = r.register(Box::new(c.clone()));
    c
}

fn histogram(r: &Registry, name: &str, help: &str, labels: &[&str]) -> HistogramVec {
    let opts = HistogramOpts::new(name, help)
        .namespace(PREFIX)
        .buckets(BUCKETS.to_vec());
    let h = HistogramVec::new(opts, labels)
        .unwrap_or_else(|e| unreachable!("static metric definition: {e}"));
    let _ = r.register(Box::new(h.clone()));
    h
}

impl Metrics {
    pub fn new() -> Self {
        let r = Registry::new();
        #[cfg(target_os = "linux")]
        {
            let _ = r.register(Box::new(
                prometheus::process_collector::ProcessCollector::for_self(),
            ));
        }
        let requests_by_protocol = counter(
            &r,
            "requests_by_protocol_total",
            "Agent JSON-RPC requests by the protocol they came in: v1 (MCP v1.0) or modelcontextprotocol.",
            &["protocol"],
        );
        let request_seconds = histogram(
            &r,
            "request_duration_seconds",
            "Time to answer an agent JSON-RPC request.",
            &["method"],
        );
        Self {
            requests: counter(
                &r,
                "requests_total",
                "Agent JSON-RPC requests by tenant, method and outcome.",
                &["tenant", "method", "outcome"],
            ),
            by_protocol: PROTOCOLS.map(|p| requests_by_protocol.with_label_values(&[p])),
            execute_seconds: request_seconds.with_label_values(&["mcp/executeTool"]),
            call_seconds: request_seconds.with_label_values(&["tools/call"]),
            requests_by_protocol,
            request_seconds,
            http_responses: counter(
                &r,
                "http_responses_total",
                "HTTP responses on the agent listener by status code.",
                &["status"],
            ),
            upstream_calls: counter(
                &r,
                "upstream_calls_total",
                "Calls to upstreams by upstream, method and outcome.",
                &["upstream", "method", "outcome"],
            ),
            upstream_seconds: histogram(
                &r,
                "upstream_call_duration_seconds",
                "Time an upstream took to answer a call.",
                &["upstream", "method"],
            ),
            upstream_up: gauge(
                &r,
                "upstream_up",
                "1 when the upstream has completed its handshake and is serving.",
                &["upstream"],
            ),
            upstream_restarts: counter(
                &r,
                "upstream_restarts_total",
                "Times an upstream connection or child was started again.",
                &["upstream"],
            ),
            upstream_protocol_errors: counter(
                &r,
                "upstream_protocol_errors_total",
                "Messages from an upstream that broke the protocol.",
                &["upstream"],
            ),
            definitions_listed: gauge(
                &r,
                "definitions_listed",
                "Definitions an upstream currently contributes to listings.",
                &["upstream", "kind"],
            ),
            definitions_dropped: counter(
                &r,
                "definitions_dropped_total",
                "Definitions left out of listings because they break the spec's schemas (or cannot be mapped).",
                &["upstream", "kind"],
            ),
            definitions_unmapped: gauge(
                &r,
                "definitions_unmapped",
                "Definitions of a Model Context Protocol upstream's last listing that MCP v1.0 cannot carry, by reason.",
                &["upstream", "kind", "reason"],
            ),
            sessions_open: gauge(
                &r,
                "sessions_open",
                "Agent sessions open now (HTTP and stdio).",
                &["tenant"],
            ),
            upstream_in_flight: gauge(
                &r,
                "upstream_in_flight",
                "Calls sent to an upstream and not answered, timed out or cancelled yet.",
                &["upstream"],
            ),
            upstream_log_lines_dropped: counter(
                &r,
                "upstream_log_lines_dropped_total",
                "Lines of an upstream's stderr not logged because it wrote too fast.",
                &["upstream"],
            ),
            requests_limited: counter(
                &r,
                "requests_limited_total",
                "Agent requests refused because the tenant was over its rate or concurrency limit.",
                &["tenant", "reason"],
            ),
            audit_lines_dropped: counter(
                &r,
                "audit_lines_dropped_total",
                "Audit lines of a tenant's refused calls left out: past 10 a second (burst 20), so a flood cannot flood the log.",
                &["tenant"],
            ),
            definitions_quarantined: gauge(
                &r,
                "definitions_quarantined",
                "Tools of a pinned upstream whose definition matches no pin, waiting for review or rejected.",
                &["upstream"],
            ),
            pin_decisions: counter(
                &r,
                "pin_decisions_total",
                "Review decisions on quarantined tool definitions made here, by decision (approved, rejected).",
                &["decision"],
            ),
            results_truncated: counter(
                &r,
                "results_truncated_total",
                "Tool results cut to the tenant's output budget (tools.output), the rest kept in pages.",
                &["tenant"],
            ),
            spill_bytes: gauge(
                &r,
                "spill_bytes",
                "Bytes of cut results' pages the tenant holds: on this replica, or in the shared store.",
                &["tenant"],
            ),
            result_cache: counter(
                &r,
                "result_cache_total",
                "Lookups of cached tool results (tools.cache), by outcome (hit, miss).",
                &["tenant", "outcome"],
            ),
            result_cache_entries: gauge(
                &r,
                "result_cache_entries",
                "Cached tool results the tenant holds on this replica.",
                &["tenant"],
            ),
            upstream_token_requests: counter(
                &r,
                "upstream_token_requests_total",
                "Requests to upstreams' authorization servers, by grant (client_credentials, ...) and outcome (ok, or why not).",
                &["upstream", "grant", "outcome"],
            ),
            upstream_token_seconds: histogram(
                &r,
                "upstream_token_request_duration_seconds",
                "How long requests to upstreams' authorization servers took.",
                &["upstream", "grant"],
            ),
            upstream_token_cache: counter(
                &r,
                "upstream_token_cache_total",
                "Upstream credentials looked up: hit (one in force was used), miss (one was obtained).",
                &["upstream", "result"],
            ),
            discovery: DiscoveryMetrics::new(&r),
            upstream_tokens_cached: gauge(
                &r,
                "upstream_tokens_cached",
                "Upstream credentials held.",
                &["upstream"],
            ),
            upstream_consents: counter(
                &r,
                "upstream_consents_total",
                "Users' consents to upstreams, by outcome (started, connected, refused, revoked).",
                &["upstream", "outcome"],
            ),
            config_reloads: counter(
                &r,
                "config_reloads_total",
                "Configuration reloads by outcome (applied, rejected).",
                &["outcome"],
            ),
            server_requests: counter(
                &r,
                "server_requests_total",
                "Requests from upstreams to the gateway, by outcome: answered (ping, by the gateway), forwarded (to the client whose call it relates to, and its answer delivered), unanswered (the client did not answer within gateway.server_request_timeout_ms, or its call ended first: the upstream is answered with an error), withdrawn (the upstream cancelled it first: the client is told), refused (-32601: no client it can be attributed to, or one that cannot be asked), dropped (over gateway.limits.max_server_requests), failed (the answer could not be delivered in time).",
                &["outcome"],
            ),
            server_requests_waiting: int_gauge(
                &r,
                "server_requests_waiting",
                "Requests of upstreams forwarded to clients and waiting for their answers.",
            ),
            session_children: gauge(
                &r,
                "session_children",
                "Stdio children running for one client session each (upstreams with per_session: true).",
                &["upstream"],
            ),
            tenant_children: gauge(
                &r,
                "tenant_children",
                "Stdio children, or Streamable HTTP sessions, running for one tenant each (upstreams listed by several tenants, without shared: true).",
                &["upstream"],
            ),
            reports_dropped: int_counter(
                &r,
                "reports_dropped_total",
                "Progress notifications and log lines of calls dropped (the oldest first) because their client did not read them within a call's bytes (1 MiB) or its tenant's (16 MiB).",
            ),
            stray_answers: int_counter(
                &r,
                "stray_answers_total",
                "Answers from clients to requests the gateway did not send them or no longer waits for; dropped (202).",
            ),
            trace_spans_dropped: int_counter(
                &r,
                "trace_spans_dropped_total",
                "Spans that never reached the trace collector: its queue was full, or it refused or did not take their batch in time.",
            ),
            accept_errors: counter(
                &r,
                "accept_errors_total",
                "Connections the agent or admin listener failed to accept (out of file descriptors, ...); the listener backs off and goes on.",
                &[],
            ),
            store_up: int_gauge(
                &r,
                "store_up",
                "1 while the shared store (gateway.store) answers; 0 while it does not, or when there is none.",
            ),
            store_configured: int_gauge(
                &r,
                "store_configured",
                "1 when a shared store (gateway.store) is configured, 0 when every replica keeps its own limits and state.",
            ),
            store_replicas: int_gauge(
                &r,
                "store_replicas",
                "Replicas seen alive in the shared store at its last beat (each limit's share while the store is down divides by it).",
            ),
            store_seconds: {
                let opts = HistogramOpts::new(
                    "store_call_duration_seconds",
                    "Time a call to the shared store took.",
                )
                .namespace(PREFIX)
                .buckets(BUCKETS.to_vec());
                let h = prometheus::Histogram::with_opts(opts)
                    .unwrap_or_else(|e| unreachable!("static metric definition: {e}"));
                let _ = r.register(Box::new(h.clone()));
                h
            },
            store_errors: counter(
                &r,
                "store_errors_total",
                "Calls to the shared store that failed: timeout, connection, error (the store answered an error).",
                &["kind"],
            ),
            store_fallbacks: counter(
                &r,
                "store_fallbacks_total",
                "Admissions decided on this replica's share of a limit (rate, concurrency, sessions, connections) because the shared store could not be asked.",
                &["limit"],
            ),
            store_leased_tokens: gauge(
                &r,
                "store_leased_tokens",
                "Tokens of a tenant's shared rate limit this replica holds in its lease, not spent yet.",
                &["tenant"],
            ),
            store_borrowed: gauge(
                &r,
                "store_borrowed",
                "Places this replica borrowed from a tenant's pool in the shared store past its own share, by pool (calls, sessions, connections).",
                &["tenant", "pool"],
            ),
            log_lines_dropped: counter(
                &r,
                "log_lines_dropped_total",
                "Log lines (audit lines included) dropped because the log writer was 4 MiB behind (stderr blocked or too slow).",
                &[],
            ),
            registry: r,
        }
        .init()
    }

    /// Series that exist from the start, at zero.
    fn init(self) -> Self {
        for outcome in ["applied", "rejected"] {
            self.config_reloads.with_label_values(&[outcome]);
        }
        self.log_lines_dropped.with_label_values::<&str>(&[]);
        self.accept_errors.with_label_values::<&str>(&[]);
        for kind in ["timeout", "connection", "error"] {
            self.store_errors.with_label_values(&[kind]);
        }
        for limit in ["rate", "concurrency", "sessions", "connections"] {
            self.store_fallbacks.with_label_values(&[limit]);
        }
        for outcome in ServerRequest::ALL {
            self.server_requests.with_label_values(&[outcome.as_str()]);
        }
        for decision in ["approved", "rejected"] {
            self.pin_decisions.with_label_values(&[decision]);
        }
        self
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let dropped = self.log_lines_dropped.with_label_values::<&str>(&[]);
        let behind = crate::telemetry::writer::dropped().saturating_sub(dropped.get());
        if behind > 0 {
            dropped.inc_by(behind);
        }
        let mut out = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

/// What became of a request an upstream sent the gateway (a closed label set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerRequest {
    /// `ping`, answered `{}`.
    Answered,
    /// Forwarded to the client whose call it relates to; its answer delivered.
    Forwarded,
    /// Forwarded, and not answered in time (or the call ended first).
    Unanswered,
    /// Forwarded, and cancelled by the upstream before the client answered.
    Withdrawn,
    /// Answered -32601: a request the gateway does not serve.
    Refused,
    /// Over the bound of requests being answered at once: not answered.
    Dropped,
    /// The answer could not be delivered within the upstream's timeout.
    Failed,
}

impl ServerRequest {
    pub const ALL: [ServerRequest; 7] = [
        ServerRequest::Answered,
        ServerRequest::Forwarded,
        ServerRequest::Unanswered,
        ServerRequest::Withdrawn,
        ServerRequest::Refused,
        ServerRequest::Dropped,
        ServerRequest::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ServerRequest::Answered => "answered",
            ServerRequest::Forwarded => "forwarded",
            ServerRequest::Unanswered => "unanswered",
            ServerRequest::Withdrawn => "withdrawn",
            ServerRequest::Refused => "refused",
            ServerRequest::Dropped => "dropped",
            ServerRequest::Failed => "failed",
        }
    }
}

impl Metrics {
    /// Counts a request from an upstream.
    pub fn server_request(&self, outcome: ServerRequest) {
        self.server_requests
            .with_label_values(&[outcome.as_str()])
            .inc();
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
