//! Micro benchmarks of the hot paths (run: `cargo bench`).
#![allow(
    clippy::unwrap_used,
    reason = "a benchmark of a failing path would measure nothing"
)]

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;

use bytes::BytesMut;
use mcp_gateway::jsonrpc::ContentLengthCodec;
use mcp_gateway::jsonrpc::codec::encode_into;
use mcp_gateway::protocol::mcpid;
use tokio_util::codec::Decoder;

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
}

criterion_group!(benches, codec, ids);
criterion_main!(benches);
