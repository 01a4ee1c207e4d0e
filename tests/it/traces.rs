//! One trace from the client to the upstream: the gateway binary exports
//! its spans over OTLP to a real collector (rotel, from PyPI), which passes
//! them on to a receiver the test reads (tests/fixtures/otlp_sink.py); the
//! upstream (the official Python SDK's server) says what trace context it
//! was called with, in `_meta` and, over HTTP, the `traceparent` header.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::*;

/// A trace the client started: its trace id and the client's span.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// rotel on two loopback ports, forwarding to the sink, which writes
/// `spans.jsonl`; both ended (by pid) when dropped.
struct Collector {
    rotel: Child,
    _sink: Server,
    grpc: u16,
    http: u16,
    spans: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.rotel.kill();
        let _ = self.rotel.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn listening(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

impl Collector {
    fn start() -> Collector {
        servers();
        let dir = tempfile::tempdir().unwrap();
        let spans = dir.path().join("spans.jsonl");
        let mut sink = Command::new(venv().join("bin/python"));
        sink.arg(root().join("tests/fixtures/otlp_sink.py"))
            .arg(&spans);
        let sink = start_server(sink, "PORT ", false);
        let sink_url = sink.url.trim_end_matches("/mcp").to_owned();
        let agent = venv().join("lib/python3.11/site-packages/rotel/rotel-agent");
        // rotel cannot take port 0: free ports are picked, and picked again
        // if another process took one first.
        for _ in 0..5 {
            let (grpc, http) = (free_port(), free_port());
            let mut rotel = Command::new(&agent)
                .args(["start", "--otlp-grpc-endpoint"])
                .arg(format!("127.0.0.1:{grpc}"))
                .arg("--otlp-http-endpoint")
                .arg(format!("127.0.0.1:{http}"))
                .args(["--exporter", "otlp", "--otlp-exporter-protocol", "http"])
                .arg("--otlp-exporter-endpoint")
                .arg(&sink_url)
                .args(["--batch-timeout", "10ms"])
                .env("NO_COLOR", "1")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let deadline = Instant::now() + Duration::from_secs(15);
            while Instant::now() < deadline {
                if listening(grpc) && listening(http) {
                    return Collector {
                        rotel,
                        _sink: sink,
                        grpc,
                        http,
                        spans,
                        _dir: dir,
                    };
                }
                if rotel.try_wait().unwrap().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = rotel.kill();
            let _ = rotel.wait();
        }
        panic!("rotel did not start");
    }

    fn spans(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.spans)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The spans of trace `trace`, once `n` of them have come (within 20 s).
    fn trace(&self, trace: &str, n: usize) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let spans: Vec<Value> = self
                .spans()
                .into_iter()
                .filter(|s| s["trace_id"] == trace)
                .collect();
            if spans.len() >= n || Instant::now() > deadline {
                return spans;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The gateway binary with an HTTP upstream and a stdio upstream, both the
/// Python SDK's server, exporting to `endpoint` with `protocol`.
fn gateway(
    endpoint: &str,
    protocol: &str,
    extra: &[(&str, &str)],
) -> (Process, Gateway, Server, tempfile::TempDir) {
    let upstream = sdk_server();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.yaml");
    std::fs::write(
        &path,
        json!({
            "gateway": {"id": "gw"},
            "upstreams": {"h": http(&upstream.url), "s": sdk_stdio()},
            "tenants": {"a": tenant("ka", &["h", "s"])},
        })
        .to_string(),
    )
    .unwrap();
    let mut env = vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol),
        ("OTEL_SERVICE_NAME", "gw-under-test"),
    ];
    env.extend_from_slice(extra);
    let mut p = Process::spawn_with_env(&["serve", "--config", path.to_str().unwrap()], &env);
    let agent = p.addr("agent listener bound");
    // Each upstream's own line: a line already seen satisfies a second wait.
    for name in ["h", "s"] {
        p.wait_log(name, |v| {
            v["message"] == "upstream ready" && v["upstream"] == name
        });
    }
    let gw = Gateway::at(&agent);
    (p, gw, upstream, dir)
}

async fn post(gw: &Gateway, headers: &[(&str, &str)], body: Value) -> Value {
    let mut request = gw
        .client
        .post(&gw.url)
        .bearer_auth("ka")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = within(request.body(body.to_string()).send()).await.unwrap();
    let text = within(response.text()).await.unwrap();
    serde_json::from_str(&text).unwrap_or_else(|_| panic!("{text}"))
}

/// What the `traced` tool says it was called with.
fn seen(answer: &Value) -> Value {
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"));
    serde_json::from_str(text).unwrap()
}

fn traceparent(trace: &str, span: &str, sampled: bool) -> String {
    format!("00-{trace}-{span}-{}", if sampled { "01" } else { "00" })
}

/// The span id in a `traceparent`.
fn parent_in(traceparent: &str) -> &str {
    traceparent.split('-').nth(2).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_is_one_trace_from_the_client_through_the_gateway_to_each_upstream() {
    let collector = Collector::start();
    let endpoint = format!("http://127.0.0.1:{}", collector.http);
    let (mut p, gw, _upstream, _dir) = gateway(&endpoint, "http/protobuf", &[]);
    let secret = "secret-argument-7f3e";
    // The client's context in `_meta` (SEP-414), an HTTP header beside it
    // that `_meta` wins over, and a call to each upstream.
    let client = traceparent(TRACE, CLIENT_SPAN, true);
    let other = traceparent("11111111111111111111111111111111", "2222222222222222", true);
    let mut seen_by = Vec::new();
    for tool in ["h__traced", "s__traced"] {
        let answer = post(
            &gw,
            &[("traceparent", &other)],
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": tool, "arguments": {"secret": secret},
                "_meta": {"traceparent": client, "tracestate": "vendor=1"}}}),
        )
        .await;
        seen_by.push(seen(&answer));
    }
    let spans = collector.trace(TRACE, 4);
    assert_eq!(spans.len(), 4, "{spans:#?}");
    let servers: Vec<&Value> = spans
        .iter()
        .filter(|s| s["kind"] == "SPAN_KIND_SERVER")
        .collect();
    let clients: Vec<&Value> = spans
        .iter()
        .filter(|s| s["kind"] == "SPAN_KIND_CLIENT")
        .collect();
    assert_eq!((servers.len(), clients.len()), (2, 2), "{spans:#?}");
    for (tool, upstream, seen) in [
        ("h__traced", "h", &seen_by[0]),
        ("s__traced", "s", &seen_by[1]),
    ] {
        let server = servers
            .iter()
            .find(|s| s["name"] == format!("tools/call {tool}"))
            .unwrap_or_else(|| panic!("{spans:#?}"));
        assert_eq!(server["parent_span_id"], CLIENT_SPAN, "{server}");
        let a = &server["attributes"];
        assert_eq!(a["mcp.method.name"], "tools/call", "{server}");
        assert_eq!(a["gen_ai.tool.name"], tool, "{server}");
        assert_eq!(a["gen_ai.operation.name"], "execute_tool", "{server}");
        assert_eq!(a["jsonrpc.request.id"], "1", "{server}");
        assert_eq!(a["mcp_gateway.tenant"], "a", "{server}");
        assert_eq!(a["mcp_gateway.upstream"], upstream, "{server}");
        assert!(
            server["events"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e == "arguments validated"),
            "{server}"
        );
        assert_eq!(
            server["resource"]["service.name"], "gw-under-test",
            "{server}"
        );
        // Its child: the upstream dispatch, under the upstream's own name.
        let client_span = clients
            .iter()
            .find(|c| c["parent_span_id"] == server["span_id"])
            .unwrap_or_else(|| panic!("{spans:#?}"));
        assert_eq!(client_span["name"], "tools/call traced", "{client_span}");
        assert_eq!(client_span["attributes"]["mcp_gateway.upstream"], upstream);
        // The upstream was called in the client span's context.
        let got = seen["traceparent"]
            .as_str()
            .unwrap_or_else(|| panic!("{seen}"));
        assert_eq!(
            got,
            traceparent(TRACE, client_span["span_id"].as_str().unwrap(), true)
        );
        assert_eq!(seen["tracestate"], "vendor=1", "{seen}");
        if upstream == "h" {
            assert_eq!(seen["header"], got, "{seen}");
        }
    }
    // Nothing sensitive in any span.
    let all = serde_json::to_string(&collector.spans()).unwrap();
    for secret in [secret, "ka", "Bearer"] {
        assert!(!all.contains(secret), "{secret} in {all}");
    }
    // The audit line names the trace and the gateway's span.
    let audit = p.wait_log("audit", |v| v["target"] == "mcp_gateway::audit");
    assert_eq!(audit["trace_id"], TRACE, "{audit}");
    assert!(
        servers.iter().any(|s| s["span_id"] == audit["span_id"]),
        "{audit}"
    );
    assert!(p.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_era_and_mcp_v1_carry_the_trace_over_grpc_too() {
    let collector = Collector::start();
    let endpoint = format!("http://127.0.0.1:{}", collector.grpc);
    let (p, gw, _upstream, _dir) = gateway(&endpoint, "grpc", &[]);
    let client = traceparent(TRACE, CLIENT_SPAN, true);
    // A 2026-07-28 request, its context in the header only.
    let stateless = post(
        &gw,
        &[
            ("traceparent", &client),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "h__traced"),
        ],
        json!({"jsonrpc": "2.0", "id": "s", "method": "tools/call", "params": {
            "name": "h__traced", "arguments": {},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}}}}),
    )
    .await;
    // MCP v1.0, in `_meta` as the stdio agents carry it.
    let v1 = post(
        &gw,
        &[],
        json!({"jsonrpc": "2.0", "id": 2, "method": "mcp/executeTool", "params": {
            "id": "mcp://gw/s/tool/traced", "arguments": {},
            "_meta": {"traceparent": client}}}),
    )
    .await;
    let spans = collector.trace(TRACE, 4);
    assert_eq!(spans.len(), 4, "{spans:#?}");
    let server = |name: &str| {
        spans
            .iter()
            .find(|s| {
                s["kind"] == "SPAN_KIND_SERVER" && s["name"].as_str().unwrap().starts_with(name)
            })
            .unwrap_or_else(|| panic!("{name}: {spans:#?}"))
            .clone()
    };
    let stateless_span = server("tools/call h__traced");
    assert_eq!(
        stateless_span["attributes"]["mcp.protocol.version"],
        "2026-07-28"
    );
    let v1_span = server("mcp/executeTool");
    assert_eq!(v1_span["attributes"]["mcp.method.name"], "mcp/executeTool");
    for (answer, server) in [(&stateless, &stateless_span), (&v1, &v1_span)] {
        let client_span = spans
            .iter()
            .find(|c| c["parent_span_id"] == server["span_id"])
            .unwrap_or_else(|| panic!("{spans:#?}"));
        // What the tool said, wherever each protocol's result puts its text.
        let text = answer.to_string();
        let at = text
            .find(&format!("00-{TRACE}-"))
            .unwrap_or_else(|| panic!("{answer}"));
        let sent = &text[at + 36..at + 52];
        assert_eq!(Some(sent), client_span["span_id"].as_str(), "{answer}");
    }
    drop(p);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsampled_request_exports_nothing_and_its_context_still_flows() {
    let collector = Collector::start();
    let endpoint = format!("http://127.0.0.1:{}", collector.http);
    let (p, gw, _upstream, _dir) = gateway(&endpoint, "http/protobuf", &[]);
    let unsampled = traceparent(TRACE, CLIENT_SPAN, false);
    // Without state, and with state the upstream must get too.
    for (id, state) in [(1, None), (3, Some("vendor=1"))] {
        let mut meta = json!({"traceparent": unsampled});
        if let Some(state) = state {
            meta["tracestate"] = json!(state);
        }
        let answer = post(
            &gw,
            &[],
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
                "name": "h__traced", "arguments": {}, "_meta": meta}}),
        )
        .await;
        let got = seen(&answer);
        let sent = got["traceparent"]
            .as_str()
            .unwrap_or_else(|| panic!("{got}"));
        // The same trace, not sampled, under a span id of the gateway's own.
        assert!(
            sent.starts_with(&format!("00-{TRACE}-")) && sent.ends_with("-00"),
            "{sent}"
        );
        assert_ne!(parent_in(sent), CLIENT_SPAN, "{sent}");
        assert_eq!(got["tracestate"].as_str(), state, "{got}");
    }
    // A sampled one after it shows the pipeline works: the unsampled one exported nothing.
    let sampled_trace = "0123456789abcdef0123456789abcdef";
    post(
        &gw,
        &[],
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "h__traced", "arguments": {},
            "_meta": {"traceparent": traceparent(sampled_trace, CLIENT_SPAN, true)}}}),
    )
    .await;
    assert_eq!(collector.trace(sampled_trace, 2).len(), 2);
    let unsampled: Vec<Value> = collector
        .spans()
        .into_iter()
        .filter(|s| s["trace_id"] == TRACE)
        .collect();
    assert!(unsampled.is_empty(), "{unsampled:#?}");
    drop(p);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_request_is_sampled_by_its_own_trace_id_and_carries_it_either_way() {
    let collector = Collector::start();
    let endpoint = format!("http://127.0.0.1:{}", collector.http);
    let (p, gw, _upstream, _dir) = gateway(
        &endpoint,
        "http/protobuf",
        &[
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.5"),
        ],
    );
    // Requests that bring no context: each starts a trace of the gateway's,
    // sampled or not by its id as the SDK's ratio sampler decides.
    let mut sent = Vec::new();
    for id in 0..16 {
        let answer = post(
            &gw,
            &[],
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
                "name": "h__traced", "arguments": {}}}),
        )
        .await;
        let got = seen(&answer);
        let parent = got["traceparent"]
            .as_str()
            .unwrap_or_else(|| panic!("{got}"));
        let fields: Vec<&str> = parent.split('-').collect();
        assert!(
            fields.len() == 4
                && fields[0] == "00"
                && fields[1].len() == 32
                && fields[2].len() == 16,
            "{parent}"
        );
        assert!(
            fields[1] != "0".repeat(32) && fields[2] != "0".repeat(16),
            "{parent}"
        );
        sent.push((
            fields[1].to_owned(),
            fields[2].to_owned(),
            fields[3] == "01",
        ));
    }
    let traces: std::collections::HashSet<&str> = sent.iter().map(|(t, ..)| t.as_str()).collect();
    assert_eq!(traces.len(), sent.len(), "each root is a trace of its own");
    assert!(
        sent.iter().any(|s| s.2) && sent.iter().any(|s| !s.2),
        "a ratio of 0.5 samples some of 16 and not others: {sent:?}"
    );
    for (trace, span, sampled) in &sent {
        if !sampled {
            continue;
        }
        // The sampled ones are exported: the upstream's parent is the CLIENT span.
        let spans = collector.trace(trace, 2);
        let client = spans
            .iter()
            .find(|s| s["kind"] == "SPAN_KIND_CLIENT")
            .unwrap_or_else(|| panic!("{spans:#?}"));
        assert_eq!(client["span_id"], span.as_str(), "{spans:#?}");
    }
    // And the others are not (the sampled ones have all come by now).
    for (trace, ..) in sent.iter().filter(|s| !s.2) {
        assert!(
            collector
                .spans()
                .iter()
                .all(|s| s["trace_id"] != trace.as_str()),
            "{trace} was not sampled"
        );
    }
    drop(p);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_collector_costs_calls_nothing_but_dropped_spans() {
    // Nothing listens there.
    let endpoint = format!("http://127.0.0.1:{}", free_port());
    let (mut p, gw, _upstream, _dir) = gateway(
        &endpoint,
        "http/protobuf",
        &[("OTEL_EXPORTER_OTLP_TIMEOUT", "500")],
    );
    let started = Instant::now();
    for id in 0..20 {
        let answer = post(
            &gw,
            &[],
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
                "name": "h__traced", "arguments": {},
                "_meta": {"traceparent": traceparent(TRACE, CLIENT_SPAN, true)}}}),
        )
        .await;
        assert!(answer["result"].is_object(), "{answer}");
    }
    // Twenty calls, each far within the export timeout (no call waited for it).
    assert!(started.elapsed() < Duration::from_secs(10));
    let admin = p
        .seen()
        .iter()
        .find(|v| v["message"] == "admin listener bound")
        .and_then(|v| v["addr"].as_str())
        .unwrap()
        .to_owned();
    let metrics = |admin: String| async move {
        let text = reqwest::get(format!("http://{admin}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        metric(&text, "mcp_gateway_trace_spans_dropped_total").unwrap_or(0.0)
    };
    until(|| {
        let admin = admin.clone();
        async move { metrics(admin).await >= 40.0 }
    })
    .await;
    // The start-up line names the collector, and so does the first failed
    // export's warning; the next within the minute are counted, not logged.
    let named = |v: &Value| v["endpoint"] == format!("{endpoint}/v1/traces");
    assert!(
        p.seen()
            .iter()
            .any(|v| v["message"] == "exporting traces" && named(v)),
        "{}",
        p.seen_text()
    );
    let warning = p.wait_log("a failed export's warning", |v| {
        v["level"] == "WARN" && named(v) && v["message"].as_str().unwrap_or("").contains("exported")
    });
    assert_eq!(warning["failed_exports"], 1, "{warning}");
    let warnings = p
        .seen()
        .iter()
        .filter(|v| v["level"] == "WARN" && named(v))
        .count();
    assert_eq!(warnings, 1, "{}", p.seen_text());
    assert!(p.terminate().success());
}

/// What a client chooses (its request id, the tool it names) reaches the
/// collector cut to the attribute value limit (the SDKs' own variable), and
/// so do the spans' names; a tool's own failure is the span's `tool_error`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_a_client_chose_are_cut_to_the_attribute_value_limit() {
    let collector = Collector::start();
    let endpoint = format!("http://127.0.0.1:{}", collector.http);
    let (mut p, gw, _upstream, _dir) = gateway(
        &endpoint,
        "http/protobuf",
        &[("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "64")],
    );
    let long_id = "i".repeat(100_000);
    let long_tool = format!("h__{}", "é".repeat(50_000));
    let answer = post(
        &gw,
        &[],
        json!({"jsonrpc": "2.0", "id": long_id, "method": "tools/call", "params": {
            "name": long_tool, "arguments": {},
            "_meta": {"traceparent": traceparent(TRACE, CLIENT_SPAN, true)}}}),
    )
    .await;
    assert!(answer.get("error").is_some(), "{answer}");
    let spans = collector.trace(TRACE, 1);
    let server = spans
        .iter()
        .find(|s| s["kind"] == "SPAN_KIND_SERVER")
        .unwrap_or_else(|| panic!("{spans:#?}"));
    let a = &server["attributes"];
    let chars = |v: &Value| {
        v.as_str()
            .unwrap_or_else(|| panic!("{server}"))
            .chars()
            .count()
    };
    assert_eq!(chars(&a["jsonrpc.request.id"]), 64, "{server}");
    assert!(long_id.contains(a["jsonrpc.request.id"].as_str().unwrap().trim_matches('"')));
    assert_eq!(chars(&a["gen_ai.tool.name"]), 64, "{server}");
    assert!(long_tool.starts_with(a["gen_ai.tool.name"].as_str().unwrap()));
    assert!(chars(&server["name"]) <= 64, "{server}");

    // A tool's own failure (a result with isError) is the span's error.
    let trace = "5bf92f3577b34da6a3ce929d0e0e4737";
    let answer = post(
        &gw,
        &[],
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "h__explode", "arguments": {},
            "_meta": {"traceparent": traceparent(trace, CLIENT_SPAN, true)}}}),
    )
    .await;
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    let spans = collector.trace(trace, 2);
    let server = spans
        .iter()
        .find(|s| s["kind"] == "SPAN_KIND_SERVER")
        .unwrap_or_else(|| panic!("{spans:#?}"));
    assert_eq!(server["attributes"]["error.type"], "tool_error", "{server}");
    assert!(p.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_collector_a_context_passes_to_the_upstream_unchanged() {
    let upstream = sdk_server();
    let gw = Gateway::start(
        &json!({
            "gateway": {"id": "gw"},
            "upstreams": {"h": http(&upstream.url)},
            "tenants": {"a": tenant("ka", &["h"])},
        })
        .to_string(),
    )
    .await;
    gw.wait_ready(&["h"]).await;
    let client = traceparent(TRACE, CLIENT_SPAN, true);
    let answer = post(
        &gw,
        &[],
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "h__traced", "arguments": {},
            "_meta": {"traceparent": client, "tracestate": "vendor=1"}}}),
    )
    .await;
    let got = seen(&answer);
    assert_eq!(got["traceparent"], client, "{got}");
    assert_eq!(got["tracestate"], "vendor=1", "{got}");
    assert_eq!(got["header"], client, "{got}");
    // Without one, nothing is added.
    let plain = post(
        &gw,
        &[],
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "h__traced", "arguments": {}}}),
    )
    .await;
    assert_eq!(seen(&plain)["traceparent"], Value::Null, "{plain}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdks_client_starts_the_trace_in_either_era() {
    let collector = Collector::start();
    let endpoint = format!("http://127.0.0.1:{}", collector.http);
    let (p, gw, _upstream, _dir) = gateway(&endpoint, "http/protobuf", &[]);
    for mode in ["legacy", "auto"] {
        let steps = json!([{"op": "traced", "name": "h__traced", "arguments": {}}]);
        let (_, answers) = sdk_client(&gw, "ka", mode, steps).await;
        let client = &answers[0];
        let trace = client["trace_id"]
            .as_str()
            .unwrap_or_else(|| panic!("{client}"));
        let spans = collector.trace(trace, 2);
        let server = spans
            .iter()
            .find(|s| s["kind"] == "SPAN_KIND_SERVER")
            .unwrap_or_else(|| panic!("{mode}: {spans:#?}"));
        // The client's span is the gateway's parent, the gateway's client
        // span the upstream's.
        assert_eq!(
            server["parent_span_id"], client["span_id"],
            "{mode}: {server}"
        );
        let dispatch = spans
            .iter()
            .find(|s| s["kind"] == "SPAN_KIND_CLIENT")
            .unwrap_or_else(|| panic!("{mode}: {spans:#?}"));
        assert_eq!(dispatch["parent_span_id"], server["span_id"], "{mode}");
        let text = client["result"]["content"][0]["text"].as_str().unwrap();
        let seen: Value = serde_json::from_str(text).unwrap();
        assert_eq!(
            seen["traceparent"],
            traceparent(trace, dispatch["span_id"].as_str().unwrap(), true),
            "{mode}"
        );
        let version = if mode == "auto" {
            "2026-07-28"
        } else {
            "2025-11-25"
        };
        assert_eq!(
            server["attributes"]["mcp.protocol.version"], version,
            "{mode}: {server}"
        );
        // A handshake-era session names itself; the stateless era has none.
        assert_eq!(
            server["attributes"]["mcp.session.id"].is_string(),
            mode == "legacy",
            "{mode}: {server}"
        );
    }
    drop(p);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_with_only_stdio_upstreams_exports_too() {
    // Its HTTP exporter is the only HTTP client it has.
    let collector = Collector::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.yaml");
    std::fs::write(
        &path,
        json!({
            "gateway": {"id": "gw"},
            "upstreams": {"s": sdk_stdio()},
            "tenants": {"a": tenant("ka", &["s"])},
        })
        .to_string(),
    )
    .unwrap();
    let endpoint = format!("http://127.0.0.1:{}", collector.http);
    let mut p = Process::spawn_with_env(
        &["serve", "--config", path.to_str().unwrap()],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)],
    );
    let agent = p.addr("agent listener bound");
    p.wait_log("ready", |v| v["message"] == "upstream ready");
    let gw = Gateway::at(&agent);
    let answer = post(
        &gw,
        &[("traceparent", &traceparent(TRACE, CLIENT_SPAN, true))],
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "s__traced", "arguments": {}}}),
    )
    .await;
    assert!(seen(&answer)["traceparent"].is_string(), "{answer}");
    assert_eq!(collector.trace(TRACE, 2).len(), 2);
    assert!(p.terminate().success());
}
