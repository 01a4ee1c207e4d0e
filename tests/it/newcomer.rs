//! What a new user meets in the first hour (issue 25): the stdio mode from a
//! config shared with the server, honest errors, sessions by default, a
//! `check` that catches what breaks at run time, logs a team can keep on, and
//! the answers outside conformance checks expect.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

#[test]
fn the_stdio_mode_starts_without_the_servers_secrets() {
    // The server's config: keys, the admin token and the session secret
    // from variables a desktop host does not set.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gw.yaml");
    std::fs::write(
        &config,
        json!({
            "gateway": {
                "id": "gw",
                "admin_token": "env:NOT_SET_ADMIN",
                "session_secret": "env:NOT_SET_SECRET",
            },
            "upstreams": {"s": stdio_upstream("s", &[])},
            "tenants": {
                "a": {"api_keys": ["env:NOT_SET_KEY", "file:missing.key"], "upstreams": ["s"]},
            },
        })
        .to_string(),
    )
    .unwrap();
    // `serve` and `check` need them, and say which.
    let checked = Command::new(BIN)
        .args(["check", "--config", config.to_str().unwrap()])
        .env_remove("NOT_SET_KEY")
        .output()
        .unwrap();
    assert!(!checked.status.success());
    assert!(String::from_utf8_lossy(&checked.stderr).contains("NOT_SET_KEY"));
    // The stdio mode does not: it answers the handshake and lists the tools.
    let mut child = Command::new(BIN)
        .args([
            "stdio",
            "--config",
            config.to_str().unwrap(),
            "--tenant",
            "a",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for msg in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "host", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    ] {
        writeln!(stdin, "{msg}").unwrap();
    }
    let mut answers = Vec::new();
    while answers.len() < 2 {
        let line = lines.next().expect("an answer").unwrap();
        answers.push(serde_json::from_str::<Value>(&line).unwrap());
    }
    assert_eq!(
        answers[0]["result"]["protocolVersion"], "2025-11-25",
        "{}",
        answers[0]
    );
    assert!(
        answers[1]["result"]["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty()),
        "{}",
        answers[1]
    );
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

async fn post_with(gw: &Gateway, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    let mut r = gw
        .client
        .post(&gw.url)
        .bearer_auth("ka")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    let resp = within(r.body(body.to_owned()).send()).await.unwrap();
    let status = resp.status().as_u16();
    (status, within(resp.text()).await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_are_accepted_and_removed_methods_are_not_found() {
    let gw = Gateway::one_upstream(&[]).await;
    let handshake = [("mcp-protocol-version", "2025-11-25")];
    // A client's answers (to a ping, say), alone or (in 2025-03-26, which
    // has batches) in a batch: 202, no body.
    let batches = [("mcp-protocol-version", "2025-03-26")];
    for (body, headers) in [
        (r#"{"jsonrpc":"2.0","id":"p1","result":{}}"#, &handshake),
        (
            r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"Method not found"}}"#,
            &handshake,
        ),
        (
            r#"[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","method":"notifications/initialized"}]"#,
            &batches,
        ),
    ] {
        let (status, text) = post_with(&gw, headers, body).await;
        assert_eq!((status, text.as_str()), (202, ""), "{body}");
    }
    // To MCP v1.0, which sends no requests, a response is an invalid request, as before.
    let (status, text) = post_with(&gw, &[], r#"{"jsonrpc":"2.0","id":1,"result":{}}"#).await;
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["error"]["code"],
        -32600
    );
    // 2026-07-28 has no initialize (nor ping): 404 and -32601, however it is sent.
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientCapabilities": {}});
    for (method, params, headers) in [
        (
            "initialize",
            json!({"_meta": meta}),
            vec![
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "initialize"),
            ],
        ),
        (
            "initialize",
            json!({}),
            vec![
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "initialize"),
            ],
        ),
        ("initialize", json!({"_meta": meta}), vec![]),
        (
            "ping",
            json!({"_meta": meta}),
            vec![
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "ping"),
            ],
        ),
    ] {
        let body =
            json!({"jsonrpc": "2.0", "id": 5, "method": method, "params": params}).to_string();
        let (status, text) = post_with(&gw, &headers, &body).await;
        assert_eq!(status, 404, "{method} {headers:?}: {text}");
        let r: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            (r["id"].as_i64(), r["error"]["code"].as_i64()),
            (Some(5), Some(-32601)),
            "{r}"
        );
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_is_down_is_said_alike_in_both_protocols_and_tool_errors_are_counted() {
    let (url, server) = http_upstream("h").await;
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {"h": {"http": {"url": url}, "timeout_ms": 2000}},
        "tenants": {"a": tenant("ka", &["h"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["h"]).await;
    let call = |name: &str, arguments: Value| {
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": name, "arguments": arguments}})
            .to_string()
    };
    let listed: Value = serde_json::from_str(
        &post_with(
            &gw,
            &[],
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
        )
        .await
        .1,
    )
    .unwrap();
    let name = |part: &str| {
        listed["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .find(|n| n.contains(part))
            .unwrap()
    };
    let echo = name("echo");
    // Arguments the tool's schema refuses are a tool error: a result with
    // isError, counted as tool_error.
    let (_, text) = post_with(&gw, &[], &call(&echo, json!({}))).await;
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["result"]["isError"],
        true,
        "{text}"
    );
    let series =
        r#"mcp_gateway_requests_total{method="tools/call",outcome="tool_error",tenant="a"}"#;
    assert_eq!(metric(&gw.metrics().await, series), Some(1.0));
    // The upstream goes away: its tool still exists, its upstream is unavailable.
    server.abort();
    let _ = server.await;
    let v1 = gw
        .execute("ka", "mcp://gw/h/h/tools/echo:v1", json!({"text": "x"}))
        .await;
    assert_eq!(v1["error"]["code"], -32001, "{v1}");
    let (_, text) = post_with(&gw, &[], &call(&echo, json!({"text": "x"}))).await;
    let official: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(official["error"]["code"], -32001, "{official}");
    assert_eq!(
        official["error"]["message"], v1["error"]["message"],
        "{official}"
    );
    gw.stop().await;
}

#[test]
fn refused_credentials_are_logged_at_most_once_a_second_without_the_credential() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gw.yaml");
    std::fs::write(
        &config,
        json!({
            "gateway": {"id": "gw"},
            "upstreams": {"s": stdio_upstream("s", &[])},
            "tenants": {"a": tenant("ka", &["s"])},
        })
        .to_string(),
    )
    .unwrap();
    let mut p = Process::spawn(&["serve", "--config", config.to_str().unwrap()]);
    let agent = p.addr("agent listener bound");
    let guess = |key: &str| {
        use std::io::Read;
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
        let mut s = std::net::TcpStream::connect(&agent).unwrap();
        write!(s, "POST /mcp HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 401"), "{out}");
    };
    for i in 0..50 {
        guess(&format!("guess-number-{i}"));
    }
    let first = p.wait_log("a refusal line", |v| v["message"] == "credentials refused");
    assert_eq!(first["reason"], "missing or unknown key", "{first}");
    // A second later, the next refusal says how many the first line stood for.
    std::thread::sleep(Duration::from_millis(1100));
    guess("guess-number-50");
    let second = p.wait_log("a second refusal line", |v| {
        v["message"] == "credentials refused" && v["refused_since_last_line"].as_u64() > Some(0)
    });
    assert_eq!(second["refused_since_last_line"], 49, "{second}");
    let status = p.terminate();
    assert!(status.success());
    let seen = p.seen_text();
    assert!(
        !seen.contains("guess-number"),
        "a credential reached the log"
    );
    assert_eq!(
        seen.matches("credentials refused").count(),
        2,
        "one line a second"
    );
}

#[test]
fn check_reports_what_would_break_at_run_time() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gw.yaml");
    std::fs::write(
        &config,
        "gateway: {id: gateway}\n\
         upstreams:\n  files: {stdio: {command: mcp-server-time-not-installed}}\n  search: {http: {url: \"127.0.0.1:3001/mcp\"}}\n  shell: {stdio: {command: sh, args: [-c, \"exit 0\"]}}\n\
         tenants:\n  acme:\n    api_keys: [k]\n    upstreams: [files, shell]\n    tools: {allow: [\"mcp://gatway/files/*\", \"[bad\"], deny: [\"[worse\", \"mcp://gateway/nope/*\"]}\n",
    )
    .unwrap();
    let err = check_refused(&config);
    for expected in [
        "upstreams.search.http.url: '127.0.0.1:3001/mcp' has no scheme",
        "tenants.acme.tools.allow[0]: 'mcp://gatway/files/*' can match no tool of this tenant",
        "tenants.acme.tools.allow[1]: '[bad' is not a glob",
        "tenants.acme.tools.deny[0]: '[worse' is not a glob",
        "tenants.acme.tools.deny[1]",
    ] {
        assert!(err.contains(expected), "missing {expected:?} in {err}");
    }
    // Once the config is valid, what it runs is looked up as the child will.
    std::fs::write(
        &config,
        "upstreams:\n  files: {stdio: {command: mcp-server-time-not-installed}}\n  shell: {stdio: {command: sh}}\n\
         tenants:\n  acme: {api_keys: [k], upstreams: [files, shell]}\n",
    )
    .unwrap();
    let err = check_refused(&config);
    assert!(
        err.contains("upstreams.files.stdio.command: 'mcp-server-time-not-installed' is not on the PATH the child gets (/usr/local/bin:/usr/bin:/bin)"),
        "{err}"
    );
    assert!(!err.contains("upstreams.shell"), "{err}");
    let elsewhere = Command::new(BIN)
        .args(["check", "--elsewhere", "--config", config.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(elsewhere.status.success());
}

#[test]
fn logs_say_a_left_out_definition_once_with_structured_fields_and_no_colours_in_pipes() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gw.yaml");
    std::fs::write(
        &config,
        json!({
            "gateway": {"id": "gw"},
            "upstreams": {"s": stdio_upstream("s", &[])},
            "tenants": {"a": tenant("ka", &["s"])},
        })
        .to_string(),
    )
    .unwrap();
    let mut p = Process::spawn(&["serve", "--config", config.to_str().unwrap()]);
    let agent = p.addr("agent listener bound");
    let ready = p.wait_log("ready", |v| v["message"] == "upstream ready");
    // What it offers, counted as listed, and the protocol it was found to speak.
    assert_eq!(
        ready["tools"].as_u64(),
        Some(TEST_TOOL_COUNT as u64),
        "{ready}"
    );
    assert!(ready["prompts"].as_u64().is_some(), "{ready}");
    assert_eq!(ready["protocol"], "v1", "{ready}");
    // The demo's two broken definitions; then three relistings (each touch
    // announces a change the upstream relists for).
    let touch = json!({"jsonrpc": "2.0", "id": 1, "method": "mcp/executeTool",
        "params": {"id": "mcp://gw/s/s/tools/touch", "arguments": {}}});
    for _ in 0..3 {
        let mut s = std::net::TcpStream::connect(&agent).unwrap();
        let body = touch.to_string();
        write!(s, "POST /mcp HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer ka\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).unwrap();
        let mut out = String::new();
        std::io::Read::read_to_string(&mut s, &mut out).unwrap();
        assert!(out.contains("\"result\""), "{out}");
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(p.terminate().success());
    let left: Vec<&Value> = p
        .seen()
        .iter()
        .filter(|v| v["message"] == "definition left out of listings")
        .collect();
    let mut ids: Vec<&str> = left.iter().map(|v| v["id"].as_str().unwrap()).collect();
    ids.sort_unstable();
    let distinct = ids.len();
    ids.dedup();
    assert!(!ids.is_empty());
    assert_eq!(distinct, ids.len(), "each said once: {left:#?}");

    // The text format writes no colour codes into a pipe.
    let mut text = Command::new(BIN)
        .args([
            "serve",
            "--config",
            config.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--log-format",
            "text",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(text.stderr.take().unwrap()).lines();
    let mut seen = String::new();
    while !seen.contains("upstream ready") {
        seen.push_str(&lines.next().expect("a log line").unwrap());
        seen.push('\n');
    }
    let _ = text.kill();
    let _ = text.wait();
    assert!(!seen.contains('\u{1b}'), "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_file_created_after_a_rejected_reload_is_reloaded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.yaml");
    let base = json!({
        "gateway": {"id": "gw", "reload_poll_ms": 50},
        "upstreams": {"s": stdio_upstream("s", &[])},
        "tenants": {"a": tenant("ka", &["s"])},
    })
    .to_string();
    std::fs::write(&path, &base).unwrap();
    let config = mcp_gateway::config::Config::load(&path).unwrap();
    let agent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gw = Gateway::wrap(
        mcp_gateway::app::start_on(config, Some(path.clone()), agent, admin).unwrap(),
    );
    gw.wait_ready(&["s"]).await;
    let reloads = async |outcome: &str, n: f64| {
        let series = format!("mcp_gateway_config_reloads_total{{outcome=\"{outcome}\"}}");
        within(async {
            while metric(&gw.metrics().await, &series) != Some(n) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
    };
    // A new tenant whose key file is not there yet: rejected.
    std::fs::write(
        &path,
        Doc::parse(&base)
            .set(
                "tenants.b",
                json!({"api_keys": ["file:b.key"], "upstreams": ["s"]}),
            )
            .yaml(),
    )
    .unwrap();
    reloads("rejected", 1.0).await;
    assert_eq!(
        gw.post("kb", r#"{"jsonrpc":"2.0","id":1,"method":"mcp/listTools"}"#)
            .await
            .0,
        401
    );
    // The file appears (a Secret mounted late): applied, with no other change.
    std::fs::write(dir.path().join("b.key"), "kb\n").unwrap();
    reloads("applied", 1.0).await;
    assert_eq!(
        gw.post("kb", r#"{"jsonrpc":"2.0","id":1,"method":"mcp/listTools"}"#)
            .await
            .0,
        200
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_reach_the_owner_of_the_prompt_or_template() {
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {"ev": crate::support::everything_stdio()},
        "tenants": {"a": tenant("ka", &["ev"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["ev"]).await;
    let rpc = async |method: &str, params: Value| -> Value {
        let body =
            json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
        let (status, text) = post_with(&gw, &[("mcp-protocol-version", "2025-11-25")], &body).await;
        assert_eq!(status, 200, "{text}");
        serde_json::from_str(&text).unwrap()
    };
    let init = rpc(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}),
    )
    .await;
    assert_eq!(
        init["result"]["capabilities"]["completions"],
        json!({}),
        "{init}"
    );
    let prompts = rpc("prompts/list", json!({})).await;
    let prompt = prompts["result"]["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"].as_str().unwrap().contains("completable"))
        .unwrap()["name"]
        .clone();
    let done = rpc(
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": prompt},
        "argument": {"name": "department", "value": "S"}}),
    )
    .await;
    assert_eq!(
        done["result"]["completion"]["values"],
        json!(["Sales", "Support"]),
        "{done}"
    );
    // With context: the second argument depends on the first.
    let done = rpc("completion/complete", json!({"ref": {"type": "ref/prompt", "name": prompt},
        "argument": {"name": "name", "value": ""}, "context": {"arguments": {"department": "Engineering"}}})).await;
    assert_eq!(
        done["result"]["completion"]["values"],
        json!(["Alice", "Bob", "Charlie"]),
        "{done}"
    );
    let templates = rpc("resources/templates/list", json!({})).await;
    let template = templates["result"]["resourceTemplates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["uriTemplate"].as_str().unwrap().contains("text"))
        .unwrap()["uriTemplate"]
        .clone();
    let done = rpc(
        "completion/complete",
        json!({"ref": {"type": "ref/resource", "uri": template},
        "argument": {"name": "resourceId", "value": "7"}}),
    )
    .await;
    assert_eq!(
        done["result"]["completion"]["values"],
        json!(["7"]),
        "{done}"
    );
    // What the tenant is not offered is unknown.
    let done = rpc(
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "nope"},
        "argument": {"name": "x", "value": ""}}),
    )
    .await;
    assert_eq!(done["error"]["code"], -32602, "{done}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_whose_stream_ends_early_is_resumed_with_last_event_id() {
    let server = crate::support::sdk_server();
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {"sdk": crate::support::http(&server.url)},
        "tenants": {"a": tenant("ka", &["sdk"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["sdk"]).await;
    // The server closes the answer's stream before answering; the answer
    // comes on the GET that resumes it, after the 100 ms the server asked for.
    for _ in 0..3 {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "sdk__interrupted", "arguments": {}}})
        .to_string();
        let (status, text) = post_with(&gw, &[], &body).await;
        assert_eq!(status, 200);
        let r: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            r["result"]["content"][0]["text"], "answered after the stream closed",
            "{r}"
        );
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_upstreams_env_may_come_from_a_secret_file() {
    // A mounted Secret's file, named in the config instead of its value.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "s3cret-from-a-file\n").unwrap();
    let out = dir.path().join("env.txt");
    let path = dir.path().join("gw.yaml");
    std::fs::write(
        &path,
        json!({
            "gateway": {"id": "gw"},
            "upstreams": {
                "e": {
                    "stdio": {
                        "command": "/bin/sh",
                        "args": ["-c", format!("env > $OUT; exec {} demo-upstream --name e", BIN)],
                        "env": {"OUT": out, "TOKEN": "file:token"},
                    },
                },
            },
            "tenants": {"a": tenant("ka", &["e"])},
        })
        .to_string(),
    )
    .unwrap();
    let config = mcp_gateway::config::Config::load(&path).unwrap();
    assert!(
        config.sources.iter().any(|s| s.ends_with("token")),
        "watched for reloads"
    );
    let gw = Gateway::start_config(config).await;
    gw.wait_ready(&["e"]).await;
    let env = std::fs::read_to_string(&out).unwrap();
    assert!(
        env.lines().any(|l| l == "TOKEN=s3cret-from-a-file"),
        "{env}"
    );
    gw.stop().await;
    // A missing file is a config error naming where, never a value.
    std::fs::remove_file(dir.path().join("token")).unwrap();
    let err = mcp_gateway::config::Config::load(&path)
        .unwrap_err()
        .to_string();
    assert!(err.contains("upstreams.e.stdio.env.TOKEN"), "{err}");
}
