//! Each of `upstreams:`: its transport (a stdio child or an HTTP server),
//! the headers it is sent, its protocol and bounds.

use super::*;

pub(super) fn upstream(
    name: String,
    mut raw: RawUpstream,
    settings: &super::upstream_auth::Settings,
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
        None | Some("auto") => Some(Protocol::Auto),
        Some("v1") => Some(Protocol::V1),
        Some("modelcontextprotocol") => Some(Protocol::ModelContext),
        Some(other) => {
            p.add(
                format!("{at}.protocol"),
                format!(
                    "unknown protocol {other:?}: auto (the default), modelcontextprotocol or v1"
                ),
            );
            None
        }
    };
    let children = children(&at, &raw, p);
    let auth = raw.auth.take().map(|a| {
        let http = raw.http.as_ref();
        let up = super::upstream_auth::Upstream {
            at: &at,
            url: http.map(|h| h.url.as_str()),
            headers: http.map_or_else(Vec::new, |h| {
                h.headers.keys().map(|k| k.to_ascii_lowercase()).collect()
            }),
            per_session: raw.per_session,
        };
        super::upstream_auth::auth(a, &up, settings, secrets, p)
    });
    let transport = transport(&at, raw.stdio, raw.http, secrets, p);
    if raw.per_session
        && !(matches!(transport, Some(TransportSpec::Stdio(_))) && protocol != Some(Protocol::V1))
    {
        p.add(
            format!("{at}.per_session"),
            "is for stdio upstreams of the Model Context Protocol (not protocol: v1)",
        );
    }
    Some(UpstreamSpec {
        name: name.clone(),
        transport: transport?,
        protocol: protocol?,
        timeout: timeout?,
        required: raw.required,
        max_concurrency: concurrency,
        max_queue,
        pin: raw.pin,
        per_session: raw.per_session,
        shared: raw.shared,
        children,
        auth: match auth {
            Some(auth) => Some(auth?),
            None => None,
        },
    })
    .filter(|_| is_name(&name))
}

/// An upstream's one transport: a stdio command (its environment's values
/// read as themselves, env:VAR or file:PATH) or an HTTP URL.
fn transport(
    at: &str,
    stdio: Option<crate::config::raw::RawStdio>,
    http_raw: Option<crate::config::raw::RawHttp>,
    secrets: &dyn Secrets,
    p: &mut Problems,
) -> Option<TransportSpec> {
    match (stdio, http_raw) {
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
        (None, Some(h)) => http(at, h.url, h.headers, secrets, p).map(|t| match t {
            TransportSpec::Http(spec) => TransportSpec::Http(HttpSpec {
                notifications: h.notifications,
                ..spec
            }),
            other => other,
        }),
        (Some(_), Some(_)) => {
            p.add(at, "give either stdio or http, not both");
            None
        }
        (None, None) => {
            p.add(
                at,
                "needs a transport: stdio {command: ...} or http {url: ...}",
            );
            None
        }
    }
}

/// The bounds of the children run for one tenant or one client session:
/// `max_children` means something only with `per_session` (a tenant runs
/// one child otherwise), `idle_timeout_ms` only where children run at all.
fn children(at: &str, raw: &RawUpstream, p: &mut Problems) -> ChildBounds {
    let defaults = ChildBounds::default();
    if raw.max_children.is_some() && !raw.per_session {
        p.add(format!("{at}.max_children"), "needs per_session: true");
    }
    if raw.idle_timeout_ms.is_some() && raw.shared && !raw.per_session {
        p.add(
            format!("{at}.idle_timeout_ms"),
            "means nothing with shared: true (no child runs for one tenant), unless per_session: true",
        );
    }
    let max_children = match raw.max_children {
        Some(0) => {
            p.add(format!("{at}.max_children"), "must be greater than 0");
            0
        }
        n => n.map_or(defaults.max_children, |n| {
            usize::try_from(n).unwrap_or(usize::MAX)
        }),
    };
    let idle_timeout = match raw.idle_timeout_ms {
        Some(0) => {
            p.add(format!("{at}.idle_timeout_ms"), "must be greater than 0");
            Duration::ZERO
        }
        ms => ms.map_or(defaults.idle_timeout, Duration::from_millis),
    };
    ChildBounds {
        max_children,
        idle_timeout,
    }
}

/// Headers that frame the request or govern the connection (RFC 9110 7.6.1
/// and 9112): set by the gateway, never by configuration, or a configured
/// value could break the framing of every call.
pub(super) const FRAMING_HEADERS: [&str; 11] = [
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

pub(super) fn http(
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
