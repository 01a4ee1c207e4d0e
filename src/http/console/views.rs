//! The tenant, pins, config and login views (see `pages` for the frame).

use std::fmt::Write as _;

use serde_json::Value;

use super::pages::{esc, text};

/// A `data-*` attribute's value of a JSON value (numbers raw, null empty).
fn attr(v: &Value) -> String {
    esc(&text(v))
}

pub fn tenant(doc: &Value) -> String {
    let name = esc(doc["name"].as_str().unwrap_or(""));
    let mut tools = String::new();
    for t in doc["tools"].as_array().into_iter().flatten() {
        let _ = writeln!(
            tools,
            r#"<tr data-testid="tool-row" data-tool-id="{id}" data-upstream="{up}" data-state="{state}"><td data-testid="tool-name-mcp">{mcp}</td><td data-testid="tool-name-v1">{v1}</td><td data-testid="tool-state">{state}</td><td data-testid="tool-reason">{reason}</td></tr>"#,
            id = attr(&t["id"]),
            up = attr(&t["upstream"]),
            state = attr(&t["state"]),
            mcp = attr(&t["faces"]["modelcontextprotocol"]["name"]),
            v1 = attr(&t["faces"]["v1"]["name"]),
            reason = attr(&t["reason"]),
        );
    }
    let mut limits = String::new();
    for (key, max, current) in limit_rows(doc) {
        let _ = writeln!(
            limits,
            r#"<tr data-testid="limit-row" data-limit="{key}" data-max="{m}" data-current="{c}"><th scope="row">{key}</th><td>{c}</td><td>{m}</td></tr>"#,
            m = attr(&max),
            c = attr(&current),
        );
    }
    let mut refusals = String::new();
    for (reason, n) in doc["refusals"].as_object().into_iter().flatten() {
        let _ = writeln!(
            refusals,
            r#"<tr data-testid="refusal-row" data-reason="{r}" data-count="{n}"><th scope="row">{r}</th><td>{n}</td></tr>"#,
            r = esc(reason),
        );
    }
    format!(
        r#"<section data-testid="tenant" data-tenant="{name}">
<p>Upstreams: <span data-testid="tenant-upstream-list">{ups}</span>. Requests/s over the last {w} s: <span data-testid="tenant-requests-per-s" data-value="{rps}">{rps}</span>.</p>
<h2>Limits</h2>
<table data-testid="tenant-limits"><thead><tr><th>Limit</th><th>Now</th><th>At most</th></tr></thead><tbody>
{limits}</tbody></table>
<h2>Refusals</h2>
<table data-testid="tenant-refusals"><thead><tr><th>Reason</th><th>Count</th></tr></thead><tbody>
{refusals}</tbody></table>
<h2>Tools</h2>
<table data-testid="tenant-tools"><thead><tr><th>Model Context Protocol name</th><th>MCP v1.0 id</th><th>State</th><th>Why</th></tr></thead><tbody>
{tools}</tbody></table>
</section>"#,
        ups = esc(&text(&doc["upstreams"])),
        w = doc["usage"]["rate_window_s"],
        rps = attr(&doc["usage"]["requests_per_s"]),
    )
}

/// Each limit's key, its bound, and the usage it bounds.
pub fn limit_rows(doc: &Value) -> Vec<(&'static str, Value, Value)> {
    let (l, u) = (&doc["limits"], &doc["usage"]);
    vec![
        (
            "rate_limit",
            l["rate_limit"]["per_second"].clone(),
            u["requests_per_s"].clone(),
        ),
        (
            "max_concurrency",
            l["max_concurrency"].clone(),
            u["in_flight"].clone(),
        ),
        (
            "max_sessions",
            l["max_sessions"].clone(),
            u["sessions"].clone(),
        ),
        (
            "max_connections",
            l["max_connections"].clone(),
            u["connections"].clone(),
        ),
    ]
}

pub fn pins(doc: &Value) -> String {
    let items = doc["quarantined"].as_array().cloned().unwrap_or_default();
    let mut out = String::new();
    for q in &items {
        let _ = write!(
            out,
            r#"<article data-testid="quarantine-item" data-upstream="{up}" data-tool="{tool}" data-fingerprint="{fp}" data-state="{state}" data-reason="{reason}">
<h2>{up} · {tool}</h2>
<p>{reason}; the definition waiting is <code>{fp}</code>.</p>
<pre data-testid="quarantine-diff">{diff}</pre>
<p class="actions"><button type="button" data-testid="pin-approve">Approve</button> <button type="button" data-testid="pin-reject">Reject</button></p>
</article>
"#,
            up = attr(&q["upstream"]),
            tool = attr(&q["tool"]),
            fp = attr(&q["pending"]["fingerprint"]),
            state = attr(&q["state"]),
            reason = attr(&q["reason"]),
            diff = esc(q["diff"].as_str().unwrap_or("")),
        );
    }
    let empty = if items.is_empty() {
        r#"<p data-testid="quarantine-empty">Nothing waits for review.</p>"#
    } else {
        ""
    };
    format!(
        r#"<p data-testid="action-result" data-outcome="" role="status"></p>
<section data-testid="quarantine">
{empty}{out}</section>
<noscript><p>Approving and rejecting need JavaScript; so does POST /ui/api/pins/approve.</p></noscript>"#
    )
}

pub fn config(doc: &Value, base: &str) -> String {
    let last = &doc["last_reload"];
    let outcome = last["outcome"].as_str().unwrap_or("none");
    format!(
        r#"<dl>
<dt>Version</dt><dd data-testid="config-version">{version}</dd>
<dt>Gateway id</dt><dd data-testid="config-gateway-id">{id}</dd>
<dt>Started</dt><dd data-testid="config-started-at">{started}</dd>
<dt>Configuration digest</dt><dd data-testid="config-digest">{digest}</dd>
<dt>Loaded</dt><dd data-testid="config-loaded-at">{loaded}</dd>
<dt>Reloads</dt><dd data-testid="config-reloads">{applied} applied, {rejected} rejected</dd>
<dt>Last reload</dt><dd data-testid="reload-outcome" data-outcome="{outcome}">{outcome}</dd>
<dt>Its error</dt><dd data-testid="reload-error">{error}</dd>
</dl>
<p><a data-testid="metrics-link" href="{base}api/metrics">This replica's metrics</a> (Prometheus text).</p>"#,
        version = attr(&doc["version"]),
        id = attr(&doc["gateway_id"]),
        started = attr(&doc["started_at"]),
        digest = attr(&doc["digest"]),
        loaded = attr(&doc["loaded_at"]),
        applied = doc["reloads"]["applied"],
        rejected = doc["reloads"]["rejected"],
        error = attr(&last["error"]),
    )
}

/// The login form; `refused` adds its error.
pub fn login(refused: bool) -> String {
    let error = if refused {
        r#"<p data-testid="login-error" role="alert">That is not the admin token.</p>"#
    } else {
        ""
    };
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Log in · mcp-gateway</title>
<link rel="stylesheet" href="static/console.css">
</head>
<body class="login">
<main>
<h1>mcp-gateway</h1>
<p>The admin console of this gateway (version <span data-testid="version">{version}</span>).</p>
{error}
<form data-testid="login-form" method="post" action="login">
<label for="token">Admin token</label>
<input data-testid="login-token" id="token" name="token" type="password" autocomplete="current-password" required>
<button data-testid="login-submit" type="submit">Log in</button>
</form>
</main>
</body></html>
"#,
        version = env!("CARGO_PKG_VERSION"),
    )
}
