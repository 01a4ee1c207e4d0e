//! The admin listener: liveness, readiness and metrics, away from agent traffic.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::json;
use crate::dispatch::Dispatcher;

#[derive(Clone)]
pub struct AdminState {
    pub dispatcher: Dispatcher,
    /// Set when shutdown starts: readiness turns off so traffic moves elsewhere.
    pub draining: Arc<AtomicBool>,
}

pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

/// Liveness: answering at all proves the process and its event loop are alive.
async fn healthz() -> &'static str {
    "ok\n"
}

#[derive(serde::Serialize)]
struct Readiness {
    ready: bool,
    draining: bool,
    upstreams: BTreeMap<String, &'static str>,
}

/// Readiness: config loaded and listening (we are serving this), and not draining.
/// Upstreams are reported for humans; a down upstream does not fail readiness,
/// because the gateway still serves every other one.
async fn readyz(State(s): State<AdminState>) -> Response {
    let draining = s.draining.load(Ordering::Relaxed);
    let body = Readiness {
        ready: !draining,
        draining,
        upstreams: s
            .dispatcher
            .upstreams()
            .map(|u| (u.name.to_string(), u.status().as_str()))
            .collect(),
    };
    let status = if draining {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    json(status, serde_json::to_vec(&body).unwrap_or_default())
}

async fn metrics(State(s): State<AdminState>) -> Response {
    let mut r = s.dispatcher.metrics().render().into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    r
}
