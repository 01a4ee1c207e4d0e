//! Micro benchmarks of the hot paths (run: `cargo bench`; a quick pass:
//! `cargo bench -- --quick`). Upstreams here are in-memory `Transport`s that
//! answer from prebuilt JSON, so what is measured is the gateway's own work.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark of a failing path would measure nothing"
)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use futures_util::future::BoxFuture;
use mcp_gateway::config::{KeyDigest, TenantSpec};
use mcp_gateway::dispatch::{Dispatcher, respond};
use mcp_gateway::jsonrpc::ContentLengthCodec;
use mcp_gateway::jsonrpc::codec::encode_into;
use mcp_gateway::jsonrpc::{Json, JsonBuf};
use mcp_gateway::metrics::Metrics;
use mcp_gateway::protocol::instance::Instance;
use mcp_gateway::protocol::{Kind, mcpid, schema};
use mcp_gateway::tenant::KeyStore;
use mcp_gateway::upstream::{CallError, Params, Transport, Upstream};
use serde_json::json;
use serde_json::value::RawValue;
use tokio_util::codec::Decoder;

/// An upstream in memory: `initialize`, a fixed listing, and an echo tool.
struct Canned {
    tools: Box<RawValue>,
}

impl Transport for Canned {
    fn request<'a>(
        &'a self,
        method: &'a str,
        params: Params<'a>,
    ) -> BoxFuture<'a, Result<JsonBuf, CallError>> {
        Box::pin(async move {
            let text = match method {
                "initialize" => r#"{"capabilities":{"listToolsProvider":true,"listResourcesProvider":false,"listPromptsProvider":false,"executionProvider":{"execute":true}}}"#.to_owned(),
                "mcp/listTools" => self.tools.get().to_owned(),
                // The arguments come back as the output, as an echo server would.
                "mcp/executeTool" => {
                    let p: serde_json::Value = serde_json::from_str(&params.to_text()).unwrap();
                    format!(r#"{{"output":{}}}"#, p["arguments"])
                }
                _ => "[]".to_owned(),
            };
            Ok(RawValue::from_string(text).unwrap().into())
        })
    }
    fn notify<'a>(&'a self, _: &'a str, _: &'a RawValue) -> BoxFuture<'a, Result<(), CallError>> {
        Box::pin(async { Ok(()) })
    }
}

fn tool_defs(upstream: usize, n: usize) -> Box<RawValue> {
    let defs: Vec<_> = (0..n)
        .map(|i| {
            json!({
                "mcpId": format!("mcp://up{upstream}/tools/tool-{i}:v1"),
                "name": format!("tool-{i}"),
                "description": "Does one thing well, with a description long enough to be realistic about what it does.",
                "inputSchema": {"type": "object", "properties": {"text": {"type": "string", "maxLength": 1000}, "count": {"type": "integer", "minimum": 0}}, "required": ["text"], "additionalProperties": false},
                "outputSchema": {"type": "object", "properties": {"text": {"type": "string"}, "count": {"type": "integer"}}, "required": ["text"]}
            })
        })
        .collect();
    RawValue::from_string(serde_json::to_string(&defs).unwrap()).unwrap()
}

/// A dispatcher over `upstreams` in-memory upstreams of `tools` tools each, and its tenant.
fn gateway(
    rt: &tokio::runtime::Runtime,
    upstreams: usize,
    tools: usize,
) -> (Dispatcher, Arc<mcp_gateway::tenant::Tenant>) {
    let metrics = Metrics::new();
    let ups: Vec<_> = (0..upstreams)
        .map(|i| {
            let up = Upstream::new(
                &format!("up{i}"),
                "gw",
                Duration::from_secs(5),
                false,
                None,
                mcp_gateway::config::Protocol::V1,
                metrics.clone(),
            );
            rt.block_on(up.connect(Arc::new(Canned {
                tools: tool_defs(i, tools),
            })))
            .unwrap();
            up
        })
        .collect();
    let spec = TenantSpec {
        name: "t".into(),
        keys: vec![KeyDigest::of(b"k")],
        upstreams: (0..upstreams).map(|i| format!("up{i}")).collect(),
        tools: Default::default(),
        rate_limit: None,
        max_concurrency: None,
        max_sessions: None,
        curation: None,
        digest: 0,
    };
    let keys = KeyStore::new(&[spec]);
    let tenant = keys.tenants()[0].clone();
    (Dispatcher::new("gw", ups, keys.tenants(), metrics), tenant)
}

fn codec(c: &mut Criterion) {
    let body = br#"{"jsonrpc":"2.0","id":17,"result":{"output":{"text":"hello world"}}}"#;
    c.bench_function("codec/encode", |b| {
        let mut dst = BytesMut::with_capacity(4096);
        b.iter(|| {
            dst.clear();
            encode_into(black_box(&body[..]), &mut dst);
        })
    });
    let mut wire = BytesMut::new();
    encode_into(&body[..], &mut wire);
    c.bench_function("codec/decode", |b| {
        let mut codec = ContentLengthCodec::new(1 << 20);
        b.iter(|| {
            let mut buf = wire.clone();
            black_box(codec.decode(&mut buf).unwrap().unwrap());
        })
    });
    c.bench_function("codec/decode_16_byte_reads", |b| {
        let mut codec = ContentLengthCodec::new(1 << 20);
        b.iter(|| {
            let mut buf = BytesMut::new();
            let mut out = None;
            for chunk in wire.chunks(16) {
                buf.put_slice(chunk);
                if let Some(f) = codec.decode(&mut buf).unwrap() {
                    out = Some(f);
                }
            }
            black_box(out.unwrap());
        })
    });
}

fn ids(c: &mut Criterion) {
    c.bench_function("mcpid/namespace", |b| {
        b.iter(|| {
            mcpid::namespace(
                "gateway",
                "files",
                black_box("mcp://acme-corp/tools/file-writer:v1"),
            )
        })
    });
    let ns = mcpid::namespace("gateway", "files", "mcp://acme-corp/tools/file-writer:v1");
    c.bench_function("mcpid/parse", |b| {
        b.iter(|| mcpid::parse("gateway", black_box(&ns)))
    });
    let encoded = mcpid::namespace("gateway", "files", "urn:acme:tools:file writer");
    c.bench_function("mcpid/parse_encoded", |b| {
        b.iter(|| mcpid::parse("gateway", black_box(&encoded)))
    });
}

fn validation(c: &mut Criterion) {
    let schema_json = json!({
        "type": "object",
        "properties": {
            "path": {"type": "string", "pattern": "^/[a-z0-9/._-]+$"},
            "content": {"type": "string", "maxLength": 100000},
            "mode": {"enum": ["create", "append", "overwrite"]},
            "retries": {"type": "integer", "minimum": 0, "maximum": 10}
        },
        "required": ["path", "content"],
        "additionalProperties": false
    });
    let validator = schema::compile(&schema_json).unwrap();
    let text = json!({"path": "/home/agent/output.txt", "content": "Hello, world.", "mode": "create", "retries": 2}).to_string();
    let args = Instance::parse(&text).unwrap();
    c.bench_function("validate/arguments", |b| {
        b.iter(|| black_box(validator.is_valid(black_box(&args))))
    });
    // What a call pays: the arguments' text read, then validated.
    c.bench_function("validate/parse_and_validate", |b| {
        b.iter(|| {
            let v = Instance::parse(black_box(&text)).unwrap();
            black_box(validator.is_valid(&v))
        })
    });
    // The same through a serde_json::Value, as calls were validated before.
    let by_value = jsonschema::options().build(&schema_json).unwrap();
    c.bench_function("validate/parse_and_validate_as_value", |b| {
        b.iter(|| {
            let v: serde_json::Value = serde_json::from_str(black_box(&text)).unwrap();
            black_box(by_value.is_valid(&v))
        })
    });
}

fn listings(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("listing");
    group.sample_size(20);
    // `cargo test` runs each benchmark once to show it works; the 100,000-tool
    // setup (200,000 schemas compiled in a debug build) is kept for `cargo bench`.
    let benchmarking = std::env::args().any(|a| a == "--bench");
    let sizes: &[(usize, usize)] = if benchmarking {
        &[(10, 100), (100, 1000)]
    } else {
        &[(10, 100)]
    };
    for &(ups, tools) in sizes {
        let (dispatcher, tenant) = gateway(&rt, ups, tools);
        // What an HTTP answer costs the gateway: the parts, shared with the catalogs.
        group.bench_with_input(
            BenchmarkId::new("merge_cached", format!("{ups}x{tools}")),
            &(),
            |b, ()| b.iter(|| black_box(dispatcher.listing(&tenant, Kind::Tool).len())),
        );
        // Sessions and stdio frame each answer as one buffer: the parts joined.
        group.bench_with_input(
            BenchmarkId::new("merge_joined", format!("{ups}x{tools}")),
            &(),
            |b, ()| {
                b.iter(|| {
                    let parts = dispatcher.listing(&tenant, Kind::Tool);
                    let mut joined = Vec::with_capacity(parts.iter().map(|p| p.len()).sum());
                    for p in &parts {
                        joined.extend_from_slice(p);
                    }
                    black_box(joined.len())
                })
            },
        );
    }
    let defs = tool_defs(0, 100);
    group.bench_function("build_catalog/100_tools", |b| {
        b.iter(|| {
            black_box(mcp_gateway::protocol::catalog::build(
                "gw",
                "up0",
                Kind::Tool,
                Json::from(&*defs),
                Default::default(),
            ))
        })
    });
    group.finish();
}

fn dispatch(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (dispatcher, tenant) = gateway(&rt, 10, 100);
    let request = r#"{"jsonrpc":"2.0","id":42,"method":"mcp/executeTool","params":{"id":"mcp://gw/up3/up3/tools/tool-7:v1","arguments":{"text":"hello","count":3}}}"#;
    let raw: &RawValue = serde_json::from_str(request).unwrap();
    // Sanity: the path really routes and answers.
    let answer = rt.block_on(respond(&dispatcher, &tenant, raw)).unwrap();
    assert!(
        String::from_utf8(answer.into_vec())
            .unwrap()
            .contains(r#""output":{"count":3,"text":"hello"}"#)
    );
    c.bench_function("dispatch/execute_tool", |b| {
        b.iter(|| black_box(rt.block_on(respond(&dispatcher, &tenant, black_box(raw)))))
    });
}

fn keys(c: &mut Criterion) {
    // 10,000 tenants with two keys each: lookup is one SHA-256 and one hash-map probe.
    let specs: Vec<TenantSpec> = (0..10_000)
        .map(|i| TenantSpec {
            name: format!("tenant-{i}"),
            keys: vec![
                KeyDigest::of(format!("key-{i}-a").as_bytes()),
                KeyDigest::of(format!("key-{i}-b").as_bytes()),
            ],
            upstreams: vec![],
            tools: Default::default(),
            rate_limit: None,
            max_concurrency: None,
            max_sessions: None,
            curation: None,
            digest: 0,
        })
        .collect();
    let store = KeyStore::new(&specs);
    assert_eq!(
        &*store.authenticate("key-9999-b").unwrap().name,
        "tenant-9999"
    );
    c.bench_function("keys/authenticate_10000_tenants", |b| {
        b.iter(|| black_box(store.authenticate(black_box("key-5000-a"))))
    });
    c.bench_function("keys/reject_unknown_10000_tenants", |b| {
        b.iter(|| black_box(store.authenticate(black_box("no-such-key"))))
    });
}

criterion_group!(benches, codec, ids, validation, listings, dispatch, keys);
criterion_main!(benches);
