//! Values the file may give as themselves or read from elsewhere: an
//! upstream's header or environment value, a client's secret.

use super::*;

/// A header value given as itself, `env:VAR` or `file:PATH` (one trailing
/// newline dropped). The problem text never contains the value.
pub(super) fn header_value(
    value: &str,
    secrets: &dyn Secrets,
    at: &str,
    p: &mut Problems,
) -> Option<String> {
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

/// `url` if it is an http:// or https:// URL with a host and no
/// credentials (never echoed whole: its query may hold a secret).
pub(super) fn checked_url(url: String, at: &str, p: &mut Problems) -> Option<String> {
    match reqwest::Url::parse(&url) {
        Ok(u) if !u.username().is_empty() || u.password().is_some() => {
            p.add(
                at,
                "holds credentials: give the client's in client_id and client_secret",
            );
            None
        }
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Some(url),
        _ => {
            let written = crate::redact::written(&url);
            p.add(
                at,
                format!("'{written}' is not an http:// or https:// URL with a host"),
            );
            None
        }
    }
}

/// A client's `auth_method` at `at`: `client_secret_basic` (the default,
/// true) or `client_secret_post` (false); anything else is a problem.
pub(super) fn basic_auth(method: Option<&str>, at: &str, p: &mut Problems) -> Option<bool> {
    match method {
        None | Some("client_secret_basic") => Some(true),
        Some("client_secret_post") => Some(false),
        Some(other) => {
            p.add(
                format!("{at}.auth_method"),
                format!("'{other}' is not client_secret_basic or client_secret_post"),
            );
            None
        }
    }
}
