//! `gateway:`: the listeners, bounds and timeouts, `gateway.auth` (the
//! resource and its issuers) and `gateway.limits`.

use super::*;

pub(super) fn gateway(
    raw: RawGateway,
    secrets: &dyn Secrets,
    p: &mut Problems,
) -> Option<GatewaySettings> {
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
    let session_key = raw
        .session_secret
        .as_deref()
        .and_then(|secret| session_key(secret, secrets, p));
    use crate::config::tool_names::{DEFAULT_BUDGET, MAX_NAME, MIN_BUDGET};
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
    let allowed_origins = allowed_origins(raw.allowed_origins, p);
    let shutdown_timeout = Duration::from_millis(raw.shutdown_timeout_ms.unwrap_or(25_000));
    let server_request_timeout =
        Duration::from_millis(raw.server_request_timeout_ms.unwrap_or(300_000).max(1));
    let pins_file = raw.pins_file.map(PathBuf::from);
    let reload_poll = match raw.reload_poll_ms {
        Some(0) => None,
        Some(ms) => Some(Duration::from_millis(ms)),
        None => Some(Duration::from_secs(2)),
    };
    let admin_ui = super::super::admin_ui::validate(raw.admin_ui).unwrap_or_else(|wrong| {
        for (path, why) in wrong {
            p.add(path, why);
        }
        Default::default()
    });
    Some(GatewaySettings {
        id,
        listen: listen?,
        admin_listen: admin_listen?,
        shutdown_timeout,
        server_request_timeout,
        pins_file,
        reload_poll,
        limits: limits?,
        admin_token,
        admin_ui,
        max_cached_tokens: crate::config::upstream_auth::DEFAULT_MAX_CACHED_TOKENS,
        consent: None,
        allowed_origins,
        session_key,
        tool_name_budget,
        store,
        fixed: Default::default(),
    })
    .filter(|_| id_ok)
}

/// `gateway.session_secret`: used as it is (never a digest), 32 characters
/// at least; its key.
fn session_key(secret: &str, secrets: &dyn Secrets, p: &mut Problems) -> Option<KeyDigest> {
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
}

/// `gateway.allowed_origins`: each an origin (scheme://host[:port], http or
/// https, no path), lower-cased.
fn allowed_origins(raw: Vec<String>, p: &mut Problems) -> Vec<String> {
    let mut allowed_origins = Vec::new();
    for (i, origin) in raw.into_iter().enumerate() {
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
    allowed_origins
}

/// `gateway.auth`: the resource identifier, and each issuer's settings.
pub(super) fn auth(raw: RawAuth, tenants: &[String], p: &mut Problems) -> AuthSettings {
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
        issuers.extend(issuer(&at, j, tenants, resource.as_deref(), p));
    }
    AuthSettings {
        resource,
        issuers,
        signing: None,
    }
}

/// One of `gateway.auth.jwt`: where its keys are, which tenant its tokens
/// name, the audiences they must carry (the resource's by default), and
/// its clock leeway and key refresh, each within bounds.
fn issuer(
    at: &str,
    j: crate::config::raw::RawJwt,
    tenants: &[String],
    resource: Option<&str>,
    p: &mut Problems,
) -> Option<IssuerSpec> {
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
            p.add(at, "give exactly one of jwks_url and jwks_file");
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
            p.add(at, "give exactly one of tenant_claim and tenant");
            None
        }
    };
    let audiences = if j.audiences.is_empty() {
        resource.iter().map(|r| r.to_string()).collect()
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
    Some(IssuerSpec {
        issuer: j.issuer,
        audiences,
        keys: keys?,
        tenant: tenant?,
        tenants: j.tenants,
        leeway,
        refresh,
    })
}

pub(super) fn limits(raw: RawLimits, p: &mut Problems) -> Option<Limits> {
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
        max_spill_bytes: positive("max_spill_bytes", raw.max_spill_bytes, d.max_spill_bytes),
        max_cache_bytes: positive("max_cache_bytes", raw.max_cache_bytes, d.max_cache_bytes),
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
