//! `gateway.admin_ui`: the admin console on the admin listener (see
//! `http::console`), as written and as validated.

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawAdminUi {
    /// Serve /ui on the admin listener (default true; it needs admin_token).
    pub enabled: Option<bool>,
    /// How often an open page refreshes its figures, 1000 to 60000 (default 2000).
    #[schemars(range(min = 1000, max = 60000))]
    pub refresh_ms: Option<u64>,
    /// How long a login lasts, 300 to 86400 seconds (default 28800).
    #[schemars(range(min = 300, max = 86400))]
    pub session_ttl_s: Option<u64>,
}

/// The console's settings; applied on reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdminUi {
    pub enabled: bool,
    pub refresh: Duration,
    pub session_ttl: Duration,
}

impl Default for AdminUi {
    fn default() -> Self {
        AdminUi {
            enabled: true,
            refresh: Duration::from_millis(2000),
            session_ttl: Duration::from_secs(28_800),
        }
    }
}

/// The settings, or each value out of its range as (path, why).
pub fn validate(raw: Option<RawAdminUi>) -> Result<AdminUi, Vec<(String, String)>> {
    let raw = raw.unwrap_or_default();
    let mut out = AdminUi::default();
    let mut wrong = Vec::new();
    if let Some(enabled) = raw.enabled {
        out.enabled = enabled;
    }
    match raw.refresh_ms {
        Some(ms) if (1000..=60_000).contains(&ms) => out.refresh = Duration::from_millis(ms),
        Some(_) => wrong.push((
            "gateway.admin_ui.refresh_ms".into(),
            "must be 1000 to 60000 (milliseconds)".into(),
        )),
        None => {}
    }
    match raw.session_ttl_s {
        Some(s) if (300..=86_400).contains(&s) => out.session_ttl = Duration::from_secs(s),
        Some(_) => wrong.push((
            "gateway.admin_ui.session_ttl_s".into(),
            "must be 300 to 86400 (seconds)".into(),
        )),
        None => {}
    }
    match wrong.is_empty() {
        true => Ok(out),
        false => Err(wrong),
    }
}
