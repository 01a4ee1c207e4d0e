//! The agent edge on raw sockets: keep-alive, pipelining, bodies that arrive
//! late, `Connection: close`, and connections that move from the edge's own
//! HTTP/1.1 path to hyper's in the middle (src/http/h1.rs).

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use crate::support::*;

pub(crate) const LIST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"mcp/listPrompts"}"#;

/// One client connection, written and read by hand.
pub(crate) struct Raw {
    read: BufReader<OwnedReadHalf>,
    write: OwnedWriteHalf,
}

pub(crate) struct Answer {
    pub(crate) status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&self.body)))
    }
}

pub(crate) fn post(key: &str, body: &str, extra: &str) -> String {
    format!(
        "POST /mcp HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

impl Raw {
    pub(crate) async fn connect(gw: &Gateway) -> Raw {
        let (read, write) = TcpStream::connect(gw.agent_addr())
            .await
            .unwrap()
            .into_split();
        Raw {
            read: BufReader::new(read),
            write,
        }
    }

    pub(crate) async fn send(&mut self, bytes: &str) {
        self.write.write_all(bytes.as_bytes()).await.unwrap();
    }

    async fn line(&mut self) -> String {
        let mut line = String::new();
        within(self.read.read_line(&mut line)).await.unwrap();
        line.trim_end().to_owned()
    }

    /// The next response: its body framed by Content-Length or chunked.
    pub(crate) async fn answer(&mut self) -> Answer {
        let status_line = self.line().await;
        let status = status_line
            .strip_prefix("HTTP/1.1 ")
            .and_then(|s| s.get(..3))
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("not a status line: {status_line:?}"));
        let mut headers = Vec::new();
        loop {
            let line = self.line().await;
            if line.is_empty() {
                break;
            }
            let (name, value) = line.split_once(':').unwrap();
            headers.push((name.to_owned(), value.trim().to_owned()));
        }
        let mut answer = Answer {
            status,
            headers,
            body: Vec::new(),
        };
        if let Some(n) = answer.header("content-length") {
            answer.body = vec![0; n.parse().unwrap()];
            within(self.read.read_exact(&mut answer.body))
                .await
                .unwrap();
        } else if answer.header("transfer-encoding") == Some("chunked") {
            loop {
                let size = usize::from_str_radix(&self.line().await, 16).unwrap();
                let mut chunk = vec![0; size + 2];
                within(self.read.read_exact(&mut chunk)).await.unwrap();
                if size == 0 {
                    break;
                }
                answer.body.extend_from_slice(&chunk[..size]);
            }
        }
        answer
    }

    /// Lists prompts with `key` and expects a 200 with the request's id.
    pub(crate) async fn list_ok(&mut self, key: &str) {
        self.send(&post(key, LIST, "")).await;
        self.listed().await;
    }

    /// The next answer is the listing's: 200, echoing id 1.
    async fn listed(&mut self) {
        let a = self.answer().await;
        assert_eq!((a.status, a.json()["id"].clone()), (200, json!(1)));
    }

    /// The next line of a chunked session answer (one message per chunk).
    async fn session_line(&mut self) -> Value {
        let size = usize::from_str_radix(&self.line().await, 16).unwrap();
        let mut chunk = vec![0; size + 2];
        within(self.read.read_exact(&mut chunk)).await.unwrap();
        serde_json::from_slice(&chunk[..size]).unwrap()
    }

    /// True when the gateway closes the connection (end of stream).
    pub(crate) async fn closed(&mut self) -> bool {
        let mut rest = Vec::new();
        within(self.read.read_to_end(&mut rest)).await.is_ok() && rest.is_empty()
    }
}

async fn gateway(limits: Value) -> Gateway {
    let yaml = json!({
        "gateway": {"id": "gw", "limits": limits},
        "upstreams": {"s": stdio_upstream("s", &[])},
        "tenants": {"a": tenant("ka", &["s"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["s"]).await;
    gw
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_answered_in_order_on_one_connection() {
    let gw = gateway(json!({"max_body_bytes": 4096})).await;
    let mut c = Raw::connect(&gw).await;
    let notification =
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":9}}"#;
    let second = r#"{"jsonrpc":"2.0","id":"two","method":"mcp/listTools"}"#;
    // Three requests in one write, the last with the client's request id.
    c.send(&format!(
        "{}{}{}",
        post("ka", LIST, ""),
        post("ka", notification, ""),
        post("ka", second, "X-Request-Id: trace-7\r\n")
    ))
    .await;
    let first = c.answer().await;
    assert_eq!(first.status, 200);
    assert_eq!(first.json()["id"], 1);
    assert_eq!(first.header("content-type"), Some("application/json"));
    assert_eq!(first.header("x-request-id").map(str::len), Some(16));
    assert!(first.header("date").is_some());
    let accepted = c.answer().await;
    assert_eq!(accepted.status, 202);
    assert!(accepted.body.is_empty());
    let third = c.answer().await;
    assert_eq!(third.json()["id"], "two");
    assert_eq!(third.header("x-request-id"), Some("trace-7"));
    assert!(third.json()["result"].as_array().unwrap().len() > 1);
    // And the connection is still open for more.
    c.list_ok("ka").await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_arrives_in_pieces_is_waited_for() {
    let gw = gateway(json!({"max_body_bytes": 4096})).await;
    let mut c = Raw::connect(&gw).await;
    let request = post("ka", LIST, "");
    let (head, body) = request.split_at(request.len() - LIST.len());
    c.send(head).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (one, two) = body.split_at(10);
    c.send(one).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    c.send(two).await;
    c.listed().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_handed_to_hyper_keeps_working() {
    let gw = gateway(json!({"max_body_bytes": 4096})).await;
    let mut c = Raw::connect(&gw).await;
    c.list_ok("ka").await;
    // Another method: hyper answers from here on, on the same connection.
    c.send("PUT /mcp HTTP/1.1\r\nHost: gw\r\n\r\n").await;
    let a = c.answer().await;
    assert_eq!(a.status, 405);
    assert_eq!(a.header("allow"), Some("GET, POST, DELETE"));
    assert_eq!(a.json()["error"]["code"], -32600);
    c.send(&post("ka", LIST, "")).await;
    assert_eq!(c.answer().await.json()["id"], 1);
    // A chunked body, which only hyper's path reads.
    c.send(&format!(
        "POST /mcp HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer ka\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{LIST}\r\n0\r\n\r\n",
        LIST.len()
    ))
    .await;
    assert_eq!(c.answer().await.json()["id"], 1);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_close_ends_the_connection_after_the_answer() {
    let gw = gateway(json!({"max_body_bytes": 4096})).await;
    let mut c = Raw::connect(&gw).await;
    c.send(&post("ka", LIST, "Connection: close\r\n")).await;
    let a = c.answer().await;
    assert_eq!(a.status, 200);
    assert_eq!(a.header("connection"), Some("close"));
    assert!(c.closed().await);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_answers_to_a_body_still_arriving_end_the_connection() {
    let gw = gateway(json!({"max_body_bytes": 4096, "body_read_timeout_ms": 300})).await;
    // A head that declares 100 bytes of body, and the start of that body.
    let early = |key: &'static str, start: &'static str| {
        let gw = &gw;
        async move {
            let mut c = Raw::connect(gw).await;
            c.send(&format!(
                "POST /mcp HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{start}"
            ))
            .await;
            let a = c.answer().await;
            (a, c)
        }
    };
    // Wrong key: 401 at once, without waiting for the body.
    let (a, mut c) = early("nope", "{\"jsonrpc\"").await;
    assert_eq!(a.status, 401);
    assert_eq!(a.header("www-authenticate"), Some("Bearer"));
    assert!(c.closed().await);
    // A body that stops arriving: 408 after the body-read timeout.
    let (a, mut c) = early("ka", "{\"jsonrpc\"").await;
    assert_eq!(a.status, 408);
    assert_eq!(a.json()["error"]["code"], -32600);
    assert!(c.closed().await);
    // A body that is not JSON is answered before it ends.
    let (a, _) = early("ka", "{\"a\" 1}").await;
    assert_eq!(a.status, 400);
    assert_eq!(a.json()["error"]["code"], -32700);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_opens_while_a_content_length_body_is_still_arriving() {
    let gw = gateway(json!({"max_body_bytes": 4096})).await;
    let mut c = Raw::connect(&gw).await;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"clientCapabilities": {}}}).to_string() + "\n";
    let list = format!(
        "{}\n{}\n",
        json!({"jsonrpc": "2.0", "method": "initialized", "params": {}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "mcp/listPrompts"})
    );
    // The length of the whole body is declared, but the client sends the
    // rest only after the answer to `initialize`.
    c.send(&format!(
        "POST /mcp HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer ka\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{init}",
        init.len() + list.len()
    ))
    .await;
    let a = c.answer_head().await;
    assert_eq!(a.status, 200);
    let first = c.session_line().await;
    assert_eq!(first["id"], 1);
    assert!(first["result"]["capabilities"].is_object(), "{first}");
    c.send(&list).await;
    let second = c.session_line().await;
    assert_eq!(second["id"], 2);
    assert!(second["result"].is_array(), "{second}");
    gw.stop().await;
}

impl Raw {
    /// The status line and headers only (a streamed answer follows).
    async fn answer_head(&mut self) -> Answer {
        let status_line = self.line().await;
        let status = status_line[9..12].parse().unwrap();
        let mut headers = Vec::new();
        loop {
            let line = self.line().await;
            if line.is_empty() {
                break;
            }
            let (name, value) = line.split_once(':').unwrap();
            headers.push((name.to_owned(), value.trim().to_owned()));
        }
        Answer {
            status,
            headers,
            body: Vec::new(),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_replaced_by_a_reload_apply_to_open_connections() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.yaml");
    let write = |key: &str| {
        let text = json!({
            "gateway": {"id": "gw", "reload_poll_ms": 50},
            "upstreams": {"s": stdio_upstream("s", &[])},
            "tenants": {"a": tenant(key, &["s"])},
        })
        .to_string();
        std::fs::write(&path, text).unwrap();
    };
    write("old-key");
    let config = mcp_gateway::config::Config::load(&path).unwrap();
    let agent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gw = Gateway::wrap(
        mcp_gateway::app::start_on(config, Some(path.clone()), agent, admin).unwrap(),
    );
    gw.wait_ready(&["s"]).await;
    let mut c = Raw::connect(&gw).await;
    c.list_ok("old-key").await;
    write("new-key");
    within(async {
        while metric(
            &gw.metrics().await,
            r#"mcp_gateway_config_reloads_total{outcome="applied"}"#,
        ) != Some(1.0)
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // The same connection, the same header: the old key no longer opens anything.
    c.send(&post("old-key", LIST, "")).await;
    assert_eq!(c.answer().await.status, 401);
    c.list_ok("new-key").await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_ends_a_header_read_timeout_after_its_last_answer() {
    let gw = gateway(json!({"header_read_timeout_ms": 400})).await;
    let mut c = Raw::connect(&gw).await;
    // Requests keep the connection open well past one timeout in all...
    for _ in 0..4 {
        c.list_ok("ka").await;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // ...and once quiet, it is closed within the timeout (and not long after).
    let quiet = std::time::Instant::now();
    assert!(c.closed().await);
    let waited = quiet.elapsed();
    assert!(
        waited < Duration::from_millis(2000),
        "closed after {waited:?}"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_written_a_byte_at_a_time_is_answered() {
    let gw = gateway(json!({"max_body_bytes": 4096})).await;
    let mut c = Raw::connect(&gw).await;
    for b in post("ka", LIST, "").bytes() {
        c.write.write_all(&[b]).await.unwrap();
        c.write.flush().await.unwrap();
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    c.listed().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_idle_keep_alive_connections_at_once() {
    // A header-read timeout longer than any wait here: only shutdown can end it.
    let gw = gateway(json!({"header_read_timeout_ms": 60000})).await;
    let mut idle = Raw::connect(&gw).await;
    idle.list_ok("ka").await;
    // A keep-alive connection between requests does not hold the drain up to
    // its deadline (30 s by default): it is closed when shutdown starts.
    let started = std::time::Instant::now();
    gw.stop().await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "stopping took {:?}",
        started.elapsed()
    );
    assert!(idle.closed().await);
}

/// The same request, once on the edge's own path (a Content-Length body) and
/// once on hyper's (the same body chunked): the same status, body and headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_paths_answer_every_request_alike() {
    let gw = gateway(json!({"max_body_bytes": 4096})).await;
    let exec = |args: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":"e","method":"mcp/executeTool","params":{{"id":"mcp://gw/s/s/tools/echo:v1","arguments":{args}}}}}"#
        )
    };
    let json = "Authorization: Bearer ka\r\nContent-Type: application/json\r\n";
    let cases: Vec<(&str, String)> = vec![
        (json, LIST.to_owned()),
        (json, exec(r#"{"text":"hi"}"#)),
        (json, exec("{}")),
        (json, exec(r#"{"text":"a","text":"b"}"#)),
        (json, r#"{"jsonrpc":"2.0","id":9,"method":"mcp/executeTool","params":{"id":"mcp://gw/nope/x","arguments":{}}}"#.to_owned()),
        (json, r#"{"jsonrpc":"2.0","method":"mcp/ping"}"#.to_owned()),
        (json, format!("[{LIST},{LIST}]")),
        (json, "[]".to_owned()),
        (json, r#"{"jsonrpc":"2.0","id":1,"method":"nope"}"#.to_owned()),
        (json, r#"{"id":1,"method":"mcp/listTools"}"#.to_owned()),
        (json, "{not json".to_owned()),
        (json, format!("{LIST}}}")),
        (json, format!(r#"{{"pad":"{}"}}"#, "x".repeat(5000))),
        ("Authorization: Bearer ka\r\nContent-Type: text/plain\r\n", LIST.to_owned()),
        ("Authorization: Bearer wrong\r\nContent-Type: application/json\r\n", LIST.to_owned()),
        ("Content-Type: application/json\r\n", LIST.to_owned()),
        ("Authorization: Bearer ka\r\nContent-Type: application/json; charset=utf-8\r\n", LIST.to_owned()),
    ];
    let headers = [
        "content-type",
        "retry-after",
        "www-authenticate",
        "allow",
        "x-request-id",
    ];
    for (extra, body) in cases {
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: gw\r\nX-Request-Id: diff-1\r\nConnection: close\r\n{extra}"
        );
        let mut own = Raw::connect(&gw).await;
        own.send(&format!(
            "{head}Content-Length: {}\r\n\r\n{body}",
            body.len()
        ))
        .await;
        let own = own.answer().await;
        let mut hyper = Raw::connect(&gw).await;
        hyper
            .send(&format!(
                "{head}Transfer-Encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
                body.len()
            ))
            .await;
        let hyper = hyper.answer().await;
        let case = format!("{extra:?} {body:.80}");
        assert_eq!(own.status, hyper.status, "{case}");
        assert_eq!(
            String::from_utf8_lossy(&own.body),
            String::from_utf8_lossy(&hyper.body),
            "{case}"
        );
        for h in headers {
            assert_eq!(own.header(h), hyper.header(h), "{h}: {case}");
        }
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tenant_cannot_hold_every_connection() {
    let yaml = json!({
        "gateway": {"id": "gw", "limits": {"max_connections_per_tenant": 2}},
        "upstreams": {"s": stdio_upstream("s", &[])},
        "tenants": {"a": tenant("ka", &["s"]), "b": tenant("kb", &["s"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["s"]).await;
    let mut first = Raw::connect(&gw).await;
    first.list_ok("ka").await;
    let mut second = Raw::connect(&gw).await;
    second.list_ok("ka").await;
    // A third connection of the same tenant, on either path: 429, then closed.
    for chunked in [false, true] {
        let mut third = Raw::connect(&gw).await;
        if chunked {
            third
                .send(&format!(
                    "POST /mcp HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer ka\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{LIST}\r\n0\r\n\r\n",
                    LIST.len()
                ))
                .await;
        } else {
            third.send(&post("ka", LIST, "")).await;
        }
        let a = third.answer().await;
        assert_eq!(a.status, 429, "chunked {chunked}");
        assert_eq!(a.header("retry-after"), Some("1"));
        assert_eq!(a.json()["error"]["code"], -32004);
        assert!(third.closed().await);
    }
    // Another tenant is served; the held connections go on being served.
    let mut other = Raw::connect(&gw).await;
    other.list_ok("kb").await;
    first.list_ok("ka").await;
    // A connection that ends gives its place back.
    drop(second);
    within(async {
        loop {
            let mut again = Raw::connect(&gw).await;
            again.send(&post("ka", LIST, "")).await;
            if again.answer().await.status == 200 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let m = gw.metrics().await;
    assert!(
        metric(
            &m,
            r#"mcp_gateway_requests_limited_total{reason="connections_limited",tenant="a"}"#
        )
        .unwrap()
            >= 2.0
    );
    gw.stop().await;
}
