//! No path skips a check: a batch gets every check a lone request gets (or
//! is refused), a withdrawn key or a removed API key ends what it opened,
//! an issuer names only its own tenants, and every refused call is audited.

use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::support::jwt::{ISSUER, RESOURCE, SigningKey, now, write_jwks};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_the_stateless_era_is_refused_whole() {
    let hostile = Hostile::start(&[]);
    let gw = gateway(&hostile, json!({}), json!({})).await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "h_echo", "arguments": {"text": "ran"}, "_meta": stateless_meta()}});
    let batch = json!([call]).to_string();
    // Labelled tools/list in its headers, or carrying the revision only in
    // its `_meta`: either way nothing of it runs.
    for headers in [
        vec![
            ("mcp-protocol-version", STATELESS),
            ("mcp-method", "tools/list"),
        ],
        vec![],
        vec![("mcp-protocol-version", "2025-11-25")],
    ] {
        let (status, _, body) = request(
            &gw,
            reqwest::Method::POST,
            "ka",
            &headers,
            Some(batch.clone()),
        )
        .await;
        assert_eq!(status, 400, "{headers:?}: {body}");
        let r: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(r["error"]["code"], -32600, "{r}");
    }
    assert_eq!(hostile.count("tools/call"), 0);
    // MCP v1.0 batches are served as before.
    let v1 = json!([{"jsonrpc": "2.0", "id": 1, "method": "mcp/listTools"}]).to_string();
    let (status, _, body) = request(&gw, reqwest::Method::POST, "ka", &[], Some(v1)).await;
    assert_eq!(status, 200, "{body}");
    gw.stop().await;
}

fn token_claims(tenant: &str) -> Value {
    json!({"iss": ISSUER, "aud": RESOURCE, "sub": "agent", "tenant": tenant,
           "iat": now(), "exp": now() + 300})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawn_key_verifies_nothing_it_verified_before() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (SigningKey::es256("old"), SigningKey::es256("new"));
    let jwks = dir.path().join("jwks.json");
    write_jwks(&jwks, &[&old]);
    let yaml = json!({
        "gateway": {
            "auth": {
                "resource": RESOURCE,
                "jwt": [
                    {
                        "issuer": ISSUER,
                        "jwks_file": jwks,
                        "tenant_claim": "tenant",
                        "refresh_s": 3600,
                    },
                ],
            },
        },
        "upstreams": {"s": stdio_upstream("s", &[])},
        "tenants": {"a": {"upstreams": ["s"]}},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["s"]).await;
    let by_old = old.sign(&token_claims("a"));
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"mcp/listTools"}"#;
    // A session opened with it, and a request on a kept-alive connection.
    let mut live = Live::ready(&gw, &by_old, false).await;
    assert_eq!(gw.post(&by_old, list).await.0, 200);
    // The provider rotates: the old key is withdrawn. A token of the new
    // key makes the gateway fetch the key set again.
    write_jwks(&jwks, &[&new]);
    assert_eq!(gw.post(&new.sign(&token_claims("a")), list).await.0, 200);
    let (status, headers, _) = gw
        .post_raw(Some(&by_old), Some("application/json"), list)
        .await;
    assert_eq!(status, 401);
    assert!(
        headers["www-authenticate"]
            .to_str()
            .unwrap()
            .contains("invalid_token")
    );
    // The session opened with the withdrawn key serves nothing more: its
    // next request is refused and the session ends. Under load the session
    // may already have ended by the time the request is written; then
    // nothing it sent after the rotation was answered.
    let request = json!({"jsonrpc": "2.0", "id": 2, "method": "mcp/listTools"});
    if live.try_send(request).await {
        let r = live.next_answer().await;
        assert_eq!(r["error"]["message"], "Unauthorized", "{r}");
    }
    while let Some(m) = live.next().await {
        assert!(
            m.get("result").is_none(),
            "answered after the key was withdrawn: {m}"
        );
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_issuer_names_only_its_own_tenants() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (SigningKey::es256("first"), SigningKey::es256("second"));
    let (one, two) = (dir.path().join("one.json"), dir.path().join("two.json"));
    write_jwks(&one, &[&first]);
    write_jwks(&two, &[&second]);
    let other = "http://127.0.0.1:1/realms/other";
    // The first issuer may name only `a`; the second lists none, so it may
    // name any tenant no issuer is bound to: `b`, not `a`.
    let yaml = json!({
        "gateway": {
            "auth": {
                "resource": RESOURCE,
                "jwt": [
                    {
                        "issuer": ISSUER,
                        "jwks_file": one,
                        "tenant_claim": "tenant",
                        "tenants": ["a"],
                    },
                    {"issuer": other, "jwks_file": two, "tenant_claim": "tenant"},
                ],
            },
        },
        "upstreams": {"s": stdio_upstream("s", &[])},
        "tenants": {"a": {"upstreams": ["s"]}, "b": {"upstreams": ["s"]}},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["s"]).await;
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"mcp/listTools"}"#;
    let by_second = |tenant: &str| {
        let mut c = token_claims(tenant);
        c["iss"] = json!(other);
        second.sign(&c)
    };
    for (token, status) in [
        (first.sign(&token_claims("a")), 200),
        (first.sign(&token_claims("b")), 401),
        (by_second("a"), 401),
        (by_second("b"), 200),
    ] {
        assert_eq!(gw.post(&token, list).await.0, status);
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_removes_a_key_ends_its_streams() {
    let hostile = Hostile::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.yaml");
    let before = json!({
        "gateway": {"id": "gw", "session_secret": SECRET, "reload_poll_ms": 50},
        "upstreams": {"h": hostile.upstream(5000), "s": stdio_upstream("s", &[])},
        "tenants": {"a": {"api_keys": ["ka", "gone"], "upstreams": ["h", "s"]}},
    })
    .to_string();
    std::fs::write(&path, &before).unwrap();
    let config = mcp_gateway::config::Config::load(&path).unwrap();
    let agent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gw = Gateway::wrap(
        mcp_gateway::app::start_on(config, Some(path.clone()), agent, admin).unwrap(),
    );
    gw.wait_ready(&["h", "s"]).await;
    let open =
        async |headers: Vec<(&str, String)>, method: reqwest::Method, body: Option<String>| {
            let mut r = gw
                .client
                .request(method, &gw.url)
                .bearer_auth("gone")
                .header("accept", "application/json, text/event-stream")
                .header("content-type", "application/json");
            for (k, v) in headers {
                r = r.header(k, v);
            }
            if let Some(b) = body {
                r = r.body(b);
            }
            let resp = within(r.send()).await.unwrap();
            assert_eq!(resp.status(), 200);
            resp
        };
    // A session's GET stream, and a listen, both opened with the key `gone`.
    let id = session(&gw, "gone").await;
    let mut get = open(vec![("mcp-session-id", id)], reqwest::Method::GET, None).await;
    let listen = json!({"jsonrpc": "2.0", "id": 9, "method": "subscriptions/listen", "params": {
        "_meta": stateless_meta(), "notifications": {"toolsListChanged": true,
        "resourceSubscriptions": ["mcp://gw/s/s/resources/motd"]}}});
    let headers = vec![
        ("mcp-protocol-version", STATELESS.to_owned()),
        ("mcp-method", "subscriptions/listen".to_owned()),
    ];
    let mut listening = open(headers, reqwest::Method::POST, Some(listen.to_string())).await;
    within(listening.chunk())
        .await
        .unwrap()
        .expect("the acknowledgment");
    let after = Doc::parse(&before).set("tenants.a.api_keys", ["ka"]);
    std::fs::write(&path, after.yaml()).unwrap();
    until(async || {
        let series = r#"mcp_gateway_config_reloads_total{outcome="applied"}"#;
        (metric(&gw.metrics().await, series) == Some(1.0)).then_some(())
    })
    .await;
    // The next event (the motd changes) ends both streams.
    let r = gw
        .execute("ka", "mcp://gw/s/s/tools/touch", json!({}))
        .await;
    assert!(r["result"].is_object(), "{r}");
    for stream in [&mut get, &mut listening] {
        let ended = within(async {
            loop {
                match stream.chunk().await {
                    Ok(Some(_)) => continue,
                    Ok(None) | Err(_) => return,
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(20), ended)
            .await
            .expect("the stream ended");
    }
    gw.stop().await;
}

#[test]
fn every_refused_official_call_is_audited() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gw.yaml");
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {"s": stdio_upstream("s", &[])},
        "tenants": {"a": tenant("ka", &["s"])},
    })
    .to_string();
    std::fs::write(&config, yaml).unwrap();
    let mut p = Process::spawn(&["serve", "--config", config.to_str().unwrap()]);
    let agent = p.addr("agent listener bound");
    p.wait_log("s ready", |v| {
        v["message"] == "upstream ready" && v["upstream"] == "s"
    });
    let call = |params: Value| {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
        call_raw(&agent, body).to_string()
    };
    let audited = |p: &mut Process, what: &str, tool: &str| {
        p.wait_log(what, |v| {
            v["target"] == "mcp_gateway::audit" && v["tool"] == tool
        })
    };
    let answer = call(json!({"name": "no_such_tool", "arguments": {}}));
    assert!(answer.contains("-32602"), "{answer}");
    let line = audited(&mut p, "the unknown tool's audit line", "no_such_tool");
    assert_eq!(line["outcome"], "invalid_params", "{line}");
    assert_eq!(line["protocol"], "modelcontextprotocol", "{line}");
    // A tool that exists, called with arguments that are not an object.
    let listing = call_raw(
        &agent,
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    );
    let echo = listing["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .find(|n| n.contains("echo"))
        .unwrap();
    let answer = call(json!({"name": echo, "arguments": "x"}));
    assert!(answer.contains("-32602"), "{answer}");
    let line = audited(&mut p, "the bad arguments' audit line", &echo);
    assert_eq!(line["outcome"], "invalid_params", "{line}");
    assert!(p.terminate().success());
}

/// One request to the binary, on a connection of its own, as tenant `a`.
fn call_raw(agent: &str, body: Value) -> Value {
    use std::io::{Read, Write};
    let body = body.to_string();
    let mut s = std::net::TcpStream::connect(agent).unwrap();
    write!(s, "POST /mcp HTTP/1.1\r\nHost: {agent}\r\nAuthorization: Bearer ka\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (_, body) = out.split_once("\r\n\r\n").unwrap();
    serde_json::from_str(body).unwrap_or_else(|_| panic!("{out}"))
}
