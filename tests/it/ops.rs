//! Operations: request ids, readiness with required upstreams.

use serde_json::{Value, json};

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_carries_a_request_id() {
    let yaml = json!({
        "upstreams": {"s": stdio_upstream("s", &[])},
        "tenants": {"a": tenant("ka", &["s"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    let send = |id: Option<&str>, key: &str| {
        let mut req = gw
            .client
            .post(&gw.url)
            .bearer_auth(key)
            .header("content-type", "application/json")
            .body(r#"{"jsonrpc":"2.0","id":1,"method":"mcp/listPrompts"}"#);
        if let Some(id) = id {
            req = req.header("x-request-id", id);
        }
        req.send()
    };
    let r = within(send(Some("trace-abc-123"), "ka")).await.unwrap();
    assert_eq!(r.headers()["x-request-id"], "trace-abc-123");
    let a = within(send(None, "ka")).await.unwrap().headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let b = within(send(None, "wrong")).await.unwrap();
    assert_eq!(b.status(), 401, "even refusals carry one");
    let b = b.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert_eq!(a.len(), 16);
    assert_ne!(a, b);
    // An unreasonable id is replaced, not echoed.
    let long = "x".repeat(200);
    let r = within(send(Some(&long), "ka")).await.unwrap();
    assert_eq!(r.headers()["x-request-id"].len(), 16);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_waits_for_required_upstreams_only() {
    let dead = dead_url().await;
    let optional = json!({
        "upstreams": {"s": stdio_upstream("s", &[]), "d": {"http": {"url": dead}}},
        "tenants": {"a": tenant("ka", &["s", "d"])},
    })
    .to_string();
    let gw = Gateway::start(&optional).await;
    gw.wait_ready(&["s"]).await;
    let (status, body) = gw.get_admin("/readyz").await;
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        status, 200,
        "an optional upstream never fails readiness: {body}"
    );
    let d = &v["upstreams"]["d"];
    assert_eq!(
        (&d["status"], &d["required"], &d["protocol"]),
        (&json!("down"), &json!(false), &json!("detecting")),
        "{d}"
    );
    // Why, for whoever reads the detail.
    assert!(
        d["problem"].as_str().unwrap().starts_with("unreachable: "),
        "{d}"
    );
    gw.stop().await;

    let required = Doc::parse(&optional)
        .set("upstreams.d.required", true)
        .yaml();
    let gw = Gateway::start(&required).await;
    gw.wait_ready(&["s"]).await;
    let (status, body) = gw.get_admin("/readyz").await;
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status, 503, "{body}");
    assert_eq!(v["ready"], false);
    assert_eq!(v["upstreams"]["d"]["required"], true);
    let (status, body) = gw.get_admin("/healthz").await;
    assert_eq!(
        (status, body.as_str()),
        (200, "ok\n"),
        "liveness does not depend on upstreams"
    );
    gw.stop().await;
}

/// Listening on every interface (in a network namespace of its own, so
/// nothing outside this test can reach it) is said once at start, with
/// what the gateway does not provide there.
#[test]
fn listening_on_every_interface_is_said_at_start() {
    use std::io::BufRead;
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
    let mut child = std::process::Command::new("unshare")
        .args([namespaces(), BIN, "serve", "--config"])
        .arg(&config)
        .args([
            "--listen",
            "0.0.0.0:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--log-format",
            "json",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut said = None;
    for line in lines.map_while(Result::ok) {
        let v: Value = serde_json::from_str(&line).unwrap_or_default();
        if v["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("listening on every interface"))
        {
            said = Some(v);
            break;
        }
        if v["message"] == "upstream ready" {
            break;
        }
    }
    // SIGTERM: the gateway stops its child before it exits.
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    let said = said.expect("a note about every interface");
    assert_eq!(said["allowed_origins"], 0, "{said}");
    assert_eq!(said["admin_token"], false, "{said}");
}
