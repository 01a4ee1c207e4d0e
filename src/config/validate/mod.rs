//! Turns the raw file into a `Config`, collecting every problem with its path:
//! here the problems, the whole file's checks and secrets; `gateway`,
//! `upstreams` and `tenants` check their sections.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::auth::{IssuerSpec, KeySource, TenantFrom};

use super::raw::{RawAuth, RawConfig, RawGateway, RawLimits, RawTenant, RawUpstream};
mod consent;
mod curation;
mod discovery;
mod gateway;
mod store;
mod tenants;
mod upstream_auth;
mod upstreams;
mod values;

use values::header_value;

use gateway::*;
use tenants::*;

/// Where a tenant's tools are, for the checks: its tools' id prefixes (one
/// per upstream it sees), the gateway's id and its tool-name budget.
pub(super) struct Reach<'a> {
    pub at: &'a str,
    pub prefixes: &'a [String],
    pub gateway_id: Option<&'a str>,
    pub name_budget: usize,
}

use upstreams::*;

use super::{
    AuthSettings, ChildBounds, Config, GatewaySettings, HttpSpec, Limits, Protocol, Secrets,
    StdioSpec, TenantSpec, ToolGlobs, TransportSpec, UpstreamSpec,
};

/// One thing wrong with the configuration, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// A dotted path into the file, e.g. `tenants.acme.upstreams[1]`.
    pub path: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// The SHA-256 digest of an API key. Keys are only ever kept as digests, and
/// digests compare in constant time.
#[derive(Clone, Copy)]
pub struct KeyDigest(pub [u8; 32]);

impl KeyDigest {
    pub fn of(token: &[u8]) -> Self {
        let digest = Sha256::digest(token);
        let mut out = [0u8; 32];
        out.copy_from_slice(&digest);
        Self(out)
    }
}

impl PartialEq for KeyDigest {
    fn eq(&self, other: &Self) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}
impl Eq for KeyDigest {}

impl Hash for KeyDigest {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // A digest is uniformly distributed; its first bytes are as good a hash as any,
        // and reveal nothing about the key itself.
        state.write(&self.0[..8]);
    }
}

impl fmt::Debug for KeyDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyDigest(..)")
    }
}

#[derive(Default)]
pub(super) struct Problems(Vec<Problem>);

impl Problems {
    pub(super) fn add(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(Problem {
            path: path.into(),
            message: message.into(),
        });
    }
}

/// A name usable in an mcpId and a metric label: letters, digits, `-` and `_`.
fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

pub(super) fn validate(
    raw: RawConfig,
    secrets: &dyn Secrets,
    purpose: super::Purpose,
) -> Result<Config, Vec<Problem>> {
    let mut p = Problems::default();
    let has_pins_file = raw.gateway.as_ref().is_some_and(|g| g.pins_file.is_some());
    let mut raw_gateway = raw.gateway.unwrap_or_default();
    let mut raw_auth = raw_gateway.auth.take().unwrap_or_default();
    let logins = consent::logins(&mut raw_auth);
    let raw_upstream_auth = raw_gateway.upstream_auth.take().unwrap_or_default();
    let gateway = gateway(raw_gateway, secrets, &mut p);
    let tenant_names: Vec<String> = raw.tenants.keys().cloned().collect();
    let mut auth = auth(raw_auth, &tenant_names, &mut p);
    let jwt = !auth.issuers.is_empty();
    let upstream_auth = upstream_auth::settings(raw_upstream_auth, jwt, logins, secrets, &mut p);
    auth.signing = upstream_auth.signer.as_ref().map(|s| s.keys.clone());
    let by_token: Vec<&str> = if auth
        .issuers
        .iter()
        .any(|i| matches!(i.tenant, TenantFrom::Claim(_)))
    {
        tenant_names.iter().map(String::as_str).collect()
    } else {
        auth.issuers
            .iter()
            .filter_map(|i| match &i.tenant {
                TenantFrom::Fixed(t) => Some(t.as_str()),
                TenantFrom::Claim(_) => None,
            })
            .collect()
    };
    let by_token: Vec<String> = by_token.into_iter().map(str::to_owned).collect();
    // Tenants are checked against every declared name, valid or not, so that one
    // broken upstream is reported once, not again at every tenant that uses it.
    let declared: Vec<String> = raw.upstreams.keys().cloned().collect();
    let upstreams: Vec<UpstreamSpec> = raw
        .upstreams
        .into_iter()
        .filter_map(|(name, u)| upstream(name, u, &upstream_auth, secrets, &mut p))
        .collect();
    // The stdio mode authenticates nobody: its tenants need no keys.
    let by_token = match purpose {
        super::Purpose::Serve | super::Purpose::Elsewhere => by_token,
        super::Purpose::Stdio => tenant_names.clone(),
    };
    let gateway_id = gateway.as_ref().map(|g| g.id.clone());
    let tenants = tenants(
        raw.tenants,
        &declared,
        &by_token,
        gateway_id.as_deref(),
        gateway
            .as_ref()
            .map_or(crate::config::tool_names::DEFAULT_BUDGET, |g| {
                g.tool_name_budget
            }),
        secrets,
        &mut p,
    );
    if let Some(u) = upstreams.iter().find(|u| u.pin) {
        if !has_pins_file {
            p.add(
                format!("upstreams.{}.pin", u.name),
                "pinning needs gateway.pins_file (where fingerprints are kept)",
            );
        }
    }
    let traces = traces(
        raw.telemetry.and_then(|t| t.traces).unwrap_or_default(),
        secrets,
        &mut p,
    );
    match (gateway, p.0.is_empty()) {
        (Some(mut gateway), true) => Ok(Config {
            gateway: {
                gateway.max_cached_tokens = upstream_auth.max_cached_tokens;
                gateway.consent = upstream_auth.consent;
                gateway
            },
            auth,
            upstreams,
            tenants,
            traces,
            sources: Vec::new(),
            digest: String::new(),
        }),
        _ => Err(p.0),
    }
}

/// `telemetry.traces`: checked as the environment's variables would be
/// (the environment, read when the gateway starts, overrides it). Header
/// values may be `env:VAR` or `file:PATH`, as they usually hold a credential.
fn traces(
    raw: super::raw::RawTraces,
    secrets: &dyn Secrets,
    p: &mut Problems,
) -> crate::telemetry::traces::TracesFile {
    let mut headers = Vec::new();
    for (name, value) in raw.headers {
        let at = format!("telemetry.traces.headers.{name}");
        let value = if value.starts_with("env:") || value.starts_with("file:") {
            secret_text(&value, secrets, &at, p)
        } else {
            Some(value)
        };
        if let Some(value) = value {
            headers.push((name, value));
        }
    }
    let file = crate::telemetry::traces::TracesFile {
        endpoint: raw.endpoint,
        protocol: raw.protocol,
        headers,
        service_name: raw.service_name,
        sampler: raw.sampler,
        sampler_arg: raw.sampler_arg,
    };
    if let Err(why) = crate::telemetry::traces::settings(&file, |_| None) {
        p.add("telemetry.traces", why);
    }
    file
}

/// Resolves one `api_keys` entry. The problem text never contains the key itself.
fn key_digest(key: &str, secrets: &dyn Secrets, at: &str, p: &mut Problems) -> Option<KeyDigest> {
    if let Some(hex) = key.strip_prefix("sha256:") {
        let bytes = decode_hex(hex);
        if bytes.is_none() {
            p.add(at, "sha256: must be followed by 64 hex digits");
        }
        return bytes.map(KeyDigest);
    }
    secret_text(key, secrets, at, p).map(|v| KeyDigest::of(v.as_bytes()))
}

/// A secret given as itself, `env:VAR` or `file:PATH` (one trailing newline
/// dropped). The problem text never contains the secret itself.
pub(super) fn secret_text(
    key: &str,
    secrets: &dyn Secrets,
    at: &str,
    p: &mut Problems,
) -> Option<String> {
    let plain = |value: String, what: &str, p: &mut Problems| {
        let value = value.trim_end_matches(['\r', '\n']).to_owned();
        if value.is_empty() || value.chars().any(char::is_whitespace) {
            p.add(at, format!("{what} is empty or contains white space"));
            return None;
        }
        Some(value)
    };
    if let Some(var) = key.strip_prefix("env:") {
        return match secrets.var(var) {
            Some(v) => plain(v, &format!("environment variable {var}"), p),
            None => {
                p.add(at, format!("environment variable {var} is not set"));
                None
            }
        };
    }
    if let Some(path) = key.strip_prefix("file:") {
        return match secrets.file(Path::new(path)) {
            Some(v) => plain(v, &format!("key file {path}"), p),
            None => {
                p.add(at, format!("key file {path} cannot be read"));
                None
            }
        };
    }
    plain(key.to_owned(), "the key", p)
}

fn decode_hex(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, chunk) in hex.as_bytes().chunks(2).enumerate() {
        let s = std::str::from_utf8(chunk).ok()?;
        out[i] = u8::from_str_radix(s, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests;
