//! A real identity provider nobody on this project wrote: oidc-provider
//! (npm, installed by .ci/run), on 127.0.0.1, issuing client-credentials
//! access tokens as RS256 JWTs for the gateway's resource.

use serde_json::{Value, json};

use crate::support::jwt::ids;
use crate::support::oidc::Provider;
use crate::support::*;

const RESOURCE: &str = "http://gateway.test/mcp";

/// Tenants `a` and `b`, each with its own upstream, tokens from `issuer`.
async fn gateway(issuer: &str) -> Gateway {
    let yaml = json!({
        "gateway": {
            "auth": {
                "resource": RESOURCE,
                "jwt": [
                    {
                        "issuer": issuer,
                        "jwks_url": format!("{}/jwks", issuer),
                        "tenant_claim": "tenant",
                        "refresh_s": 3600,
                    },
                ],
            },
        },
        "upstreams": {"s": stdio_upstream("s", &[]), "t": stdio_upstream("t", &[])},
        "tenants": {
            "a": tenant("ka", &["s"]),
            "b": {
                "upstreams": ["t"],
                "tools": {"scopes": {"*/tools/echo*": "files", "*/tools/add*": "search"}},
            },
        },
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["s", "t"]).await;
    gw
}

/// `tools/list` of the Model Context Protocol (handshake era, served
/// statelessly) with this bearer token: the tools as listed.
async fn mcp_listing(gw: &Gateway, token: &str) -> Vec<Value> {
    let resp = gw
        .client
        .post(&gw.url)
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .body(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let v: Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
    v["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .clone()
}

fn mcp_id(tool: &Value) -> &str {
    tool["_meta"]["dev.mcp-gateway/mcpId"]
        .as_str()
        .unwrap_or("")
}

/// The mcpIds of the tools that listing shows.
async fn mcp_tools(gw: &Gateway, token: &str) -> Vec<String> {
    let listing = mcp_listing(gw, token).await;
    listing.iter().map(|t| mcp_id(t).to_owned()).collect()
}

/// The Model Context Protocol name of the tool whose mcpId contains `part`.
async fn mcp_tool_named(gw: &Gateway, token: &str, part: &str) -> String {
    let listing = mcp_listing(gw, token).await;
    listing
        .iter()
        .find(|t| mcp_id(t).contains(part))
        .and_then(|t| t["name"].as_str())
        .unwrap_or_else(|| panic!("no tool {part}: {listing:?}"))
        .to_owned()
}

#[tokio::test]
async fn tokens_of_a_real_provider_reach_their_tenant_over_both_protocols() {
    let idp = Provider::start(0, RESOURCE);
    let gw = gateway(&idp.issuer).await;
    let b = idp.token("agent-b").await;
    let listed = ids(&gw.list(&b, "mcp/listTools").await);
    assert!(!listed.is_empty());
    assert!(
        listed.iter().all(|id| id.starts_with("mcp://gateway/t/")),
        "{listed:?}"
    );
    let r = gw
        .execute(&b, "mcp://gateway/t/t/tools/echo:v1", json!({"text": "hi"}))
        .await;
    assert_eq!(r["result"]["output"]["text"], "hi", "{r}");
    let face = mcp_tools(&gw, &b).await;
    assert!(!face.is_empty());
    assert!(
        face.iter().all(|id| id.starts_with("mcp://gateway/t/")),
        "{face:?}"
    );
    let a = idp.token("agent-a").await;
    assert!(
        mcp_tools(&gw, &a)
            .await
            .iter()
            .all(|id| id.starts_with("mcp://gateway/s/"))
    );
    // A token of this provider for another resource is refused.
    let (status, headers, _) = gw
        .post_raw(Some(&format!("{b}x")), Some("application/json"), "{}")
        .await;
    assert_eq!(status, 401);
    assert!(
        headers["www-authenticate"]
            .to_str()
            .unwrap()
            .contains("error=\"invalid_token\"")
    );
    gw.stop().await;
    idp.stop();
}

#[tokio::test]
async fn a_key_rotation_is_followed_and_a_provider_down_leaves_tokens_working() {
    let first = Provider::start(0, RESOURCE);
    let gw = gateway(&first.issuer).await;
    let before = first.token("agent-b").await;
    assert!(!gw.list(&before, "mcp/listTools").await.is_empty());
    // The provider restarts with a new signing key: a rotation.
    let port = first.port;
    first.stop();
    let second = Provider::start(port, RESOURCE);
    let (rotated, kept) = (second.token("agent-b").await, second.token("agent-b").await);
    assert!(
        !gw.list(&rotated, "mcp/listTools").await.is_empty(),
        "the new key is fetched when a token names it"
    );
    // The provider goes down: a token the gateway has not seen yet still
    // verifies, with the keys it cached.
    second.stop();
    assert!(!gw.list(&kept, "mcp/listTools").await.is_empty());
    assert!(!gw.list(&rotated, "mcp/listTools").await.is_empty());
    gw.stop().await;
}

#[tokio::test]
async fn a_tool_is_only_for_tokens_with_its_scope() {
    let idp = Provider::start(0, RESOURCE);
    let gw = gateway(&idp.issuer).await;
    let files = idp.token_for("agent-b", "files").await;
    let listed = ids(&gw.list(&files, "mcp/listTools").await);
    assert!(
        listed.iter().any(|id| id.contains("/tools/echo")),
        "{listed:?}"
    );
    assert!(
        !listed.iter().any(|id| id.contains("/tools/add")),
        "{listed:?}"
    );
    assert!(
        !mcp_tools(&gw, &files)
            .await
            .iter()
            .any(|id| id.contains("/tools/add"))
    );
    // Refused as a denied tool is (-32007), with 403 and the challenge that
    // names the scope, for a client to step up.
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "mcp/executeTool",
                      "params": {"id": "mcp://gateway/t/t/tools/add:v1", "arguments": {"a": 1, "b": 2}}});
    let (status, headers, body) = gw
        .post_raw(Some(&files), Some("application/json"), call.to_string())
        .await;
    assert_eq!(status, 403, "{body}");
    let r: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(r["error"]["code"], -32007, "{r}");
    assert_eq!(
        headers["www-authenticate"],
        "Bearer error=\"insufficient_scope\", scope=\"search\", \
         resource_metadata=\"http://gateway.test/.well-known/oauth-protected-resource/mcp\""
    );
    // The same over the Model Context Protocol.
    let both = idp.token_for("agent-b", "files search").await;
    let name = mcp_tool_named(&gw, &both, "/tools/add").await;
    let resp = gw
        .client
        .post(&gw.url)
        .bearer_auth(&files)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .body(
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                     "params": {"name": name, "arguments": {"a": 1, "b": 2}}})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    assert!(
        resp.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .contains("scope=\"search\"")
    );
    let r: Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
    assert_eq!(r["error"]["code"], -32007, "{r}");
    let listed = ids(&gw.list(&both, "mcp/listTools").await);
    assert!(
        listed.iter().any(|id| id.contains("/tools/add")),
        "{listed:?}"
    );
    let r = gw
        .execute(
            &both,
            "mcp://gateway/t/t/tools/add:v1",
            json!({"a": 1, "b": 2}),
        )
        .await;
    assert_eq!(r["result"]["output"]["sum"], 3.0, "{r}");
    gw.stop().await;
    idp.stop();
}
