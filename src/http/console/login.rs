//! Logging in and out of the console. The token is compared as a digest;
//! it is never logged, echoed or put in the cookie.

use axum::Form;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::access::{Who, same_site, who};
use super::session::COOKIE;
use super::{Ctx, Peer, html, see_other, views};
use crate::config::KeyDigest;

pub(super) async fn form(State(s): State<Ctx>, headers: HeaderMap) -> Response {
    if let Who::Session(_) = who(&s, &headers) {
        return see_other("./");
    }
    html(StatusCode::OK, views::login(false))
}

#[derive(Deserialize)]
pub(super) struct Login {
    #[serde(default)]
    token: String,
}

fn remote(req: &Request) -> String {
    req.extensions()
        .get::<Peer>()
        .map_or_else(|| "unknown".to_owned(), |p| p.0.ip().to_string())
}

pub(super) async fn submit(State(s): State<Ctx>, req: Request) -> Response {
    let remote = remote(&req);
    let secure = req
        .headers()
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|p| p.eq_ignore_ascii_case("https"));
    let Form(login) = match Form::<Login>::from_request(req, &()).await {
        Ok(f) => f,
        Err(_) => Form(Login {
            token: String::new(),
        }),
    };
    let Some(want) = s.token.load_full() else {
        return StatusCode::FORBIDDEN.into_response();
    };
    let right = !login.token.is_empty() && KeyDigest::of(login.token.as_bytes()) == *want;
    if !right {
        if !s.console.sessions.refusal_turn().await {
            tracing::info!(target: crate::telemetry::AUDIT, outcome = "limited", remote, "admin login");
            let mut r = (
                StatusCode::TOO_MANY_REQUESTS,
                "too many refused logins wait; try again in a second\n",
            )
                .into_response();
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return r;
        }
        tracing::info!(target: crate::telemetry::AUDIT, outcome = "refused", remote, "admin login");
        return html(StatusCode::UNAUTHORIZED, views::login(true));
    }
    let ttl = s.console.ui.load().session_ttl;
    let (value, session) = s.console.sessions.open(&want, ttl);
    tracing::info!(target: crate::telemetry::AUDIT, outcome = "ok", session = %session.short(), remote, "admin login");
    let mut cookie = format!(
        "{COOKIE}={value}; HttpOnly; SameSite=Strict; Max-Age={}",
        ttl.as_secs()
    );
    if secure {
        cookie.push_str("; Secure");
    }
    let mut r = see_other("./");
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

#[derive(Deserialize)]
pub(super) struct Logout {
    #[serde(default)]
    csrf: String,
}

pub(super) async fn logout(State(s): State<Ctx>, req: Request) -> Response {
    let headers = req.headers().clone();
    let Who::Session(session) = who(&s, &headers) else {
        return see_other("login");
    };
    let field = match Form::<Logout>::from_request(req, &()).await {
        Ok(Form(l)) => l.csrf,
        Err(_) => String::new(),
    };
    if !same_site(&headers, &session, Some(&field)) {
        return (
            StatusCode::FORBIDDEN,
            "logging out needs the session's CSRF token\n",
        )
            .into_response();
    }
    if let Some(cookie) = super::cookie(&headers) {
        s.console.sessions.end(cookie);
    }
    tracing::info!(target: crate::telemetry::AUDIT, session = %session.short(), "admin logout");
    let mut r = see_other("login");
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&format!("{COOKIE}=; HttpOnly; SameSite=Strict; Max-Age=0"))
            .unwrap_or(HeaderValue::from_static("")),
    );
    r
}

use axum::extract::FromRequest as _;
