//! Hot reload: a bad config changes nothing; a good one swaps what changed,
//! without dropping a request in flight.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

async fn pid_of(gw: &Gateway, key: &str, upstream: &str) -> u64 {
    within(async {
        loop {
            let r = gw
                .execute(
                    key,
                    &format!("mcp://gw/{upstream}/{upstream}/tools/pid"),
                    json!({}),
                )
                .await;
            if let Some(pid) = r["result"]["output"]["pid"].as_u64() {
                return pid;
            }
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_config_is_rejected_and_the_running_one_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.yaml");
    let good = json!({
        "gateway": {"id": "gw", "reload_poll_ms": 50},
        "upstreams": {"s": stdio_upstream("s", &[])},
        "tenants": {"a": tenant("ka", &["s"])},
    })
    .to_string();
    std::fs::write(&path, &good).unwrap();
    let gw = start_watching(&path).await;
    gw.wait_ready(&["s"]).await;
    let ghost = Doc::parse(&good).set("tenants.a.upstreams", ["s", "ghost"]);
    std::fs::write(&path, ghost.yaml()).unwrap();
    wait_reloads(&gw, "rejected", 1.0).await;
    assert_eq!(gw.list("ka", "mcp/listTools").await.len(), TEST_TOOL_COUNT);
    std::fs::write(&path, "not: [valid").unwrap();
    wait_reloads(&gw, "rejected", 2.0).await;
    assert_eq!(gw.list("ka", "mcp/listTools").await.len(), TEST_TOOL_COUNT);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_config_is_swapped_in_without_dropping_a_request() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.yaml");
    let keys = dir.path().join("keys");
    std::fs::create_dir(&keys).unwrap();
    std::fs::write(keys.join("a"), "key-one\n").unwrap();
    let write = |change_args: &[&str], tenants: Value, with_gone: bool| {
        let mut upstreams = json!({
            "keep": stdio_upstream("keep", &[]),
            "change": stdio_upstream("change", change_args),
        });
        if with_gone {
            upstreams["gone"] = stdio_upstream("gone", &[]);
        }
        let text = json!({
            "gateway": {"id": "gw", "reload_poll_ms": 50},
            "upstreams": upstreams,
            "tenants": tenants,
        });
        std::fs::write(&path, text.to_string()).unwrap();
    };
    write(
        &[],
        json!({"a": {"api_keys": ["file:keys/a"], "upstreams": ["keep", "change", "gone"]}}),
        true,
    );
    let gw = start_watching(&path).await;
    gw.wait_ready(&["keep", "change", "gone"]).await;
    let keep_pid = pid_of(&gw, "key-one", "keep").await;
    let change_pid = pid_of(&gw, "key-one", "change").await;
    let slow = |upstream: &str| {
        let (client, url, id) = (
            gw.client.clone(),
            gw.url.clone(),
            format!("mcp://gw/{upstream}/{upstream}/tools/sleep"),
        );
        tokio::spawn(async move {
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": "mcp/executeTool", "params": {"id": id, "arguments": {"ms": 1200}}});
            let r = client
                .post(url)
                .bearer_auth("key-one")
                .header("content-type", "application/json")
                .body(body.to_string())
                .send()
                .await
                .unwrap();
            serde_json::from_str::<Value>(&r.text().await.unwrap()).unwrap()
        })
    };
    let (on_gone, on_change) = (slow("gone"), slow("change"));
    within(async {
        while metric(
            &gw.metrics().await,
            r#"mcp_gateway_upstream_in_flight{upstream="gone"}"#,
        ) != Some(1.0)
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;

    // New config: `change` runs differently, `gone` is removed, a new tenant; a's key file changes.
    std::fs::write(keys.join("a"), "key-two\n").unwrap();
    write(
        &["--description-suffix", "!"],
        json!({
            "a": {"api_keys": ["file:keys/a"], "upstreams": ["keep", "change"]},
            "b": tenant("kb", &["keep"]),
        }),
        false,
    );
    wait_reloads(&gw, "applied", 1.0).await;

    // Nothing in flight was dropped: both calls on replaced upstreams finished.
    assert_eq!(
        within(on_gone).await.unwrap()["result"]["output"]["slept"],
        1200
    );
    assert_eq!(
        within(on_change).await.unwrap()["result"]["output"]["slept"],
        1200
    );
    // Keys and tenants are swapped.
    assert_eq!(
        gw.post(
            "key-one",
            r#"{"jsonrpc":"2.0","id":1,"method":"mcp/listPrompts"}"#
        )
        .await
        .0,
        401
    );
    assert_eq!(
        gw.post(
            "kb",
            r#"{"jsonrpc":"2.0","id":1,"method":"mcp/listPrompts"}"#
        )
        .await
        .0,
        200
    );
    // The unchanged upstream was left alone, the changed one restarted.
    assert_eq!(pid_of(&gw, "key-two", "keep").await, keep_pid);
    assert_ne!(pid_of(&gw, "key-two", "change").await, change_pid);
    // The removed one is gone for everyone, and its child stops once drained.
    let r = gw
        .execute(
            "key-two",
            "mcp://gw/gone/gone/tools/echo:v1",
            json!({"text": "x"}),
        )
        .await;
    assert_eq!(r["error"]["code"], -32602);
    let (_, ready) = gw.get_admin("/readyz").await;
    assert!(!ready.contains("\"gone\""), "{ready}");
    gw.stop().await;
}

/// A reload that removes a key ends the streams that key opened before they
/// carry the reload's own change; a kept key's stream hears it. Several
/// rounds: the change and the key check must not race.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_of_a_removed_key_hears_nothing_of_the_reload_that_removed_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.yaml");
    let write = |keys: &[&str], round: usize| {
        let deny: &[&str] = if round % 2 == 1 { &["*/echo*"] } else { &[] };
        let config = json!({
            "gateway": {"id": "gw", "reload_poll_ms": 50},
            "upstreams": {"s": stdio_upstream("s", &[])},
            "tenants": {
                "a": {
                    "api_keys": keys,
                    "upstreams": ["s"],
                    "tools": {"deny": deny},
                },
            },
        })
        .to_string();
        std::fs::write(&path, config).unwrap();
    };
    let mut keys = vec!["ka", "k1", "k2", "k3"];
    write(&keys, 0);
    let gw = start_watching(&path).await;
    gw.wait_ready(&["s"]).await;
    for round in 1..=3 {
        let removed = keys.pop().unwrap();
        let mut kept = listen_for_tools(&gw, "ka").await;
        // Many streams, so that one woken early would be seen.
        let mut gone = Vec::new();
        for _ in 0..8 {
            gone.push(listen_for_tools(&gw, removed).await);
        }
        write(&keys, round);
        wait_reloads(&gw, "applied", round as f64).await;
        let changed = "notifications/tools/list_changed";
        let ack = "notifications/subscriptions/acknowledged";
        assert_eq!(
            heard(&mut kept, changed).await,
            [ack, changed],
            "round {round}"
        );
        for gone in &mut gone {
            assert_eq!(heard(gone, changed).await, [ack], "round {round}");
        }
    }
    gw.stop().await;
}
