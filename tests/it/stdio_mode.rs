//! `mcp-gateway stdio`: one agent over a real pipe. Its stdout must hold
//! nothing but well-formed Content-Length frames.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

fn frame(msg: &Value) -> Vec<u8> {
    let body = msg.to_string();
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// Reads frames strictly: exactly `Content-Length: N\r\n\r\n` then N bytes of JSON, nothing else.
fn read_frames(stdout: impl Read + Send + 'static) -> mpsc::Receiver<Result<Value, String>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        loop {
            let mut header = String::new();
            match r.read_line(&mut header) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) => return drop(tx.send(Err(e.to_string()))),
            }
            let Some(n) = header
                .strip_prefix("Content-Length: ")
                .and_then(|h| h.strip_suffix("\r\n"))
                .and_then(|n| n.parse::<usize>().ok())
            else {
                return drop(tx.send(Err(format!("not a frame header: {header:?}"))));
            };
            let mut blank = String::new();
            r.read_line(&mut blank).unwrap();
            if blank != "\r\n" {
                return drop(tx.send(Err(format!("no blank line after the header: {blank:?}"))));
            }
            let mut body = vec![0; n];
            r.read_exact(&mut body).unwrap();
            let _ = tx.send(
                serde_json::from_slice(&body).map_err(|e| format!("frame body is not JSON: {e}")),
            );
        }
    });
    rx
}

#[test]
fn stdio_mode_serves_one_agent_over_a_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gw.yaml");
    std::fs::write(
        &config,
        json!({
            "gateway": {"id": "gw"},
            "upstreams": {"s": stdio_upstream("s", &[])},
            "tenants": {"a": tenant("ka", &["s"]), "b": tenant("kb", &[])},
        })
        .to_string(),
    )
    .unwrap();
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
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let frames = read_frames(child.stdout.take().unwrap());
    let mut stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        let mut logs = String::new();
        let _ = stderr.read_to_string(&mut logs);
    });
    let next = || {
        frames
            .recv_timeout(Duration::from_secs(20))
            .expect("a frame")
            .expect("a well-formed frame")
    };

    // The handshake is enforced.
    stdin
        .write_all(&frame(
            &json!({"jsonrpc": "2.0", "id": 7, "method": "mcp/listTools"}),
        ))
        .unwrap();
    assert_eq!(next()["error"]["code"], -32002);
    stdin.write_all(&frame(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"clientCapabilities": {}}}))).unwrap();
    assert_eq!(next()["result"]["capabilities"]["listToolsProvider"], true);
    stdin
        .write_all(&frame(
            &json!({"jsonrpc": "2.0", "method": "initialized", "params": {}}),
        ))
        .unwrap();
    stdin
        .write_all(&frame(
            &json!({"jsonrpc": "2.0", "id": 2, "method": "mcp/listTools"}),
        ))
        .unwrap();
    let tools = next();
    assert_eq!(tools["id"], 2);
    assert!(
        tools["result"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["mcpId"] == "mcp://gw/s/s/tools/echo:v1")
    );
    // Notifications are forwarded.
    stdin.write_all(&frame(&json!({"jsonrpc": "2.0", "id": 3, "method": "mcp/executeTool", "params": {"id": "mcp://gw/s/s/tools/touch", "arguments": {}}}))).unwrap();
    let mut got = [next(), next()];
    got.sort_by_key(|m| m["id"].is_null());
    assert_eq!(got[0]["id"], 3);
    assert_eq!(
        got[1],
        json!({"jsonrpc": "2.0", "method": "mcp/resourceDidChange", "params": {"id": "mcp://gw/s/s/resources/motd"}})
    );
    // Garbage JSON in a well-formed frame costs that message.
    stdin.write_all(b"Content-Length: 5\r\n\r\nnope!").unwrap();
    assert_eq!(next()["error"]["code"], -32700);
    // Closing stdin ends it cleanly, after the last answer.
    stdin.write_all(&frame(&json!({"jsonrpc": "2.0", "id": 4, "method": "mcp/executeTool", "params": {"id": "mcp://gw/s/s/tools/sleep", "arguments": {"ms": 200}}}))).unwrap();
    drop(stdin);
    assert_eq!(next()["result"]["output"]["slept"], 200);
    let mut status = None;
    for _ in 0..200 {
        status = child.try_wait().unwrap();
        if status.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let status = status.expect("the gateway exits when stdin closes");
    assert!(status.success(), "{status:?}");
    // Nothing but frames: the reader saw EOF without an error.
    assert!(frames.recv_timeout(Duration::from_secs(5)).is_err());
}

#[test]
fn stdio_mode_refuses_an_unknown_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gw.yaml");
    std::fs::write(
        &config,
        json!({
            "upstreams": {"s": stdio_upstream("s", &[])},
            "tenants": {"a": tenant("ka", &["s"])},
        })
        .to_string(),
    )
    .unwrap();
    let out = Command::new(BIN)
        .args([
            "stdio",
            "--config",
            config.to_str().unwrap(),
            "--tenant",
            "nobody",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no tenant named 'nobody'"));
}

/// `mcp-gateway stdio` without a config serves the embedded demo, as
/// `serve` does, to a desktop host: the official Python SDK's stdio client
/// spawns it, lists the demo's tools and calls one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stdio_mode_serves_the_embedded_demo_without_a_config() {
    let steps = json!({"steps": [
        {"op": "tools"},
        {"op": "call", "name": "local_add_v1_2c27062c9e6f", "arguments": {"a": 2, "b": 3}},
    ]});
    let args = vec!["auto".to_owned(), "stdio".to_owned(), BIN.to_owned()];
    let (_, answers) = sdk_client_with(args, steps).await;
    let listed = answers[0].to_string();
    for name in ["local_add_v1_2c27062c9e6f", "remote_"] {
        assert!(listed.contains(name), "{name}: {listed}");
    }
    assert!(answers[1].to_string().contains('5'), "{answers:?}");
}
