//! The admin console's JSON API and its guards over plain HTTP: who may
//! read and change, CSRF and fetch metadata, logging out, refused logins
//! answered one at a time (the right token never waits), the figures the
//! API gives after real calls, and the audit lines of the real binary.

use std::time::Duration;

use serde_json::{Value, json};

use crate::console::ADMIN;
use crate::support::*;

/// The gateway's configuration, `gateway`'s keys added to its own.
fn config(gateway: Value) -> String {
    json!({
        "gateway": with_keys(json!({"id": "gw"}), gateway),
        "upstreams": {"s": stdio_upstream("s", &[])},
        "tenants": {"a": tenant("ka", &["s"])},
    })
    .to_string()
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Logs in; the cookie header to send, and the session's CSRF token.
async fn session(gw: &Gateway) -> (String, String) {
    let r = client()
        .post(format!("{}/ui/login", gw.admin))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={}", ADMIN))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "./");
    let set = r.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    assert!(
        set.contains("Max-Age=28800") && !set.contains("Path=") && !set.contains("Secure"),
        "{set}"
    );
    let cookie = set.split(';').next().unwrap().to_owned();
    assert!(!cookie.contains(ADMIN));
    let page = client()
        .get(format!("{}/ui/", gw.admin))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let csrf = page
        .split(r#"<meta name="csrf-token" content=""#)
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap()
        .to_owned();
    (cookie, csrf)
}

#[tokio::test]
async fn without_an_admin_token_every_console_path_is_forbidden() {
    let gw = Gateway::start(&config(json!({}))).await;
    for path in [
        "/ui",
        "/ui/",
        "/ui/login",
        "/ui/api/upstreams",
        "/ui/static/console.js",
    ] {
        let r = client()
            .get(format!("{}{path}", gw.admin))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{path}");
    }
    let r = client()
        .post(format!("{}/ui/login", gw.admin))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={}", ""))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let off = Gateway::start(&config(
        json!({"admin_token": ADMIN, "admin_ui": {"enabled": false}}),
    ))
    .await;
    let r = client()
        .get(format!("{}/ui/", off.admin))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn reads_need_a_session_or_the_token_and_changes_need_the_csrf_token() {
    let gw = Gateway::start(&config(json!({"admin_token": ADMIN}))).await;
    gw.wait_ready_as(&["s"], Some(ADMIN)).await;
    let api = |p: &str| format!("{}/ui/api/{p}", gw.admin);
    // Nobody: pages send to the login (relative), the API answers 401.
    let r = client()
        .get(format!("{}/ui/tenants/a", gw.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(
        (
            r.status().as_u16(),
            r.headers()["location"].to_str().unwrap()
        ),
        (303, "../login")
    );
    let r = client().get(api("upstreams")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    assert_eq!(r.headers()["content-type"], "application/json");
    let r = client()
        .get(api("upstreams"))
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // The token as a bearer reads and decides, no CSRF token needed.
    let doc = crate::console::api_json(&gw, "tenants/a").await;
    assert_eq!(doc["name"], "a");
    let r = client()
        .get(api("tenants/nobody"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let decision =
        json!({"upstream": "s", "tool": "mcp://s/tools/echo:v1", "fingerprint": "sha256:00"});
    let r = client()
        .post(api("pins/approve"))
        .bearer_auth(ADMIN)
        .header("content-type", "application/json")
        .body(decision.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "nothing waits: past the guards");
    let r = client()
        .get(api("pins/approve"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);

    // A session reads; its changes need the CSRF token and no other site.
    let (cookie, csrf) = session(&gw).await;
    let post = |extra: &[(&str, &str)]| {
        let mut r = client()
            .post(api("pins/reject"))
            .header("cookie", &cookie)
            .header("content-type", "application/json")
            .body(decision.to_string());
        for (k, v) in extra {
            r = r.header(*k, *v);
        }
        r.send()
    };
    assert_eq!(post(&[]).await.unwrap().status(), 403);
    assert_eq!(
        post(&[("x-csrf-token", "forged")]).await.unwrap().status(),
        403
    );
    let cross = [
        ("x-csrf-token", csrf.as_str()),
        ("sec-fetch-site", "cross-site"),
    ];
    assert_eq!(post(&cross).await.unwrap().status(), 403);
    let own = [
        ("x-csrf-token", csrf.as_str()),
        ("sec-fetch-site", "same-origin"),
    ];
    assert_eq!(post(&own).await.unwrap().status(), 404);
    let r = client()
        .get(api("config"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    // Logging out needs the token too; then the session is refused.
    let out = |csrf: &str| {
        client()
            .post(format!("{}/ui/logout", gw.admin))
            .header("cookie", &cookie)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("csrf={}", csrf))
            .send()
    };
    assert_eq!(out("forged").await.unwrap().status(), 403);
    let r = out(&csrf).await.unwrap();
    assert_eq!(
        (
            r.status().as_u16(),
            r.headers()["location"].to_str().unwrap()
        ),
        (303, "login")
    );
    assert!(
        r.headers()["set-cookie"]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    let r = client()
        .get(api("config"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = client()
        .get(format!("{}/ui/logout", gw.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_logins_wait_their_turn_and_the_right_token_does_not() {
    let gw = Gateway::start(&config(json!({"admin_token": ADMIN}))).await;
    let login = |token: &'static str| {
        client()
            .post(format!("{}/ui/login", gw.admin))
            .header("x-forwarded-proto", "https")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={}", token))
            .send()
    };
    let wrong: Vec<_> = (0..20).map(|_| tokio::spawn(login("guess"))).collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // While up to 16 refusals wait a second each, the right one is let in.
    let right = login(ADMIN).await.unwrap();
    assert_eq!(right.status(), 303);
    assert!(
        right.headers()["set-cookie"]
            .to_str()
            .unwrap()
            .contains("Secure")
    );
    let mut pending = 0;
    for w in &wrong {
        pending += usize::from(!w.is_finished());
    }
    assert!(pending > 0, "the refusals are answered a second apart");
    let mut statuses = Vec::new();
    for w in wrong {
        let r = w.await.unwrap().unwrap();
        if r.status() == 429 {
            assert_eq!(r.headers()["retry-after"], "1");
        }
        statuses.push(r.status().as_u16());
    }
    assert!(
        statuses.iter().all(|s| *s == 401 || *s == 429),
        "{statuses:?}"
    );
    assert!(statuses.contains(&429), "past 16 waiting: 429 {statuses:?}");
    assert!(
        statuses.iter().filter(|s| **s == 401).count() <= 17,
        "{statuses:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_figures_follow_real_calls_and_reloads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.yaml");
    let text = config(json!({"admin_token": ADMIN, "reload_poll_ms": 100}));
    std::fs::write(&path, &text).unwrap();
    let gw = start_watching(&path).await;
    gw.wait_ready_as(&["s"], Some(ADMIN)).await;
    let get = |p: &'static str| crate::console::api_json(&gw, p);
    for _ in 0..4 {
        gw.execute("ka", "mcp://gw/s/s/tools/echo:v1", json!({"text": "x"}))
            .await;
    }
    gw.execute("ka", "mcp://gw/s/s/tools/fail", json!({})).await;
    let doc = get("upstreams").await;
    assert_eq!(doc["window_s"], 300);
    let s = &doc["upstreams"][0];
    assert_eq!(
        (
            s["name"].as_str(),
            s["protocol"].as_str(),
            s["transport"].as_str()
        ),
        (Some("s"), Some("v1"), Some("stdio"))
    );
    assert_eq!(s["state"], "ready");
    assert_eq!(s["recent"]["calls"], 5, "{s}");
    assert_eq!(s["recent"]["errors"], 1, "{s}");
    assert_eq!(s["recent"]["error_rate"], 0.2, "{s}");
    assert!(s["recent"]["calls_per_s"].as_f64().unwrap() > 0.0);
    assert!(s["recent"]["p50_ms"].as_f64().unwrap() > 0.0);
    assert!(s["recent"]["p99_ms"].as_f64().unwrap() >= s["recent"]["p50_ms"].as_f64().unwrap());
    assert_eq!(s["tenants"], json!(["a"]));
    assert!(s["tools"].as_u64().unwrap() >= 10);
    let tenants = get("tenants").await;
    assert_eq!(tenants["tenants"][0]["tools"]["listed"], s["tools"]);
    let a = get("tenants/a").await;
    assert_eq!(a["limits"]["rate_limit"], Value::Null);
    assert!(a["usage"]["requests_per_s"].as_f64().unwrap() > 0.0, "{a}");

    let config = get("config").await;
    let digest = format!("sha256:{}", hex(&std::fs::read(&path).unwrap()));
    assert_eq!(config["digest"], digest);
    assert_eq!(config["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(config["gateway_id"], "gw");
    assert_eq!(config["last_reload"], Value::Null);
    let with_b =
        Doc::parse(&text).set("tenants.b", json!({"api_keys": ["kb"], "upstreams": ["s"]}));
    std::fs::write(&path, with_b.yaml()).unwrap();
    let config = within(async {
        loop {
            let config = get("config").await;
            if config["reloads"]["applied"] == 1 {
                return config;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let digest = format!("sha256:{}", hex(&std::fs::read(&path).unwrap()));
    assert_eq!(config["digest"], digest);
    assert_eq!(config["last_reload"]["outcome"], "applied");
    assert_eq!(config["last_reload"]["error"], Value::Null);
    assert_eq!(config["reloads"]["applied"], 1);
    assert_eq!(get("tenants").await["tenants"].as_array().unwrap().len(), 2);
}

fn hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn logins_and_decisions_are_audited_and_bad_settings_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.yaml");
    let bad =
        config(json!({"admin_token": ADMIN, "admin_ui": {"refresh_ms": 10, "session_ttl_s": 5}}));
    std::fs::write(&path, bad).unwrap();
    let out = check_refused(&path);
    assert!(
        out.contains("gateway.admin_ui.refresh_ms")
            && out.contains("gateway.admin_ui.session_ttl_s"),
        "{out}"
    );
    let good = config(
        json!({"admin_token": ADMIN, "listen": "127.0.0.1:0", "admin_listen": "127.0.0.1:0"}),
    );
    std::fs::write(&path, good).unwrap();
    let mut p = Process::spawn(&["serve", "--config", path.to_str().unwrap()]);
    let admin = p.addr("admin listener bound");
    let post = |body: &str| {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(&admin).unwrap();
        write!(s, "POST /ui/login HTTP/1.1\r\nHost: gw\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    assert!(post("token=nope").starts_with("HTTP/1.1 401"));
    assert!(post(&format!("token={ADMIN}")).starts_with("HTTP/1.1 303"));
    let audit = |outcome: &'static str| {
        move |v: &Value| {
            v["target"] == "mcp_gateway::audit"
                && v["message"] == "admin login"
                && v["outcome"] == outcome
        }
    };
    let refused = p.wait_log("a refused login", audit("refused"));
    let ok = p.wait_log("a login", audit("ok"));
    for line in [&refused, &ok] {
        let text = line.to_string();
        assert!(
            text.contains("admin login") && text.contains("127.0.0.1"),
            "{text}"
        );
        assert!(!text.contains(ADMIN) && !text.contains("nope"), "{text}");
    }
    let session = ok["session"].as_str().unwrap().to_owned();
    assert!(
        session.len() == 8 && session.chars().all(|c| c.is_ascii_hexdigit()),
        "{ok}"
    );
    assert!(p.terminate().success());
}
