//! The real binary, as a user runs it.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

fn post(url: &str, body: Value) -> Value {
    let client = plain_http::blocking_client();
    client(url, body)
}

mod plain_http {
    //! A tiny blocking client over std, so these tests need no async runtime.
    use std::io::{Read, Write};

    pub fn blocking_client() -> impl Fn(&str, serde_json::Value) -> serde_json::Value {
        |url, body| {
            let rest = url.strip_prefix("http://").unwrap();
            let (host, path) = rest.split_once('/').unwrap();
            let body = body.to_string();
            let mut s = std::net::TcpStream::connect(host).unwrap();
            write!(s, "POST /{path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer demo-key\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            let (_, body) = out.split_once("\r\n\r\n").unwrap();
            serde_json::from_str(body).unwrap_or_else(|_| panic!("{out}"))
        }
    }
}

#[test]
fn serve_without_config_runs_the_demo() {
    let mut p = Process::spawn(&["serve"]);
    let agent = p.addr("agent listener bound");
    p.wait_log("both upstreams ready", |v| {
        v["message"] == "upstream ready" && v["upstream"] == "remote"
    });
    p.wait_log("both upstreams ready", |v| {
        v["message"] == "upstream ready" && v["upstream"] == "local"
    });
    let url = format!("http://{agent}/mcp");
    let listing = post(
        &url,
        json!({"jsonrpc": "2.0", "id": 1, "method": "mcp/listTools"}),
    );
    let ids: Vec<&str> = listing["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["mcpId"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "mcp://gateway/local/local/tools/echo:v1",
            "mcp://gateway/local/local/tools/add:v1",
            "mcp://gateway/remote/remote/tools/echo:v1",
            "mcp://gateway/remote/remote/tools/add:v1"
        ]
    );
    let r = post(
        &url,
        json!({"jsonrpc": "2.0", "id": 2, "method": "mcp/executeTool", "params": {"id": "mcp://gateway/local/local/tools/add:v1", "arguments": {"a": 2, "b": 3}}}),
    );
    assert_eq!(r["result"]["output"]["sum"], 5.0);
    let children = children_of(p.child.id());
    assert_eq!(children.len(), 1, "one stdio child");
    let status = p.terminate();
    assert!(status.success(), "{status:?}");
    assert!(
        !std::path::Path::new(&format!("/proc/{}", children[0])).exists(),
        "the child was reaped, not orphaned"
    );
}

/// Writes a config with one stdio demo upstream `name` and a tenant `demo`
/// (key `demo-key`), serves it, and waits until the upstream is ready.
/// Returns the process, its agent address and the directory (kept alive).
fn serve_one_upstream(name: &str) -> (Process, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gw.yaml");
    std::fs::write(
        &config,
        json!({
            "upstreams": {name: stdio_upstream(name, &[])},
            "tenants": {"demo": tenant("demo-key", &[name])},
        })
        .to_string(),
    )
    .unwrap();
    let mut p = Process::spawn(&["serve", "--config", config.to_str().unwrap()]);
    let agent = p.addr("agent listener bound");
    p.wait_log("ready", |v| v["message"] == "upstream ready");
    (p, agent, dir)
}

#[test]
fn child_stderr_is_logged_under_its_upstream_name() {
    let (mut p, agent, _dir) = serve_one_upstream("noisy");
    let r = post(
        &format!("http://{agent}/mcp"),
        json!({"jsonrpc": "2.0", "id": 1, "method": "mcp/executeTool", "params": {"id": "mcp://gateway/noisy/noisy/tools/stderr", "arguments": {"text": "marker-4f1c"}}}),
    );
    assert!(r["result"].is_object(), "{r}");
    let line = p.wait_log("stderr line", |v| v["message"] == "marker-4f1c");
    assert_eq!(line["upstream"], "noisy");
    assert_eq!(line["target"], "upstream_stderr");
    assert!(p.terminate().success());
}

#[test]
fn check_validates_and_reports_every_problem() {
    let ok = Command::new(BIN)
        .args(["check", "--config", "examples/gateway.yaml"])
        .env("ACME_KEY", "k-from-env")
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "gateway: {store: {url: \"redis://:pw-1@127.0.0.1:6379/zero\"}}\nupstreams:\n  a: {stdio: {command: \"\"}}\n  b: {http: {url: \"not a url\"}}\ntenants:\n  t: {api_keys: [secret-key-1], upstreams: [a, ghost]}\n").unwrap();
    let out = Command::new(BIN)
        .args(["check", "--config", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    for expected in [
        "upstreams.a.stdio.command",
        "upstreams.b.http.url",
        "tenants.t.upstreams[1]: unknown upstream 'ghost'",
        "gateway.store.url: the database \"zero\" is not a number",
        "4 problem(s)",
    ] {
        assert!(err.contains(expected), "missing {expected:?} in {err}");
    }
    assert!(!err.contains("secret-key-1"), "a key leaked: {err}");
    assert!(!err.contains("pw-1"), "a password leaked: {err}");
    let missing = Command::new(BIN)
        .args(["check", "--config", "/nonexistent.yaml"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
}

/// Mistakes of the file's shape (an unknown key, a missing field, a wrong
/// type), which its reader stops at one by one, are named all at once, with
/// a missing executable in the same run; a YAML error quotes the file by
/// its name.
#[test]
fn check_names_every_mistake_of_shape_and_every_missing_command_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("team.yaml");
    std::fs::write(
        &bad,
        "gateway: {lisen: \"127.0.0.1:8080\"}\nupstreams:\n  a: {stdio: {command: /nonexistent/server}}\n  b: {http: {}}\n  c: {stdio: {command: x}, timeout_ms: soon}\ntenants:\n  t: {upstreams: [a]}\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["check", "--config", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    for expected in [
        "gateway: ",
        "lisen",
        "upstreams.b.http: ",
        "\"url\" is a required property",
        "upstreams.c.timeout_ms: ",
        "upstreams.a.stdio.command: '/nonexistent/server' is not an executable file",
    ] {
        assert!(err.contains(expected), "missing {expected:?} in {err}");
    }
    std::fs::write(&bad, "upstreams: [unclosed\n").unwrap();
    let out = Command::new(BIN)
        .args(["check", "--config", bad.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("<input>"), "{err}");
}

#[test]
fn the_embedded_demo_config_is_valid() {
    let config = mcp_gateway::demo::demo_config("http://127.0.0.1:1/mcp").unwrap();
    assert_eq!(config.tenants[0].name, "demo");
}

#[test]
fn every_tool_call_leaves_an_audit_line_without_its_arguments() {
    let (mut p, agent, _dir) = serve_one_upstream("s");
    let url = format!("http://{agent}/mcp");
    let args = json!({"text": "secret-argument-9d2"});
    post(
        &url,
        json!({"jsonrpc": "2.0", "id": 1, "method": "mcp/executeTool", "params": {"id": "mcp://gateway/s/s/tools/echo:v1", "arguments": args}}),
    );
    post(
        &url,
        json!({"jsonrpc": "2.0", "id": 2, "method": "mcp/executeTool", "params": {"id": "mcp://gateway/s/s/tools/nope", "arguments": {}}}),
    );
    let ok = p.wait_log("audit ok", |v| {
        v["target"] == "mcp_gateway::audit" && v["outcome"] == "ok"
    });
    assert_eq!(ok["tenant"], "demo");
    assert_eq!(ok["tool"], "mcp://gateway/s/s/tools/echo:v1");
    assert_eq!(ok["upstream"], "s");
    assert_eq!(ok["protocol"], "v1");
    assert!(ok["duration_ms"].as_f64().unwrap() >= 0.0);
    // A keyed digest of the arguments' JSON text as sent: equal calls can be
    // matched, never read, and a guess cannot be confirmed by hashing it.
    let digest = ok["args_hmac"].as_str().unwrap();
    assert_eq!(digest.len(), 32);
    let plain = {
        use sha2::Digest;
        let text = serde_json::to_string(&args).unwrap();
        let d = sha2::Sha256::digest(text.as_bytes());
        d[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    assert_ne!(digest, plain);
    assert!(
        ok["span"]["request_id"]
            .as_str()
            .is_some_and(|id| id.len() == 16),
        "{ok}"
    );
    let failed = p.wait_log("audit failure", |v| {
        v["target"] == "mcp_gateway::audit" && v["outcome"] == "invalid_params"
    });
    assert_eq!(failed["tool"], "mcp://gateway/s/s/tools/nope");
    assert!(p.terminate().success());
    assert!(
        !p.seen
            .iter()
            .any(|v| v.to_string().contains("secret-argument-9d2")),
        "arguments leaked into the logs"
    );
    assert!(
        !p.seen.iter().any(|v| v.to_string().contains("demo-key")),
        "a key leaked into the logs"
    );
}

#[test]
fn each_audit_line_carries_its_own_requests_span_on_a_kept_alive_connection() {
    use std::io::{BufRead, BufReader, Read, Write};
    let (mut p, agent, _dir) = serve_one_upstream("s");
    let mut s = std::net::TcpStream::connect(&agent).unwrap();
    let mut answers = BufReader::new(s.try_clone().unwrap());
    // A request id of the client's (with a quote and a backslash), none,
    // another: the connection's requests one after another.
    let sent = [Some(r#"trace-"7"\x"#), None, Some("third-request")];
    let mut echoed = Vec::new();
    for (n, id) in sent.iter().enumerate() {
        let body = json!({"jsonrpc": "2.0", "id": n, "method": "mcp/executeTool", "params": {"id": "mcp://gateway/s/s/tools/echo:v1", "arguments": {"text": format!("call {n}")}}}).to_string();
        let header = id.map_or(String::new(), |id| format!("x-request-id: {id}\r\n"));
        write!(s, "POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer demo-key\r\nContent-Type: application/json\r\n{header}Content-Length: {}\r\n\r\n{body}", body.len()).unwrap();
        let (mut length, mut request_id) = (0, String::new());
        loop {
            let mut line = String::new();
            answers.read_line(&mut line).unwrap();
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(": ") {
                match name.to_ascii_lowercase().as_str() {
                    "content-length" => length = value.parse().unwrap(),
                    "x-request-id" => request_id = value.to_owned(),
                    _ => {}
                }
            }
        }
        let mut answer = vec![0; length];
        answers.read_exact(&mut answer).unwrap();
        assert!(String::from_utf8_lossy(&answer).contains(&format!("call {n}")));
        echoed.push(request_id);
    }
    for (n, id) in sent.iter().enumerate() {
        let text = format!("call {n}");
        let line = p.wait_log("the call's audit line", |v| {
            v["target"] == "mcp_gateway::audit" && v["span"]["request_id"] == echoed[n].as_str()
        });
        if let Some(id) = id {
            assert_eq!(echoed[n], *id);
        } else {
            assert_eq!(echoed[n].len(), 16, "a new id: {echoed:?}");
        }
        let request = json!({"request_id": echoed[n], "tenant": "demo", "name": "request"});
        assert_eq!(line["span"], request, "{text}: {line}");
        assert_eq!(line["spans"], json!([request]), "{text}: {line}");
    }
    drop((s, answers));
    assert!(p.terminate().success());
}

fn get(url: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://")?;
    let (host, path) = rest.split_once('/')?;
    let mut s = std::net::TcpStream::connect(host).ok()?;
    write!(
        s,
        "GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, out.split_once("\r\n\r\n")?.1.to_owned()))
}

#[test]
fn sigterm_drains_in_flight_calls_then_exits_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("rec");
    let config = dir.path().join("gw.yaml");
    std::fs::write(
        &config,
        json!({
            "gateway": {"shutdown_timeout_ms": 10000},
            "upstreams": {"s": stdio_upstream("s", &["--record", record.to_str().unwrap()])},
            "tenants": {"demo": tenant("demo-key", &["s"])},
        })
        .to_string(),
    )
    .unwrap();
    // One worker: the current-thread runtime the benchmarks use.
    let mut p = Process::spawn(&[
        "serve",
        "--config",
        config.to_str().unwrap(),
        "--workers",
        "1",
    ]);
    let agent = p.addr("agent listener bound");
    let admin = p.addr("admin listener bound");
    p.wait_log("ready", |v| v["message"] == "upstream ready");
    let child = children_of(p.child.id());
    assert_eq!(child.len(), 1);
    let url = format!("http://{agent}/mcp");
    let slow = {
        let url = url.clone();
        std::thread::spawn(move || {
            post(
                &url,
                json!({"jsonrpc": "2.0", "id": 1, "method": "mcp/executeTool", "params": {"id": "mcp://gateway/s/s/tools/sleep", "arguments": {"ms": 1500}}}),
            )
        })
    };
    // Once the call is at the child, ask the gateway to stop.
    while !std::fs::read_to_string(&record)
        .unwrap_or_default()
        .contains("\"ms\":1500")
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    p.signal("-TERM");
    // While draining: not ready, still alive.
    let mut saw_not_ready = false;
    for _ in 0..100 {
        match get(&format!("http://{admin}/readyz")) {
            Some((503, body)) => {
                assert!(body.contains(r#""draining":true"#), "{body}");
                saw_not_ready = true;
                break;
            }
            Some(_) => std::thread::sleep(Duration::from_millis(10)),
            None => break,
        }
    }
    assert!(saw_not_ready, "readiness must turn off while draining");
    // No new connections are accepted.
    assert!(
        std::net::TcpStream::connect(&agent).is_err()
            || get(&format!("http://{agent}/mcp")).is_none()
    );
    // The call in flight is answered, not cut.
    let answer = slow.join().unwrap();
    assert_eq!(answer["result"]["output"]["slept"], 1500, "{answer}");
    let status = p.terminate();
    assert!(status.success(), "{status:?}");
    assert!(
        !std::path::Path::new(&format!("/proc/{}", child[0])).exists(),
        "the child was stopped and reaped"
    );
}

#[test]
fn sighup_reloads_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gw.yaml");
    let text = |tenants: Value| {
        json!({
            "gateway": {"reload_poll_ms": 0},
            "upstreams": {"s": stdio_upstream("s", &[])},
            "tenants": with_keys(json!({"demo": tenant("demo-key", &["s"])}), tenants),
        })
        .to_string()
    };
    std::fs::write(&config, text(json!({}))).unwrap();
    let mut p = Process::spawn(&["serve", "--config", config.to_str().unwrap()]);
    p.wait_log("ready", |v| v["message"] == "upstream ready");
    std::fs::write(&config, text(json!({"other": tenant("other-key", &["s"])}))).unwrap();
    p.signal("-HUP");
    let line = p.wait_log("reloaded", |v| v["message"] == "configuration reloaded");
    assert!(
        line["summary"]
            .as_str()
            .unwrap()
            .contains("1 upstreams kept, 0 started"),
        "{line}"
    );
    // The listeners were given on the command line: a reload leaves them,
    // and does not call them changed.
    let restart =
        |v: &Value| v["message"] == "these settings changed but only take effect after a restart";
    assert!(!p.seen().iter().any(restart), "{}", p.seen_text());
    // A store is named as left for a restart; an admin token is applied.
    let admin = p
        .seen()
        .iter()
        .find(|v| v["message"] == "admin listener bound")
        .and_then(|v| v["addr"].as_str())
        .unwrap()
        .to_owned();
    let metrics = |token: &str| {
        use std::io::{Read, Write};
        let mut conn = std::net::TcpStream::connect(&admin).unwrap();
        conn.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        write!(
            conn,
            "GET /metrics HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\nconnection: close\r\n\r\n"
        )
        .unwrap();
        let mut head = [0u8; 12];
        conn.read_exact(&mut head).unwrap();
        String::from_utf8_lossy(&head[9..12]).into_owned()
    };
    assert_eq!(metrics("anything"), "200");
    let rotated = Doc::parse(&text(json!({})))
        .set("gateway.admin_token", "rotated-token")
        .set("gateway.store", json!({"url": "redis://127.0.0.1:1/0"}));
    std::fs::write(&config, rotated.yaml()).unwrap();
    p.signal("-HUP");
    let line = p.wait_log("restart warning", restart);
    assert_eq!(line["settings"], "[\"gateway.store\"]", "{line}");
    p.wait_log("reloaded again", |v| {
        v["message"] == "configuration reloaded"
            && v["summary"].as_str().unwrap_or("").contains("1 tenants")
    });
    assert_eq!(metrics("anything"), "401");
    assert_eq!(metrics("rotated-token"), "200");
    std::fs::write(&config, "garbage: [").unwrap();
    p.signal("-HUP");
    p.wait_log("rejected", |v| {
        v["message"] == "configuration reload rejected; the running configuration stays"
    });
    assert!(p.terminate().success());
}

/// Proxy variables reach neither HTTP path: the plain-http pool cannot use
/// them, so reqwest (https:// upstreams, the notification session) does not
/// either. A "proxy" that counts connections sees none.
#[test]
fn proxy_variables_are_ignored_on_both_http_paths() {
    let proxy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_url = format!("http://{}", proxy.local_addr().unwrap());
    proxy.set_nonblocking(true).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (url, _server) = rt.block_on(http_upstream("h"));
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gw.yaml");
    std::fs::write(
        &config,
        json!({
            "upstreams": {"h": {"http": {"url": url, "notifications": true}}},
            "tenants": {"demo": tenant("demo-key", &["h"])},
        })
        .to_string(),
    )
    .unwrap();
    let env: Vec<(&str, &str)> = [
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ]
    .iter()
    .map(|name| (*name, proxy_url.as_str()))
    .collect();
    let mut p = Process::spawn_with_env(&["serve", "--config", config.to_str().unwrap()], &env);
    let agent = p.addr("agent listener bound");
    p.wait_log("ready", |v| v["message"] == "upstream ready");
    p.wait_log("the notification session", |v| {
        v["message"] == "notification session open"
    });
    let r = post(
        &format!("http://{agent}/mcp"),
        json!({"jsonrpc": "2.0", "id": 1, "method": "mcp/executeTool", "params": {"id": "mcp://gateway/h/h/tools/echo:v1", "arguments": {"text": "direct"}}}),
    );
    assert_eq!(r["result"]["output"]["text"], "direct", "{r}");
    assert!(proxy.accept().is_err(), "a connection went to the proxy");
    assert!(p.terminate().success());
}

#[test]
fn audit_lines_never_wait_for_stderr_and_those_dropped_are_counted() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gw.yaml");
    // A long tenant name and request id make long audit lines: the 4 MiB
    // the log writer holds fill after fewer calls.
    let name = "t".repeat(64);
    std::fs::write(
        &config,
        json!({
            "upstreams": {"s": stdio_upstream("s", &[])},
            "tenants": {name.clone(): tenant("demo-key", &["s"])},
        })
        .to_string(),
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .args(["serve", "--config", config.to_str().unwrap()])
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let (mut agent, mut admin, mut ready) = (None, None, false);
    while agent.is_none() || admin.is_none() || !ready {
        let mut line = String::new();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "the gateway ended"
        );
        let v: Value = serde_json::from_str(&line).unwrap();
        let addr = v["addr"].as_str().map(str::to_owned);
        match v["message"].as_str() {
            Some("agent listener bound") => agent = addr,
            Some("admin listener bound") => admin = addr,
            Some("upstream ready") => ready = true,
            _ => {}
        }
    }
    // Nobody reads stderr now: the pipe fills, the log writer blocks on it,
    // and its 4 MiB fill with audit lines of about 800 bytes. Arguments that
    // break the tool's schema are refused without another log line.
    const CALLS: usize = 8_000;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "mcp/executeTool", "params": {"id": "mcp://gateway/s/s/tools/echo:v1", "arguments": {}}}).to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer demo-key\r\nx-request-id: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        "r".repeat(128),
        body.len()
    );
    let mut s = std::net::TcpStream::connect(agent.unwrap()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = Vec::new();
    for call in 0..CALLS {
        s.write_all(request.as_bytes()).unwrap();
        let answer = loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                let length: usize = head
                    .split("content-length: ")
                    .nth(1)
                    .and_then(|r| r.split("\r\n").next())
                    .unwrap()
                    .parse()
                    .unwrap();
                if buf.len() >= end + 4 + length {
                    let answer =
                        String::from_utf8_lossy(&buf[end + 4..end + 4 + length]).into_owned();
                    buf.drain(..end + 4 + length);
                    break answer;
                }
            }
            let mut chunk = [0u8; 4096];
            let n = s
                .read(&mut chunk)
                .unwrap_or_else(|e| panic!("call {call} waited (for stderr?): {e}"));
            assert!(n > 0, "the gateway closed the connection");
            buf.extend_from_slice(&chunk[..n]);
        };
        assert!(answer.contains("-32602"), "{answer}");
    }
    let metrics = http_get(admin.as_deref().unwrap(), "/metrics");
    let dropped = metric(&metrics, "mcp_gateway_log_lines_dropped_total").unwrap() as usize;
    assert!(dropped > 0, "4 MiB could not hold {CALLS} lines");
    // Reading again, every line that was not dropped arrives, whole, and
    // nothing more.
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut audited = 0;
    let check = |line: String| {
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["target"], "mcp_gateway::audit", "{v}");
        assert_eq!(v["outcome"], "invalid_params");
        assert_eq!(v["span"]["tenant"], name.as_str());
    };
    while audited + dropped < CALLS {
        let line = lines
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("{audited} lines and {dropped} dropped of {CALLS}"));
        check(line);
        audited += 1;
    }
    if let Ok(line) = lines.recv_timeout(Duration::from_millis(300)) {
        panic!("a line beyond the {CALLS} calls: {line}");
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

/// The body of a GET, over a fresh connection.
fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.split_once("\r\n\r\n").unwrap().1.to_owned()
}

#[test]
fn the_audit_line_of_a_token_names_its_subject_never_the_token() {
    use crate::support::jwt::{ISSUER, RESOURCE, SigningKey, now, write_jwks};
    let dir = tempfile::tempdir().unwrap();
    let key = SigningKey::es256("k");
    write_jwks(&dir.path().join("jwks.json"), &[&key]);
    let config = dir.path().join("gw.yaml");
    std::fs::write(
        &config,
        json!({
            "gateway": {
                "auth": {
                    "resource": RESOURCE,
                    "jwt": [{"issuer": ISSUER, "jwks_file": "jwks.json", "tenant": "demo"}],
                },
            },
            "upstreams": {"s": stdio_upstream("s", &[])},
            "tenants": {"demo": tenant("demo-key", &["s"])},
        })
        .to_string(),
    )
    .unwrap();
    let mut p = Process::spawn(&["serve", "--config", config.to_str().unwrap()]);
    let agent = p.addr("agent listener bound");
    p.wait_log("ready", |v| v["message"] == "upstream ready");
    let token =
        key.sign(&json!({"iss": ISSUER, "aud": RESOURCE, "sub": "agent-42", "exp": now() + 300}));
    let answer = {
        use std::io::{Read, Write};
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "mcp/executeTool",
                          "params": {"id": "mcp://gateway/s/s/tools/echo:v1", "arguments": {"text": "t"}}})
        .to_string();
        let mut s = std::net::TcpStream::connect(&agent).unwrap();
        write!(s, "POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let line = p.wait_log("audit", |v| v["target"] == "mcp_gateway::audit");
    assert_eq!(line["subject"], "agent-42");
    assert_eq!(line["tenant"], "demo");
    let status = p.terminate();
    assert!(status.success());
    assert!(
        p.seen.iter().all(|v| !v.to_string().contains(&token)),
        "the token is in no log line"
    );
}
