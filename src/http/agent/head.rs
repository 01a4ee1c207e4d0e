//! The checks of a request's head, before its body is read: its origin
//! (403), its credentials (401), then its content type (415), checked on
//! the bytes as the text check would.

use super::*;

/// A header value as text, when it is visible ASCII (what `HeaderValue::to_str` accepts).
pub(super) fn header_str(v: &[u8]) -> Option<&str> {
    if v.iter().all(|&b| b == b'\t' || (32..127).contains(&b)) {
        std::str::from_utf8(v).ok()
    } else {
        None
    }
}

/// `application/json`, parameters (e.g. `charset=utf-8`) allowed, in any case.
pub(super) fn is_json(content_type: Option<&[u8]>) -> bool {
    // On the bytes, with the check `header_str` makes (visible ASCII and tabs):
    // as text it cost more than the rest of the head's checks.
    content_type.is_some_and(|v| {
        // The usual value, whole: it passes every check below.
        v.eq_ignore_ascii_case(b"application/json")
            || (v.iter().all(|&b| b == b'\t' || (32..127).contains(&b))
                && v.split(|&b| b == b';').next().is_some_and(|mime| {
                    mime.trim_ascii().eq_ignore_ascii_case(b"application/json")
                }))
    })
}

/// The checks of a head before its body is read, in order: the tenant its
/// credentials name (401), then the content type (415). The tenant is
/// recorded in the request's span unless the span was made with it.
pub(super) fn admit_head(
    keys: &arc_swap::ArcSwap<KeyStore>,
    tenant: Result<Arc<Tenant>, Denied>,
    content_type: Option<&[u8]>,
    in_span: bool,
) -> Result<Arc<Tenant>, Reply> {
    let tenant = match tenant {
        Ok(tenant) => tenant,
        Err(denied) => {
            tracing::debug!("unauthenticated request");
            return Err(Refusal::Unauthorized(&keys.load(), denied).reply());
        }
    };
    // Finding the current span costs even when it is disabled: only when it can be enabled.
    if !in_span && tracing::level_enabled!(tracing::Level::INFO) {
        tracing::Span::current().record("tenant", &*tenant.name);
    }
    if !is_json(content_type) {
        return Err(Refusal::NotJson.reply());
    }
    Ok(tenant)
}

impl Edge {
    /// A request without `Origin` is served; one with an `Origin` only when it
    /// is one of `gateway.allowed_origins` (a browser page on another origin
    /// must not reach a gateway on localhost: DNS rebinding).
    pub(super) fn origin_allowed(&self, headers: &axum::http::HeaderMap) -> bool {
        let mut origins = headers.get_all(header::ORIGIN).iter();
        match (origins.next(), origins.next()) {
            (None, _) => true,
            (Some(origin), None) => origin.to_str().is_ok_and(|o| {
                let o = o.trim().to_ascii_lowercase();
                self.allowed_origins.contains(&o)
            }),
            (Some(_), Some(_)) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_content_types_are_read_as_the_text_check_read_them() {
        let as_text = |v: &[u8]| {
            header_str(v)
                .and_then(|v| v.split(';').next())
                .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"))
        };
        for v in [
            &b"application/json"[..],
            b"Application/JSON; charset=utf-8",
            b" application/json\t;x=y",
            b"application/json;",
            b"application/jsonx",
            b"application/ json",
            b"text/plain",
            b"",
            b";application/json",
            b"application/json\xc2\xa0",
            b"application/json; charset=\xff",
            b"application/json\x00",
            b"\x0bapplication/json",
        ] {
            assert_eq!(
                is_json(Some(v)),
                as_text(v),
                "{:?}",
                String::from_utf8_lossy(v)
            );
        }
        assert!(!is_json(None));
    }

    proptest::proptest! {
        #[test]
        fn json_content_types_agree_with_the_text_check(
            pre in "[ \t\x0b;a]{0,3}",
            upper in proptest::prelude::any::<bool>(),
            post in "[ \t;=a\u{a0}\x00\x7f]{0,4}",
        ) {
            let mime = if upper { "APPLICATION/Json" } else { "application/json" };
            let v = format!("{pre}{mime}{post}");
            let as_text = header_str(v.as_bytes())
                .and_then(|v| v.split(';').next())
                .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"));
            proptest::prop_assert_eq!(is_json(Some(v.as_bytes())), as_text, "{:?}", v);
        }
    }
}
