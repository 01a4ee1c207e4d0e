//! Users' consents to upstreams over HTTP (see `upstream::credentials::consent`):
//! on the agent listener, the browser's steps (`GET /oauth/upstream/connect`,
//! `login`, `callback`) and a user's own connections, by the agent's bearer
//! (`GET /oauth/upstream/connections`, `DELETE .../connections/{upstream}`);
//! on the admin listener, behind `gateway.admin_token`,
//! `DELETE /upstream-auth/connections?tenant=T&upstream=U[&issuer=I&sub=S]`.
//! Pages are the gateway's own, plain HTML, never cached, framed by nobody.

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::admin_state::AdminState;
use super::state::AgentState;
use crate::tenant::bearer_token;
use crate::upstream::credentials::Consents;
use crate::upstream::credentials::consent::{Answer, COOKIE, Page, Returned};

/// The prefix of every path served here on the agent listener.
pub const PREFIX: &str = "/oauth/upstream/";

/// A request under [`PREFIX`] on the agent listener.
pub async fn serve(state: &AgentState, request: hyper::Request<hyper::body::Incoming>) -> Response {
    let Some(consents) = state.consents.load_full() else {
        return plain(StatusCode::NOT_FOUND, "no upstream asks for consent here\n");
    };
    let path = &request.uri().path()[PREFIX.len()..];
    let query: Returned = Query::try_from_uri(request.uri())
        .map(|Query(q)| q)
        .unwrap_or_default();
    let cookie = browser_cookie(request.headers());
    let method = request.method().clone();
    let response = match (&method, path) {
        (&Method::GET, "connect") => {
            let id = query.id.as_deref().unwrap_or_default();
            answer(&consents, consents.connect(id, cookie.as_deref()).await)
        }
        (&Method::GET, "login") => {
            answer(&consents, consents.login(&query, cookie.as_deref()).await)
        }
        (&Method::GET, "callback") => answer(
            &consents,
            consents.callback(&query, cookie.as_deref()).await,
        ),
        (_, "connect" | "login" | "callback") => {
            plain(StatusCode::METHOD_NOT_ALLOWED, "GET only\n")
        }
        _ => connections(state, &consents, &method, path, request.headers()).await,
    };
    state
        .metrics
        .http_responses
        .with_label_values(&[response.status().as_str()])
        .inc();
    response
}

/// `GET connections` and `DELETE connections/{upstream}`, by the agent's bearer.
async fn connections(
    state: &AgentState,
    consents: &Consents,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
) -> Response {
    let upstream = match (method, path.strip_prefix("connections")) {
        (&Method::GET, Some("")) => None,
        (&Method::DELETE, Some(rest)) if rest.len() > 1 && rest.starts_with('/') => {
            Some(&rest[1..])
        }
        (_, Some(_)) => {
            return plain(
                StatusCode::METHOD_NOT_ALLOWED,
                "GET connections, or DELETE connections/{upstream}\n",
            );
        }
        _ => return plain(StatusCode::NOT_FOUND, "not found\n"),
    };
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token);
    let keys = state.keys.load_full();
    let tenant = match token {
        Some(token) => keys.authenticate_token(token).await.ok(),
        None => None,
    };
    let Some(tenant) = tenant else {
        let mut r = plain(StatusCode::UNAUTHORIZED, "send the agent's bearer token\n");
        r.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return r;
    };
    let Some(user) = tenant.user.clone() else {
        return plain(
            StatusCode::FORBIDDEN,
            "connections are a user's: an API key names none\n",
        );
    };
    match upstream {
        None => match consents.connections(&tenant.name, &user).await {
            Ok(list) => super::json(
                StatusCode::OK,
                serde_json::json!({"connections": list})
                    .to_string()
                    .into_bytes(),
            ),
            Err(_) => unavailable(),
        },
        Some(upstream) => match consents.disconnect(&tenant.name, &user, upstream).await {
            Ok(_) => StatusCode::NO_CONTENT.into_response(),
            Err(_) => unavailable(),
        },
    }
}

fn unavailable() -> Response {
    plain(
        StatusCode::SERVICE_UNAVAILABLE,
        "the store does not answer; try again\n",
    )
}

fn plain(status: StatusCode, text: &'static str) -> Response {
    (status, text).into_response()
}

/// The binding cookie the browser sent, when it sent one.
fn browser_cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_owned())
}

/// A step's answer as the browser gets it.
fn answer(consents: &Consents, answer: Answer) -> Response {
    let mut response = match answer {
        Answer::Redirect { location, cookie } => {
            let mut r = StatusCode::SEE_OTHER.into_response();
            if let Ok(v) = HeaderValue::from_str(&location) {
                r.headers_mut().insert(header::LOCATION, v);
            }
            if let Some(value) = cookie {
                let settings = consents.settings();
                let secure = if settings.public_url.starts_with("https://") {
                    "; Secure"
                } else {
                    ""
                };
                let set = format!(
                    "{COOKIE}={value}; Path={PREFIX}; HttpOnly; SameSite=Lax; Max-Age={}{secure}",
                    settings.ttl.as_secs()
                );
                if let Ok(v) = HeaderValue::from_str(&set) {
                    r.headers_mut().insert(header::SET_COOKIE, v);
                }
            }
            r
        }
        Answer::Page(page) => html(&page),
    };
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert("x-frame-options", HeaderValue::from_static("DENY"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'",
        ),
    );
    response
}

fn html(page: &Page) -> Response {
    let escape = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
    };
    let body = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title></head>\
         <body style=\"font-family:sans-serif;max-width:36rem;margin:10vh auto\">\
         <h1>{t}</h1><p data-testid=\"consent-result\">{x}</p></body></html>\n",
        t = escape(page.title),
        x = escape(&page.text),
    );
    let status = StatusCode::from_u16(page.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    r
}

#[derive(Deserialize)]
pub struct Removal {
    tenant: String,
    upstream: String,
    issuer: Option<String>,
    sub: Option<String>,
}

/// `DELETE /upstream-auth/connections` on the admin listener.
pub async fn remove(
    State(s): State<AdminState>,
    headers: HeaderMap,
    Query(q): Query<Removal>,
) -> Response {
    if s.token.load().is_none() {
        let why = "connections are removed with gateway.admin_token, and none is configured\n";
        return (StatusCode::FORBIDDEN, why).into_response();
    }
    if !s.may_see(&headers) {
        return super::admin_state::unauthorized();
    }
    let Some(consents) = s.consents.load_full() else {
        return super::json(StatusCode::OK, br#"{"removed":0}"#.to_vec());
    };
    let user = match (&q.issuer, &q.sub) {
        (Some(i), Some(s)) => Some((i.as_str(), s.as_str())),
        (None, None) => None,
        _ => {
            return plain(
                StatusCode::BAD_REQUEST,
                "give issuer and sub together, or neither\n",
            );
        }
    };
    match consents.remove(&q.tenant, &q.upstream, user).await {
        Ok(removed) => {
            tracing::info!(target: crate::telemetry::AUDIT, tenant = %q.tenant, upstream = %q.upstream, removed, "upstream connections removed by an admin");
            super::json(
                StatusCode::OK,
                serde_json::json!({"removed": removed})
                    .to_string()
                    .into_bytes(),
            )
        }
        Err(_) => unavailable(),
    }
}
