//! `gateway.store`: checked offline, as `mcp-gateway check` does it: the
//! scheme, the URL, `when_down`, `timeout_ms`; the credentials read (from
//! the URL, or `username`/`password` in any of the secret forms) and never
//! echoed in a problem.

use std::time::Duration;

use super::{Problems, secret_text};
use crate::config::raw::RawStore;
use crate::config::{Secrets, StoreSettings, WhenDown};

/// Every key the gateway writes starts with this, unless configured.
pub const DEFAULT_PREFIX: &str = "mcp-gateway:";

pub(super) fn settings(
    raw: RawStore,
    secrets: &dyn Secrets,
    p: &mut Problems,
) -> Option<StoreSettings> {
    let at = "gateway.store";
    // The URL itself may be a secret (it may carry a password).
    let secret = raw.url.starts_with("env:") || raw.url.starts_with("file:");
    let url = if secret && secrets.stands_in() {
        // Read where it runs: only its form can be checked here.
        "redis://stand-in.invalid:6379/0".to_owned()
    } else if secret {
        secret_text(&raw.url, secrets, &format!("{at}.url"), p)?
    } else {
        raw.url
    };
    let parsed = match reqwest::Url::parse(&url) {
        Ok(u) if matches!(u.scheme(), "redis" | "rediss") && u.host_str().is_some() => {
            database_is_a_number(&u, at, p).then_some(u)
        }
        Ok(u) => {
            p.add(
                format!("{at}.url"),
                format!(
                    "scheme {:?} is not redis:// or rediss:// (with a host)",
                    u.scheme()
                ),
            );
            None
        }
        Err(e) => {
            p.add(
                format!("{at}.url"),
                format!("is not a URL ({e}): redis://host:port/db or rediss://..."),
            );
            None
        }
    };
    let secret = |value: Option<String>, field: &str, p: &mut Problems| match value {
        None => Some(None),
        Some(v) => secret_text(&v, secrets, &format!("{at}.{field}"), p).map(Some),
    };
    let username = secret(raw.username, "username", p);
    let password = secret(raw.password, "password", p);
    let when_down = match raw.when_down.as_deref() {
        None | Some("local") => Some(WhenDown::Local),
        Some("refuse") => Some(WhenDown::Refuse),
        Some(other) => {
            p.add(
                format!("{at}.when_down"),
                format!("unknown {other:?}: local (the default) or refuse"),
            );
            None
        }
    };
    let timeout = match raw.timeout_ms {
        None => Some(Duration::from_millis(50)),
        Some(ms @ 1..=10_000) => Some(Duration::from_millis(ms)),
        Some(_) => {
            p.add(format!("{at}.timeout_ms"), "must be 1 to 10000");
            None
        }
    };
    let mut parsed = parsed?;
    // Credentials in the URL move out of it, so the URL can be logged.
    let url_user = (!parsed.username().is_empty()).then(|| parsed.username().to_owned());
    let url_password = parsed.password().map(str::to_owned);
    let _ = parsed.set_username("");
    let _ = parsed.set_password(None);
    let decode = |s: String| {
        percent_encoding::percent_decode_str(&s)
            .decode_utf8_lossy()
            .into_owned()
    };
    Some(StoreSettings {
        url: parsed.to_string(),
        username: username?.or(url_user.map(decode)),
        password: password?.or(url_password.map(decode)),
        key_prefix: raw.key_prefix.unwrap_or_else(|| DEFAULT_PREFIX.into()),
        when_down: when_down?,
        timeout: timeout?,
    })
}

/// The URL's path names a database by its number (`/0`, `/15`), or nothing
/// (database 0): a client that read `/zero` as 0 would share database 0
/// with whatever else uses it, unnoticed.
fn database_is_a_number(url: &reqwest::Url, at: &str, p: &mut Problems) -> bool {
    let db = url.path().trim_start_matches('/');
    if db.is_empty() || db.parse::<u32>().is_ok() {
        return true;
    }
    p.add(
        format!("{at}.url"),
        format!("the database {db:?} is not a number: redis://host:port/0 names database 0"),
    );
    false
}
