//! What of a secret-bearing value may reach a log line or an error.

/// An upstream URL as logs show it: scheme, host, port and path. Userinfo,
/// query and fragment are left out whatever they hold (tokens travel there).
pub fn url(u: &reqwest::Url) -> String {
    let mut out = format!("{}://{}", u.scheme(), u.host_str().unwrap_or(""));
    if let Some(port) = u.port() {
        out.push(':');
        out.push_str(&port.to_string());
    }
    out.push_str(u.path());
    if u.query().is_some() {
        out.push_str("?…");
    }
    out
}

/// A URL as written in a config, for an error about it when it does not
/// parse as one (a missing scheme, most often): what comes before an `@` of
/// its authority, and its query and fragment, are left out.
pub fn written(text: &str) -> String {
    let text = text.trim();
    let end = text.find(['?', '#']).unwrap_or(text.len());
    let text = &text[..end];
    let authority_end = text.find("://").map_or(0, |at| at + 3);
    let rest = &text[authority_end..];
    let host_end = rest.find('/').unwrap_or(rest.len());
    match rest[..host_end].rfind('@') {
        Some(at) => format!("{}…@{}", &text[..authority_end], &rest[at + 1..]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_written_url_leaves_out_userinfo_query_and_fragment() {
        for (given, shown) in [
            ("127.0.0.1:3001/mcp", "127.0.0.1:3001/mcp"),
            ("user:pw@host:1/mcp?token=x", "…@host:1/mcp"),
            ("http://u:p@h/a#f", "http://…@h/a"),
            ("localhost/x@y", "localhost/x@y"),
        ] {
            assert_eq!(super::written(given), shown);
        }
    }

    #[test]
    fn leaves_out_userinfo_query_and_fragment() {
        for (given, shown) in [
            (
                "https://u:pw@h.example:8443/mcp?token=s3cret#f",
                "https://h.example:8443/mcp?…",
            ),
            ("http://127.0.0.1:7/a/b", "http://127.0.0.1:7/a/b"),
            ("http://h/", "http://h/"),
        ] {
            let shown_now = super::url(&reqwest::Url::parse(given).unwrap());
            assert_eq!(shown_now, shown);
            assert!(!shown_now.contains("s3cret") && !shown_now.contains("pw"));
        }
    }
}
