//! Credentials the gateway obtains for an upstream: the client credentials
//! grant at a real authorization server (oidc-provider, on 127.0.0.1), for
//! an upstream on the official Python SDK that serves only requests bearing
//! a token that server issued for it (`tests/fixtures/protected_server.py`).

use serde_json::{Value, json};

use crate::support::oidc::Provider;
use crate::support::*;

const WHOAMI: &str = "mcp://gw/p/tool/whoami";

/// The protected upstream, and the authorization server that issues
/// tokens for it; the files it reads its issuer from and logs tokens to.
struct Parties {
    server: Protected,
    provider: Provider,
}

fn parties(reject_first: u32) -> Parties {
    let server = Protected::start(&["--reject-first", &reject_first.to_string()]);
    let provider = Provider::start(0, &server.url);
    server.trust(&provider.issuer);
    Parties { server, provider }
}

fn config(parties: &Parties, secret: &str) -> String {
    let endpoint = json!({"token_url": format!("{}/token", parties.provider.issuer)});
    config_with(parties, secret, endpoint)
}

/// With the token endpoint given as `endpoint` (`{token_url}` or `{issuer}`).
fn config_with(parties: &Parties, secret: &str, endpoint: Value) -> String {
    let client = json!({"client_id": "agent-a", "client_secret": secret, "scope": "files"});
    json!({
        "gateway": {"id": "gw", "upstream_auth": {"token_timeout_ms": 3000}},
        "upstreams": {
            "p": {
                "http": {"url": parties.server.url},
                "protocol": "modelcontextprotocol",
                "auth": {"client_credentials": with_keys(client, endpoint)},
            },
        },
        "tenants": {"a": tenant("ka", &["p"])},
    })
    .to_string()
}

fn whoami(r: &Value) -> Value {
    let text = r["result"]["output"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"));
    serde_json::from_str(text).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_credentials_token_reaches_the_upstream_and_is_reused() {
    let parties = parties(0);
    // protocol: auto (the default): the question which protocol it speaks
    // bears the credential too.
    let yaml = Doc::parse(&config(&parties, "secret"))
        .remove("upstreams.p.protocol")
        .yaml();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["p"]).await;
    let first = whoami(&gw.execute("ka", WHOAMI, json!({})).await);
    let second = whoami(&gw.execute("ka", WHOAMI, json!({})).await);
    assert_eq!(first["aud"], parties.server.url.as_str());
    assert_eq!(first["client_id"], "agent-a");
    assert_eq!(first["scope"], "files");
    assert_eq!(first["jti"], second["jti"], "one token, reused");
    // Every request the upstream served bore that token: the question of
    // its protocol, the handshake, the listing and both calls; never the
    // agent's key.
    let seen = parties.server.accepted();
    assert!(seen.len() >= 4, "{seen:?}");
    assert!(seen.iter().all(|c| c["jti"] == first["jti"]), "{seen:?}");
    let metrics = gw.metrics().await;
    let requests = r#"mcp_gateway_upstream_token_requests_total{grant="client_credentials",outcome="ok",upstream="p"}"#;
    assert_eq!(metric(&metrics, requests), Some(1.0));
    let hits = r#"mcp_gateway_upstream_token_cache_total{result="hit",upstream="p"}"#;
    assert!(metric(&metrics, hits) >= Some(3.0), "{metrics}");
    assert_eq!(
        metric(
            &metrics,
            r#"mcp_gateway_upstream_tokens_cached{upstream="p"}"#
        ),
        Some(1.0)
    );
    gw.stop().await;
}

/// A token the upstream refuses (401) is let go and the request made once
/// more with a new one; the caller sees only the answer. The token
/// endpoint here is found from the issuer's metadata.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_token_is_replaced_once() {
    let parties = parties(1);
    let issuer = json!({"issuer": parties.provider.issuer});
    let gw = Gateway::start(&config_with(&parties, "secret", issuer)).await;
    gw.wait_ready(&["p"]).await;
    let me = whoami(&gw.execute("ka", WHOAMI, json!({})).await);
    assert_eq!(me["client_id"], "agent-a");
    let metrics = gw.metrics().await;
    let requests = r#"mcp_gateway_upstream_token_requests_total{grant="client_credentials",outcome="ok",upstream="p"}"#;
    assert_eq!(
        metric(&metrics, requests),
        Some(2.0),
        "the refused one, and its replacement"
    );
    gw.stop().await;
}

/// An authorization server that refuses the client: the upstream is never
/// reached without a credential, and a call says why, within the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusing_authorization_server_fails_calls_with_the_reason() {
    let parties = parties(0);
    let gw = Gateway::start(&config(&parties, "not-the-secret")).await;
    let r = within(gw.execute("ka", WHOAMI, json!({}))).await;
    assert_eq!(r["error"]["code"], -32009, "{r}");
    assert_eq!(r["error"]["data"]["upstream"], "p");
    assert_eq!(r["error"]["data"]["reason"], "refused");
    assert_eq!(r["error"]["data"]["error"], "invalid_client");
    assert!(!r.to_string().contains("not-the-secret"));
    assert!(
        parties.server.accepted().is_empty(),
        "nothing reached the upstream"
    );
    let metrics = gw.metrics().await;
    let refused = r#"mcp_gateway_upstream_token_requests_total{grant="client_credentials",outcome="refused",upstream="p"}"#;
    assert!(metric(&metrics, refused) >= Some(1.0), "{metrics}");
    gw.stop().await;
}

#[test]
fn check_refuses_what_cannot_authenticate() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.yaml");
    let cc = |extra: Value| {
        let mut cc = json!({"client_id": "c", "client_secret": "s"});
        cc.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        json!({"client_credentials": cc})
    };
    let yaml = json!({
        "gateway": {"id": "gw", "upstream_auth": {"token_timeout_ms": 0}},
        "upstreams": {
            "st": {
                "stdio": {"command": "x"},
                "auth": cc(json!({"token_url": "http://127.0.0.1:9/t"})),
            },
            "both": {
                "http": {"url": "http://127.0.0.1:9/mcp"},
                "auth": cc(json!({"token_url": "http://127.0.0.1:9/t", "issuer": "http://127.0.0.1:9"})),
            },
            "none": {"http": {"url": "http://127.0.0.1:9/mcp"}, "auth": cc(json!({}))},
            "creds": {
                "http": {"url": "http://127.0.0.1:9/mcp"},
                "auth": cc(json!({"token_url": "http://u:p@127.0.0.1:9/t"})),
            },
            "method": {
                "http": {"url": "http://127.0.0.1:9/mcp"},
                "auth": cc(json!({"token_url": "http://127.0.0.1:9/t", "auth_method": "private_key_jwt"})),
            },
            "twice": {
                "http": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "x"}},
                "auth": cc(json!({"token_url": "http://127.0.0.1:9/t"})),
            },
            "empty": {"http": {"url": "http://127.0.0.1:9/mcp"}, "auth": {}},
        },
        "tenants": {"a": tenant("ka", &["st"])},
    }).to_string();
    std::fs::write(&path, yaml).unwrap();
    let said = check_refused(&path);
    for path in [
        "gateway.upstream_auth.token_timeout_ms",
        "upstreams.st.auth",
        "upstreams.both.auth.client_credentials",
        "upstreams.none.auth.client_credentials",
        "upstreams.creds.auth.client_credentials.token_url",
        "upstreams.method.auth.client_credentials.auth_method",
        "upstreams.twice.http.headers.authorization",
        "upstreams.empty.auth",
    ] {
        assert!(said.contains(path), "{path} not in: {said}");
    }
    assert!(
        !said.contains("u:p@"),
        "a URL's credentials are never echoed"
    );
}

/// The real binary's audit lines: each request to the authorization server
/// (`upstream credential`), and each call's mode and how its credential was
/// come by; never a token or a secret.
#[test]
fn credentials_are_audited_without_a_secret() {
    let parties = parties(0);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.yaml");
    std::fs::write(&path, config(&parties, "secret")).unwrap();
    let mut p = Process::spawn(&["serve", "--config", path.to_str().unwrap()]);
    let agent = p.addr("agent listener bound");
    p.wait_log("ready", |v| v["message"] == "upstream ready");
    let gw = Gateway::at(&agent);
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        gw.execute("ka", WHOAMI, json!({})).await;
    });
    let fetched = p.wait_log("the token request", |v| {
        v["message"] == "upstream credential"
    });
    assert_eq!(
        (
            &fetched["upstream"],
            &fetched["mode"],
            &fetched["event"],
            &fetched["outcome"]
        ),
        (
            &json!("p"),
            &json!("client_credentials"),
            &json!("token_request"),
            &json!("ok")
        )
    );
    let call = p.wait_log("the call", |v| v["message"] == "tool call");
    assert_eq!(call["upstream_auth"], "client_credentials", "{call}");
    assert_eq!(
        call["credential"], "cached",
        "the handshake fetched it: {call}"
    );
    let token = parties.server.accepted()[0]["jti"]
        .as_str()
        .unwrap()
        .to_owned();
    let logged = p.seen_text();
    assert!(
        !logged.contains("secret\""),
        "the client's secret is never logged"
    );
    assert!(!logged.contains(&token), "nor anything of the token");
    assert!(p.terminate().success());
}

/// An authorization server that never answers, or is not there: calls fail
/// with the reason within the bound, and nothing hangs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_or_absent_authorization_server_fails_calls_within_the_bound() {
    // Takes connections and never answers them.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let slow = format!("http://{}/token", silent.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut kept = Vec::new();
        while let Ok((conn, _)) = silent.accept().await {
            kept.push(conn);
        }
    });
    // A port nobody listens on any more.
    let gone = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/token", l.local_addr().unwrap())
    };
    let upstream = |token_url: &str| {
        json!({
            "http": {"url": "http://127.0.0.1:9/mcp"},
            "protocol": "modelcontextprotocol",
            "auth": {"client_credentials": {"token_url": token_url, "client_id": "c", "client_secret": "s"}},
        })
    };
    let yaml = json!({
        "gateway": {"id": "gw", "upstream_auth": {"token_timeout_ms": 300}},
        "upstreams": {"slow": upstream(&slow), "gone": upstream(&gone)},
        "tenants": {"a": tenant("ka", &["slow", "gone"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    for (upstream, reason) in [("slow", "timeout"), ("gone", "unreachable")] {
        let started = std::time::Instant::now();
        let r = within(async {
            loop {
                let r = gw
                    .execute("ka", &format!("mcp://gw/{upstream}/tool/x"), json!({}))
                    .await;
                if r["error"]["code"] == -32009 {
                    return r;
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        })
        .await;
        assert_eq!(r["error"]["data"]["reason"], reason, "{r}");
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
    }
    gw.stop().await;
    held.abort();
}
