//! The admin console: a status page under `/ui` on the admin listener,
//! behind the admin token (a login form, then a sealed session cookie; or
//! the token as a bearer for scripts). Pages are rendered on the server
//! and complete without JavaScript; a small script of the binary's own
//! polls the view's JSON (`/ui/api/*`) and updates the page in place.
//! Every answer carries a strict Content-Security-Policy; every change is
//! a POST with the session's CSRF token, audited.

mod access;
mod api;
mod assets;
mod login;
mod pages;
pub mod record;
mod routes;
mod session;
mod tools;
mod views;
pub mod window;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::SystemTime;

use arc_swap::ArcSwap;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

pub use record::ConfigRecord;
pub use routes::router;
pub use session::Sessions;

use crate::config::admin_ui::AdminUi;
use crate::tenant::Places;

/// What the console's handlers share: the admin listener's state and the
/// console's own.
#[derive(Clone)]
pub struct Ctx {
    pub admin: crate::http::admin_state::AdminState,
    pub console: Arc<Console>,
}

impl std::ops::Deref for Ctx {
    type Target = crate::http::admin_state::AdminState;

    fn deref(&self) -> &Self::Target {
        &self.admin
    }
}

/// The peer of an admin connection (for the login audit line).
#[derive(Clone, Copy)]
pub struct Peer(pub SocketAddr);

/// What the console keeps beside the admin listener's state.
pub struct Console {
    /// `gateway.admin_ui`, swapped by a reload.
    pub ui: Arc<ArcSwap<AdminUi>>,
    /// Each upstream's transport (`stdio` or `http`), swapped by a reload.
    pub transports: Arc<ArcSwap<HashMap<String, &'static str>>>,
    pub window: window::Window,
    pub sessions: Sessions,
    pub record: Arc<ConfigRecord>,
    /// The agent listener's connections, by tenant.
    pub connections: Places,
    pub max_sessions_per_tenant: usize,
    pub max_connections_per_tenant: usize,
    pub started_at: SystemTime,
}

/// Each upstream's transport, as the console names it.
pub fn transports(config: &crate::config::Config) -> HashMap<String, &'static str> {
    config
        .upstreams
        .iter()
        .map(|u| {
            let t = match u.transport {
                crate::config::TransportSpec::Stdio(_) => "stdio",
                crate::config::TransportSpec::Http(_) => "http",
            };
            (u.name.clone(), t)
        })
        .collect()
}

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The headers every `/ui` answer carries.
fn secure(mut r: Response) -> Response {
    let h = r.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
    r
}

fn html(status: StatusCode, body: String) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    r
}

fn json(status: StatusCode, body: &serde_json::Value) -> Response {
    super::json(status, body.to_string().into_bytes())
}

/// A 303 to `to` (relative to the request's URL).
fn see_other(to: &str) -> Response {
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(to) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}

/// The session cookie's value in `headers`.
fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| c.trim().strip_prefix(session::COOKIE)?.strip_prefix('='))
}
