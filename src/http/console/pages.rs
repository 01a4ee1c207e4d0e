//! The console's pages, rendered on the server from the same JSON the API
//! serves, so a page without JavaScript shows every value its script
//! would. Every text from upstreams, tenants or the config is escaped;
//! every URL is relative (`base` climbs back to `/ui/`), so the pages work
//! under any prefix an ingress strips.

use std::fmt::Write as _;

use serde_json::Value;

/// Escapes text for HTML content and quoted attributes.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A JSON value as a cell shows it: strings as they are, numbers as
/// written, lists joined by commas, null as nothing.
pub fn text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Array(items) => items.iter().map(text).collect::<Vec<_>>().join(", "),
        v => v.to_string(),
    }
}

/// A table cell of `v`, with `data-value` for numbers (and null).
fn cell(testid: &str, v: &Value) -> String {
    let raw = match v {
        Value::Number(n) => format!(r#" data-value="{n}""#),
        Value::Null => r#" data-value="""#.to_owned(),
        _ => String::new(),
    };
    format!(r#"<td data-testid="{testid}"{raw}>{}</td>"#, esc(&text(v)))
}

/// What every page shares around its view.
pub struct Frame<'a> {
    pub title: &'a str,
    /// `""` at `/ui/x`, `"../"` at `/ui/x/y`.
    pub base: &'a str,
    /// The view's JSON, relative to the page.
    pub api: &'a str,
    pub view: &'a str,
    pub csrf: &'a str,
    pub refresh_ms: u64,
    pub at: &'a str,
}

pub fn page(f: &Frame, body: &str) -> String {
    let b = f.base;
    let nav = ["upstreams", "tenants", "pins", "config"]
        .iter()
        .map(|v| {
            let current = if *v == f.view || (f.view == "tenant" && *v == "tenants") {
                r#" aria-current="page""#
            } else {
                ""
            };
            let label = match *v {
                "upstreams" => "Upstreams",
                "tenants" => "Tenants",
                "pins" => "Pins",
                _ => "Config",
            };
            format!(r#"<a data-testid="nav-{v}" href="{b}{v}"{current}>{label}</a>"#)
        })
        .collect::<String>();
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="csrf-token" content="{csrf}">
<title>{title} · mcp-gateway</title>
<link rel="stylesheet" href="{b}static/console.css">
<script src="{b}static/console.js" defer></script>
</head>
<body data-view="{view}" data-api="{api}" data-base="{b}" data-refresh-ms="{refresh}">
<header>
<strong>mcp-gateway</strong>
<nav data-testid="nav">{nav}</nav>
<span data-testid="version">{version}</span>
<span data-testid="live" data-refreshed-at="{at}">as of <time>{at}</time></span>
<form data-testid="logout" method="post" action="{b}logout"><input type="hidden" name="csrf" value="{csrf}"><button type="submit">Log out</button></form>
</header>
<main>
<h1>{title}</h1>
{body}
</main>
</body></html>
"#,
        csrf = esc(f.csrf),
        title = esc(f.title),
        view = f.view,
        api = esc(f.api),
        refresh = f.refresh_ms,
        version = env!("CARGO_PKG_VERSION"),
        at = esc(f.at),
    )
}

/// The cells of an upstream's row, by test id and member of its JSON.
pub const UPSTREAM_CELLS: [(&str, &str); 11] = [
    ("upstream-protocol", "/protocol"),
    ("upstream-transport", "/transport"),
    ("upstream-state", "/state"),
    ("upstream-last-error", "/last_error/message"),
    ("upstream-restarts", "/restarts"),
    ("upstream-calls-per-s", "/recent/calls_per_s"),
    ("upstream-error-rate", "/recent/error_rate"),
    ("upstream-p50", "/recent/p50_ms"),
    ("upstream-p99", "/recent/p99_ms"),
    ("upstream-tenants", "/tenants"),
    ("upstream-quarantined", "/quarantined"),
];

pub fn upstreams(doc: &Value) -> String {
    let mut rows = String::new();
    for u in doc["upstreams"].as_array().into_iter().flatten() {
        let name = esc(u["name"].as_str().unwrap_or(""));
        let state = esc(u["state"].as_str().unwrap_or(""));
        let _ = write!(
            rows,
            r#"<tr data-testid="upstream-row" data-upstream="{name}" data-state="{state}"><th scope="row" data-testid="upstream-name">{name}</th>"#
        );
        for (testid, at) in UPSTREAM_CELLS {
            rows.push_str(&cell(testid, u.pointer(at).unwrap_or(&Value::Null)));
        }
        rows.push_str("</tr>\n");
    }
    format!(
        r#"<p>Tool calls of the last {w} s on this replica.</p>
<table data-testid="upstreams"><thead><tr><th>Upstream</th><th>Protocol</th><th>Transport</th><th>State</th><th>Last error</th><th>Restarts</th><th>Calls/s</th><th>Error rate</th><th>p50 ms</th><th>p99 ms</th><th>Tenants</th><th>Quarantined</th></tr></thead>
<tbody>
{rows}</tbody></table>"#,
        w = doc["window_s"]
    )
}

pub const TENANT_CELLS: [(&str, &str); 4] = [
    ("tenant-upstreams", "/upstreams"),
    ("tenant-in-flight", "/in_flight"),
    ("tenant-sessions", "/sessions"),
    ("tenant-refusals-count", "/refusals"),
];

pub fn tenants(doc: &Value) -> String {
    let mut rows = String::new();
    for t in doc["tenants"].as_array().into_iter().flatten() {
        let name = t["name"].as_str().unwrap_or("");
        let href = percent_encoding::utf8_percent_encode(name, percent_encoding::NON_ALPHANUMERIC);
        let _ = write!(
            rows,
            r#"<tr data-testid="tenant-row" data-tenant="{n}"><th scope="row"><a data-testid="tenant-link" href="tenants/{href}">{n}</a></th>"#,
            n = esc(name)
        );
        for (testid, at) in TENANT_CELLS {
            rows.push_str(&cell(testid, t.pointer(at).unwrap_or(&Value::Null)));
        }
        rows.push_str(&cell("tenant-tool-states", &tool_states(&t["tools"])));
        rows.push_str("</tr>\n");
    }
    format!(
        r#"<table data-testid="tenants"><thead><tr><th>Tenant</th><th>Upstreams</th><th>In flight</th><th>Sessions</th><th>Refusals</th><th>Tools</th></tr></thead>
<tbody>
{rows}</tbody></table>"#
    )
}

/// `{"listed": 3, "hidden": 1}` as `listed 3, hidden 1`.
pub fn tool_states(counts: &Value) -> Value {
    let parts: Vec<String> = counts
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    Value::from(parts.join(", "))
}
