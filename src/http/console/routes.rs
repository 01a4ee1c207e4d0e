//! The console's paths, who may take them, and their answers.

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::access::{Who, same_site, who};
use super::pages::{self, Frame};
use super::{Console, Ctx, api, html, json as json_answer, secure, see_other, views};

/// The console's paths, with their guard, for the admin listener.
pub fn router(
    admin: crate::http::admin_state::AdminState,
    console: std::sync::Arc<Console>,
) -> Router {
    let ctx = Ctx { admin, console };
    Router::new()
        .route("/ui", get(|| async { see_other("ui/") }))
        .route("/ui/", get(|s, h| page(s, h, "upstreams", None)))
        .route("/ui/upstreams", get(|s, h| page(s, h, "upstreams", None)))
        .route("/ui/tenants", get(|s, h| page(s, h, "tenants", None)))
        .route(
            "/ui/tenants/{tenant}",
            get(|s, h, Path(t): Path<String>| page(s, h, "tenant", Some(t))),
        )
        .route("/ui/pins", get(|s, h| page(s, h, "pins", None)))
        .route("/ui/config", get(|s, h| page(s, h, "config", None)))
        .route(
            "/ui/login",
            get(super::login::form).post(super::login::submit),
        )
        .route("/ui/logout", post(super::login::logout))
        .route("/ui/static/console.js", get(super::assets::script))
        .route("/ui/static/console.css", get(super::assets::style))
        .route(
            "/ui/api/upstreams",
            get(|s, h| api_get(s, h, "upstreams", None)),
        )
        .route(
            "/ui/api/tenants",
            get(|s, h| api_get(s, h, "tenants", None)),
        )
        .route(
            "/ui/api/tenants/{tenant}",
            get(|s, h, Path(t): Path<String>| api_get(s, h, "tenant", Some(t))),
        )
        .route("/ui/api/config", get(|s, h| api_get(s, h, "config", None)))
        .route("/ui/api/pins", get(|s, h| api_get(s, h, "pins", None)))
        .route(
            "/ui/api/metrics",
            get(|s, h| api_get(s, h, "metrics", None)),
        )
        .route(
            "/ui/api/pins/approve",
            post(|s, h, b| decide(s, h, b, true)),
        )
        .route(
            "/ui/api/pins/reject",
            post(|s, h, b| decide(s, h, b, false)),
        )
        .route("/ui/{*rest}", get(|| async { StatusCode::NOT_FOUND }))
        .layer(axum::middleware::from_fn_with_state(ctx.clone(), guard))
        .with_state(ctx)
}

/// Around every `/ui` path: 403 without an admin token, 404 with the
/// console turned off, and the safety headers on every answer.
async fn guard(State(s): State<Ctx>, req: Request, next: Next) -> Response {
    let answer = if s.token.load().is_none() {
        let why = "the admin console needs gateway.admin_token, and none is configured\n";
        (StatusCode::FORBIDDEN, why).into_response()
    } else if !s.console.ui.load().enabled {
        (StatusCode::NOT_FOUND, "gateway.admin_ui.enabled is false\n").into_response()
    } else {
        next.run(req).await
    };
    secure(answer)
}

/// The view's JSON, or `None` for a tenant that does not exist.
async fn doc(s: &Ctx, view: &str, tenant: Option<&str>) -> Option<Value> {
    let d = &s.dispatcher;
    let c = &s.console;
    Some(match view {
        "upstreams" => api::upstreams(d, c),
        "tenants" => api::tenants(d),
        "tenant" => {
            let (mut head, tools) = api::tenant(d, c, tenant?)?;
            head["tools"] = serde_json::to_value(tools).ok()?;
            head
        }
        "config" => api::config(d, c),
        _ => {
            let r = crate::http::admin_pins::review(&s.admin).await;
            let body = axum::body::to_bytes(r.into_body(), 64 << 20).await.ok()?;
            let mut v: Value = serde_json::from_slice(&body).ok()?;
            v["at"] = api::time(std::time::SystemTime::now()).into();
            v
        }
    })
}

async fn page(
    State(s): State<Ctx>,
    headers: HeaderMap,
    view: &'static str,
    tenant: Option<String>,
) -> Response {
    let base = if tenant.is_some() { "../" } else { "" };
    let Who::Session(session) = who(&s, &headers) else {
        if let Who::Bearer = who(&s, &headers) {
            return html(
                StatusCode::OK,
                render(&s, view, tenant.as_deref(), "", base).await,
            );
        }
        return see_other(&format!("{base}login"));
    };
    let body = render(&s, view, tenant.as_deref(), &session.csrf, base).await;
    if body.is_empty() {
        return (StatusCode::NOT_FOUND, "no such tenant\n").into_response();
    }
    html(StatusCode::OK, body)
}

async fn render(s: &Ctx, view: &str, tenant: Option<&str>, csrf: &str, base: &str) -> String {
    let Some(doc) = doc(s, view, tenant).await else {
        return String::new();
    };
    let (title, body, api) = match view {
        "upstreams" => (
            "Upstreams".to_owned(),
            pages::upstreams(&doc),
            "api/upstreams".to_owned(),
        ),
        "tenants" => (
            "Tenants".to_owned(),
            pages::tenants(&doc),
            "api/tenants".to_owned(),
        ),
        "tenant" => {
            let name = tenant.unwrap_or("");
            let href =
                percent_encoding::utf8_percent_encode(name, percent_encoding::NON_ALPHANUMERIC);
            (
                format!("Tenant {name}"),
                views::tenant(&doc),
                format!("../api/tenants/{href}"),
            )
        }
        "config" => (
            "Configuration".to_owned(),
            views::config(&doc, base),
            "api/config".to_owned(),
        ),
        _ => ("Pins".to_owned(), views::pins(&doc), "api/pins".to_owned()),
    };
    let at = doc["at"].as_str().unwrap_or("").to_owned();
    let frame = Frame {
        title: &title,
        base,
        api: &api,
        view,
        csrf,
        refresh_ms: s.console.ui.load().refresh.as_millis() as u64,
        at: &at,
    };
    pages::page(&frame, &body)
}

fn api_refused() -> Response {
    let mut r = json_answer(
        StatusCode::UNAUTHORIZED,
        &json!({"error": "log in at ../login, or send Authorization: Bearer <admin token>"}),
    );
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

async fn api_get(
    State(s): State<Ctx>,
    headers: HeaderMap,
    view: &'static str,
    tenant: Option<String>,
) -> Response {
    if let Who::Nobody = who(&s, &headers) {
        return api_refused();
    }
    if view == "metrics" {
        let mut r = s.dispatcher.metrics().render().into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        );
        return r;
    }
    if view == "tenant" {
        let found = tenant.and_then(|t| api::tenant(&s.dispatcher, &s.console, &t));
        return match found {
            Some((head, tools)) => {
                crate::http::json(StatusCode::OK, api::tenant_json(&head, &tools))
            }
            None => json_answer(StatusCode::NOT_FOUND, &json!({"error": "no such tenant"})),
        };
    }
    match doc(&s, view, tenant.as_deref()).await {
        Some(doc) => json_answer(StatusCode::OK, &doc),
        None => json_answer(StatusCode::NOT_FOUND, &json!({"error": "no such tenant"})),
    }
}

async fn decide(State(s): State<Ctx>, headers: HeaderMap, body: Bytes, approve: bool) -> Response {
    let session = match who(&s, &headers) {
        Who::Nobody => return api_refused(),
        Who::Bearer => None,
        Who::Session(session) => {
            if !same_site(&headers, &session, None) {
                return json_answer(
                    StatusCode::FORBIDDEN,
                    &json!({"error": "a change needs the session's X-CSRF-Token, from this console's own page"}),
                );
            }
            Some(session.short())
        }
    };
    crate::http::admin_pins::decision(&s.admin, body, approve, session.as_deref()).await
}
