//! `protocol: auto`, the default: servers of the Model Context Protocol
//! (the official reference servers and SDKs, over stdio and HTTP, of either
//! era) and of MCP v1.0 are each told by their answer to the first
//! `initialize`, and served without a `protocol:` key. An upstream that
//! answers in neither is reported (readiness's detail), never an empty
//! listing that looks healthy.

use serde_json::{Value, json};

use crate::support::*;

/// A stdio upstream as a user would write it: no `protocol:`.
fn plain_stdio(command: &str, args: &[&str]) -> Value {
    json!({"stdio": {"command": command, "args": args}})
}

async fn readiness(gw: &Gateway) -> Value {
    serde_json::from_str(&gw.get_admin("/readyz").await.1).unwrap()
}

/// The names of the tools a Model Context Protocol client of `key` sees.
async fn tool_names(gw: &Gateway, key: &str) -> Vec<String> {
    let (_, text) = gw
        .post(
            key,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#,
        )
        .await;
    let v: Value = serde_json::from_str(&text).unwrap();
    v["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standard_and_v1_servers_work_without_a_protocol_key() {
    servers();
    let venv_bin = venv().join("bin");
    let time = venv_bin.join("mcp-server-time").display().to_string();
    let everything = everything_js().display().to_string();
    let evh = everything_http(0);
    let modern = resolve_server_modern();
    let (v1_url, _v1) = http_upstream("v1h").await;
    let upstreams = [
        ("time", plain_stdio(&time, &["--local-timezone", "UTC"])),
        ("ev", plain_stdio("node", &[&everything, "stdio"])),
        ("v1s", stdio_upstream("v1s", &[])),
        ("evh", json!({"http": {"url": evh.url}})),
        ("modern", json!({"http": {"url": modern.url}})),
        ("v1h", json!({"http": {"url": v1_url}})),
    ];
    let names: Vec<&str> = upstreams.iter().map(|(n, _)| *n).collect();
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": upstreams.iter().map(|(n, u)| (n.to_string(), u.clone())).collect::<serde_json::Map<_, _>>(),
        "tenants": {"a": tenant("ka", &names)},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&names).await;
    let ready = readiness(&gw).await;
    for (name, protocol) in [
        ("time", "modelcontextprotocol"),
        ("ev", "modelcontextprotocol"),
        ("v1s", "v1"),
        ("evh", "modelcontextprotocol"),
        ("modern", "modelcontextprotocol"),
        ("v1h", "v1"),
    ] {
        assert_eq!(ready["upstreams"][name]["protocol"], protocol, "{ready}");
    }
    // Each one's tools are listed, and a call reaches the one that owns it.
    let tools = tool_names(&gw, "ka").await;
    for prefix in ["time__", "ev__", "v1s_", "evh__", "modern__", "v1h_"] {
        assert!(
            tools.iter().any(|t| t.starts_with(prefix)),
            "{prefix}: {tools:?}"
        );
    }
    let (_, text) = gw
        .post(
            "ka",
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"time__get_current_time","arguments":{"timezone":"UTC"}}}"#,
        )
        .await;
    assert!(text.contains("UTC"), "{text}");
    gw.stop().await;
}

/// Answers every HTTP request with 404, as a path that serves nothing does.
async fn not_found() -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", l.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 9\r\nconnection: close\r\n\r\nnot found")
                    .await;
            });
        }
    });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_speaks_neither_is_reported_down_with_why() {
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {
            "junk": plain_stdio("sh", &["-c", "echo this is not a protocol"]),
            "web": {"http": {"url": not_found().await}},
            "s": stdio_upstream("s", &[]),
        },
        "tenants": {"a": tenant("ka", &["junk", "web", "s"])},
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["s"]).await;
    let seen = within(async {
        loop {
            let ready = readiness(&gw).await;
            let told = |n: &str| ready["upstreams"][n]["problem"].as_str().map(str::to_owned);
            if let (Some(junk), Some(web)) = (told("junk"), told("web")) {
                return (ready, junk, web);
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
    let (ready, junk, web) = seen;
    assert!(junk.contains("neither protocol"), "{ready}");
    assert!(
        web.contains("neither protocol") && web.contains("404"),
        "{ready}"
    );
    for name in ["junk", "web"] {
        assert_eq!(ready["upstreams"][name]["status"], "down", "{ready}");
        assert_eq!(ready["upstreams"][name]["protocol"], "detecting", "{ready}");
    }
    // The others serve on, and a listing does not wait for these.
    assert_eq!(gw.list("ka", "mcp/listTools").await.len(), TEST_TOOL_COUNT);
    gw.stop().await;
}
