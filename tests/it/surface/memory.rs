//! What a hostile tenant can make a replica keep, measured as the real
//! binary's resident memory before and after (generous margins: the point
//! is tens of MiB that stay, or not).

use serde_json::{Value, json};

use super::*;

/// The real binary with the hostile upstream `h` and the session secret;
/// its process, agent address, and the upstream and directory kept alive.
fn serve() -> (Process, String, Hostile, tempfile::TempDir) {
    let hostile = Hostile::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.yaml");
    let yaml = json!({
        "gateway": {"id": "gw", "session_secret": SECRET},
        "upstreams": {"h": hostile.upstream(5000)},
        "tenants": {"a": tenant("ka", &["h"])},
    })
    .to_string();
    std::fs::write(&path, yaml).unwrap();
    let mut p = Process::spawn(&["serve", "--config", path.to_str().unwrap()]);
    let agent = p.addr("agent listener bound");
    p.wait_log("h ready", |v| {
        v["message"] == "upstream ready" && v["upstream"] == "h"
    });
    (p, format!("http://{agent}/mcp"), hostile, dir)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn made_up_subscriptions_and_huge_listens_cost_what_they_are_sent_only_while_they_are_sent() {
    let (p, url, _hostile, _dir) = serve();
    let client = reqwest::Client::new();
    let post = |headers: Vec<(&'static str, String)>, body: String| {
        let mut r = client
            .post(&url)
            .bearer_auth("ka")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body);
        for (k, v) in headers {
            r = r.header(k, v);
        }
        r.send()
    };
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let r = within(post(vec![], init.to_string())).await.unwrap();
    let id = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let (before, _) = memory_of(p.child.id());
    // 96 subscriptions to made-up uris of 1 MiB each.
    for i in 0..96 {
        let uri = format!("mcp://gw/h/resource/{i}{}", "x".repeat(1 << 20));
        let body = json!({"jsonrpc": "2.0", "id": i, "method": "resources/subscribe", "params": {"uri": uri}});
        let headers = vec![
            ("mcp-session-id", id.clone()),
            ("mcp-protocol-version", "2025-11-25".to_owned()),
        ];
        let r = within(post(headers, body.to_string())).await.unwrap();
        let answer: Value = serde_json::from_str(&within(r.text()).await.unwrap()).unwrap();
        assert_eq!(answer["error"]["code"], -32002, "{answer}");
    }
    // 16 listens, each asking for a megabyte of empty uris; kept open when served.
    let mut open = Vec::new();
    for i in 0..16 {
        let body = json!({"jsonrpc": "2.0", "id": i, "method": "subscriptions/listen", "params": {
            "_meta": stateless_meta(),
            "notifications": {"resourceSubscriptions": vec![""; 1 << 19]}}});
        let headers = vec![
            ("mcp-protocol-version", STATELESS.to_owned()),
            ("mcp-method", "subscriptions/listen".to_owned()),
        ];
        let r = within(post(headers, body.to_string())).await.unwrap();
        assert_eq!(r.status(), 400);
        open.push(r);
    }
    let (after, _) = memory_of(p.child.id());
    eprintln!(
        "resident memory: {:.1} MiB before, {:.1} MiB after 96 MiB of made-up subscriptions and 16 MiB of listens",
        mib(before),
        mib(after)
    );
    // The allocator keeps some of what the 1 MiB bodies took (about 20 MiB
    // here); what the tenant sent is not kept (before: 100 and 240 MiB).
    assert!(
        after < before + 48 * 1024,
        "{:.1} MiB before, {:.1} MiB after",
        mib(before),
        mib(after)
    );
    drop(open);
}
