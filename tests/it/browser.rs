//! Browsers: a page of an origin in `gateway.allowed_origins` calls the
//! gateway from a real browser (Debian's `chromium`, headless; `.ci/run`
//! installs it), through the CORS preflight; a page of another origin is
//! refused. The pages are served here, on 127.0.0.1, and say what they got
//! by loading `/report?...` from their own server.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::support::*;

/// A page's script: `initialize` (handshake era) with the tenant's key, then
/// a report of the status, whether the session id could be read, and the
/// negotiated revision; or of the failure.
fn page(gateway: &str) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "page", "version": "1"}}});
    format!(
        r#"<!doctype html><title>page</title><script>
const report = (what) => {{ new Image().src = "/report?" + encodeURIComponent(what); }};
fetch({gateway:?}, {{
  method: "POST",
  headers: {{"Authorization": "Bearer ka", "Content-Type": "application/json",
             "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}},
  body: JSON.stringify({init}),
}}).then(r => r.json().then(b => report("ok " + r.status + " session=" + (r.headers.get("mcp-session-id") ? "yes" : "no")
        + " revision=" + b.result.protocolVersion)))
  .catch(e => report("failed " + e));
</script>"#
    )
}

/// Serves `html` at `/` on a free port until dropped; reports arrive on the receiver.
async fn page_server(html: String) -> (u16, mpsc::Receiver<String>, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel(8);
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let (html, tx) = (html.clone(), tx.clone());
            tokio::spawn(async move {
                let mut buf = vec![0; 8192];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).to_string();
                let target = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
                let body = if let Some(q) = target.strip_prefix("/report?") {
                    let what = percent_encoding::percent_decode_str(q)
                        .decode_utf8_lossy()
                        .to_string();
                    let _ = tx.send(what).await;
                    String::new()
                } else if target == "/" {
                    html
                } else {
                    String::new()
                };
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(response.as_bytes()).await;
            });
        }
    });
    (port, rx, task)
}

/// Headless chromium on `url`, in a process group of its own: killed whole when dropped.
struct Browser {
    child: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    fn open(url: &str) -> Browser {
        use std::os::unix::process::CommandExt;
        let profile = tempfile::tempdir().unwrap();
        let child = Command::new("chromium")
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(url)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("chromium is needed for the browser tests (Debian: apt-get install chromium; .ci/run installs it)");
        Browser {
            child,
            _profile: profile,
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The browser's own children (renderer, zygote) are in its group.
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.child.wait();
    }
}

async fn report(rx: &mut mpsc::Receiver<String>) -> String {
    tokio::time::timeout(Duration::from_secs(60), rx.recv())
        .await
        .expect("the page reported nothing")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_a_listed_origin_calls_the_gateway_and_another_is_refused() {
    // The pages' servers first: their origins go into the config.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let agent_port = listener.local_addr().unwrap().port();
    let gateway_url = format!("http://127.0.0.1:{agent_port}/mcp");
    let (listed, mut listed_reports, _a) = page_server(page(&gateway_url)).await;
    let (other, mut other_reports, _b) = page_server(page(&gateway_url)).await;
    let yaml = json!({
        "gateway": {"id": "gw", "allowed_origins": [format!("http://127.0.0.1:{}", listed)]},
        "upstreams": {"s": stdio_upstream("s", &[])},
        "tenants": {"a": tenant("ka", &["s"])},
    })
    .to_string();
    let secrets = mcp_gateway::config::SystemSecrets::default();
    let config = mcp_gateway::config::Config::from_yaml(&yaml, &secrets).unwrap();
    let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gw = Gateway::wrap(mcp_gateway::app::start_with(config, listener, admin).unwrap());
    gw.wait_ready(&["s"]).await;

    // The preflight as the browser will send it, by hand first.
    let preflight = |origin: String| {
        gw.client
            .request(reqwest::Method::OPTIONS, &gw.url)
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization,content-type,mcp-protocol-version,mcp-param-region",
            )
            .send()
    };
    let r = within(preflight(format!("http://127.0.0.1:{listed}")))
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let h = r.headers();
    assert_eq!(
        h["access-control-allow-origin"],
        format!("http://127.0.0.1:{listed}")
    );
    let allowed = h["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    for name in [
        "authorization",
        "content-type",
        "mcp-protocol-version",
        "mcp-param-region",
    ] {
        assert!(allowed.contains(name), "{allowed}");
    }
    assert!(
        h["access-control-allow-methods"]
            .to_str()
            .unwrap()
            .contains("POST")
    );
    let r = within(preflight(format!("http://127.0.0.1:{other}")))
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(r.headers().get("access-control-allow-origin").is_none());

    // A real browser, on each page.
    let browser = Browser::open(&format!("http://127.0.0.1:{listed}/"));
    let got = report(&mut listed_reports).await;
    assert_eq!(got, "ok 200 session=yes revision=2025-11-25");
    drop(browser);
    let browser = Browser::open(&format!("http://127.0.0.1:{other}/"));
    let got = report(&mut other_reports).await;
    assert!(got.starts_with("failed"), "{got}");
    drop(browser);
    gw.stop().await;
}
