//! Pins you can review, on the admin listener behind `gateway.admin_token`
//! (401 without it or with another; 403 when none is configured, since a
//! decision must never be open to anyone who reaches the port):
//! `GET /pins` lists what waits, `POST /pins/approve` and `/pins/reject`
//! decide on one definition, named by its fingerprint. A decision is
//! audited, counted, and relisted at once: here, and on every replica when
//! the pins are in the shared store.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::admin_state::AdminState;
use super::json;
use crate::upstream::Upstream;
use crate::upstream::pins::Undecided;
use crate::upstream::pins::review::{self, Review};

/// Why a request may not review pins, as its answer.
fn refused(s: &AdminState, headers: &HeaderMap) -> Option<Response> {
    if s.token.load().is_none() {
        let why = "pins are reviewed with gateway.admin_token, and none is configured\n";
        return Some((StatusCode::FORBIDDEN, why).into_response());
    }
    (!s.may_see(headers)).then(super::admin_state::unauthorized)
}

fn pinned(s: &AdminState) -> Vec<Arc<Upstream>> {
    let mut ups = s.dispatcher.upstreams();
    ups.retain(|u| u.pins().is_some());
    ups
}

pub(super) async fn list(State(s): State<AdminState>, headers: HeaderMap) -> Response {
    if let Some(r) = refused(&s, &headers) {
        return r;
    }
    review(&s).await
}

/// What waits for review, as `GET /pins` answers it (the caller checked
/// who asks).
pub(super) async fn review(s: &AdminState) -> Response {
    let mut doc = Review::default();
    for up in pinned(s) {
        let Some(pins) = up.pins() else { continue };
        match pins.record(&up.name).await {
            Ok(record) => review::add(&mut doc, s.dispatcher.gateway_id(), &up.name, &record),
            Err(e) => {
                let body = json!({"error": format!("cannot read the pins of {}: {e}", up.name)});
                return json(
                    StatusCode::SERVICE_UNAVAILABLE,
                    body.to_string().into_bytes(),
                );
            }
        }
    }
    json(StatusCode::OK, serde_json::to_vec(&doc).unwrap_or_default())
}

pub(super) async fn approve(s: State<AdminState>, headers: HeaderMap, body: Bytes) -> Response {
    decide(s, headers, body, true).await
}

pub(super) async fn reject(s: State<AdminState>, headers: HeaderMap, body: Bytes) -> Response {
    decide(s, headers, body, false).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Decision {
    upstream: String,
    tool: String,
    fingerprint: String,
}

async fn decide(
    State(s): State<AdminState>,
    headers: HeaderMap,
    body: Bytes,
    approve: bool,
) -> Response {
    if let Some(r) = refused(&s, &headers) {
        return r;
    }
    decision(&s, body, approve, None).await
}

/// Decides on one definition as `POST /pins/approve` (or `reject`) does;
/// `session` names the console session that asked, for the audit line
/// (the caller checked who asks).
pub(super) async fn decision(
    s: &AdminState,
    body: Bytes,
    approve: bool,
    session: Option<&str>,
) -> Response {
    let answer =
        |status: StatusCode, body: serde_json::Value| json(status, body.to_string().into_bytes());
    let d: Decision = match serde_json::from_slice(&body) {
        Ok(d) => d,
        Err(e) => {
            let why = format!("the body is {{\"upstream\", \"tool\", \"fingerprint\"}}: {e}");
            return answer(StatusCode::BAD_REQUEST, json!({"error": why}));
        }
    };
    let nothing = || {
        let why = format!("nothing of {}'s {} waits for review", d.upstream, d.tool);
        answer(StatusCode::NOT_FOUND, json!({"error": why}))
    };
    let Some(up) = pinned(s).into_iter().find(|u| *u.name == d.upstream) else {
        return nothing();
    };
    let Some(pins) = up.pins() else {
        return nothing();
    };
    let decided = match pins
        .decide(&d.upstream, &d.tool, Some(&d.fingerprint), approve)
        .await
    {
        Ok(decided) => decided,
        Err(e) => {
            let why = format!("cannot change the pins of {}: {e}", d.upstream);
            return answer(StatusCode::SERVICE_UNAVAILABLE, json!({"error": why}));
        }
    };
    let decision = if approve { "approved" } else { "rejected" };
    match decided {
        Err(Undecided::Nothing) => nothing(),
        Err(Undecided::Other(waiting)) => answer(
            StatusCode::CONFLICT,
            json!({"error": "another definition waits than the one reviewed", "pending": waiting}),
        ),
        Ok(print) => {
            match session {
                Some(session) => {
                    tracing::info!(target: crate::telemetry::AUDIT, upstream = %d.upstream, tool = %d.tool, decision, fingerprint = %print, via = "admin", session, "pin decision");
                }
                None => {
                    tracing::info!(target: crate::telemetry::AUDIT, upstream = %d.upstream, tool = %d.tool, decision, fingerprint = %print, via = "admin", "pin decision");
                }
            }
            s.dispatcher
                .metrics()
                .pin_decisions
                .with_label_values(&[decision])
                .inc();
            up.relist_soon(None);
            if let Some(store) = pins.store()
                && let Err(e) = store.announce_relisting(&d.upstream).await
            {
                tracing::warn!(upstream = %d.upstream, error = %e, "a pin decision was not announced to the other replicas: they apply it at their next refresh");
            }
            answer(
                StatusCode::OK,
                json!({ decision: [{"upstream": d.upstream, "tool": d.tool}] }),
            )
        }
    }
}
