//! The request id every agent request carries: the client's `x-request-id`
//! when it is a sane token, else a new one; echoed in the answer and in the
//! request's span.

use crate::telemetry::Scope;

pub(super) const REQUEST_ID: &str = "x-request-id";

/// The request id: the client's `x-request-id` when it is a sane token, else a new one.
pub(super) struct RequestId {
    bytes: [u8; 128],
    len: usize,
}

impl RequestId {
    pub(super) fn of(sent: Option<&[u8]>) -> Self {
        let mut id = RequestId {
            bytes: [0; 128],
            len: 0,
        };
        match sent
            .filter(|v| (1..=128).contains(&v.len()) && v.iter().all(|b| b.is_ascii_graphic()))
        {
            Some(v) => {
                id.bytes[..v.len()].copy_from_slice(v);
                id.len = v.len();
            }
            None => {
                id.bytes[..16].copy_from_slice(&new_request_id());
                id.len = 16;
            }
        }
        id
    }

    pub(super) fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    pub(super) fn as_str(&self) -> &str {
        std::str::from_utf8(self.as_bytes()).unwrap_or("-")
    }

    /// The request's span; its `tenant` is recorded once known, or given
    /// here when the credentials were read before the span was made.
    pub(super) fn span(&self, tenant: Option<&str>) -> tracing::Span {
        tracing::info_span!("request", request_id = self.as_str(), tenant)
    }

    /// Sets `scope` to stand for the request's span, and says so, where the
    /// JSON log is on and the span would be enabled; else the request is
    /// logged in its [`span`](Self::span).
    pub(super) fn scoped(&self, scope: &mut Scope, tenant: Option<&str>) -> bool {
        // The JSON log's subscriber and filter are the process's for good:
        // whether the span would be enabled is asked once.
        static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let scoped = crate::telemetry::audit_direct()
            && *ENABLED.get_or_init(|| tracing::span_enabled!(tracing::Level::INFO));
        if scoped {
            scope.set(self.as_str(), tenant);
        }
        scoped
    }
}

/// 16 hex digits, unique in this process and not guessable across processes.
fn new_request_id() -> [u8; 16] {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEED: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let seed = *SEED.get_or_init(|| {
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    // An odd multiplier makes this a bijection of the counter: ids never repeat.
    let v = (n ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut hex = [0u8; 16];
    for (i, digit) in hex.iter_mut().enumerate() {
        *digit = b"0123456789abcdef"[((v >> (60 - 4 * i)) & 0xf) as usize];
    }
    hex
}
