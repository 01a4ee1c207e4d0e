//! Who asks the console (a session, the admin token as a bearer, or
//! nobody), and whether a change with the session's cookie comes from the
//! console's own page.

use axum::http::{HeaderMap, header};

use super::Ctx;
use super::session::Session;

/// Who asks: a console session, the admin token as a bearer, or nobody.
pub(super) enum Who {
    Session(Session),
    Bearer,
    Nobody,
}

pub(super) fn who(s: &Ctx, headers: &HeaderMap) -> Who {
    let Some(token) = s.token.load_full() else {
        return Who::Nobody;
    };
    if headers.contains_key(header::AUTHORIZATION) {
        return match s.may_see(headers) {
            true => Who::Bearer,
            false => Who::Nobody,
        };
    }
    match super::cookie(headers).and_then(|c| s.console.sessions.check(&token, c)) {
        Some(session) => Who::Session(session),
        None => Who::Nobody,
    }
}

/// Whether a POST with the session's cookie is the page's own: its CSRF
/// token (header or form field), and no other site's fetch metadata.
pub(super) fn same_site(headers: &HeaderMap, session: &Session, field: Option<&str>) -> bool {
    let site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    if site.is_some_and(|s| s != "same-origin") {
        return false;
    }
    let sent = headers
        .get("x-csrf-token")
        .and_then(|v| v.to_str().ok())
        .or(field);
    sent.is_some_and(|t| {
        use subtle::ConstantTimeEq as _;
        t.as_bytes().ct_eq(session.csrf.as_bytes()).into()
    })
}
