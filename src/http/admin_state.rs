//! What every request of the admin listener shares, and who may see what
//! names tenants and upstreams.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::config::KeyDigest;
use crate::dispatch::Dispatcher;
use crate::tenant::bearer_token;

#[derive(Clone)]
pub struct AdminState {
    pub dispatcher: Dispatcher,
    /// Set when shutdown starts: readiness turns off so traffic moves elsewhere.
    pub draining: Arc<AtomicBool>,
    /// Needed for what names tenants and upstreams (metrics, readiness
    /// detail); swapped by a reload.
    pub token: Arc<arc_swap::ArcSwapOption<KeyDigest>>,
    /// Users' consents to upstreams, which an admin may revoke.
    pub consents: Arc<arc_swap::ArcSwapOption<crate::upstream::credentials::Consents>>,
}

impl AdminState {
    /// Whether the request may see what names tenants and upstreams.
    pub(super) fn may_see(&self, headers: &HeaderMap) -> bool {
        let want = self.token.load();
        let Some(want) = want.as_deref() else {
            return true;
        };
        headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_token)
            .is_some_and(|t| KeyDigest::of(t.as_bytes()) == *want)
    }
}

/// The answer to a request without the admin token (or with another).
pub(super) fn unauthorized() -> Response {
    let mut r = (
        StatusCode::UNAUTHORIZED,
        "send Authorization: Bearer <admin token>\n",
    )
        .into_response();
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}
