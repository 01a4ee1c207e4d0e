//! Upstreams the gateway calls as the user: the caller's JWT (from a real
//! identity provider, oidc-provider) exchanged for a token of the
//! upstream's own authorization server (a second oidc-provider, with the
//! token exchange grant registered through its `registerGrantType`), or an
//! identity assertion the gateway signs, for an upstream on the official
//! Python SDK that verifies every bearer token it receives
//! (`tests/fixtures/protected_server.py`).

use serde_json::{Value, json};

use crate::support::oidc::Provider;
use crate::support::*;

const RESOURCE: &str = "http://gateway.test/mcp";
const WHOAMI: &str = "mcp://gw/p/tool/whoami";

/// The parties: the tenant's identity provider, the protected upstream
/// and (for token exchange) its authorization server.
struct Parties {
    idp: Provider,
    server: Protected,
    upstream_as: Option<Provider>,
    dir: tempfile::TempDir,
}

impl Parties {
    /// `exchange`: the upstream trusts its own authorization server;
    /// otherwise the gateway (its issuer file is written by the test).
    fn start(exchange: bool) -> Parties {
        let dir = tempfile::tempdir().unwrap();
        let server = Protected::start(&["--stateful"]);
        let idp = Provider::start(0, RESOURCE);
        let upstream_as = exchange.then(|| {
            let p = Provider::exchanging(&server.url, &idp.issuer, &dir.path().join("actor"));
            server.trust(&p.issuer);
            p
        });
        Parties {
            idp,
            server,
            upstream_as,
            dir,
        }
    }

    /// The gateway's config: tenant `a` (key `ka`, and JWTs of the IdP),
    /// the upstream `p` with this `auth`.
    fn config(&self, auth: Value) -> String {
        let key = self.dir.path().join("sign.pem");
        std::fs::write(&key, p256_pem()).unwrap();
        json!({
            "gateway": {
                "id": "gw",
                "auth": {
                    "resource": RESOURCE,
                    "jwt": [
                        {
                            "issuer": self.idp.issuer,
                            "jwks_url": format!("{}/jwks", self.idp.issuer),
                            "tenant_claim": "tenant",
                        },
                    ],
                },
                "upstream_auth": {
                    "token_timeout_ms": 3000,
                    "issuer": "https://gw.test",
                    "signing_keys": [format!("file:{}", key.display())],
                },
            },
            "upstreams": {
                "p": {
                    "http": {"url": self.server.url},
                    "protocol": "modelcontextprotocol",
                    "auth": auth,
                },
            },
            "tenants": {"a": tenant("ka", &["p"])},
        })
        .to_string()
    }
}

fn whoami(r: &Value) -> Value {
    let text = r["result"]["output"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"));
    serde_json::from_str(text).unwrap()
}

/// `tools/call` of the Model Context Protocol's face with this bearer token.
async fn mcp_call(gw: &Gateway, token: &str, name: &str) -> Value {
    let params = json!({"name": name, "arguments": {}});
    mcp_request(gw, token, "tools/call", params).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_user_calls_with_their_own_exchanged_token_and_session() {
    let parties = Parties::start(true);
    let token_url = format!("{}/token", parties.upstream_as.as_ref().unwrap().issuer);
    let auth = json!({"token_exchange": {
        "token_url": token_url, "client_id": "gw", "client_secret": "secret", "scope": "files", "actor_token": true,
    }});
    let gw = Gateway::start(&parties.config(auth)).await;
    std::fs::write(
        parties.dir.path().join("actor"),
        format!("http://{}/.well-known/jwks.json", gw.agent_addr()),
    )
    .unwrap();
    let alice = parties.idp.token_for("alice", "files").await;
    let bob = parties.idp.token_for("bob", "files").await;

    // Nobody has called yet: the upstream, which serves no request
    // without a token, waits for its first user to be listed.
    let first = whoami(&within(gw.execute(&alice, WHOAMI, json!({}))).await);
    let again = whoami(&gw.execute(&alice, WHOAMI, json!({})).await);
    let theirs = whoami(&gw.execute(&bob, WHOAMI, json!({})).await);
    let upstream_as = parties.upstream_as.as_ref().unwrap();
    assert_eq!(first["sub"], "alice");
    assert_eq!(first["iss"], upstream_as.issuer.as_str());
    assert_eq!(first["aud"], parties.server.url.as_str());
    assert_eq!(
        first["act"]["sub"], "gw",
        "the gateway's actor token verified"
    );
    assert_eq!(first["act"]["iss"], "https://gw.test");
    assert_eq!(first["jti"], again["jti"], "a user's token is reused");
    assert_eq!(theirs["sub"], "bob");
    assert_ne!(theirs["jti"], first["jti"]);
    assert!(first["session"].is_string(), "{first}");
    assert_eq!(first["session"], again["session"], "one session per user");
    assert_ne!(first["session"], theirs["session"], "users' sessions apart");
    // The agents' tokens never reached the upstream: every token it
    // accepted is its own server's.
    let seen = parties.server.accepted();
    assert!(seen.len() >= 5, "{seen:?}");
    assert!(
        seen.iter().all(|c| c["iss"] == upstream_as.issuer.as_str()),
        "{seen:?}"
    );

    // An API key names no user; a user the server refuses is told why.
    let keyed = gw.execute("ka", WHOAMI, json!({})).await;
    assert_eq!(keyed["error"]["code"], -32009, "{keyed}");
    assert_eq!(keyed["error"]["data"]["reason"], "no_user");
    let carol = parties.idp.token_for("carol", "files").await;
    let refused = within(gw.execute(&carol, WHOAMI, json!({}))).await;
    assert_eq!(refused["error"]["code"], -32009, "{refused}");
    assert_eq!(refused["error"]["data"]["reason"], "refused");
    assert_eq!(refused["error"]["data"]["error"], "invalid_grant");
    assert!(!refused.to_string().contains(&carol));

    let metrics = gw.metrics().await;
    let ok = r#"mcp_gateway_upstream_token_requests_total{grant="token_exchange",outcome="ok",upstream="p"}"#;
    // The listing's (alice's), then alice's and bob's own sessions'.
    assert_eq!(metric(&metrics, ok), Some(3.0), "{metrics}");
    gw.stop().await;
}

/// `max_cached_tokens` bounds the tokens kept, every user's together: past
/// it the least recently used goes, and its user's next call obtains
/// another from the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_cached_tokens_the_least_recently_used_token_goes() {
    let parties = Parties::start(true);
    let token_url = format!("{}/token", parties.upstream_as.as_ref().unwrap().issuer);
    let auth = json!({"token_exchange": {
        "token_url": token_url, "client_id": "gw", "client_secret": "secret", "scope": "files",
    }});
    let config = Doc::parse(&parties.config(auth))
        .set("gateway.upstream_auth.max_cached_tokens", 1)
        .yaml();
    let gw = Gateway::start(&config).await;
    let alice = parties.idp.token_for("alice", "files").await;
    let bob = parties.idp.token_for("bob", "files").await;
    let first = whoami(&within(gw.execute(&alice, WHOAMI, json!({}))).await);
    let again = whoami(&gw.execute(&alice, WHOAMI, json!({})).await);
    assert_eq!(first["jti"], again["jti"], "kept while within the bound");
    let theirs = whoami(&gw.execute(&bob, WHOAMI, json!({})).await);
    assert_eq!(theirs["sub"], "bob");
    let later = whoami(&gw.execute(&alice, WHOAMI, json!({})).await);
    assert_eq!(later["sub"], "alice");
    assert_ne!(later["jti"], first["jti"], "bob's token pushed alice's out");
    let metrics = gw.metrics().await;
    let cached = metric(
        &metrics,
        r#"mcp_gateway_upstream_tokens_cached{upstream="p"}"#,
    );
    assert_eq!(cached, Some(1.0), "{metrics}");
    let ok = r#"mcp_gateway_upstream_token_requests_total{grant="token_exchange",outcome="ok",upstream="p"}"#;
    // The listing's, alice's, bob's, and alice's again.
    assert_eq!(metric(&metrics, ok), Some(4.0), "{metrics}");
    gw.stop().await;
}

/// Before any user listed it, a call of the upstream's tool by name is
/// answered with the reason it cannot be listed, never as unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlisted_upstream_answers_with_why() {
    let parties = Parties::start(true);
    let token_url = format!("{}/token", parties.upstream_as.as_ref().unwrap().issuer);
    let auth = json!({"token_exchange": {"token_url": token_url, "client_id": "gw", "client_secret": "secret"}});
    let gw = Gateway::start(&parties.config(auth)).await;
    let keyed = within(mcp_call(&gw, "ka", "p__whoami")).await;
    assert_eq!(keyed["error"]["code"], -32009, "{keyed}");
    assert_eq!(keyed["error"]["data"]["reason"], "no_user");
    assert!(
        gw.list("ka", "mcp/listTools").await.is_empty(),
        "nothing is listed for an API key"
    );
    let carol = parties.idp.token_for("carol", "files").await;
    let refused = within(mcp_call(&gw, &carol, "p__whoami")).await;
    assert_eq!(refused["error"]["code"], -32009, "{refused}");
    assert_eq!(refused["error"]["data"]["reason"], "refused");
    // A user the server takes lists it, by name, at their first call.
    let alice = parties.idp.token_for("alice", "files").await;
    let answer = within(mcp_call(&gw, &alice, "p__whoami")).await;
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"));
    let me: Value = serde_json::from_str(text).unwrap();
    assert_eq!(me["sub"], "alice");
    assert!(me["act"].is_null(), "no actor token unless asked");
    gw.stop().await;
}

/// An identity assertion: a JWT the gateway signs for the user, which the
/// upstream verifies with the keys the gateway publishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_assertion_says_who_the_user_is() {
    let parties = Parties::start(false);
    let gw = Gateway::start(&parties.config(json!({"assertion": {"ttl_s": 120}}))).await;
    let jwks_url = format!("http://{}/.well-known/jwks.json", gw.agent_addr());
    // The upstream trusts the gateway, and where it publishes its keys.
    parties
        .server
        .trust(&format!("https://gw.test\n{jwks_url}\n"));
    let jwks = gw.client.get(&jwks_url).send().await.unwrap();
    let jwks: Value = serde_json::from_str(&jwks.text().await.unwrap()).unwrap();
    assert_eq!(jwks["keys"][0]["alg"], "ES256");
    assert_eq!(jwks["keys"][0]["use"], "sig");
    assert!(jwks["keys"][0].get("d").is_none(), "no private part");

    let alice = parties.idp.token_for("alice", "files").await;
    let me = whoami(&within(gw.execute(&alice, WHOAMI, json!({}))).await);
    assert_eq!(me["iss"], "https://gw.test");
    assert_eq!(me["sub"], "alice");
    assert_eq!(me["idp"], parties.idp.issuer.as_str());
    assert_eq!(me["tenant"], "a");
    assert_eq!(me["scope"], "files");
    assert_eq!(me["aud"], parties.server.url.as_str());
    let bob = parties.idp.token_for("bob", "files").await;
    let theirs = whoami(&gw.execute(&bob, WHOAMI, json!({})).await);
    assert_eq!(theirs["sub"], "bob");
    let metrics = gw.metrics().await;
    let cached = r#"mcp_gateway_upstream_tokens_cached{upstream="p"}"#;
    // The listing's, alice's and bob's.
    assert_eq!(metric(&metrics, cached), Some(3.0), "{metrics}");
    gw.stop().await;
}

/// A gateway that signs nothing publishes no keys.
#[tokio::test]
async fn no_keys_are_published_without_signing_keys() {
    let gw = Gateway::one_upstream(&[]).await;
    let url = format!("http://{}/.well-known/jwks.json", gw.agent_addr());
    let resp = gw.client.get(&url).send().await.unwrap();
    assert_eq!(resp.status(), 404);
    gw.stop().await;
}

#[test]
fn check_refuses_per_user_modes_it_cannot_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.yaml");
    std::fs::write(
        dir.path().join("bad.pem"),
        "-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();
    let te = json!({"token_exchange": {
        "token_url": "http://127.0.0.1:9/t", "client_id": "c", "client_secret": "s", "actor_token": true,
    }});
    let yaml = json!({
        "gateway": {
            "id": "gw",
            "upstream_auth": {
                "issuer": "https://gw.test",
                "signing_keys": [format!("file:{}", dir.path().join("bad.pem").display())],
            },
        },
        "upstreams": {
            "te": {"http": {"url": "http://127.0.0.1:9/mcp"}, "auth": te},
            "as": {
                "http": {"url": "http://127.0.0.1:9/mcp"},
                "auth": {"assertion": {"ttl_s": 301}},
            },
            "two": {
                "http": {"url": "http://127.0.0.1:9/mcp"},
                "auth": {
                    "assertion": {},
                    "token_exchange": {
                        "token_url": "http://127.0.0.1:9/t",
                        "client_id": "c",
                        "client_secret": "s",
                    },
                },
            },
            "st": {"stdio": {"command": "x"}, "auth": {"assertion": {}, "env": "GH_TOKEN"}},
            "noenv": {"stdio": {"command": "x"}, "per_session": true, "auth": {"assertion": {}}},
            "hdr": {
                "stdio": {"command": "x"},
                "per_session": true,
                "auth": {"assertion": {}, "env": "T", "header": "x-t"},
            },
            "httpenv": {
                "http": {"url": "http://127.0.0.1:9/mcp"},
                "auth": {"assertion": {}, "env": "T"},
            },
        },
        "tenants": {"a": tenant("ka", &["te"])},
    })
    .to_string();
    std::fs::write(&path, yaml).unwrap();
    let said = check_refused(&path);
    for (path, why) in [
        ("gateway.upstream_auth.signing_keys[0]", "PKCS#8"),
        ("upstreams.te.auth", "gateway.auth.jwt"),
        (
            "upstreams.te.auth.token_exchange.actor_token",
            "signing_keys",
        ),
        ("upstreams.as.auth.assertion", "signing_keys"),
        ("upstreams.as.auth.assertion.ttl_s", "1 to 300"),
        ("upstreams.two.auth", "exactly one mode"),
        ("upstreams.st.auth", "per_session"),
        ("upstreams.noenv.auth", "needs env"),
        ("upstreams.hdr.auth.header", "stdio upstream"),
        ("upstreams.httpenv.auth.env", "HTTP upstream"),
    ] {
        assert!(said.contains(path), "{path} not in: {said}");
        assert!(said.contains(why), "{why} not in: {said}");
    }
    assert!(!said.contains("c2VjcmV0"), "a key is never echoed");
}

/// A stdio upstream that acts for the user: each user's calls run on a
/// process of their own, their credential in its environment; the
/// listing process holds none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_users_process_holds_their_credential_alone() {
    let parties = Parties::start(false);
    let python = venv().join("bin/python");
    let server = root().join("tests/fixtures/env_server.py");
    let stdio = json!({
        "stdio": {"command": python, "args": [server]},
        "per_session": true,
        "protocol": "modelcontextprotocol",
        "auth": {"assertion": {"audience": "github"}, "env": "GH_TOKEN"},
    });
    let yaml = Doc::parse(&parties.config(json!({})))
        .set("upstreams.p", stdio)
        .yaml();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["p"]).await;
    let id = "mcp://gw/p/tool/whoami";
    let said = |r: &Value| -> Value {
        let text = r["result"]["output"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{r}"));
        serde_json::from_str(text).unwrap()
    };
    let alice = parties.idp.token_for("alice", "files").await;
    let bob = parties.idp.token_for("bob", "files").await;
    let first = said(&within(gw.execute(&alice, id, json!({}))).await);
    let again = said(&gw.execute(&alice, id, json!({})).await);
    let theirs = said(&within(gw.execute(&bob, id, json!({}))).await);
    assert_eq!(first["claims"]["sub"], "alice", "{first}");
    assert_eq!(first["claims"]["aud"], "github");
    assert_eq!(first["claims"]["iss"], "https://gw.test");
    assert_eq!(first["pid"], again["pid"], "one process per user");
    assert_eq!(theirs["claims"]["sub"], "bob");
    assert_ne!(first["pid"], theirs["pid"], "users' processes apart");
    let keyed = gw.execute("ka", id, json!({})).await;
    assert_eq!(keyed["error"]["data"]["reason"], "no_user", "{keyed}");
    gw.stop().await;
}
