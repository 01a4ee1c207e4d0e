//! A compromised upstream: reads through its templates go only where the
//! template goes, its notification storms cost a few relistings, its
//! listings are bounded in bytes, and its requests to the gateway in
//! number and time (with the listener serving through a spell without
//! file descriptors).

use std::io::{Read, Write};
use std::time::Duration;

use serde_json::{Value, json};

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_read_forwards_only_what_the_template_expands_to() {
    let hostile = Hostile::start(&[]);
    let gw = gateway(&hostile, json!({}), json!({})).await;
    let id = session(&gw, "ka").await;
    let read = |uri: String| json!({ "uri": uri });
    let (_, r) = in_session(&gw, "ka", &id, "resources/read", read(data_uri("notes"))).await;
    assert_eq!(
        r["result"]["contents"][0]["text"], "read:file:///data/notes",
        "{r}"
    );
    // `{name}` expands "../../etc/passwd" to `..%2F..%2Fetc%2Fpasswd`: what
    // decodes to a path with slashes is no expansion, and is never sent.
    for name in [
        "..%2F..%2Fetc%2Fpasswd",
        "a%2Fb",
        "x%3Fy",
        "%2E%2E%2Fsecret",
    ] {
        let (_, r) = in_session(&gw, "ka", &id, "resources/read", read(data_uri(name))).await;
        assert_eq!(r["error"]["code"], -32002, "{name}: {r}");
    }
    // What simple expansion makes of "../x" (an encoded slash) is one.
    let (_, r) = in_session(&gw, "ka", &id, "resources/read", read(data_uri("..%252Fx"))).await;
    assert_eq!(
        r["result"]["contents"][0]["text"], "read:file:///data/..%2Fx",
        "{r}"
    );
    let sent: Vec<String> = hostile
        .received()
        .iter()
        .filter(|m| m["method"] == "resources/read")
        .map(|m| m["params"]["uri"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        sent.iter()
            .all(|u| !u.contains('?') && !u["file:///data/".len()..].contains('/')),
        "{sent:?}"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_storm_costs_a_few_relistings() {
    let hostile = Hostile::start(&["--storm", "1000"]);
    let gw = gateway(&hostile, json!({}), json!({})).await;
    // The storm comes on the GET stream the gateway opens once it is ready;
    // relistings follow it. Counted once they have stopped for a second.
    let (mut last, mut still) = (0, std::time::Instant::now());
    let relisted = until(async || {
        let listed = hostile.count("tools/list");
        if listed != last {
            (last, still) = (listed, std::time::Instant::now());
        }
        let storm_heard = hostile.received().iter().any(|m| m["kind"] == "get");
        (storm_heard && listed > 1 && still.elapsed() > Duration::from_secs(1)).then_some(listed)
    })
    .await;
    assert!(relisted <= 10, "{relisted} listings for 1,000 list_changed");
    gw.stop().await;
}

/// A config for the real binary with the hostile upstream `h` and tenant `a` (key `ka`).
fn binary_config(
    dir: &std::path::Path,
    hostile: &Hostile,
    gateway: Value,
    timeout_ms: u64,
) -> String {
    let path = dir.join("gw.yaml");
    let yaml = json!({
        "gateway": with_keys(json!({"id": "gw"}), gateway),
        "upstreams": {"h": hostile.upstream(timeout_ms)},
        "tenants": {"a": tenant("ka", &["h"])},
    })
    .to_string();
    std::fs::write(&path, yaml).unwrap();
    path.display().to_string()
}

/// An HTTP/1.1 exchange on a connection of its own: the status and body.
fn exchange(addr: &str, request: &str) -> (u16, String) {
    exchange_on(std::net::TcpStream::connect(addr).unwrap(), request)
}

fn exchange_on(mut s: std::net::TcpStream, request: &str) -> (u16, String) {
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out
        .split_whitespace()
        .nth(1)
        .unwrap_or("0")
        .parse()
        .unwrap_or(0);
    (
        status,
        out.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned(),
    )
}

fn post(addr: &str, key: &str, body: &Value) -> String {
    let body = body.to_string();
    format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn scrape(admin: &str) -> String {
    exchange(
        admin,
        &format!("GET /metrics HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n"),
    )
    .1
}

fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

#[test]
fn server_requests_are_bounded_and_the_listener_serves_through_descriptor_exhaustion() {
    // 600 pings whose answers the upstream never takes, with room for 200 of
    // them at once and 256 descriptors: the held answers and the agents
    // below take every descriptor until the answers time out (8 s).
    let hostile = Hostile::start(&["--pings", "600", "--hold-replies"]);
    let dir = tempfile::tempdir().unwrap();
    let config = binary_config(
        dir.path(),
        &hostile,
        json!({"limits": {"max_server_requests": 200}}),
        8000,
    );
    let mut limited = std::process::Command::new("prlimit");
    limited.args(["--nofile=256:256", BIN]);
    let mut p = Process::spawn_command(limited, &["serve", "--config", &config], &[]);
    let agent = p.addr("agent listener bound");
    let admin = p.addr("admin listener bound");
    p.wait_log("h ready", |v| {
        v["message"] == "upstream ready" && v["upstream"] == "h"
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while hostile
        .received()
        .iter()
        .filter(|m| m["kind"] == "response")
        .count()
        < 200
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the answers never came"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // 60 agents connect (the kernel completes each handshake), all before
    // any sends its request, so that their connections are held at once.
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let connected = std::sync::Arc::new(std::sync::Barrier::new(61));
    let agents: Vec<_> = (0..60)
        .map(|_| {
            let (agent, request) = (agent.clone(), post(&agent, "ka", &list));
            let connected = connected.clone();
            std::thread::spawn(move || {
                let s = std::net::TcpStream::connect(&agent).unwrap();
                connected.wait();
                exchange_on(s, &request)
            })
        })
        .collect();
    connected.wait();
    // Every agent is served: some once descriptors are free again.
    for a in agents {
        let (status, body) = a.join().unwrap();
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("\"echo\""), "{body}");
    }
    let count = |series: &str| metric(&scrape(&admin), series).unwrap_or(0.0);
    assert!(count("mcp_gateway_accept_errors_total") >= 1.0);
    assert!(count(r#"mcp_gateway_server_requests_total{outcome="dropped"}"#) >= 390.0);
    // The held answers give up at the upstream's timeout, and their sockets go.
    let failed = r#"mcp_gateway_server_requests_total{outcome="failed"}"#;
    while count(failed) < 190.0 {
        assert!(std::time::Instant::now() < deadline + Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        open_descriptors(p.child.id()) < 64,
        "the held answers' sockets are closed"
    );
    assert!(p.terminate().success());
}

#[test]
fn an_upstreams_listing_is_bounded_in_bytes() {
    // Eight pages of 2 MB against the default bound of 8 MiB; and a control.
    let peak = |args: &[&str]| -> (u64, usize, Process) {
        let hostile = Hostile::start(args);
        let dir = tempfile::tempdir().unwrap();
        let config = binary_config(dir.path(), &hostile, json!({}), 10_000);
        let mut p = Process::spawn(&["serve", "--config", &config]);
        let agent = p.addr("agent listener bound");
        p.wait_log("h ready", |v| {
            v["message"] == "upstream ready" && v["upstream"] == "h"
        });
        let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
        let (status, body) = exchange(&agent, &post(&agent, "ka", &list));
        assert_eq!(status, 200);
        let (_, hwm) = memory_of(p.child.id());
        (hwm, body.len(), p)
    };
    let (control, _, mut c) = peak(&[]);
    assert!(c.terminate().success());
    let (big, listed, mut p) = peak(&["--pages", "8", "--page-bytes", "2000000"]);
    p.wait_log("the over-bound listing is logged", |v| {
        v["message"] == "definition left out of listings"
            && v["reason"]
                .as_str()
                .is_some_and(|r| r.contains("max_listing_bytes"))
    });
    eprintln!(
        "peak resident memory: {control} KiB (control), {big} KiB (8 x 2 MB pages); tools/list {listed} bytes"
    );
    assert!(listed < 9 << 20, "tools/list is {listed} bytes");
    // The text bound is 8 MiB; the peak stays a small multiple of it (the
    // text is held as received, read, mapped, kept for listings, rendered
    // for the official face, and written out).
    assert!(
        big < control + 8 * 8 * 1024,
        "{big} KiB against {control} KiB"
    );
    assert!(p.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_in_a_result_are_followed_through_the_gateway_by_their_tenant_only() {
    let hostile = Hostile::start(&[]);
    let gw = gateway(&hostile, json!({}), json!({})).await;
    let (a, b) = (session(&gw, "ka").await, session(&gw, "kb").await);
    let (_, listed) = in_session(&gw, "ka", &a, "tools/list", json!({})).await;
    let links = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .find(|n| n.contains("links"))
        .unwrap();
    let (_, called) = in_session(
        &gw,
        "ka",
        &a,
        "tools/call",
        json!({"name": links, "arguments": {}}),
    )
    .await;
    let content = called["result"]["content"].as_array().unwrap().clone();
    // The listed one is its namespaced id; the others are links sealed to `a`.
    assert_eq!(content[1]["uri"], data_uri("readme"), "{called}");
    let notes = content[2]["uri"].as_str().unwrap().to_owned();
    let embedded = content[3]["resource"]["uri"].as_str().unwrap().to_owned();
    assert!(notes.starts_with("mcp://gw/h/link/"), "{notes}");
    assert!(embedded.starts_with("mcp://gw/h/link/"), "{embedded}");
    assert_eq!(content[3]["resource"]["text"], "inline");
    for (uri, expected) in [
        (data_uri("readme"), "file:///data/readme"),
        (notes.clone(), "file:///other/notes"),
        (embedded.clone(), "file:///other/embedded"),
    ] {
        let (_, read) = in_session(&gw, "ka", &a, "resources/read", json!({"uri": uri})).await;
        assert_eq!(
            read["result"]["contents"][0]["text"],
            format!("read:{expected}"),
            "{read}"
        );
        assert_eq!(read["result"]["contents"][0]["uri"], uri, "{read}");
    }
    // Another tenant, a tampered link, a made-up one: no such resource.
    let tampered = notes.replacen("mcp://gw/h/link/", "mcp://gw/h/link/x", 1);
    let made_up = "mcp://gw/h/link/AAAAAAAAAAAAAAAAAAAAAA/file%3A%2F%2F%2Fetc%2Fpasswd".to_owned();
    for (key, session, uri) in [
        ("kb", &b, &notes),
        ("ka", &a, &tampered),
        ("ka", &a, &made_up),
    ] {
        let (_, read) = in_session(&gw, key, session, "resources/read", json!({"uri": uri})).await;
        assert_eq!(read["error"]["code"], -32002, "{key} {uri}: {read}");
    }
    let forwarded: Vec<String> = hostile
        .received()
        .iter()
        .filter(|m| m["method"] == "resources/read")
        .map(|m| m["params"]["uri"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        !forwarded.iter().any(|u| u.contains("passwd")),
        "{forwarded:?}"
    );
    gw.stop().await;
}
