//! JWT bearer tokens beside API keys: keys in a JWKS file, tokens signed
//! here with real ES256 and EdDSA keys (ring), every refusal a 401.

use std::time::Duration;

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

use crate::support::jwt::*;
use crate::support::*;

/// Claims a good token has, for tenant `t`.
fn claims(tenant: &str) -> Value {
    json!({"iss": ISSUER, "aud": RESOURCE, "sub": "agent-7", "tenant": tenant,
           "iat": now(), "exp": now() + 300})
}

/// A gateway with tenants `a` (key `ka`) and `b` (tokens only), each with
/// its own stdio upstream, trusting one issuer whose keys are in `jwks`.
async fn gateway(jwks: &std::path::Path) -> Gateway {
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
        "upstreams": {"s": stdio_upstream("s", &[]), "t": stdio_upstream("t", &[])},
        "tenants": {"a": tenant("ka", &["s"]), "b": {"upstreams": ["t"]}},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["s", "t"]).await;
    gw
}

#[tokio::test]
async fn a_token_reaches_its_tenant_and_api_keys_work_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let (ec, ed) = (SigningKey::es256("ec-1"), SigningKey::ed25519("ed-1"));
    let jwks = dir.path().join("jwks.json");
    write_jwks(&jwks, &[&ec, &ed]);
    let gw = gateway(&jwks).await;
    for key in [&ec, &ed] {
        let token = key.sign(&claims("b"));
        let listed = ids(&gw.list(&token, "mcp/listTools").await);
        assert!(!listed.is_empty());
        assert!(
            listed.iter().all(|id| id.starts_with("mcp://gateway/t/")),
            "{listed:?}"
        );
        let r = gw
            .execute(
                &token,
                "mcp://gateway/t/t/tools/echo:v1",
                json!({"text": "hi"}),
            )
            .await;
        assert_eq!(r["result"]["output"]["text"], "hi", "{r}");
        // Another tenant's tool does not exist for it.
        let r = gw
            .execute(
                &token,
                "mcp://gateway/s/s/tools/echo:v1",
                json!({"text": "hi"}),
            )
            .await;
        assert!(r["error"].is_object(), "{r}");
    }
    let token = ec.sign(&claims("a"));
    assert!(
        ids(&gw.list(&token, "mcp/listTools").await)
            .iter()
            .all(|id| id.contains("/s/"))
    );
    // The API key: unchanged.
    let listed = ids(&gw.list("ka", "mcp/listTools").await);
    assert!(listed.iter().all(|id| id.starts_with("mcp://gateway/s/")));
    let (status, headers, _) = gw
        .post_raw(Some("nope"), Some("application/json"), "{}")
        .await;
    assert_eq!(status, 401);
    let challenge = headers["www-authenticate"].to_str().unwrap();
    assert_eq!(
        challenge,
        "Bearer resource_metadata=\"http://gateway.test/.well-known/oauth-protected-resource/mcp\""
    );
    gw.stop().await;
}

#[tokio::test]
async fn every_bad_token_is_refused_with_invalid_token() {
    let dir = tempfile::tempdir().unwrap();
    let ec = SigningKey::es256("ec-1");
    let stranger = SigningKey::es256("ec-1"); // the same kid, another key
    let jwks = dir.path().join("jwks.json");
    write_jwks(&jwks, &[&ec]);
    let gw = gateway(&jwks).await;
    let good = claims("b");
    let with = |k: &str, v: Value| {
        let mut c = good.clone();
        c[k] = v;
        c
    };
    let without = |k: &str| {
        let mut c = good.clone();
        c.as_object_mut().unwrap().remove(k);
        c
    };
    let none_token = {
        let header = b64(br#"{"alg":"none","typ":"JWT"}"#);
        format!("{header}.{}.", b64(good.to_string().as_bytes()))
    };
    // HS256 with the public key's JWK text as the secret: the confusion
    // attack on verifiers that take the algorithm from the token.
    let hs256 = {
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some("ec-1".into());
        let secret = ec.jwk.to_string();
        jsonwebtoken::encode(&header, &good, &EncodingKey::from_secret(secret.as_bytes())).unwrap()
    };
    let tampered = {
        let token = ec.sign(&good);
        let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
        parts[1] = b64(with("tenant", json!("a")).to_string().as_bytes());
        parts.join(".")
    };
    let unknown_kid = {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some("never-published".into());
        jsonwebtoken::encode(&header, &good, &ec.encoding()).unwrap()
    };
    let cases = [
        ("expired", ec.sign(&with("exp", json!(now() - 120)))),
        ("not yet valid", ec.sign(&with("nbf", json!(now() + 120)))),
        (
            "wrong issuer",
            ec.sign(&with("iss", json!("http://127.0.0.1:1/realms/other"))),
        ),
        (
            "wrong audience",
            ec.sign(&with("aud", json!("http://elsewhere/mcp"))),
        ),
        ("no audience", ec.sign(&without("aud"))),
        ("no expiry", ec.sign(&without("exp"))),
        (
            "an unknown tenant",
            ec.sign(&with("tenant", json!("nobody"))),
        ),
        ("no tenant claim", ec.sign(&without("tenant"))),
        ("alg none", none_token),
        ("HS256 keyed with the public key", hs256),
        ("tampered", tampered),
        ("unknown kid", unknown_kid),
        ("signed by another key", stranger.sign(&good)),
    ];
    for (what, token) in cases {
        let (status, headers, body) = gw
            .post_raw(
                Some(&token),
                Some("application/json"),
                r#"{"jsonrpc":"2.0","id":1,"method":"mcp/listTools"}"#,
            )
            .await;
        assert_eq!(status, 401, "{what}: {body}");
        let challenge = headers["www-authenticate"].to_str().unwrap();
        assert!(
            challenge.contains("error=\"invalid_token\""),
            "{what}: {challenge}"
        );
        assert!(
            challenge.contains("resource_metadata=\""),
            "{what}: {challenge}"
        );
    }
    // Within the leeway, an expiry just past is still accepted.
    let token = ec.sign(&with("exp", json!(now() - 5)));
    assert!(!gw.list(&token, "mcp/listTools").await.is_empty());
    gw.stop().await;
}

#[tokio::test]
async fn a_rotated_key_is_followed_and_a_provider_gone_leaves_the_cached_keys() {
    let dir = tempfile::tempdir().unwrap();
    let old = SigningKey::es256("k-1");
    let jwks = dir.path().join("jwks.json");
    write_jwks(&jwks, &[&old]);
    let gw = gateway(&jwks).await;
    assert!(
        !gw.list(&old.sign(&claims("b")), "mcp/listTools")
            .await
            .is_empty()
    );
    // The provider rotates: a new key is published, and tokens name it.
    let new = SigningKey::ed25519("k-2");
    write_jwks(&jwks, &[&old, &new]);
    let token = new.sign(&claims("b"));
    assert!(
        !gw.list(&token, "mcp/listTools").await.is_empty(),
        "an unknown kid fetches the keys again"
    );
    // The provider is gone (its keys unreadable). Past the least time
    // between fetches, an unknown kid makes the gateway try again: that
    // fails, and the cached keys stay in force.
    std::fs::remove_file(&jwks).unwrap();
    tokio::time::sleep(mcp_gateway::auth::MIN_REFETCH + Duration::from_millis(200)).await;
    let newer = SigningKey::es256("k-3");
    let (status, _, _) = gw
        .post_raw(
            Some(&newer.sign(&claims("b"))),
            Some("application/json"),
            r#"{"jsonrpc":"2.0","id":1,"method":"mcp/listTools"}"#,
        )
        .await;
    assert_eq!(status, 401);
    assert!(
        !gw.list(&old.sign(&claims("b")), "mcp/listTools")
            .await
            .is_empty()
    );
    assert!(
        !gw.list(&new.sign(&claims("b")), "mcp/listTools")
            .await
            .is_empty()
    );
    gw.stop().await;
}

#[tokio::test]
async fn the_protected_resource_metadata_names_the_resource_and_its_issuers() {
    let dir = tempfile::tempdir().unwrap();
    let jwks = dir.path().join("jwks.json");
    write_jwks(&jwks, &[&SigningKey::es256("k")]);
    let gw = gateway(&jwks).await;
    let base = format!("http://{}", gw.agent_addr());
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let resp = gw.client.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        assert_eq!(resp.headers()["content-type"], "application/json");
        let doc: Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
        assert_eq!(doc["resource"], RESOURCE);
        assert_eq!(doc["authorization_servers"], json!([ISSUER]));
        assert_eq!(doc["bearer_methods_supported"], json!(["header"]));
    }
    let resp = gw
        .client
        .post(format!("{base}/.well-known/oauth-protected-resource"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 405);
    gw.stop().await;
}

#[tokio::test]
async fn a_session_opened_with_a_token_ends_when_the_token_expires() {
    let dir = tempfile::tempdir().unwrap();
    let ec = SigningKey::es256("ec-1");
    let jwks = dir.path().join("jwks.json");
    write_jwks(&jwks, &[&ec]);
    let gw = gateway(&jwks).await;
    let mut c = claims("b");
    c["exp"] = json!(now() + 2);
    let token = ec.sign(&c);
    let started = std::time::Instant::now();
    let mut live = Live::ready(&gw, &token, false).await;
    live.send(json!({"jsonrpc": "2.0", "id": 2, "method": "mcp/listTools"}))
        .await;
    assert_eq!(
        live.next_answer().await["id"],
        2,
        "served while the token is valid"
    );
    // Nothing more is sent: the session ends at the token's expiry.
    assert!(live.next().await.is_none(), "the session ended");
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "not before the expiry"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_applies_to_the_next_message_of_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let ec = SigningKey::es256("ec-1");
    let jwks = dir.path().join("jwks.json");
    write_jwks(&jwks, &[&ec]);
    let path = dir.path().join("gw.yaml");
    let config = |scopes: Value, issuer: bool| {
        let mut gateway = json!({"id": "gateway", "reload_poll_ms": 50});
        if issuer {
            gateway["auth"] = json!({
                "resource": RESOURCE,
                "jwt": [{"issuer": ISSUER, "jwks_file": jwks, "tenant_claim": "tenant"}],
            });
        }
        json!({
            "gateway": gateway,
            "upstreams": {"t": stdio_upstream("t", &[])},
            "tenants": {"b": {"api_keys": ["kb"], "upstreams": ["t"], "tools": {"scopes": scopes}}},
        })
        .to_string()
    };
    std::fs::write(&path, config(json!({"*/tools/add*": "search"}), true)).unwrap();
    let running = mcp_gateway::app::start_on(
        mcp_gateway::config::Config::load(&path).unwrap(),
        Some(path.clone()),
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
    )
    .unwrap();
    let gw = Gateway::wrap(running);
    gw.wait_ready(&["t"]).await;
    let mut c = claims("b");
    c["scope"] = json!("files");
    let token = ec.sign(&c);
    let sees_add = |listing: &[Value]| ids(listing).iter().any(|id| id.contains("/tools/add"));
    assert!(!sees_add(&gw.list(&token, "mcp/listTools").await));
    let mut live = Live::ready(&gw, &token, false).await;
    let reloads = |n: f64| {
        let gw = &gw;
        async move {
            within(async {
                while metric(
                    &gw.metrics().await,
                    r#"mcp_gateway_config_reloads_total{outcome="applied"}"#,
                ) != Some(n)
                {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await
        }
    };
    // The scope rule goes: from the next message on, the token sees the tool.
    std::fs::write(&path, config(json!({}), true)).unwrap();
    reloads(1.0).await;
    assert!(sees_add(&gw.list(&token, "mcp/listTools").await));
    live.send(json!({"jsonrpc": "2.0", "id": 3, "method": "mcp/listTools"}))
        .await;
    let answer = live.next_answer().await;
    assert!(sees_add(answer["result"].as_array().unwrap()), "{answer}");
    // The issuer goes: the token is refused, and the session ends at its next message.
    std::fs::write(&path, config(json!({}), false)).unwrap();
    reloads(2.0).await;
    let (status, _, _) = gw
        .post_raw(Some(&token), Some("application/json"), "{}")
        .await;
    assert_eq!(status, 401);
    live.send(json!({"jsonrpc": "2.0", "id": 4, "method": "mcp/listTools"}))
        .await;
    let answer = live.next_answer().await;
    assert_eq!(answer["error"]["message"], "Unauthorized", "{answer}");
    assert!(live.next().await.is_none(), "the session ended");
    assert!(
        !gw.list("kb", "mcp/listTools").await.is_empty(),
        "the key is unchanged"
    );
    gw.stop().await;
}
