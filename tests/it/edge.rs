//! The agent edge: status codes, content types, limits, JSON-RPC to the letter.

use serde_json::{Value, json};

use crate::support::*;

async fn gateway() -> Gateway {
    let yaml = json!({
        "gateway": {"id": "gw", "limits": {"max_body_bytes": 4096, "max_batch": 4}},
        "upstreams": {"t": stdio_upstream("t", &[])},
        "tenants": {"a": tenant("ka", &["t"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["t"]).await;
    gw
}

const LIST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"mcp/listTools"}"#;

fn error_code(body: &str) -> i64 {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("not JSON: {body}"));
    v["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("no error: {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_required() {
    let gw = gateway().await;
    for key in [None, Some("wrong"), Some("")] {
        let (status, headers, body) = gw.post_raw(key, Some("application/json"), LIST).await;
        assert_eq!(status, 401, "{key:?}");
        assert_eq!(headers["www-authenticate"], "Bearer");
        assert_eq!(headers["content-type"], "application/json");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["id"], Value::Null);
        assert_eq!(v["error"]["code"], -32600);
    }
    let (status, _, _) = gw
        .post_raw(Some("ka"), Some("application/json"), LIST)
        .await;
    assert_eq!(status, 200);
    // Basic auth is not a bearer token.
    let resp = gw
        .client
        .post(&gw.url)
        .basic_auth("ka", Some("ka"))
        .header("content-type", "application/json")
        .body(LIST)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_type_must_be_json() {
    let gw = gateway().await;
    for ct in [
        None,
        Some("text/plain"),
        Some("application/jsonx"),
        Some("application/x-www-form-urlencoded"),
    ] {
        let (status, _, body) = gw.post_raw(Some("ka"), ct, LIST).await;
        assert_eq!(status, 415, "{ct:?}");
        assert_eq!(error_code(&body), -32600);
    }
    for ct in [
        "application/json; charset=utf-8",
        "Application/JSON",
        "application/json;charset=UTF-8",
    ] {
        let (status, _, _) = gw.post_raw(Some("ka"), Some(ct), LIST).await;
        assert_eq!(status, 200, "{ct}");
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_paths_and_methods() {
    let gw = gateway().await;
    let resp = gw.client.put(&gw.url).send().await.unwrap();
    assert_eq!(resp.status(), 405);
    assert_eq!(resp.headers()["allow"], "GET, POST, DELETE");
    assert_eq!(error_code(&resp.text().await.unwrap()), -32600);
    // GET and DELETE without a session name nothing: path and method are
    // refused before credentials, with or without a key.
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        for key in [None, Some("ka"), Some("wrong")] {
            let mut req = gw.client.request(method.clone(), &gw.url);
            if let Some(key) = key {
                req = req.bearer_auth(key);
            }
            let resp = req.send().await.unwrap();
            assert_eq!(resp.status(), 405, "{method} {key:?}");
            assert!(resp.headers()["allow"].to_str().unwrap().contains("POST"));
        }
    }
    let other = gw.url.replace("/mcp", "/other");
    let resp = gw
        .client
        .post(&other)
        .bearer_auth("ka")
        .header("content-type", "application/json")
        .body(LIST)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    assert_eq!(resp.headers()["content-type"], "application/json");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_json_is_400_with_a_parse_error() {
    let gw = gateway().await;
    for body in [r#"{"jsonrpc":"2.0","#, "", "nope", "{\"a\":1}}"] {
        let (status, text) = gw.post("ka", body).await;
        assert_eq!(status, 400, "{body:?}");
        assert_eq!(
            text,
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#
        );
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_over_the_limit_are_413() {
    let gw = gateway().await;
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"x","params":{{"p":"{}"}}}}"#,
        "a".repeat(5000)
    );
    let (status, _, body) = gw
        .post_raw(Some("ka"), Some("application/json"), big.clone())
        .await;
    assert_eq!(status, 413);
    assert_eq!(error_code(&body), -32600);
    // Without a Content-Length (chunked), the limit still holds: the answer comes
    // while the client is still sending, the body is never read whole.
    let head = "POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ka\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
    let chunk = format!("400\r\n{}\r\n", " ".repeat(0x400));
    assert!(
        status_line(gw.agent_addr(), head, chunk.into_bytes(), 50_000)
            .await
            .contains(" 413 ")
    );
    // A declared length over the limit is refused before any of the body is sent.
    let head = "POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ka\r\nContent-Type: application/json\r\nContent-Length: 52428800\r\n\r\n";
    assert!(
        status_line(gw.agent_addr(), head, Vec::new(), 0)
            .await
            .contains(" 413 ")
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_get_202_and_no_body() {
    let gw = gateway().await;
    for body in [
        r#"{"jsonrpc":"2.0","method":"initialized"}"#,
        r#"{"jsonrpc":"2.0","method":"mcp/listTools"}"#,
        r#"{"jsonrpc":"2.0","method":"no/such/method","params":{}}"#,
        // Malformed notifications are never answered either.
        r#"{"jsonrpc":"1.0","method":"x"}"#,
        r#"{"jsonrpc":"2.0","method":"x","params":"s"}"#,
        r#"[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","method":"b"}]"#,
    ] {
        let (status, text) = gw.post("ka", body).await;
        assert_eq!((status, text.as_str()), (202, ""), "{body}");
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_are_echoed_exactly() {
    let gw = gateway().await;
    for id in [
        "1",
        "-7",
        "0",
        "9007199254740993",
        "18446744073709551617",
        "1.5",
        "-0.0",
        "1e400",
        r#""abc""#,
        r#""""#,
        r#""\u00e9\n""#,
        "null",
    ] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"mcp/listPrompts"}}"#);
        let (status, text) = gw.post("ka", &body).await;
        assert_eq!(status, 200);
        assert!(
            text.starts_with(&format!(r#"{{"jsonrpc":"2.0","id":{id},"result":["#)),
            "{id}: {text}"
        );
    }
    // Ids of other types are invalid: the reply has id null.
    for id in ["true", "{}", "[1]"] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"mcp/listPrompts"}}"#);
        let (_, text) = gw.post("ka", &body).await;
        assert!(
            text.starts_with(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600"#),
            "{id}: {text}"
        );
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_requests_and_unknown_methods() {
    let gw = gateway().await;
    let cases = [
        (r#"{"jsonrpc":"2.0","id":1}"#, -32600, json!(1)),
        (r#"{"id":1,"method":"mcp/listTools"}"#, -32600, json!(1)),
        (
            r#"{"jsonrpc":"2.1","id":"x","method":"mcp/listTools"}"#,
            -32600,
            json!("x"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"mcp/listTools","params":"s"}"#,
            -32600,
            json!(1),
        ),
        (
            r#"{"jsonrpc":"2.0","method":1,"params":"bar"}"#,
            -32600,
            Value::Null,
        ),
        ("5", -32600, Value::Null),
        (r#""text""#, -32600, Value::Null),
        (
            r#"{"jsonrpc":"2.0","id":2,"method":"mcp/noSuchMethod"}"#,
            -32601,
            json!(2),
        ),
        (
            r#"{"jsonrpc":"2.0","id":2,"method":"initialized"}"#,
            -32601,
            json!(2),
        ),
        (
            r#"{"jsonrpc":"2.0","id":3,"method":"mcp/listTools","params":[1]}"#,
            -32602,
            json!(3),
        ),
    ];
    for (body, code, id) in cases {
        let (status, text) = gw.post("ka", body).await;
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            (v["error"]["code"].as_i64(), &v["id"]),
            (Some(code), &id),
            "{body}: {text}"
        );
        assert_eq!(v["jsonrpc"], "2.0");
        assert!(v.get("result").is_none());
    }
    // MCP's "params: null" for listings is accepted.
    let (_, text) = gw
        .post(
            "ka",
            r#"{"jsonrpc":"2.0","id":4,"method":"mcp/listTools","params":null}"#,
        )
        .await;
    assert!(text.contains(r#""result":["#), "{text}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches() {
    let gw = gateway().await;
    let body = r#"[
        {"jsonrpc":"2.0","id":"a","method":"mcp/listPrompts"},
        {"jsonrpc":"2.0","method":"initialized"},
        {"jsonrpc":"2.0","id":"b","method":"nope"},
        {"foo":"bar"}
    ]"#;
    let (status, text) = gw.post("ka", body).await;
    assert_eq!(status, 200);
    let v: Vec<Value> = serde_json::from_str(&text).unwrap();
    assert_eq!(v.len(), 3, "{text}");
    assert_eq!(v[0]["id"], "a");
    assert!(v[0]["result"].is_array());
    assert_eq!(
        (v[1]["id"].as_str(), v[1]["error"]["code"].as_i64()),
        (Some("b"), Some(-32601))
    );
    assert_eq!(
        (v[2]["id"].clone(), v[2]["error"]["code"].as_i64()),
        (Value::Null, Some(-32600))
    );
    // An empty batch is one error object, not an array.
    let (status, text) = gw.post("ka", "[]").await;
    assert_eq!(status, 200);
    assert_eq!(error_code(&text), -32600);
    // Batch elements that are not objects get one error each.
    let (_, text) = gw.post("ka", "[1,2]").await;
    let v: Vec<Value> = serde_json::from_str(&text).unwrap();
    assert_eq!(v.len(), 2);
    // The batch size is bounded (max_batch: 4 here).
    let five = format!(
        "[{}]",
        [r#"{"jsonrpc":"2.0","id":1,"method":"mcp/listTools"}"#; 5].join(",")
    );
    let (_, text) = gw.post("ka", &five).await;
    assert_eq!(error_code(&text), -32600);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateless_initialize() {
    let gw = gateway().await;
    let (_, text) = gw
        .post(
            "ka",
            r#"{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"clientCapabilities":{}}}"#,
        )
        .await;
    assert_eq!(error_code(&text), -32600);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_enforce_the_handshake() {
    let gw = gateway().await;
    // A request before initialize: -32002.
    let body = concat!(
        r#"{"jsonrpc":"2.0","id":5,"method":"mcp/listTools"}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientCapabilities":{}}}"#,
        "\n",
        r#"{"jsonrpc":"2.0","method":"initialized","params":{}}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":6,"method":"mcp/listPrompts"}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
        "\n",
    );
    let (status, headers, text) = gw
        .post_raw(Some("ka"), Some("application/json"), body)
        .await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(headers["transfer-encoding"], "chunked");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4, "{text}");
    let by_id = |id: i64| {
        lines
            .iter()
            .filter(|l| l["id"] == id)
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(by_id(5)[0]["error"]["code"], -32002);
    let init = by_id(1);
    assert_eq!(init.len(), 2);
    assert!(
        init[0]["result"]["capabilities"]["listToolsProvider"]
            .as_bool()
            .unwrap()
    );
    assert_eq!(
        init[1]["error"]["code"], -32600,
        "a second initialize is refused"
    );
    assert!(by_id(6)[0]["result"].is_array());
    // initialize with an id other than 1 opens a session, but is refused with -32600.
    let (_, text) = gw
        .post(
            "ka",
            concat!(
                r#"{"jsonrpc":"2.0","id":2,"method":"initialize","params":{}}"#,
                "\n",
                r#"{"jsonrpc":"2.0","id":3,"method":"mcp/listTools"}"#
            ),
        )
        .await;
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["error"]["code"], -32600);
    assert_eq!(lines[1]["error"]["code"], -32002);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_are_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let yaml = json!({
        "gateway": {"limits": {"header_read_timeout_ms": 300}},
        "upstreams": {"t": stdio_upstream("t", &[])},
        "tenants": {"a": tenant("ka", &["t"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    let mut s = tokio::net::TcpStream::connect(gw.agent_addr())
        .await
        .unwrap();
    s.write_all(b"POST /mcp HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    // Never finish the headers: the gateway must close the connection.
    let mut buf = Vec::new();
    let started = std::time::Instant::now();
    let _ = within(s.read_to_end(&mut buf)).await;
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    gw.stop().await;
}

/// Sends `head`, then `chunk` up to `repeat` times while reading; returns the response's status line.
async fn status_line(
    addr: std::net::SocketAddr,
    head: &str,
    chunk: Vec<u8>,
    repeat: usize,
) -> String {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (read, mut write) = stream.into_split();
    write.write_all(head.as_bytes()).await.unwrap();
    let writer = tokio::spawn(async move {
        for _ in 0..repeat {
            if write.write_all(&chunk).await.is_err() {
                return;
            }
        }
    });
    let mut line = String::new();
    within(BufReader::new(read).read_line(&mut line))
        .await
        .unwrap();
    writer.abort();
    line
}
