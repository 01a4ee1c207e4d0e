//! Subscriptions, listens and session records: what a tenant can make a
//! replica keep is bounded per session and per tenant, and only what it
//! can read is kept at all.

use serde_json::{Value, json};

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_hold_only_readable_uris_within_their_bytes() {
    let hostile = Hostile::start(&[]);
    // Each uri below is 47 bytes: four fit a session, six the tenant.
    let limits = json!({
        "max_subscription_bytes_per_session": 200,
        "max_subscription_bytes_per_tenant": 300,
    });
    let gw = gateway(&hostile, limits, json!({})).await;
    let one = session(&gw, "ka").await;
    let subscribe = |uri: String| json!({ "uri": uri });
    // Made up, of any size: refused, nothing kept.
    for uri in [
        "mcp://gw/h/resource/nothing".to_owned(),
        format!("mcp://gw/h/resource/{}", "x".repeat(1 << 20)),
        "mcp://gw/other/resource/x".to_owned(),
    ] {
        let (status, r) = in_session(&gw, "ka", &one, "resources/subscribe", subscribe(uri)).await;
        assert_eq!(status, 200);
        assert_eq!(r["error"]["code"], -32002, "{r}");
    }
    // Listed (a v1.0 resource and one of the upstream's), and template expansions.
    for uri in ["mcp://gw/s/s/resources/motd".to_owned(), data_uri("readme")] {
        let (_, r) = in_session(&gw, "ka", &one, "resources/subscribe", subscribe(uri)).await;
        assert_eq!(r["result"], json!({}), "{r}");
    }
    let (_, r) = in_session(
        &gw,
        "ka",
        &one,
        "resources/unsubscribe",
        subscribe(data_uri("readme")),
    )
    .await;
    assert_eq!(r["result"], json!({}), "{r}");
    let (_, r) = in_session(
        &gw,
        "ka",
        &one,
        "resources/unsubscribe",
        subscribe("mcp://gw/s/s/resources/motd".into()),
    )
    .await;
    assert_eq!(r["result"], json!({}), "{r}");
    let uri = |i: usize| data_uri(&format!("n{i:03}"));
    assert_eq!(uri(1).len(), 47);
    for i in 0..4 {
        let (_, r) = in_session(&gw, "ka", &one, "resources/subscribe", subscribe(uri(i))).await;
        assert_eq!(r["result"], json!({}), "{r}");
    }
    // Past the session's bound: its own error; then past the tenant's: 429.
    let (status, r) = in_session(&gw, "ka", &one, "resources/subscribe", subscribe(uri(4))).await;
    assert_eq!(
        (status, r["error"]["code"].as_i64()),
        (200, Some(-32602)),
        "{r}"
    );
    let two = session(&gw, "ka").await;
    for i in 10..13 {
        let (status, r) =
            in_session(&gw, "ka", &two, "resources/subscribe", subscribe(uri(i))).await;
        if i < 12 {
            assert_eq!(r["result"], json!({}), "{r}");
        } else {
            assert_eq!(status, 429, "{r}");
            assert_eq!(r["error"]["code"], -32004, "{r}");
        }
    }
    // Another tenant has its own budget.
    let other = session(&gw, "kb").await;
    let (_, r) = in_session(&gw, "kb", &other, "resources/subscribe", subscribe(uri(20))).await;
    assert_eq!(r["result"], json!({}), "{r}");
    // Ending a session gives its bytes back.
    let (status, _, _) = request(
        &gw,
        reqwest::Method::DELETE,
        "ka",
        &[("mcp-session-id", &one)],
        None,
    )
    .await;
    assert_eq!(status, 200);
    let (_, r) = in_session(&gw, "ka", &two, "resources/subscribe", subscribe(uri(12))).await;
    assert_eq!(r["result"], json!({}), "{r}");
    gw.stop().await;
}

/// A `subscriptions/listen` request's body and headers.
fn listen(uris: Value) -> (String, Vec<(&'static str, &'static str)>) {
    let mut params =
        json!({"_meta": stateless_meta(), "notifications": {"toolsListChanged": true}});
    if !uris.is_null() {
        params["notifications"]["resourceSubscriptions"] = uris;
    }
    let body =
        json!({"jsonrpc": "2.0", "id": "l1", "method": "subscriptions/listen", "params": params});
    let headers = vec![
        ("mcp-protocol-version", STATELESS),
        ("mcp-method", "subscriptions/listen"),
    ];
    (body.to_string(), headers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_honours_only_readable_uris_within_its_bytes() {
    let hostile = Hostile::start(&[]);
    let gw = gateway(&hostile, json!({}), json!({})).await;
    // A megabyte of empty strings: refused before it is read.
    let (body, headers) = listen(Value::Array(vec![json!(""); 1 << 19]));
    let (status, _, text) = request(&gw, reqwest::Method::POST, "ka", &headers, Some(body)).await;
    assert_eq!(status, 400, "{}", &text[..text.len().min(300)]);
    let r: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(r["error"]["code"], -32602, "{r}");
    // Readable uris are honoured (once); the rest is left out of the acknowledgment.
    let asked = json!([
        data_uri("a"),
        "mcp://gw/h/resource/made-up",
        data_uri("a"),
        "",
        "mcp://gw/s/s/resources/motd"
    ]);
    let (body, headers) = listen(asked);
    let mut r = gw
        .client
        .post(&gw.url)
        .bearer_auth("ka")
        .body(body)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    for (k, v) in headers {
        r = r.header(k, v);
    }
    let mut resp = within(r.send()).await.unwrap();
    assert_eq!(resp.status(), 200);
    let ack = sse::read_until(&mut resp, |ms| !ms.is_empty())
        .await
        .remove(0);
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["notifications"]["resourceSubscriptions"],
        json!([data_uri("a"), "mcp://gw/s/s/resources/motd"]),
        "{ack}"
    );
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "l1"
    );
    drop(resp);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_records_are_per_tenant_and_a_delete_is_200_only_when_recorded() {
    let hostile = Hostile::start(&[]);
    let limited = json!({"c": {
        "api_keys": ["kc"],
        "upstreams": ["s"],
        "rate_limit": {"per_second": 1, "burst": 1},
    }});
    let gw = gateway(
        &hostile,
        json!({"max_session_records_per_tenant": 2}),
        limited,
    )
    .await;
    let delete = async |key: &str, id: &str| {
        request(
            &gw,
            reqwest::Method::DELETE,
            key,
            &[("mcp-session-id", id)],
            None,
        )
        .await
    };
    let list = json!({});
    let a: Vec<String> = [
        session(&gw, "ka").await,
        session(&gw, "ka").await,
        session(&gw, "ka").await,
    ]
    .into();
    assert_eq!(delete("ka", &a[0]).await.0, 200);
    assert_eq!(delete("ka", &a[1]).await.0, 200);
    // Tenant a keeps as many records as it may: its third DELETE is refused, not lost.
    let (status, headers, body) = delete("ka", &a[2]).await;
    assert_eq!(status, 429, "{body}");
    let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry > 3600, "the oldest record expires in a day: {retry}");
    let r: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(r["error"]["code"], -32004, "{r}");
    assert_eq!(
        in_session(&gw, "ka", &a[2], "tools/list", list.clone())
            .await
            .0,
        200
    );
    for ended in &a[..2] {
        assert_eq!(
            in_session(&gw, "ka", ended, "tools/list", list.clone())
                .await
                .0,
            404
        );
    }
    // Tenant b's DELETE is kept: its session is over.
    let b = session(&gw, "kb").await;
    assert_eq!(delete("kb", &b).await.0, 200);
    assert_eq!(
        in_session(&gw, "kb", &b, "tools/list", list.clone())
            .await
            .0,
        404
    );
    // GET and DELETE spend the tenant's rate: at one a second, the second is 429.
    let c = session(&gw, "kc").await;
    let (status, headers, _) = delete("kc", &c).await;
    assert_eq!(status, 429);
    assert!(headers.contains_key("retry-after"));
    let series = r#"mcp_gateway_requests_limited_total{reason="rate_limited",tenant="c"}"#;
    assert!(metric(&gw.metrics().await, series) >= Some(1.0));
    gw.stop().await;
}
