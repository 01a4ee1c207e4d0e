//! What a client sends that may belong to another replica: its answer to
//! an upstream's request forwarded to it, and its cancellation of a call
//! running elsewhere. Both pass through the shared store, within bounds: a
//! client makes the gateway publish only its own tenant's traffic.

use axum::http::{HeaderValue, StatusCode, header};

use super::mcp_sessions::Opened;
use super::refusal::Refusal;
use super::state::AgentState;
use super::{Reply, ReplyBody, error};
use crate::dispatch::mcp::Mirrored;
use crate::jsonrpc::{ErrorObject, Json, codes};
use crate::tenant::Tenant;
use crate::upstream::asks::Taken;

/// A client's answer to a request of an upstream's forwarded to it: handed
/// to the call waiting for it when the session is the client's (checked)
/// and the request went out in it; with a shared store, published for the
/// replica where it waits; counted and dropped otherwise. 202 either way,
/// as for any response (a 404 when the session is not one).
pub(super) async fn client_answer(
    s: &AgentState,
    tenant: &Tenant,
    mirrored: &Mirrored<'_>,
    id: Json<'_>,
    outcome: Result<Json<'_>, Json<'_>>,
) -> Reply {
    let (Some(sessions), Some(session)) = (&s.mcp_sessions, mirrored.session) else {
        // Nothing was asked without a session.
        s.dispatcher.metrics().stray_answers.inc();
        return accepted();
    };
    if sessions.open(session, &tenant.name).await.is_none() {
        return Refusal::SessionNotFound(None).reply();
    }
    if s.dispatcher.asks().answer(session, id.get(), outcome) == Taken::Stray {
        let asks = s.dispatcher.asks();
        match sessions.store() {
            // Nothing waits for it anywhere (an id this deployment did not
            // send this session, or whose wait is over): never published.
            Some(_) if !asks.may_wait_somewhere(session, id.get()) => {
                s.dispatcher.metrics().stray_answers.inc();
            }
            Some(_)
                if outcome.map_or_else(|e| e.get().len(), |r| r.get().len()) > PUBLISHED_BYTES =>
            {
                s.dispatcher.metrics().stray_answers.inc();
                return too_large_to_share("answer");
            }
            // Not waiting here: the replica where it waits takes it from the
            // store, within the tenant's rate; while the store is down, the
            // client is told.
            Some(store) => {
                if let Err(e) = s.dispatcher.admit_rate(tenant).await {
                    return Refusal::OverCapacity(None, &e).reply();
                }
                let outcome = outcome.map(Json::get).map_err(Json::get);
                if let Err(e) = store.announce_answer(session, id.get(), outcome).await {
                    tracing::debug!(error = %e, "a client's answer not shared with the other replicas");
                    return store_unavailable("answer");
                }
            }
            None => s.dispatcher.metrics().stray_answers.inc(),
        }
    }
    accepted()
}

/// The most a client's answer or cancellation may hold to be passed to the
/// other replicas through the store: what a client makes the gateway
/// publish is its tenant's traffic, and the store's channel every tenant's.
const PUBLISHED_BYTES: usize = 64 << 10;

/// 413 for an answer too large to pass through the store (see [`PUBLISHED_BYTES`]).
fn too_large_to_share(what: &str) -> Reply {
    error(
        StatusCode::PAYLOAD_TOO_LARGE,
        ErrorObject::new(codes::INVALID_REQUEST, "Too large to share").with_data(format!(
            "this {what} must reach another replica through the gateway's shared store, which takes at most {PUBLISHED_BYTES} bytes"
        )),
    )
}

/// 503 and `Retry-After` for a message that must reach another replica
/// through the shared store while the store cannot be reached.
fn store_unavailable(what: &str) -> Reply {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        ErrorObject::new(codes::INTERNAL_ERROR, "Store unavailable").with_data(format!(
            "this {what} must reach the replica holding the request through the gateway's shared store, which cannot be reached now; retry shortly"
        )),
    )
    .with_header(header::RETRY_AFTER, HeaderValue::from(1))
}

/// The longest request id a cancellation passed to the other replicas may
/// name: JSON-RPC clients number their requests, or name them briefly.
const CANCELLED_ID_BYTES: usize = 256;

pub(super) fn accepted() -> Reply {
    Reply {
        status: StatusCode::ACCEPTED,
        body: ReplyBody::Empty,
        header: None,
    }
}

/// A cancellation of a call that is not running here: published for the
/// replica running it, within the tenant's rate; while the store is down,
/// the client is told. `None`: published.
pub(super) async fn cancel_elsewhere(
    s: &AgentState,
    store: &crate::store::Store,
    tenant: &Tenant,
    opened: &Opened,
    id: Json<'_>,
) -> Option<Reply> {
    // An id no call of the session can have is never published (ids are
    // small by far).
    if id.get().len() > CANCELLED_ID_BYTES {
        s.dispatcher.metrics().stray_answers.inc();
        return Some(accepted());
    }
    if let Err(e) = s.dispatcher.admit_rate(tenant).await {
        return Some(Refusal::OverCapacity(None, &e).reply());
    }
    if let Err(e) = store
        .announce_cancel(opened.nonce.as_bytes(), id.get())
        .await
    {
        tracing::debug!(error = %e, "a cancellation not shared with the other replicas");
        return Some(store_unavailable("cancellation"));
    }
    None
}
