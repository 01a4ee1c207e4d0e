//! The audit line of a tool call: what it records (the tool, the name the
//! agent called, the upstream, a keyed digest of the arguments, what the
//! gateway did with the result) and how it is written.

use std::sync::Arc;

use crate::error::GatewayError;
use crate::jsonrpc::Json;
use crate::tenant::Tenant;

/// Longest tool id written to the audit log (ids come from clients).
pub(super) const MAX_AUDITED_ID: usize = 512;

/// What the audit line of one `mcp/executeTool` records. Never the arguments
/// themselves: only a keyed digest, so that equal calls can be matched while
/// nobody who reads the log can confirm a guess of them.
pub struct Audit {
    /// Whether the log keeps audit lines (its level and filter say so).
    pub(super) enabled: bool,
    /// The protocol the call came in.
    pub(super) protocol: &'static str,
    pub(super) tool: Option<String>,
    /// The tool's name as the agent called it, where it called it by name.
    pub(super) name: Option<String>,
    pub(super) upstream: Option<Arc<str>>,
    pub(super) args_hmac: Option<ArgsDigest>,
    /// The result was cut to the tenant's output budget.
    pub(super) truncated: bool,
    /// The result came from the tenant's result cache.
    pub(super) cached: bool,
    /// The upstream's `auth` mode, and how the call's credential was come by.
    pub(super) upstream_auth: Option<&'static str>,
    pub(super) credential: Option<&'static str>,
    /// The meta-tool the call came through (`call_tool`), if any.
    pub via: Option<&'static str>,
}

impl Audit {
    pub fn new(protocol: &'static str) -> Self {
        Audit {
            enabled: crate::telemetry::audit_enabled(),
            protocol,
            tool: None,
            name: None,
            upstream: None,
            args_hmac: None,
            truncated: false,
            cached: false,
            upstream_auth: None,
            credential: None,
            via: None,
        }
    }

    /// Whether the audit line is written at all.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Notes what a call refused before it reached [`Dispatcher::call_tool`]
    /// was for: the tool as the client named it, and its arguments' digest.
    pub fn refused(&mut self, tool: Option<&str>, arguments: Option<Json<'_>>) {
        if !self.enabled {
            return;
        }
        if self.tool.is_none() {
            self.tool = tool.map(|t| truncated(t, MAX_AUDITED_ID).to_owned());
        }
        if self.args_hmac.is_none() {
            self.args_hmac = arguments.map(|a| args_digest(a.get().as_bytes()));
        }
    }

    /// Notes the name the agent called the tool by (the Model Context
    /// Protocol's face; curation may list a tool under another than its id's).
    pub fn named(&mut self, name: &str) {
        if self.enabled {
            self.name = Some(truncated(name, MAX_AUDITED_ID).to_owned());
        }
    }

    /// Notes the task a request is about: its tool and upstream.
    pub fn task(&mut self, tool: &str, upstream: &str) {
        if self.enabled {
            self.tool = Some(truncated(tool, MAX_AUDITED_ID).to_owned());
            self.upstream = Some(upstream.into());
        }
    }

    pub fn log<T>(
        &self,
        tenant: &Tenant,
        result: &Result<T, GatewayError>,
        took: std::time::Duration,
    ) {
        let outcome = result.as_ref().map_or_else(GatewayError::outcome, |_| "ok");
        self.log_outcome(tenant, outcome, took);
    }

    /// The audit line of a call that ended with `outcome` (a closed set: see
    /// [`GatewayError::outcome`]).
    pub fn log_outcome(&self, tenant: &Tenant, outcome: &'static str, took: std::time::Duration) {
        if crate::telemetry::audit_direct() {
            crate::telemetry::audit(&crate::telemetry::AuditLine {
                tenant: &tenant.name,
                tool: self.tool.as_deref().unwrap_or(""),
                name: self.name.as_deref(),
                upstream: self.upstream.as_deref().unwrap_or(""),
                outcome,
                duration_ms: crate::telemetry::millis(took),
                args_hmac: self.args_hmac.as_ref().map_or("", ArgsDigest::as_str),
                protocol: self.protocol,
                truncated: self.truncated.then_some(true),
                cached: self.cached.then_some(true),
                upstream_auth: self.upstream_auth,
                credential: self.credential,
                subject: tenant.subject.as_deref(),
                via: self.via,
            });
            return;
        }
        tracing::info!(
            target: crate::telemetry::AUDIT,
            tenant = &*tenant.name,
            tool = self.tool.as_deref().unwrap_or(""),
            name = self.name.as_deref(),
            upstream = self.upstream.as_deref().unwrap_or(""),
            outcome,
            duration_ms = crate::telemetry::millis(took),
            args_hmac = self.args_hmac.as_ref().map_or("", ArgsDigest::as_str),
            protocol = self.protocol,
            truncated = self.truncated.then_some(true),
            cached = self.cached.then_some(true),
            upstream_auth = self.upstream_auth,
            credential = self.credential,
            subject = tenant.subject.as_deref(),
            via = self.via,
            "tool call"
        );
    }
}

/// SipHash-2-4 with its 128-bit output, of the arguments' JSON text, in
/// hex, under a key drawn once per process: a plain hash of `{"pin":"1234"}`
/// could be found again by hashing the ten thousand guesses, and SipHash is a
/// keyed pseudorandom function made for short inputs (a few hundred
/// instructions where an HMAC-SHA256 takes tens of thousands).
pub(super) fn args_digest(bytes: &[u8]) -> ArgsDigest {
    use siphasher::sip128::{Hasher128, SipHasher24};
    use std::hash::Hasher;
    use std::sync::OnceLock;
    static KEY: OnceLock<SipHasher24> = OnceLock::new();
    let keyed = KEY.get_or_init(|| {
        let mut key = [0u8; 16];
        // Without the OS's randomness the key is still unknown to readers of
        // the log, if weaker: the time the process started, hashed.
        if getrandom::fill(&mut key).is_err() {
            use sha2::Digest;
            let now = format!("{:?}{:?}", std::time::SystemTime::now(), std::process::id());
            key.copy_from_slice(&sha2::Sha256::digest(now.as_bytes())[..16]);
        }
        SipHasher24::new_with_key(&key)
    });
    let mut h = *keyed;
    h.write(bytes);
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 32];
    for (pair, b) in out.chunks_exact_mut(2).zip(h.finish128().as_bytes()) {
        pair[0] = HEX[usize::from(b >> 4)];
        pair[1] = HEX[usize::from(b & 15)];
    }
    ArgsDigest(out)
}

/// [`args_digest`]'s 32 hex digits, kept in place.
pub(super) struct ArgsDigest([u8; 32]);

impl ArgsDigest {
    fn as_str(&self) -> &str {
        // Hex digits only: always UTF-8.
        std::str::from_utf8(&self.0).unwrap_or("")
    }
}

/// The first `chars` characters of `s`.
pub(super) fn truncated(s: &str, chars: usize) -> &str {
    if s.len() <= chars {
        return s;
    }
    s.char_indices().nth(chars).map_or(s, |(at, _)| &s[..at])
}
