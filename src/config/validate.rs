//! Turns the raw file into a `Config`, collecting every problem with its path.

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
use super::{
    AuthSettings, Config, GatewaySettings, HttpSpec, Limits, Protocol, Secrets, StdioSpec,
    TenantSpec, ToolGlobs, TransportSpec, UpstreamSpec,
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
    let raw_auth = raw_gateway.auth.take().unwrap_or_default();
    let gateway = gateway(raw_gateway, secrets, &mut p);
    let tenant_names: Vec<String> = raw.tenants.keys().cloned().collect();
    let auth = auth(raw_auth, &tenant_names, &mut p);
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
        .filter_map(|(name, u)| upstream(name, u, secrets, &mut p))
        .collect();
    // The stdio mode authenticates nobody: its tenants need no keys.
    let by_token = match purpose {
        super::Purpose::Serve => by_token,
        super::Purpose::Stdio => tenant_names.clone(),
    };
    let gateway_id = gateway.as_ref().map(|g| g.id.clone());
    let tenants = tenants(
        raw.tenants,
        &declared,
        &by_token,
        gateway_id.as_deref(),
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
    match (gateway, p.0.is_empty()) {
        (Some(gateway), true) => Ok(Config {
            gateway,
            auth,
            upstreams,
            tenants,
            sources: Vec::new(),
        }),
        _ => Err(p.0),
    }
}

fn gateway(raw: RawGateway, secrets: &dyn Secrets, p: &mut Problems) -> Option<GatewaySettings> {
    let id = raw.id.unwrap_or_else(|| "gateway".into());
    let id_ok = !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
    if !id_ok {
        p.add(
            "gateway.id",
            "must be a non-empty host name (letters, digits, '-', '.', '_')",
        );
    }
    let mut addr = |field: &str, value: Option<String>, default: &str| {
        let text = value.unwrap_or_else(|| default.into());
        text.parse::<SocketAddr>()
            .map_err(|_| {
                p.add(
                    format!("gateway.{field}"),
                    format!("'{text}' is not an address like 0.0.0.0:8080"),
                )
            })
            .ok()
    };
    let listen = addr("listen", raw.listen, "0.0.0.0:8080");
    let admin_listen = addr("admin_listen", raw.admin_listen, "0.0.0.0:9090");
    if let (Some(a), Some(b)) = (listen, admin_listen) {
        if a == b && a.port() != 0 {
            p.add("gateway.admin_listen", "must differ from gateway.listen");
        }
    }
    let limits = limits(raw.limits, p);
    let store = raw
        .store
        .and_then(|s| super::store::settings(s, secrets, p));
    // The same forms as an API key, and never echoed either.
    let admin_token = raw
        .admin_token
        .as_deref()
        .and_then(|t| key_digest(t, secrets, "gateway.admin_token", p));
    let session_key = raw.session_secret.as_deref().and_then(|secret| {
        let at = "gateway.session_secret";
        if secret.starts_with("sha256:") {
            p.add(
                at,
                "a session secret is used as it is: give it, or env:VAR, or file:PATH",
            );
            return None;
        }
        let value = secret_text(secret, secrets, at, p)?;
        if value.len() < 32 {
            p.add(
                at,
                "must be at least 32 characters (for example 32 random bytes, base64)",
            );
            return None;
        }
        Some(KeyDigest::of(value.as_bytes()))
    });
    use crate::modelcontext::names::{DEFAULT_BUDGET, MAX_NAME, MIN_BUDGET};
    let tool_name_budget = match raw.tool_name_budget {
        None => DEFAULT_BUDGET,
        Some(b) if (MIN_BUDGET as u64..=MAX_NAME as u64).contains(&b) => b as usize,
        Some(_) => {
            p.add(
                "gateway.tool_name_budget",
                format!("must be {MIN_BUDGET} to {MAX_NAME} (a tool name's length)"),
            );
            DEFAULT_BUDGET
        }
    };
    let mut allowed_origins = Vec::new();
    for (i, origin) in raw.allowed_origins.into_iter().enumerate() {
        match reqwest::Url::parse(&origin) {
            Ok(url)
                if matches!(url.scheme(), "http" | "https")
                    && url.host_str().is_some()
                    && url.path() == "/"
                    && !origin.ends_with('/')
                    && url.query().is_none()
                    && url.username().is_empty() =>
            {
                allowed_origins.push(origin.to_ascii_lowercase());
            }
            _ => p.add(
                format!("gateway.allowed_origins[{i}]"),
                "is not an origin: scheme://host[:port], http or https, no path",
            ),
        }
    }
    let shutdown_timeout = Duration::from_millis(raw.shutdown_timeout_ms.unwrap_or(25_000));
    let pins_file = raw.pins_file.map(PathBuf::from);
    let reload_poll = match raw.reload_poll_ms {
        Some(0) => None,
        Some(ms) => Some(Duration::from_millis(ms)),
        None => Some(Duration::from_secs(2)),
    };
    Some(GatewaySettings {
        id,
        listen: listen?,
        admin_listen: admin_listen?,
        shutdown_timeout,
        pins_file,
        reload_poll,
        limits: limits?,
        admin_token,
        allowed_origins,
        session_key,
        tool_name_budget,
        store,
    })
    .filter(|_| id_ok)
}

/// `gateway.auth`: the resource identifier, and each issuer's settings.
fn auth(raw: RawAuth, tenants: &[String], p: &mut Problems) -> AuthSettings {
    let resource = raw.resource.filter(|r| {
        let ok = crate::auth::ProtectedResource::new(r, &[], &[]).is_some();
        if !ok {
            p.add(
                "gateway.auth.resource",
                "must be this gateway's URL, http:// or https:// (e.g. https://gateway.example.com/mcp)",
            );
        }
        ok
    });
    if !raw.jwt.is_empty()
        && resource.is_none()
        && p.0.iter().all(|x| x.path != "gateway.auth.resource")
    {
        p.add(
            "gateway.auth.resource",
            "JWT issuers need the gateway's resource identifier (the audience tokens are issued for)",
        );
    }
    let mut issuers: Vec<IssuerSpec> = Vec::new();
    let mut named: Vec<String> = Vec::new();
    for (i, j) in raw.jwt.into_iter().enumerate() {
        let at = format!("gateway.auth.jwt[{i}]");
        if j.issuer.is_empty() {
            p.add(
                format!("{at}.issuer"),
                "must be the issuer's identifier, as its tokens' iss",
            );
        } else if named.contains(&j.issuer) {
            p.add(format!("{at}.issuer"), "this issuer is configured twice");
        }
        named.push(j.issuer.clone());
        let keys = match (j.jwks_url, j.jwks_file) {
            (Some(url), None) => match reqwest::Url::parse(&url) {
                Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => {
                    Some(KeySource::Url(url))
                }
                _ => {
                    p.add(
                        format!("{at}.jwks_url"),
                        "must be an http:// or https:// URL",
                    );
                    None
                }
            },
            (None, Some(file)) => Some(KeySource::File(PathBuf::from(file))),
            _ => {
                p.add(&at, "give exactly one of jwks_url and jwks_file");
                None
            }
        };
        for (k, t) in j.tenants.iter().enumerate() {
            if !tenants.contains(t) {
                p.add(
                    format!("{at}.tenants[{k}]"),
                    format!("unknown tenant '{t}'"),
                );
            }
        }
        if !j.tenants.is_empty() && j.tenant_claim.is_none() {
            p.add(
                format!("{at}.tenants"),
                "only an issuer with a tenant_claim takes a list of the tenants it may name",
            );
        }
        let tenant = match (j.tenant_claim, j.tenant) {
            (Some(claim), None) if !claim.is_empty() => Some(TenantFrom::Claim(claim)),
            (None, Some(t)) if tenants.contains(&t) => Some(TenantFrom::Fixed(t)),
            (None, Some(t)) => {
                p.add(format!("{at}.tenant"), format!("unknown tenant '{t}'"));
                None
            }
            _ => {
                p.add(&at, "give exactly one of tenant_claim and tenant");
                None
            }
        };
        let audiences = if j.audiences.is_empty() {
            resource.iter().cloned().collect()
        } else {
            j.audiences
        };
        let leeway = Duration::from_secs(j.leeway_s.unwrap_or(30));
        if leeway > Duration::from_secs(300) {
            p.add(format!("{at}.leeway_s"), "at most 300 (a small clock skew)");
        }
        let refresh = Duration::from_secs(j.refresh_s.unwrap_or(300));
        if refresh < crate::auth::MIN_REFETCH {
            p.add(format!("{at}.refresh_s"), "at least 10");
        }
        if let (Some(keys), Some(tenant)) = (keys, tenant) {
            issuers.push(IssuerSpec {
                issuer: j.issuer,
                audiences,
                keys,
                tenant,
                tenants: j.tenants,
                leeway,
                refresh,
            });
        }
    }
    AuthSettings { resource, issuers }
}

fn limits(raw: RawLimits, p: &mut Problems) -> Option<Limits> {
    let d = Limits::default();
    let mut positive = |field: &str, v: Option<u64>, default: usize| -> usize {
        match v {
            Some(0) => {
                p.add(format!("gateway.limits.{field}"), "must be greater than 0");
                default
            }
            Some(v) => usize::try_from(v).unwrap_or(usize::MAX),
            None => default,
        }
    };
    let limits = Limits {
        max_body_bytes: positive("max_body_bytes", raw.max_body_bytes, d.max_body_bytes),
        max_frame_bytes: positive("max_frame_bytes", raw.max_frame_bytes, d.max_frame_bytes),
        max_batch: positive("max_batch", raw.max_batch, d.max_batch),
        header_read_timeout: Duration::from_millis(positive(
            "header_read_timeout_ms",
            raw.header_read_timeout_ms,
            d.header_read_timeout.as_millis() as usize,
        ) as u64),
        body_read_timeout: Duration::from_millis(positive(
            "body_read_timeout_ms",
            raw.body_read_timeout_ms,
            d.body_read_timeout.as_millis() as usize,
        ) as u64),
        max_connections: positive("max_connections", raw.max_connections, d.max_connections),
        max_connections_per_tenant: 0,
        max_sessions_per_tenant: positive(
            "max_sessions_per_tenant",
            raw.max_sessions_per_tenant,
            d.max_sessions_per_tenant,
        ),
        session_idle_timeout: Duration::from_millis(positive(
            "session_idle_timeout_ms",
            raw.session_idle_timeout_ms,
            d.session_idle_timeout.as_millis() as usize,
        ) as u64),
        max_session_in_flight: positive(
            "max_session_in_flight",
            raw.max_session_in_flight,
            d.max_session_in_flight,
        ),
        max_session_records_per_tenant: positive(
            "max_session_records_per_tenant",
            raw.max_session_records_per_tenant,
            d.max_session_records_per_tenant,
        ),
        max_subscription_bytes_per_session: positive(
            "max_subscription_bytes_per_session",
            raw.max_subscription_bytes_per_session,
            d.max_subscription_bytes_per_session,
        ),
        max_subscription_bytes_per_tenant: positive(
            "max_subscription_bytes_per_tenant",
            raw.max_subscription_bytes_per_tenant,
            d.max_subscription_bytes_per_tenant,
        ),
        max_listing_bytes: positive(
            "max_listing_bytes",
            raw.max_listing_bytes,
            d.max_listing_bytes,
        ),
        max_definition_bytes: positive(
            "max_definition_bytes",
            raw.max_definition_bytes,
            d.max_definition_bytes,
        ),
        max_server_requests: positive(
            "max_server_requests",
            raw.max_server_requests,
            d.max_server_requests,
        ),
    };
    let limits = Limits {
        max_connections_per_tenant: match raw.max_connections_per_tenant {
            Some(0) => {
                p.add(
                    "gateway.limits.max_connections_per_tenant",
                    "must be greater than 0",
                );
                1
            }
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
            None => (limits.max_connections / 4).max(1),
        },
        ..limits
    };
    Some(limits)
}

fn upstream(
    name: String,
    raw: RawUpstream,
    secrets: &dyn Secrets,
    p: &mut Problems,
) -> Option<UpstreamSpec> {
    let at = format!("upstreams.{name}");
    if !is_name(&name) {
        p.add(
            &at,
            "upstream names use only letters, digits, '-' and '_' (at most 64)",
        );
    }
    let timeout = match raw.timeout_ms {
        Some(0) => {
            p.add(format!("{at}.timeout_ms"), "must be greater than 0");
            None
        }
        Some(ms) => Some(Duration::from_millis(ms)),
        None => Some(Duration::from_secs(30)),
    };
    let concurrency = match raw.max_concurrency {
        Some(0) => {
            p.add(format!("{at}.max_concurrency"), "must be greater than 0");
            None
        }
        n => n.map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
    };
    if raw.max_queue.is_some() && concurrency.is_none() {
        p.add(format!("{at}.max_queue"), "needs max_concurrency");
    }
    // By default as many calls may wait as may run.
    let max_queue = raw.max_queue.map_or(concurrency.unwrap_or(0), |q| {
        usize::try_from(q).unwrap_or(usize::MAX)
    });
    let protocol = match raw.protocol.as_deref() {
        None | Some("v1") => Some(Protocol::V1),
        Some("modelcontextprotocol") => Some(Protocol::ModelContext),
        Some(other) => {
            p.add(
                format!("{at}.protocol"),
                format!("unknown protocol {other:?}: v1 (the default) or modelcontextprotocol"),
            );
            None
        }
    };
    let transport = match (raw.stdio, raw.http) {
        (Some(s), None) => {
            if s.command.trim().is_empty() {
                p.add(format!("{at}.stdio.command"), "must not be empty");
                None
            } else {
                // A value may come from the gateway's environment or a file
                // (a Secret, in a pod), read now and again at every reload.
                let mut env = BTreeMap::new();
                let mut bad = false;
                for (name, value) in s.env {
                    let vat = format!("{at}.stdio.env.{name}");
                    match header_value(&value, secrets, &vat, p) {
                        Some(v) => {
                            env.insert(name, v);
                        }
                        None => bad = true,
                    }
                }
                (!bad).then(|| {
                    TransportSpec::Stdio(StdioSpec {
                        command: s.command,
                        args: s.args,
                        env,
                        cwd: s.cwd.map(PathBuf::from),
                    })
                })
            }
        }
        (None, Some(h)) => http(&at, h.url, h.headers, secrets, p).map(|t| match t {
            TransportSpec::Http(spec) => TransportSpec::Http(HttpSpec {
                notifications: h.notifications,
                ..spec
            }),
            other => other,
        }),
        (Some(_), Some(_)) => {
            p.add(&at, "give either stdio or http, not both");
            None
        }
        (None, None) => {
            p.add(
                &at,
                "needs a transport: stdio {command: ...} or http {url: ...}",
            );
            None
        }
    };
    Some(UpstreamSpec {
        name: name.clone(),
        transport: transport?,
        protocol: protocol?,
        timeout: timeout?,
        required: raw.required,
        max_concurrency: concurrency,
        max_queue,
        pin: raw.pin,
    })
    .filter(|_| is_name(&name))
}

/// Headers that frame the request or govern the connection (RFC 9110 7.6.1
/// and 9112): set by the gateway, never by configuration, or a configured
/// value could break the framing of every call.
const FRAMING_HEADERS: [&str; 11] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "expect",
    "content-type",
];

fn http(
    at: &str,
    url: String,
    headers: BTreeMap<String, String>,
    secrets: &dyn Secrets,
    p: &mut Problems,
) -> Option<TransportSpec> {
    // The URL is never echoed whole: its userinfo or query may be a secret.
    match reqwest::Url::parse(&url) {
        Ok(u) if !u.username().is_empty() || u.password().is_some() => {
            p.add(
                format!("{at}.http.url"),
                "credentials in the URL are not used; send them as a header (http.headers, e.g. Authorization)",
            );
            return None;
        }
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
        // `localhost:8080/mcp` parses, with `localhost` as its scheme.
        Ok(_) | Err(_) if !url.contains("://") => {
            let written = crate::redact::written(&url);
            p.add(
                format!("{at}.http.url"),
                format!("'{written}' has no scheme: write it as http://{written} (or https://)"),
            );
            return None;
        }
        Ok(u) => {
            p.add(
                format!("{at}.http.url"),
                format!(
                    "'{}' is not an http:// or https:// URL with a host",
                    crate::redact::url(&u)
                ),
            );
            return None;
        }
        Err(e) => {
            p.add(
                format!("{at}.http.url"),
                format!("'{}' is not a URL: {e}", crate::redact::written(&url)),
            );
            return None;
        }
    }
    let mut bad = false;
    let mut resolved = BTreeMap::new();
    for (name, value) in headers {
        let hat = format!("{at}.http.headers.{name}");
        // A credential toward the upstream, from a Secret: read now, and
        // again at every reload (the file is watched).
        let Some(value) = header_value(&value, secrets, &hat, p) else {
            bad = true;
            continue;
        };
        let Ok(parsed) = reqwest::header::HeaderName::from_bytes(name.as_bytes()) else {
            p.add(hat, "is not a valid HTTP header name");
            bad = true;
            continue;
        };
        if reqwest::header::HeaderValue::from_str(&value).is_err() {
            p.add(hat, "is not a valid HTTP header value");
            bad = true;
        } else if FRAMING_HEADERS.contains(&parsed.as_str()) {
            p.add(
                hat,
                "is set by the gateway itself (it frames the request or the connection)",
            );
            bad = true;
        }
        resolved.insert(name, value);
    }
    if bad {
        return None;
    }
    Some(TransportSpec::Http(HttpSpec {
        url,
        headers: resolved,
        notifications: false,
    }))
}

/// A header value given as itself, `env:VAR` or `file:PATH` (one trailing
/// newline dropped). The problem text never contains the value.
fn header_value(value: &str, secrets: &dyn Secrets, at: &str, p: &mut Problems) -> Option<String> {
    let read = if let Some(var) = value.strip_prefix("env:") {
        secrets
            .var(var)
            .ok_or_else(|| format!("environment variable {var} is not set"))
    } else if let Some(path) = value.strip_prefix("file:") {
        secrets
            .file(Path::new(path))
            .ok_or_else(|| format!("file {path} cannot be read"))
    } else {
        return Some(value.to_owned());
    };
    match read {
        Ok(v) => Some(v.trim_end_matches(['\r', '\n']).to_owned()),
        Err(why) => {
            p.add(at, why);
            None
        }
    }
}

/// Whether a tool glob can match an id that starts with one of `prefixes`
/// (`mcp://{gateway.id}/{upstream}/` of the tenant's upstreams): its literal
/// start (up to its first wildcard) must agree with one of them. A typo in
/// the gateway's id or an upstream's name makes a glob that matches nothing:
/// an allow list that lets nothing through, a deny that denies nothing.
fn can_match(pattern: &str, prefixes: &[String]) -> bool {
    let literal = pattern
        .find(['*', '?', '[', '{', '\\'])
        .map_or(pattern, |at| &pattern[..at]);
    prefixes
        .iter()
        .any(|prefix| prefix.starts_with(literal) || literal.starts_with(prefix.as_str()))
}

fn never_matches(pattern: &str, prefixes: &[String]) -> String {
    if prefixes.is_empty() {
        return format!("'{pattern}' can match no tool: the tenant sees no upstream");
    }
    format!(
        "'{pattern}' can match no tool of this tenant: their ids start with {}",
        prefixes.join(" or ")
    )
}

fn tenants(
    raw: BTreeMap<String, RawTenant>,
    upstreams: &[String],
    by_token: &[String],
    gateway_id: Option<&str>,
    secrets: &dyn Secrets,
    p: &mut Problems,
) -> Vec<TenantSpec> {
    if raw.is_empty() {
        p.add(
            "tenants",
            "at least one tenant is needed, or no agent can connect",
        );
    }
    let mut owners: HashMap<KeyDigest, String> = HashMap::new();
    let mut out = Vec::new();
    for (name, t) in raw {
        let at = format!("tenants.{name}");
        if !is_name(&name) {
            p.add(
                &at,
                "tenant names use only letters, digits, '-' and '_' (at most 64)",
            );
        }
        if t.api_keys.is_empty() && !by_token.contains(&name) {
            p.add(
                format!("{at}.api_keys"),
                "at least one key is needed (or a gateway.auth.jwt issuer whose tokens name this tenant)",
            );
        }
        let mut keys = Vec::new();
        for (i, key) in t.api_keys.iter().enumerate() {
            let kat = format!("{at}.api_keys[{i}]");
            if let Some(digest) = key_digest(key, secrets, &kat, p) {
                match owners.get(&digest) {
                    Some(other) => p.add(&kat, format!("the same key is already given at {other}")),
                    None => {
                        owners.insert(digest, kat);
                        keys.push(digest);
                    }
                }
            }
        }
        let mut seen = Vec::new();
        for (i, up) in t.upstreams.iter().enumerate() {
            let uat = format!("{at}.upstreams[{i}]");
            if !upstreams.contains(up) {
                p.add(&uat, format!("unknown upstream '{up}'"));
            } else if seen.contains(up) {
                p.add(&uat, format!("upstream '{up}' is listed twice"));
            } else {
                seen.push(up.clone());
            }
        }
        let rate_limit = match t.rate_limit {
            Some(r) if r.per_second == 0 || r.burst == Some(0) => {
                p.add(
                    format!("{at}.rate_limit"),
                    "per_second and burst must be greater than 0",
                );
                None
            }
            Some(r) => {
                let clamp = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
                Some((clamp(r.per_second), clamp(r.burst.unwrap_or(r.per_second))))
            }
            None => None,
        };
        if t.max_concurrency == Some(0) {
            p.add(format!("{at}.max_concurrency"), "must be greater than 0");
        }
        let policy = t.tools.unwrap_or_default();
        let mut tools = ToolGlobs::default();
        // The ids this tenant's tools can have start with one of these.
        let prefixes: Vec<String> = gateway_id
            .map(|id| seen.iter().map(|u| format!("mcp://{id}/{u}/")).collect())
            .unwrap_or_default();
        let reachable = |pattern: &str| gateway_id.is_none() || can_match(pattern, &prefixes);
        // Every pattern on its own, so that each bad one is reported.
        for (list, patterns) in [("allow", &policy.allow), ("deny", &policy.deny)] {
            let mut good = true;
            for (i, pattern) in patterns.iter().enumerate() {
                let pat = format!("{at}.tools.{list}[{i}]");
                match globset::Glob::new(pattern) {
                    Err(e) => {
                        p.add(pat, format!("'{pattern}' is not a glob: {}", e.kind()));
                        good = false;
                    }
                    Ok(_) if !reachable(pattern) => {
                        p.add(pat, never_matches(pattern, &prefixes));
                        good = false;
                    }
                    Ok(_) => {}
                }
            }
            if !good {
                continue;
            }
            let none: &[String] = &[];
            let (allow, deny) = if list == "allow" {
                (&patterns[..], none)
            } else {
                (none, &patterns[..])
            };
            match ToolGlobs::compile(allow, deny) {
                Ok(compiled) if list == "allow" => tools.allow = compiled.allow,
                Ok(compiled) => tools.deny = compiled.deny,
                Err((list, i, why)) => p.add(format!("{at}.tools.{list}[{i}]"), why),
            }
        }
        for (pattern, scope) in &policy.scopes {
            let sat = format!("{at}.tools.scopes.{pattern}");
            match globset::Glob::new(pattern) {
                Ok(_) if scope.is_empty() || scope.contains(char::is_whitespace) => p.add(
                    &sat,
                    "a scope is one word (as in a token's space-separated scope)",
                ),
                Ok(_) if !reachable(pattern) => p.add(&sat, never_matches(pattern, &prefixes)),
                Ok(glob) => tools.scoped.push((glob.compile_matcher(), scope.clone())),
                Err(e) => p.add(&sat, format!("'{pattern}' is not a glob: {}", e.kind())),
            }
        }
        if t.max_sessions == Some(0) {
            p.add(format!("{at}.max_sessions"), "must be greater than 0");
        }
        out.push(TenantSpec {
            name,
            keys,
            upstreams: seen,
            tools,
            rate_limit,
            max_concurrency: t
                .max_concurrency
                .filter(|n| *n > 0)
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            max_sessions: t
                .max_sessions
                .filter(|n| *n > 0)
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        });
    }
    out
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
mod tests {
    use super::super::{Config, ConfigError, Secrets};
    use super::*;

    struct Fake;
    impl Secrets for Fake {
        fn var(&self, name: &str) -> Option<String> {
            (name == "ACME_KEY").then(|| "from-env".into())
        }
        fn file(&self, path: &Path) -> Option<String> {
            (path == Path::new("/keys/acme")).then(|| "from-file\n".into())
        }
    }

    const ISSUE_EXAMPLE: &str = r#"
gateway:
  id: gateway                  # authority of namespaced mcpIds
  listen: 0.0.0.0:8080         # agents: POST /mcp
  admin_listen: 0.0.0.0:9090   # /metrics, /healthz, /readyz
upstreams:
  files:
    stdio: {command: python3, args: [server.py], env: {LOG_LEVEL: info}}
  search:
    http: {url: "http://search.internal:7001/mcp"}
    timeout_ms: 30000          # per upstream; calls past it fail with -32003
tenants:
  acme:
    api_keys: ["plain-token", "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "env:ACME_KEY", "file:/keys/acme"]
    upstreams: [files, search]
"#;

    #[test]
    fn the_documented_shape_loads() {
        let c = Config::from_yaml(ISSUE_EXAMPLE, &Fake).unwrap();
        assert_eq!(c.gateway.id, "gateway");
        assert_eq!(c.upstreams.len(), 2);
        let t = &c.tenants[0];
        assert_eq!(t.upstreams, ["files", "search"]);
        assert_eq!(t.keys.len(), 4);
        assert_eq!(t.keys[0], KeyDigest::of(b"plain-token"));
        assert_eq!(t.keys[1], KeyDigest::of(b"test"));
        assert_eq!(t.keys[2], KeyDigest::of(b"from-env"));
        assert_eq!(t.keys[3], KeyDigest::of(b"from-file"));
        assert_eq!(
            c.upstream("search").unwrap().timeout,
            Duration::from_secs(30)
        );
    }

    #[test]
    fn config_cannot_break_the_wire_or_leak_a_url() {
        let text = r#"
upstreams:
  a:
    http:
      url: "http://user:s3cret@x/mcp"
  b:
    http:
      url: "http://x/mcp"
      headers: {Host: y, content-length: "3", Transfer-Encoding: chunked, Connection: close, TE: trailers, x-api-key: fine}
  c:
    http: {url: "ftp://x/y?token=s3cret"}
tenants:
  t:
    api_keys: [k]
    upstreams: [a, b, c]
    tools: {allow: ["mcp://g/{a"], deny: ["[z"]}
"#;
        let Err(ConfigError::Invalid(problems)) = Config::from_yaml(text, &Fake) else {
            panic!("accepted")
        };
        let text = problems
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n");
        for at in [
            "upstreams.a.http.url",
            "upstreams.b.http.headers.Host",
            "upstreams.b.http.headers.content-length",
            "upstreams.b.http.headers.Transfer-Encoding",
            "upstreams.b.http.headers.Connection",
            "upstreams.b.http.headers.TE",
            "upstreams.c.http.url",
            "tenants.t.tools.allow[0]",
            "tenants.t.tools.deny[0]",
        ] {
            assert!(text.contains(at), "{at} missing from:\n{text}");
        }
        assert!(!text.contains("x-api-key"), "{text}");
        assert!(!text.contains("s3cret"), "{text}");
    }

    #[test]
    fn upstream_header_values_come_from_env_and_files() {
        let text = r#"
upstreams:
  up:
    http:
      url: "http://x/mcp"
      headers: {Authorization: "env:ACME_KEY", x-token: "file:/keys/acme", x-plain: "Bearer abc"}
tenants:
  a: {api_keys: [k], upstreams: [up]}
"#;
        let config = Config::from_yaml(text, &Fake).unwrap();
        let TransportSpec::Http(http) = &config.upstreams[0].transport else {
            panic!("an HTTP upstream")
        };
        assert_eq!(http.headers["Authorization"], "from-env");
        assert_eq!(
            http.headers["x-token"], "from-file",
            "one trailing newline dropped"
        );
        assert_eq!(http.headers["x-plain"], "Bearer abc");
        let missing = text.replace("file:/keys/acme", "file:/keys/gone");
        let Err(ConfigError::Invalid(problems)) = Config::from_yaml(&missing, &Fake) else {
            panic!("should fail")
        };
        assert_eq!(problems[0].path, "upstreams.up.http.headers.x-token");
        assert!(problems[0].message.contains("cannot be read"));
    }

    #[test]
    fn identity_providers_are_checked() {
        let good = r#"
gateway:
  auth:
    resource: "https://gateway.example.com/mcp"
    jwt:
      - issuer: "https://idp.example.com/realms/agents"
        jwks_url: "http://keycloak.idp.svc:8080/realms/agents/protocol/openid-connect/certs"
        tenant_claim: tenant
      - issuer: "https://other.example.com"
        audiences: [api://gateway]
        jwks_file: jwks.json
        tenant: acme
tenants:
  acme: {upstreams: []}
"#;
        let config = Config::from_yaml(good, &Fake).unwrap();
        let issuers = &config.auth.issuers;
        assert_eq!(issuers.len(), 2);
        assert_eq!(
            issuers[0].audiences,
            ["https://gateway.example.com/mcp"],
            "the resource by default"
        );
        assert_eq!(issuers[1].tenant, TenantFrom::Fixed("acme".into()));
        assert_eq!(issuers[0].leeway, Duration::from_secs(30));
        let bad = r#"
gateway:
  auth:
    jwt:
      - issuer: "https://idp.example.com"
        jwks_url: "ftp://idp.example.com/keys"
        tenant: ghost
      - issuer: "https://idp.example.com"
        jwks_url: "https://a/keys"
        jwks_file: keys.json
        tenant_claim: tenant
        tenant: acme
        leeway_s: 3600
        refresh_s: 1
tenants:
  acme: {upstreams: []}
  lone: {upstreams: []}
"#;
        let Err(ConfigError::Invalid(problems)) = Config::from_yaml(bad, &Fake) else {
            panic!("should fail")
        };
        let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
        for expected in [
            "gateway.auth.resource",
            "gateway.auth.jwt[0].jwks_url",
            "gateway.auth.jwt[0].tenant",
            "gateway.auth.jwt[1].issuer",
            "gateway.auth.jwt[1]",
            "gateway.auth.jwt[1].leeway_s",
            "gateway.auth.jwt[1].refresh_s",
            "tenants.lone.api_keys",
        ] {
            assert!(paths.contains(&expected), "missing {expected} in {paths:?}");
        }
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let text = r#"
gateway: {id: "bad id", listen: nowhere}
upstreams:
  "bad/name": {stdio: {command: x}}
  empty: {stdio: {command: ""}}
  url: {http: {url: "ftp://x/y"}}
  both: {stdio: {command: x}, http: {url: "http://x"}}
  neither: {timeout_ms: 0}
  pinned: {stdio: {command: x}, pin: true}
tenants:
  a: {api_keys: [k1, "env:MISSING"], upstreams: [empty, ghost], tools: {deny: ["[unclosed"]}}
  b: {api_keys: [k1, "sha256:zz"], upstreams: []}
"#;
        let Err(ConfigError::Invalid(problems)) = Config::from_yaml(text, &Fake) else {
            panic!("should fail")
        };
        let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
        for expected in [
            "gateway.id",
            "gateway.listen",
            "upstreams.bad/name",
            "upstreams.empty.stdio.command",
            "upstreams.url.http.url",
            "upstreams.both",
            "upstreams.neither.timeout_ms",
            "upstreams.neither",
            "upstreams.pinned.pin",
            "tenants.a.api_keys[1]",
            "tenants.a.upstreams[1]",
            "tenants.a.tools.deny[0]",
            "tenants.b.api_keys[0]",
            "tenants.b.api_keys[1]",
        ] {
            assert!(paths.contains(&expected), "missing {expected} in {paths:?}");
        }
        let text = ConfigError::Invalid(problems).to_string();
        assert!(!text.contains("k1"), "a key leaked into an error: {text}");
        assert!(text.contains("unknown upstream 'ghost'"));
    }

    #[test]
    fn unknown_fields_and_duplicate_names_are_errors() {
        let typo = "gateway: {id: g, lisen: 1}\ntenants: {}\n";
        assert!(matches!(
            Config::from_yaml(typo, &Fake),
            Err(ConfigError::Parse(_))
        ));
        let dup = "upstreams:\n  a: {stdio: {command: x}}\n  a: {stdio: {command: y}}\ntenants:\n  t: {api_keys: [k], upstreams: [a]}\n";
        assert!(matches!(
            Config::from_yaml(dup, &Fake),
            Err(ConfigError::Parse(_))
        ));
    }
}
