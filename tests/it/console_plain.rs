//! The admin console without JavaScript (every view complete, logging in
//! and out by forms) and behind an ingress that strips a path prefix (every
//! link, form, redirect and poll stays under it), in a real browser.

use serde_json::json;

use crate::console::{Started, api_json, log_in, nothing_leaked};
use crate::support::browser::Browser;

/// Each view's test ids, as a page without its script must have them.
const VIEWS: [(&str, &[&str]); 5] = [
    (
        "upstreams",
        &[
            "[data-testid=upstream-row][data-upstream=s][data-state=ready] [data-testid=upstream-protocol]",
            "[data-testid=upstream-row][data-upstream=h] [data-testid=upstream-p99]",
        ],
    ),
    (
        "tenants",
        &["[data-testid=tenant-row][data-tenant=a] [data-testid=tenant-link]"],
    ),
    (
        "tenants/a",
        &[
            "[data-testid=tool-row][data-state=hidden] [data-testid=tool-reason]",
            "[data-testid=limit-row][data-limit=max_connections]",
            "[data-testid=refusal-row][data-reason=rate_limited][data-count=\"0\"]",
        ],
    ),
    (
        "pins",
        &[
            "[data-testid=quarantine-empty]",
            "[data-testid=action-result]",
        ],
    ),
    (
        "config",
        &[
            "[data-testid=config-digest]",
            "[data-testid=reload-outcome][data-outcome=none]",
            "[data-testid=metrics-link]",
        ],
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_javascript_every_view_is_complete_and_forms_work() {
    let started = Started::new(json!({})).await;
    let gw = &started.gw;
    let mut b = Browser::start_no_js().await;
    let base = format!("{}/ui/", gw.admin);
    log_in(&mut b, &base).await;
    for (view, ids) in VIEWS {
        b.goto(&format!("{base}{view}")).await.unwrap();
        for id in [
            "nav",
            "version",
            "live",
            "logout",
            "nav-upstreams",
            "nav-config",
        ] {
            assert_eq!(
                b.count(&format!("[data-testid={id}]")).await,
                1,
                "{view}: {id}"
            );
        }
        for selector in ids {
            assert_eq!(
                b.count(selector).await,
                1,
                "{view}: {selector}\n{}",
                b.html().await
            );
        }
    }
    // The same values the API gives.
    b.goto(&format!("{base}config")).await.unwrap();
    let digest = b.text("[data-testid=config-digest]").await;
    let api = api_json(gw, "config").await;
    assert_eq!(api["digest"], digest);
    nothing_leaked(&mut b).await;
    b.click_nav("[data-testid=logout] button").await;
    assert!(b.url().await.ends_with("/ui/login"), "{}", b.url().await);
    b.quit().await;
}

/// An ingress that serves the admin listener under `/gw` and strips it.
async fn ingress(admin: String) -> (String, tokio::task::JoinHandle<()>) {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
        let (client, admin) = (client.clone(), admin.clone());
        async move {
            let target = req
                .uri()
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_owned();
            let Some(rest) = target.strip_prefix("/gw") else {
                return axum::http::Response::builder()
                    .status(404)
                    .body(axum::body::Body::empty())
                    .unwrap();
            };
            let mut out = client.request(req.method().clone(), format!("{admin}{rest}"));
            for (k, v) in req.headers() {
                if k != "host" {
                    out = out.header(k, v);
                }
            }
            // The console must not need it, nor follow it.
            out = out.header("x-forwarded-prefix", "/elsewhere");
            let body = axum::body::to_bytes(req.into_body(), 1 << 20)
                .await
                .unwrap();
            let resp = out.body(body).send().await.unwrap();
            let mut back = axum::http::Response::builder().status(resp.status());
            for (k, v) in resp.headers() {
                back = back.header(k, v);
            }
            back.body(axum::body::Body::from(resp.bytes().await.unwrap()))
                .unwrap()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (format!("http://{addr}/gw"), task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_prefix_every_link_form_and_poll_stays_under_it() {
    let started = Started::new(json!({})).await;
    let gw = &started.gw;
    let (front, _proxy) = ingress(gw.admin.clone()).await;
    let mut b = Browser::start().await;
    // `/gw/ui` redirects to `/gw/ui/`, which sends to the login.
    b.goto(&format!("{front}/ui")).await.unwrap();
    assert!(b.url().await.ends_with("/gw/ui/login"), "{}", b.url().await);
    log_in(&mut b, &format!("{front}/ui/")).await;
    b.click_nav("[data-testid=nav-tenants]").await;
    b.click_nav("[data-testid=tenant-link]").await;
    assert!(
        b.url().await.ends_with("/gw/ui/tenants/a"),
        "{}",
        b.url().await
    );
    let refreshed = b
        .attr("[data-testid=live]", "data-refreshed-at")
        .await
        .unwrap();
    let c = serde_json::json!({"op": "wait_attr_change", "selector": "[data-testid=live]", "name": "data-refreshed-at", "from": refreshed, "timeout_ms": 10_000});
    b.cmd(c).await.unwrap();
    // A hidden tab is not polled; shown again, it is at once.
    b.set_hidden(true).await;
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let hidden_at = b
        .attr("[data-testid=live]", "data-refreshed-at")
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let still = b
        .attr("[data-testid=live]", "data-refreshed-at")
        .await
        .unwrap();
    assert_eq!(hidden_at, still, "polled while hidden");
    b.set_hidden(false).await;
    let c = serde_json::json!({"op": "wait_attr_change", "selector": "[data-testid=live]", "name": "data-refreshed-at", "from": still, "timeout_ms": 5_000});
    b.cmd(c).await.unwrap();
    b.click_nav("[data-testid=nav-config]").await;
    assert!(b.url().await.ends_with("/gw/ui/config"));
    for entry in b.network().await {
        let url = entry["url"].as_str().unwrap_or("");
        assert!(url.starts_with(&front), "left the prefix: {url}");
    }
    b.click_nav("[data-testid=logout] button").await;
    assert!(b.url().await.ends_with("/gw/ui/login"), "{}", b.url().await);
    b.quit().await;
}
