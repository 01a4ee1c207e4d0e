//! The admin listener: liveness, readiness and metrics, away from agent traffic.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use super::json;
use crate::upstream::Status;

pub use super::admin_state::AdminState;

/// The admin listener's paths, the console's (`/ui`) among them.
pub fn router(state: AdminState, console: std::sync::Arc<super::console::Console>) -> Router {
    let ui = super::console::router(state.clone(), console);
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/pins", get(super::admin_pins::list))
        .route("/pins/approve", post(super::admin_pins::approve))
        .route("/pins/reject", post(super::admin_pins::reject))
        .route(
            "/upstream-auth/connections",
            axum::routing::delete(super::consent::remove),
        )
        .with_state(state)
        .merge(ui)
}

/// Liveness: answering at all proves the process and its event loop are alive.
async fn healthz() -> &'static str {
    "ok\n"
}

#[derive(serde::Serialize)]
struct Readiness {
    ready: bool,
    draining: bool,
    upstreams: BTreeMap<String, UpstreamReadiness>,
    /// The shared store, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    store: Option<StoreReadiness>,
}

#[derive(serde::Serialize)]
struct StoreReadiness {
    /// `up` or `down`.
    state: &'static str,
    when_down: &'static str,
    replicas: usize,
}

#[derive(serde::Serialize)]
struct UpstreamReadiness {
    status: &'static str,
    required: bool,
    /// The protocol it speaks, or `detecting` until it answered in one.
    protocol: &'static str,
    /// Why it last failed to connect, until it connects.
    #[serde(skip_serializing_if = "Option::is_none")]
    problem: Option<String>,
}

/// Readiness: the config is loaded and the listener up (we are serving this), we
/// are not draining, and every upstream marked `required` is ready. Optional
/// upstreams are reported for humans but never fail readiness: the gateway still
/// serves every other one.
async fn readyz(State(s): State<AdminState>, headers: HeaderMap) -> Response {
    let draining = s.draining.load(Ordering::Relaxed);
    let mut required_ready = true;
    let upstreams: BTreeMap<String, UpstreamReadiness> = s
        .dispatcher
        .upstreams()
        .into_iter()
        .map(|u| {
            let status = u.status();
            required_ready &= !u.required || status == Status::Ready;
            let entry = UpstreamReadiness {
                status: status.as_str(),
                required: u.required,
                protocol: match u.detecting() {
                    true => "detecting",
                    false => u.dialect().as_str(),
                },
                problem: (status != Status::Ready)
                    .then(|| u.problem().map(|p| p.to_string()))
                    .flatten(),
            };
            (u.name.to_string(), entry)
        })
        .collect();
    // A store that is down fails readiness only when that is what it should
    // do (`refuse`); under `local` the replica serves on with its share.
    let store = s.dispatcher.store().map(|store| StoreReadiness {
        state: if store.is_up() { "up" } else { "down" },
        when_down: store.when_down().as_str(),
        replicas: store.replicas(),
    });
    let store_ready = store
        .as_ref()
        .is_none_or(|st| st.state == "up" || st.when_down == "local");
    let ready = !draining && required_ready && store_ready;
    let body = Readiness {
        ready,
        draining,
        upstreams,
        store,
    };
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    if !s.may_see(&headers) {
        // A probe needs the status only.
        return json(status, format!(r#"{{"ready":{ready}}}"#).into_bytes());
    }
    json(status, serde_json::to_vec(&body).unwrap_or_default())
}

async fn metrics(State(s): State<AdminState>, headers: HeaderMap) -> Response {
    if !s.may_see(&headers) {
        return super::admin_state::unauthorized();
    }
    let mut r = s.dispatcher.metrics().render().into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    r
}
