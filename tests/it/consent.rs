//! Upstreams the user connects once in a browser (`user_consent`): a real
//! identity provider and a real upstream authorization server (both panva's
//! oidc-provider, with their login and consent pages,
//! `tests/fixtures/consent_provider.mjs`), an upstream on the official
//! Python SDK that verifies every token it receives and publishes its
//! protected resource metadata (`tests/fixtures/protected_server.py`), and a
//! browser that follows the gateway's consent URL through those pages with
//! an HTTP client, as a user would.

use std::net::SocketAddr;

use serde_json::{Value, json};

use crate::support::oidc::Provider;
use crate::support::*;

const RESOURCE: &str = "http://gateway.test/mcp";
const WHOAMI: &str = "mcp://gw/p/tool/whoami";
const KEY: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

struct Parties {
    idp: Provider,
    server: Protected,
    upstream_as: Provider,
}

impl Parties {
    fn start(ttl_s: u64) -> Parties {
        let server = Protected::start(&[]);
        let idp = Provider::with_pages("idp", RESOURCE, 300);
        let upstream_as = Provider::with_pages("upstream", &server.url, ttl_s);
        server.trust(&upstream_as.issuer);
        Parties {
            idp,
            server,
            upstream_as,
        }
    }

    /// The config of a gateway at `addr`; `store`: a redis URL to share.
    fn config(&self, addr: SocketAddr, store: Option<&str>) -> String {
        let upstream = json!({
            "http": {"url": self.server.url},
            "protocol": "modelcontextprotocol",
            "auth": {"user_consent": {"scope": "read write"}},
        });
        self.config_with(addr, store, upstream)
    }

    /// The same, with upstream `p` as given.
    fn config_with(&self, addr: SocketAddr, store: Option<&str>, upstream: Value) -> String {
        let idp = &self.idp.issuer;
        let mut gateway = json!({
            "id": "gw",
            "admin_token": "admin-secret",
            "auth": {
                "resource": RESOURCE,
                "jwt": [{
                    "issuer": idp,
                    "jwks_url": format!("{idp}/jwks"),
                    "tenant_claim": "tenant",
                    "login": {"client_id": "gw-login", "client_secret": "secret"},
                }],
            },
            "upstream_auth": {
                "token_timeout_ms": 3000,
                "public_url": format!("http://{addr}"),
                "encryption_keys": [{"id": "k1", "key": KEY}],
            },
        });
        if let Some(url) = store {
            gateway["session_secret"] = json!(KEY);
            gateway["store"] = json!({"url": url});
        }
        json!({
            "gateway": gateway,
            "upstreams": {"p": upstream},
            "tenants": {"a": tenant("ka", &["p"])},
        })
        .to_string()
    }
}

/// A browser: cookies by name, redirects followed, the providers' sign-in
/// form answered as `user` and their consent form accepted.
struct Browser {
    http: reqwest::Client,
    cookies: Vec<(String, String)>,
    user: &'static str,
}

/// Where a browser's walk ended: the last status, URL and page.
struct Landed {
    status: u16,
    url: String,
    page: String,
}

impl Browser {
    fn new(user: &'static str) -> Browser {
        Browser {
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            cookies: Vec::new(),
            user,
        }
    }

    fn keep_cookies(&mut self, headers: &reqwest::header::HeaderMap) {
        for set in headers.get_all("set-cookie").iter() {
            let set = set.to_str().unwrap();
            let pair = set.split(';').next().unwrap();
            let (name, value) = pair.split_once('=').unwrap();
            self.cookies.retain(|(n, _)| n != name);
            if !value.is_empty() {
                self.cookies.push((name.to_owned(), value.to_owned()));
            }
        }
    }

    async fn send(
        &mut self,
        method: &str,
        url: &str,
        form: Option<String>,
    ) -> (u16, String, String) {
        let cookie = self
            .cookies
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect::<Vec<_>>()
            .join("; ");
        let mut req = match method {
            "POST" => self.http.post(url),
            _ => self.http.get(url),
        };
        if !cookie.is_empty() {
            req = req.header("cookie", cookie);
        }
        if let Some(form) = form {
            req = req
                .header("content-type", "application/x-www-form-urlencoded")
                .body(form);
        }
        let resp = within(req.send()).await.unwrap();
        self.keep_cookies(resp.headers());
        let status = resp.status().as_u16();
        let location = resp
            .headers()
            .get("location")
            .map(|l| {
                reqwest::Url::parse(url)
                    .unwrap()
                    .join(l.to_str().unwrap())
                    .unwrap()
                    .to_string()
            })
            .unwrap_or_default();
        (status, location, within(resp.text()).await.unwrap())
    }

    /// Follows `url` until a page that is not a provider's form; stops
    /// before a step of the gateway's when `before` names it.
    async fn walk(&mut self, url: &str, before: Option<&str>) -> Landed {
        let mut url = url.to_owned();
        for _ in 0..20 {
            if before.is_some_and(|b| url.contains(b)) {
                return Landed {
                    status: 0,
                    url,
                    page: String::new(),
                };
            }
            let (status, location, page) = self.send("GET", &url, None).await;
            let (status, location, page) = match form_of(&page) {
                Some((action, prompt)) => {
                    let form = match prompt.as_str() {
                        "login" => format!("prompt=login&login={}&password=x", self.user),
                        _ => format!("prompt={prompt}"),
                    };
                    self.send("POST", &action, Some(form)).await
                }
                None => (status, location, page),
            };
            if !(300..400).contains(&status) {
                return Landed { status, url, page };
            }
            url = location;
        }
        panic!("more than 20 steps from {url}");
    }
}

/// A provider's form: its action and its `prompt`.
fn form_of(page: &str) -> Option<(String, String)> {
    let at = page.find("<form")?;
    let form = &page[at..];
    let action = form
        .split("action=\"")
        .nth(1)?
        .split('"')
        .next()?
        .to_owned();
    let prompt = form
        .split("name=\"prompt\" value=\"")
        .nth(1)?
        .split('"')
        .next()?
        .to_owned();
    Some((action, prompt))
}

async fn start(parties: &Parties) -> Gateway {
    Gateway::start_at(|addr| parties.config(addr, None)).await
}

/// The metrics, as the admin token sees them (every series).
async fn admin_metrics(gw: &Gateway) -> String {
    let resp = gw
        .client
        .get(format!("{}/metrics", gw.admin))
        .bearer_auth("admin-secret")
        .send()
        .await
        .unwrap();
    resp.text().await.unwrap()
}

/// The consent URL and elicitation id of an MCP v1.0 call's -32010.
fn consent_of(r: &Value) -> (String, String) {
    assert_eq!(r["error"]["code"], -32010, "{r}");
    let url = r["error"]["data"]["url"].as_str().unwrap().to_owned();
    assert!(
        r["error"]["message"].as_str().unwrap().contains(&url),
        "{r}"
    );
    (
        url,
        r["error"]["data"]["elicitationId"]
            .as_str()
            .unwrap()
            .to_owned(),
    )
}

fn whoami(r: &Value) -> Value {
    let text = r["result"]["output"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"));
    serde_json::from_str(text).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_connects_once_in_a_browser_and_then_calls_with_their_own_token() {
    let parties = Parties::start(300);
    let gw = start(&parties).await;
    let alice = parties.idp.token_for("alice", "files").await;
    let bob = parties.idp.token_for("bob", "files").await;

    // Not connected: the call never reaches the upstream.
    let (url, id) = consent_of(&gw.execute(&alice, WHOAMI, json!({})).await);
    assert!(url.starts_with(&format!(
        "http://{}/oauth/upstream/connect?id=",
        gw.agent_addr()
    )));
    assert!(id.len() >= 22, "128 random bits at least");
    assert!(parties.server.accepted().is_empty());
    // A 2025-11-25 client is asked by URL-mode elicitation.
    let r = mcp_request(
        &gw,
        &alice,
        "tools/call",
        json!({"name": "p__whoami", "arguments": {}}),
    )
    .await;
    assert_eq!(r["error"]["code"], -32042, "{r}");
    let asked = &r["error"]["data"]["elicitations"][0];
    assert_eq!(asked["mode"], "url");
    assert_eq!(
        asked["url"],
        url.as_str(),
        "one flow waits per user and upstream"
    );
    assert!(
        asked["url"]
            .as_str()
            .unwrap()
            .contains("/oauth/upstream/connect?id=")
    );
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains(asked["url"].as_str().unwrap())
    );

    let landed = Browser::new("alice").walk(&url, None).await;
    assert_eq!(landed.status, 200, "{}", landed.page);
    assert!(landed.url.contains("/oauth/upstream/callback"));
    assert!(landed.page.contains("connected"), "{}", landed.page);

    let me = whoami(&gw.execute(&alice, WHOAMI, json!({})).await);
    assert_eq!(me["sub"], "alice");
    assert_eq!(me["iss"], parties.upstream_as.issuer.as_str());
    assert_eq!(me["aud"], parties.server.url.as_str());
    assert_eq!(me["scope"], "read write");
    // Bob is asked for his own.
    let (bobs, _) = consent_of(&gw.execute(&bob, WHOAMI, json!({})).await);
    assert_ne!(bobs, url);
    // The agent's token never reached the upstream: every token it saw is
    // its own server's, alice's.
    let seen = parties.server.accepted();
    assert!(!seen.is_empty());
    assert!(
        seen.iter()
            .all(|c| c["iss"] == parties.upstream_as.issuer.as_str() && c["sub"] == "alice")
    );

    // Her connections, then revoked: asked again.
    let list = gw
        .client
        .get(format!(
            "http://{}/oauth/upstream/connections",
            gw.agent_addr()
        ))
        .bearer_auth(&alice)
        .send()
        .await
        .unwrap();
    let list: Value = serde_json::from_str(&list.text().await.unwrap()).unwrap();
    assert_eq!(list["connections"][0]["upstream"], "p", "{list}");
    assert_eq!(list["connections"][0]["scope"], "read write");
    let gone = gw
        .client
        .delete(format!(
            "http://{}/oauth/upstream/connections/p",
            gw.agent_addr()
        ))
        .bearer_auth(&alice)
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 204);
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    consent_of(&gw.execute(&alice, WHOAMI, json!({})).await);
    let metrics = admin_metrics(&gw).await;
    assert_eq!(
        metric(
            &metrics,
            r#"mcp_gateway_upstream_consents_total{outcome="connected",upstream="p"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        metric(
            &metrics,
            r#"mcp_gateway_upstream_consents_total{outcome="revoked",upstream="p"}"#
        ),
        Some(1.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nobody_attaches_an_account_to_another_user_and_a_state_serves_once() {
    let parties = Parties::start(300);
    let gw = start(&parties).await;
    let alice = parties.idp.token_for("alice", "files").await;

    // Bob signs in at alice's consent URL: refused, and the URL is spent.
    let (url, _) = consent_of(&gw.execute(&alice, WHOAMI, json!({})).await);
    let landed = Browser::new("bob").walk(&url, None).await;
    assert_eq!(landed.status, 403, "{}", landed.page);
    assert!(landed.url.contains("/oauth/upstream/login"));
    assert_eq!(Browser::new("alice").walk(&url, None).await.status, 400);

    // The last step from another browser, then replayed: refused, and
    // nothing reaches the server.
    let (url, _) = consent_of(&gw.execute(&alice, WHOAMI, json!({})).await);
    let mut hers = Browser::new("alice");
    let at = hers.walk(&url, Some("/oauth/upstream/callback")).await;
    let mut other = Browser::new("alice");
    let (status, _, _) = other.send("GET", &at.url, None).await;
    assert_eq!(status, 400, "another browser");
    let (status, _, _) = hers.send("GET", &at.url, None).await;
    assert_eq!(status, 400, "the state was spent by the refused attempt");
    consent_of(&gw.execute(&alice, WHOAMI, json!({})).await);
    assert!(parties.server.accepted().is_empty());

    // An answer that names another server (RFC 9207): refused.
    let (url, _) = consent_of(&gw.execute(&alice, WHOAMI, json!({})).await);
    let mut hers = Browser::new("alice");
    let at = hers.walk(&url, Some("/oauth/upstream/callback")).await;
    let issuer = reqwest::Url::parse(&parties.upstream_as.issuer).unwrap();
    let named = reqwest::Url::parse(&at.url).unwrap();
    assert!(
        named
            .query_pairs()
            .any(|(k, v)| k == "iss" && v == issuer.as_str().trim_end_matches('/'))
    );
    let forged: Vec<(String, String)> = named
        .query_pairs()
        .map(|(k, v)| match k.as_ref() {
            "iss" => (k.into_owned(), "http://127.0.0.1:1".to_owned()),
            _ => (k.into_owned(), v.into_owned()),
        })
        .collect();
    let mut forged_url = named.clone();
    forged_url.query_pairs_mut().clear().extend_pairs(forged);
    let (status, _, page) = hers.send("GET", forged_url.as_str(), None).await;
    assert_eq!(status, 400, "{page}");
    assert!(parties.server.accepted().is_empty());

    // A server that refuses (carol may not use it): refused, counted.
    let carol = parties.idp.token_for("carol", "files").await;
    let (url, _) = consent_of(&gw.execute(&carol, WHOAMI, json!({})).await);
    let landed = Browser::new("carol").walk(&url, None).await;
    assert_eq!(landed.status, 403, "{}", landed.page);
    let metrics = admin_metrics(&gw).await;
    assert_eq!(
        metric(
            &metrics,
            r#"mcp_gateway_upstream_consents_total{outcome="refused",upstream="p"}"#
        ),
        Some(1.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiring_token_is_refreshed_and_its_rotated_refresh_token_kept() {
    // 33 s tokens: refreshed once under 30 s are left.
    let parties = Parties::start(33);
    let gw = start(&parties).await;
    let alice = parties.idp.token_for("alice", "files").await;
    let (url, _) = consent_of(&gw.execute(&alice, WHOAMI, json!({})).await);
    assert_eq!(Browser::new("alice").walk(&url, None).await.status, 200);
    let first = whoami(&gw.execute(&alice, WHOAMI, json!({})).await);
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    let second = whoami(&gw.execute(&alice, WHOAMI, json!({})).await);
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    let third = whoami(&gw.execute(&alice, WHOAMI, json!({})).await);
    assert_eq!(third["sub"], "alice");
    assert_ne!(first["jti"], second["jti"], "refreshed");
    assert_ne!(
        second["jti"], third["jti"],
        "refreshed again, with the rotated refresh token"
    );
    // Its server down when the token needs refreshing: -32009 at once,
    // never a hang and never the agent's token.
    let mut parties = parties;
    parties.upstream_as.kill();
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    let started = std::time::Instant::now();
    let down = gw.execute(&alice, WHOAMI, json!({})).await;
    assert_eq!(down["error"]["code"], -32009, "{down}");
    assert_eq!(down["error"]["data"]["reason"], "unreachable", "{down}");
    assert!(started.elapsed() < std::time::Duration::from_secs(4));
    let metrics = admin_metrics(&gw).await;
    let refreshed = metric(
        &metrics,
        r#"mcp_gateway_upstream_token_requests_total{grant="refresh_token",outcome="ok",upstream="p"}"#,
    );
    assert!(refreshed >= Some(2.0), "{refreshed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_every_step_and_a_revocation_reaches_each() {
    let redis = Redis::start();
    let parties = Parties::start(300);
    let one = Gateway::start_at(|addr| parties.config(addr, Some(&redis.url()))).await;
    // The second replica's public URL is the first's: the browser reaches
    // either through one address.
    let public = one.agent_addr();
    let two = Gateway::start_at(|_| parties.config(public, Some(&redis.url()))).await;
    let alice = parties.idp.token_for("alice", "files").await;
    // Asked on the second, connected through the first.
    let (url, _) = consent_of(&two.execute(&alice, WHOAMI, json!({})).await);
    assert_eq!(Browser::new("alice").walk(&url, None).await.status, 200);
    assert_eq!(
        whoami(&two.execute(&alice, WHOAMI, json!({})).await)["sub"],
        "alice"
    );
    assert_eq!(
        whoami(&one.execute(&alice, WHOAMI, json!({})).await)["sub"],
        "alice"
    );
    // An admin revokes on one replica; within 2 s the other asks again.
    let removed = one
        .client
        .delete(format!(
            "{}/upstream-auth/connections?tenant=a&upstream=p",
            one.admin
        ))
        .bearer_auth("admin-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(removed.status(), 200);
    let removed: Value = serde_json::from_str(&removed.text().await.unwrap()).unwrap();
    assert_eq!(removed["removed"], 1);
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    consent_of(&two.execute(&alice, WHOAMI, json!({})).await);
}

#[test]
fn check_refuses_a_consent_without_what_it_needs() {
    let yaml = "gateway:\n  id: gw\n  auth:\n    resource: \"http://gw.test/mcp\"\n    jwt: [{issuer: \"http://idp.test\", jwks_url: \"http://idp.test/jwks\", tenant: a}]\n  upstream_auth:\n    encryption_keys: [{id: k1, key: \"short\"}, {id: k2, key: \"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\"}, {id: k2, key: \"env:NOPE_NOT_SET\"}]\n    consent_ttl_s: 5\nupstreams:\n  p:\n    http: {url: \"http://127.0.0.1:1/mcp\"}\n    auth: {user_consent: {client_secret: x}}\n  q:\n    stdio: {command: x}\n    per_session: true\n    auth: {user_consent: {}, env: TOKEN}\ntenants:\n  a: {api_keys: [ka], upstreams: [p, q]}\n";
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gateway.yaml");
    std::fs::write(&file, yaml).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-gateway"))
        .args(["check", "--config", file.to_str().unwrap()])
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{said}");
    for wanted in [
        "gateway.upstream_auth.consent_ttl_s",
        "gateway.upstream_auth.encryption_keys[0].key",
        "gateway.upstream_auth.encryption_keys[2].id",
        "upstreams.p.auth.user_consent",
        "needs gateway.upstream_auth.public_url",
        "upstreams.p.auth.user_consent.client_secret",
        "upstreams.q.auth.user_consent",
    ] {
        assert!(said.contains(wanted), "{wanted} missing from:\n{said}");
    }
    assert!(!said.contains("short"), "a key is never echoed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_client_is_asked_by_url_elicitation_and_its_retry_runs_the_call() {
    let parties = Parties::start(300);
    let gw = start(&parties).await;
    let alice = parties.idp.token_for("alice", "files").await;
    let url_mode = json!({"elicitation": {"url": {}}});

    // Without URL elicitation: -32010.
    let r = call_2026(
        &gw,
        &alice,
        "p__whoami",
        json!({"elicitation": {"form": {}}}),
        json!({}),
    )
    .await;
    consent_of(&r);
    let r = call_2026(&gw, &alice, "p__whoami", url_mode.clone(), json!({})).await;
    let result = &r["result"];
    assert_eq!(result["resultType"], "input_required", "{r}");
    let requests = result["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1);
    let (key, asked) = requests.iter().next().unwrap();
    assert_eq!(asked["method"], "elicitation/create");
    assert_eq!(asked["params"]["mode"], "url");
    let url = asked["params"]["url"].as_str().unwrap().to_owned();
    let state = result["requestState"].clone();
    // Retried before connecting: asked again.
    let retry = json!({"inputResponses": {key: {"action": "accept"}}, "requestState": state});
    let again = call_2026(&gw, &alice, "p__whoami", url_mode.clone(), retry.clone()).await;
    assert_eq!(again["result"]["resultType"], "input_required", "{again}");

    assert_eq!(Browser::new("alice").walk(&url, None).await.status, 200);
    let done = call_2026(&gw, &alice, "p__whoami", url_mode, retry).await;
    let text = done["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{done}"));
    let me: Value = serde_json::from_str(text).unwrap();
    assert_eq!(me["sub"], "alice");
    assert_eq!(me["iss"], parties.upstream_as.issuer.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_users_process_holds_the_token_they_consented_to() {
    let parties = Parties::start(300);
    let python = venv().join("bin/python");
    let server = root().join("tests/fixtures/env_server.py");
    let stdio = json!({
        "stdio": {"command": python, "args": [server]},
        "per_session": true,
        "protocol": "modelcontextprotocol",
        "auth": {
            "user_consent": {"issuer": parties.upstream_as.issuer, "scope": "read"},
            "env": "GH_TOKEN",
        },
    });
    let gw = Gateway::start_at(|addr| parties.config_with(addr, None, stdio.clone())).await;
    gw.wait_ready_as(&["p"], Some("admin-secret")).await;
    let alice = parties.idp.token_for("alice", "files").await;
    let (url, _) = consent_of(&gw.execute(&alice, WHOAMI, json!({})).await);
    assert_eq!(Browser::new("alice").walk(&url, None).await.status, 200);
    let r = gw.execute(&alice, WHOAMI, json!({})).await;
    let text = r["result"]["output"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"));
    let said: Value = serde_json::from_str(text).unwrap();
    assert_eq!(said["claims"]["sub"], "alice", "{said}");
    assert_eq!(said["claims"]["iss"], parties.upstream_as.issuer.as_str());
    assert_eq!(said["claims"]["scope"], "read");
}

/// How many `tools/call` requests tenant `a` has had answered.
async fn calls_answered(gw: &Gateway) -> f64 {
    admin_metrics(gw)
        .await
        .lines()
        .filter(|l| l.starts_with(r#"mcp_gateway_requests_total{method="tools/call""#))
        .filter(|l| l.contains(r#"tenant="a""#))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdks_clients_of_both_eras_are_asked_then_call_once_connected() {
    let parties = Parties::start(300);
    let gw = start(&parties).await;
    for (user, mode) in [("alice", "legacy"), ("bob", "auto")] {
        let token = parties.idp.token_for(user, "files").await;
        let (url, _) = consent_of(&gw.execute(&token, WHOAMI, json!({})).await);
        let before = calls_answered(&gw).await;
        let call = json!({"op": "call", "name": "p__whoami"});
        let steps = match mode {
            // The handshake era: told by error, and calls again later.
            "legacy" => json!([call, {"op": "sleep", "s": 8}, call]),
            // 2026-07-28: asked in the call, answers once the user is done.
            _ => json!({"answers": {"elicit": {"action": "accept", "delay": 8}},
                        "steps": [call, {"op": "asked"}]}),
        };
        let args = vec![
            mode.to_owned(),
            "http".into(),
            gw.url.clone(),
            token.clone(),
        ];
        let client = tokio::spawn(sdk_client_with(args, steps));
        // The client's call was answered with the consent (the same waiting
        // flow, so the same URL): the user follows it meanwhile.
        until(|| async { calls_answered(&gw).await > before }).await;
        assert_eq!(Browser::new(user).walk(&url, None).await.status, 200);
        let (version, answers) = client.await.unwrap();
        let whoami = |r: &Value| -> Value {
            let text = r["content"][0]["text"]
                .as_str()
                .unwrap_or_else(|| panic!("{r}"));
            serde_json::from_str(text).unwrap()
        };
        match mode {
            "legacy" => {
                assert_eq!(version, "2025-11-25");
                assert_eq!(answers[0]["error"]["code"], -32042, "{answers:?}");
                assert!(
                    answers[0]["error"]["message"]
                        .as_str()
                        .unwrap()
                        .contains(&url)
                );
                assert_eq!(whoami(&answers[2])["sub"], user);
            }
            _ => {
                assert_eq!(version, "2026-07-28");
                assert_eq!(whoami(&answers[0])["sub"], user, "{answers:?}");
                let asked = &answers[1]["asked"][0];
                assert_eq!(asked["mode"], "url", "{answers:?}");
                assert_eq!(asked["url"], url.as_str());
            }
        }
    }
}
