//! Sessions: newline-delimited messages in, one response per line out, each
//! written as soon as it is ready (so answers may overtake each other), with
//! the handshake rules of PROTOCOL-NOTES enforced inside.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::value::RawValue;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::rpc::write_gateway_error;
use super::{Dispatcher, respond};
use crate::error::GatewayError;
use crate::jsonrpc::{ErrorObject, Incoming, classify, write_error};
use crate::protocol::Method;
use crate::tenant::Tenant;

/// Whether a body's first message opens a session (`initialize`).
pub fn starts_session(first: &RawValue) -> bool {
    matches!(classify(first), Incoming::Request { ref method, .. } if Method::parse(method) == Method::Initialize)
}

/// Handshake state of one session.
#[derive(Default)]
pub struct Handshake {
    /// `initialize` was answered.
    pub initialized: bool,
    /// The client sent `initialized`: server notifications may flow.
    pub notifications_allowed: bool,
}

/// Whether a body that is not one JSON value holds several messages, one per
/// line (a session), rather than one value followed by garbage (a parse error).
pub fn holds_several_messages(body: &[u8]) -> bool {
    let mut values = serde_json::Deserializer::from_slice(body).into_iter::<&RawValue>();
    if !matches!(values.next(), Some(Ok(_))) {
        return false;
    }
    let rest = &body[values.byte_offset()..];
    let gap = rest.iter().take_while(|b| b.is_ascii_whitespace()).count();
    gap < rest.len() && rest[..gap].contains(&b'\n')
}

/// What to do with one message of a session.
pub enum Step {
    /// Answer now with this line (handshake replies and errors).
    Reply(Vec<u8>),
    /// Answer `initialize` before reading on: its answer is the session's first line.
    Initialize,
    /// Dispatch it; the answer comes when it is ready.
    Dispatch,
    /// Nothing to send (notifications).
    Nothing,
}

impl Handshake {
    /// Applies the handshake rules to one message.
    pub fn step(&mut self, raw: &RawValue) -> Step {
        match classify(raw) {
            Incoming::Request { id, method, .. } => {
                let mut out = Vec::new();
                match Method::parse(&method) {
                    Method::Initialize if id.get() != "1" => {
                        write_gateway_error(&mut out, Some(id), &GatewayError::InitializeId)
                    }
                    Method::Initialize if self.initialized => write_error(
                        &mut out,
                        Some(id),
                        &ErrorObject::invalid_request("the session is already initialized"),
                    ),
                    Method::Initialize => {
                        self.initialized = true;
                        return Step::Initialize;
                    }
                    _ if !self.initialized => {
                        write_gateway_error(&mut out, Some(id), &GatewayError::NotInitialized)
                    }
                    _ => return Step::Dispatch,
                }
                Step::Reply(out)
            }
            Incoming::Notification { method, .. } => {
                if Method::parse(&method) == Method::Initialized && self.initialized {
                    self.notifications_allowed = true;
                }
                Step::Nothing
            }
            Incoming::Invalid { id, error } => {
                let mut out = Vec::new();
                write_error(&mut out, id, &error);
                Step::Reply(out)
            }
            Incoming::Ignored => Step::Nothing,
        }
    }
}

fn line(mut reply: Vec<u8>) -> Bytes {
    reply.push(b'\n');
    Bytes::from(reply)
}

/// Runs a session whose input was read whole; ends when every answer is out.
pub async fn run_buffered(
    dispatcher: Dispatcher,
    tenant: Arc<Tenant>,
    input: Bytes,
    out: mpsc::Sender<Bytes>,
) {
    let mut handshake = Handshake::default();
    let mut inflight = JoinSet::new();
    for value in serde_json::Deserializer::from_slice(&input).into_iter::<&RawValue>() {
        let Ok(raw) = value else {
            // The rest of the stream cannot be delimited any more.
            let mut reply = Vec::new();
            write_error(&mut reply, None, &ErrorObject::parse_error());
            let _ = out.send(line(reply)).await;
            break;
        };
        let reply = match handshake.step(raw) {
            Step::Reply(reply) => Some(reply),
            Step::Initialize => respond(&dispatcher, &tenant, raw).await,
            Step::Nothing => None,
            Step::Dispatch => {
                let (dispatcher, tenant, out) = (dispatcher.clone(), tenant.clone(), out.clone());
                let owned = raw.to_owned();
                inflight.spawn(async move {
                    if let Some(reply) = respond(&dispatcher, &tenant, &owned).await {
                        let _ = out.send(line(reply)).await;
                    }
                });
                None
            }
        };
        if let Some(reply) = reply {
            if out.send(line(reply)).await.is_err() {
                return;
            }
        }
    }
    while inflight.join_next().await.is_some() {}
}
