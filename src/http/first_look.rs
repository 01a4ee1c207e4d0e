//! The look at a body's first message while the body is still arriving:
//! `initialize` opens a session at once, anything else waits for the whole
//! body, and text that is not JSON is answered at once.

use serde_json::value::RawValue;

use crate::dispatch;
use crate::jsonrpc::stream::{Scan, ValueEnd};

/// What the first message of a body says about the exchange.
pub(super) enum First {
    /// Not complete yet.
    Incomplete,
    /// `initialize`: a session, to be served while the body is still arriving.
    Initialize,
    /// Anything else: read the whole body, then decide.
    Other,
    /// Not JSON.
    Invalid,
}

/// The look at a body's first message while the body is still arriving,
/// shared by both paths: whether it has been decided (anything but
/// `initialize`), and where the first message ends, found as the body
/// arrives ([`ValueEnd`]), so that the body is parsed once, when that message
/// is complete, however it is cut into pieces.
#[derive(Default)]
pub(super) struct FirstLook {
    pub(super) decided: bool,
    end: ValueEnd,
}

impl FirstLook {
    /// What the first message of `body` (what has arrived of it) says, when
    /// something new can be said.
    pub(super) fn look(&mut self, body: &[u8]) -> Option<First> {
        if self.decided || self.end.scan(body) == Scan::Incomplete {
            return None;
        }
        // Decidable now, so never incomplete; if it were, the whole body is
        // read first rather than parsed again for every piece.
        self.decided = true;
        match peek_first(body) {
            First::Incomplete => None,
            first => {
                self.decided = matches!(first, First::Other);
                Some(first)
            }
        }
    }
}

pub(super) fn peek_first(buf: &[u8]) -> First {
    let mut values = serde_json::Deserializer::from_slice(buf).into_iter::<&RawValue>();
    match values.next() {
        None => First::Incomplete,
        Some(Ok(v)) if dispatch::session::starts_session(v) => First::Initialize,
        Some(Ok(_)) => First::Other,
        Some(Err(e)) if e.is_eof() => First::Incomplete,
        Some(Err(_)) => First::Invalid,
    }
}
