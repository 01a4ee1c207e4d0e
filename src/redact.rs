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

#[cfg(test)]
mod tests {
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
