//! Result caching: equal calls of a tool the tenant caches are answered
//! without its upstream (the demo over HTTP counts the calls it answers),
//! in both faces and across replicas through a real store; the checks still
//! run; failures are never kept; TTL, the tenant's bound, a restarted
//! upstream and hints from server-everything's annotations decide the rest.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

const CACHED: &str = "dev.mcp-gateway/cached";
const ECHO: &str = "mcp://gw/h/h/tools/echo:v1";
const ADD: &str = "mcp://gw/h/h/tools/add:v1";

/// Tool calls the demo at `url` has answered.
async fn calls(gw: &Gateway, url: &str) -> u64 {
    let stats = url.replace("/mcp", "/stats");
    let r = within(gw.client.get(stats).send()).await.unwrap();
    let v: Value = serde_json::from_str(&within(r.text()).await.unwrap()).unwrap();
    v["calls"].as_u64().unwrap()
}

/// The gateway's configuration, `gateway`'s keys added to its own; tenant
/// `a` curates its tools as [`tools`] says.
fn config(h: &str, gateway: Value) -> String {
    json!({
        "gateway": with_keys(json!({"id": "gw"}), gateway),
        "upstreams": {"h": {"http": {"url": h}}, "ev": everything_stdio()},
        "tenants": {
            "a": {"api_keys": ["ka"], "upstreams": ["h", "ev"], "tools": tools()},
            "b": tenant("kb", &["h", "ev"]),
        },
    })
    .to_string()
}

fn tools() -> Value {
    json!({
        "cache": {"ttl_ms": 60000, "max_entries": 3, "hints": true},
        "overrides": {
            "mcp://gw/h/h/tools/echo:v1": {"cache": true},
            "mcp://gw/h/h/tools/add:v1": {"cache": {"ttl_ms": 300}},
            "mcp://gw/h/h/tools/fail": {"cache": true},
            "mcp://gw/ev/tool/get-sum": {"cache": false},
        },
    })
}

fn age(r: &Value) -> Option<u64> {
    r["_meta"][CACHED]["ageMs"].as_u64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equal_calls_are_answered_from_the_tenants_cache_in_both_faces() {
    let (h, _server) = http_upstream("h").await;
    let gw = Gateway::start(&config(&h, json!({}))).await;
    gw.wait_ready(&["h", "ev"]).await;

    // MCP v1.0: the second call is the first's result, said to be cached.
    let first = gw.execute("ka", ECHO, json!({"text": "x"})).await;
    assert!(age(&first["result"]).is_none(), "{first}");
    let second = gw.execute("ka", ECHO, json!({"text": "x"})).await;
    assert_eq!(second["result"]["output"], first["result"]["output"]);
    assert!(age(&second["result"]).is_some(), "{second}");
    assert_eq!(calls(&gw, &h).await, 1, "the upstream heard one call");

    // Arguments are compared as canonical JSON; the checks still run.
    gw.execute("ka", ADD, json!({"a": 1, "b": 2})).await;
    let r = gw.execute("ka", ADD, json!({"b": 2, "a": 1})).await;
    assert!(age(&r["result"]).is_some(), "{r}");
    assert_eq!(r["result"]["output"]["sum"], 3.0);
    let bad = gw.execute("ka", ECHO, json!({"text": 1})).await;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    assert_eq!(calls(&gw, &h).await, 2);

    // Failures are never kept; another tenant has a cache of its own.
    for _ in 0..2 {
        let r = gw.execute("ka", "mcp://gw/h/h/tools/fail", json!({})).await;
        assert!(r.get("error").is_some(), "{r}");
    }
    let b = gw.execute("kb", ECHO, json!({"text": "x"})).await;
    assert!(age(&b["result"]).is_none(), "{b}");
    assert_eq!(calls(&gw, &h).await, 5);

    // The other face shares the tenant's entries; hints cache
    // server-everything's echo (read-only, idempotent), and an override's
    // `cache: false` wins over them.
    let listed = gw.rpc("ka", "tools/list", json!({})).await;
    let tools = listed["result"]["tools"].as_array().unwrap();
    let name_of = |id: &str| {
        tools
            .iter()
            .find(|t| t["_meta"]["dev.mcp-gateway/mcpId"] == id)
            .unwrap_or_else(|| panic!("{id} is not listed: {listed}"))["name"]
            .clone()
    };
    let steps = json!([
        {"op": "call", "name": name_of(ECHO), "arguments": {"text": "x"}},
        {"op": "call", "name": "ev__echo", "arguments": {"message": "m"}},
        {"op": "call", "name": "ev__echo", "arguments": {"message": "m"}},
        {"op": "call", "name": "ev__get-sum", "arguments": {"a": 1, "b": 2}},
        {"op": "call", "name": "ev__get-sum", "arguments": {"a": 1, "b": 2}},
    ]);
    let (_, answers) = sdk_client(&gw, "ka", "legacy", steps).await;
    assert!(age(&answers[0]).is_some(), "{}", answers[0]);
    assert_eq!(answers[0]["structuredContent"], json!({"text": "x"}));
    assert!(age(&answers[1]).is_none());
    assert!(age(&answers[2]).is_some(), "{}", answers[2]);
    assert_eq!(answers[2]["content"], answers[1]["content"]);
    assert!(age(&answers[4]).is_none(), "cache: false: {}", answers[4]);
    assert_eq!(calls(&gw, &h).await, 5);

    let metrics = gw.metrics().await;
    let hits = metric(
        &metrics,
        r#"mcp_gateway_result_cache_total{outcome="hit",tenant="a"}"#,
    );
    assert_eq!(hits, Some(4.0));
    let entries = metric(&metrics, r#"mcp_gateway_result_cache_entries{tenant="a"}"#);
    assert_eq!(entries, Some(3.0), "echo, add and ev's echo");
    gw.stop().await;
}

/// An entry lives its TTL; a tenant keeps its `max_entries`, the least
/// recently used dropped first; a restarted upstream takes its entries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_expire_are_bounded_and_go_with_a_restart() {
    let (h, _server) = http_upstream("h").await;
    let gw = Gateway::start(&config(&h, json!({}))).await;
    gw.wait_ready(&["h"]).await;
    // Three entries at most: a fourth drops the least recently used.
    let echo = |text: &str| gw.execute("ka", ECHO, json!({"text": text}));
    for text in ["1", "2", "3"] {
        echo(text).await;
    }
    assert!(age(&echo("1").await["result"]).is_some());
    echo("4").await;
    assert_eq!(calls(&gw, &h).await, 4);
    assert!(
        age(&echo("2").await["result"]).is_none(),
        "2 was the least recently used"
    );
    assert!(age(&echo("1").await["result"]).is_some());
    // An entry lives its TTL (add's: 300 ms).
    gw.execute("ka", ADD, json!({"a": 1, "b": 1})).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let r = gw.execute("ka", ADD, json!({"a": 1, "b": 1})).await;
    assert!(age(&r["result"]).is_none(), "expired: {r}");
    gw.stop().await;

    // A stdio child that crashes and is started again answers anew.
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {"s": stdio_upstream("s", &[])},
        "tenants": {
            "a": {
                "api_keys": ["ka"],
                "upstreams": ["s"],
                "tools": {"overrides": {"mcp://gw/s/s/tools/pid": {"cache": true}}},
            },
        },
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["s"]).await;
    let pid = "mcp://gw/s/s/tools/pid";
    let first = gw.execute("ka", pid, json!({})).await;
    assert!(age(&gw.execute("ka", pid, json!({})).await["result"]).is_some());
    gw.execute("ka", "mcp://gw/s/s/tools/crash", json!({}))
        .await;
    // Once the gateway has seen the child go and started another.
    let restarts = r#"mcp_gateway_upstream_restarts_total{upstream="s"}"#;
    until(|| async { metric(&gw.metrics().await, restarts) >= Some(1.0) }).await;
    let again = within(async {
        loop {
            let r = gw.execute("ka", pid, json!({})).await;
            if r["result"]["output"]["pid"].is_number() {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(age(&again["result"]).is_none(), "{again}");
    assert_ne!(
        again["result"]["output"]["pid"],
        first["result"]["output"]["pid"]
    );
    gw.stop().await;
}

/// With a store, replicas answer from one cache; and a hit is audited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_store_replicas_share_the_cache() {
    let redis = Redis::start();
    let (h, _server) = http_upstream("h").await;
    let yaml = config(&h, json!({"store": {"url": redis.url()}}));
    let (one, two) = (Gateway::start(&yaml).await, Gateway::start(&yaml).await);
    for gw in [&one, &two] {
        gw.wait_ready(&["h"]).await;
        until(|| async { metric(&gw.metrics().await, "mcp_gateway_store_up") == Some(1.0) }).await;
    }
    one.execute("ka", ECHO, json!({"text": "shared"})).await;
    let r = two.execute("ka", ECHO, json!({"text": "shared"})).await;
    assert!(age(&r["result"]).is_some(), "{r}");
    assert_eq!(r["result"]["output"]["text"], "shared");
    assert_eq!(calls(&one, &h).await, 1);
    let entries = metric(
        &one.metrics().await,
        r#"mcp_gateway_result_cache_entries{tenant="a"}"#,
    );
    assert_eq!(entries, Some(1.0));
    for gw in [one, two] {
        gw.stop().await;
    }
}

#[test]
fn a_hit_is_audited_as_cached() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.yaml");
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {"h": stdio_upstream("h", &[])},
        "tenants": {
            "a": {
                "api_keys": ["ka"],
                "upstreams": ["h"],
                "tools": {"overrides": {ECHO: {"cache": true}}},
            },
        },
    })
    .to_string();
    std::fs::write(&path, yaml).unwrap();
    let mut p = Process::spawn(&["serve", "--config", path.to_str().unwrap()]);
    let agent = p.addr("agent listener bound");
    p.wait_log("ready", |v| v["message"] == "upstream ready");
    let gw = Gateway::at(&agent);
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        gw.execute("ka", ECHO, json!({"text": "x"})).await;
        gw.execute("ka", ECHO, json!({"text": "x"})).await;
    });
    p.wait_log("the hit's line", |v| {
        v["message"] == "tool call" && v["cached"] == true
    });
    let lines: Vec<&Value> = p
        .seen()
        .iter()
        .filter(|v| v["message"] == "tool call")
        .collect();
    assert!(lines[0].get("cached").is_none(), "{}", lines[0]);
    assert_eq!(lines[1]["upstream"], "h");
    assert!(p.terminate().success());
}

#[test]
fn check_refuses_zero_cache_settings() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.yaml");
    let yaml = Doc::parse(&config("http://127.0.0.1:9/mcp", json!({})))
        .set(
            "tenants.a.tools.cache",
            json!({"ttl_ms": 0, "max_entries": 0}),
        )
        .set(
            "tenants.a.tools.overrides.mcp://gw/h/h/tools/add:v1.cache",
            json!({"ttl_ms": 0}),
        )
        .set("gateway.limits", json!({"max_cache_bytes": 0}))
        .yaml();
    std::fs::write(&path, yaml).unwrap();
    let said = check_refused(&path);
    for path in [
        "tenants.a.tools.cache.ttl_ms",
        "tenants.a.tools.cache.max_entries",
        "tenants.a.tools.overrides.mcp://gw/h/h/tools/add:v1.cache.ttl_ms",
        "gateway.limits.max_cache_bytes",
    ] {
        assert!(said.contains(path), "{path} not in: {said}");
    }
}

/// An upstream's `ttlMs` bounds how long its listing is kept: it is read
/// again once that is over (an upstream that says nothing is not). The
/// gateway's own listings say `ttlMs: 0` and `cacheScope: "private"`
/// (`stateless::`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstreams_ttl_bounds_how_long_its_listing_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = |name: &str, extra: &[&str]| {
        let record = dir.path().join(name);
        let mut args = json!([
            "demo-upstream",
            "--name",
            name,
            "--modelcontext",
            "--record",
            record
        ]);
        args.as_array_mut()
            .unwrap()
            .extend(extra.iter().map(|a| json!(a)));
        json!({"stdio": {"command": BIN, "args": args}, "protocol": "modelcontextprotocol"})
    };
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {
            "kept": upstream("kept", &["--listing-ttl-ms", "1000"]),
            "plain": upstream("plain", &[]),
        },
        "tenants": {"a": tenant("ka", &["kept", "plain"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["kept", "plain"]).await;
    let listed = |name: &str| {
        let text = std::fs::read_to_string(dir.path().join(name)).unwrap_or_default();
        text.lines()
            .filter(|l| l.contains("\"tools/list\""))
            .count()
    };
    let (kept, plain) = (listed("kept"), listed("plain"));
    until(|| async { listed("kept") >= kept + 2 }).await;
    assert_eq!(
        listed("plain"),
        plain,
        "an upstream that gave no ttlMs is not relisted"
    );
    gw.stop().await;
}

/// A tool whose definition changed (here by a reload that restarts its
/// upstream with another description) answers anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_definition_answers_anew() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.yaml");
    let config = |extra: &[&str]| {
        json!({
            "gateway": {"id": "gw", "reload_poll_ms": 50},
            "upstreams": {"h": stdio_upstream("h", extra)},
            "tenants": {
                "a": {
                    "api_keys": ["ka"],
                    "upstreams": ["h"],
                    "tools": {"overrides": {"mcp://gw/h/h/tools/pid": {"cache": true}}},
                },
            },
        })
        .to_string()
    };
    std::fs::write(&path, config(&[])).unwrap();
    let gw = start_watching(&path).await;
    gw.wait_ready(&["h"]).await;
    let pid = "mcp://gw/h/h/tools/pid";
    gw.execute("ka", pid, json!({})).await;
    assert!(age(&gw.execute("ka", pid, json!({})).await["result"]).is_some());
    std::fs::write(&path, config(&["--description-suffix", " Changed."])).unwrap();
    wait_reloads(&gw, "applied", 1.0).await;
    gw.wait_ready(&["h"]).await;
    let r = within(async {
        loop {
            let r = gw.execute("ka", pid, json!({})).await;
            if r["result"].is_object() {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(age(&r["result"]).is_none(), "{r}");
    gw.stop().await;
}

/// `tools.cache` alone (hints, no override) is enough to cache the tools an
/// upstream marks read-only and idempotent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hints_alone_cache_what_the_upstream_marks_safe() {
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {"ev": everything_stdio()},
        "tenants": {
            "a": {"api_keys": ["ka"], "upstreams": ["ev"], "tools": {"cache": {"hints": true}}},
        },
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["ev"]).await;
    let echo = "mcp://gw/ev/tool/echo";
    gw.execute("ka", echo, json!({"message": "m"})).await;
    let r = gw.execute("ka", echo, json!({"message": "m"})).await;
    assert!(age(&r["result"]).is_some(), "{r}");
    let toggle = "mcp://gw/ev/tool/toggle-simulated-logging";
    gw.execute("ka", toggle, json!({})).await;
    let r = gw.execute("ka", toggle, json!({})).await;
    assert!(age(&r["result"]).is_none(), "not marked read-only: {r}");
    gw.stop().await;
}
