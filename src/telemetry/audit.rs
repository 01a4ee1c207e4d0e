//! The audit line of a tool call, written straight into a reused line in
//! the shape tracing-subscriber's JSON formatter gives every other line.

use super::*;

/// The fields of a tool call's audit line (README, "Logs").
pub struct AuditLine<'a> {
    pub tenant: &'a str,
    pub tool: &'a str,
    /// The tool's name as the agent called it, where it called it by name.
    pub name: Option<&'a str>,
    pub upstream: &'a str,
    pub outcome: &'a str,
    pub duration_ms: f64,
    pub args_hmac: &'a str,
    pub protocol: &'a str,
    /// The result was cut to the tenant's output budget (written only when so).
    pub truncated: Option<bool>,
    /// The result came from the tenant's result cache (written only when so).
    pub cached: Option<bool>,
    /// The mode of the upstream's `auth`, when it has one.
    pub upstream_auth: Option<&'a str>,
    /// How the upstream request's credential was come by (`cached`, `fetched`).
    pub credential: Option<&'a str>,
    /// The token's subject, when the caller presented a JWT.
    pub subject: Option<&'a str>,
    /// The meta-tool the call came through (`call_tool`), if any.
    pub via: Option<&'a str>,
}

/// Writes the audit line of a tool call to the log writer, as
/// tracing-subscriber's JSON formatter (with `flatten_event`) writes the
/// event `info!(target: AUDIT, tenant, tool, upstream, outcome, duration_ms,
/// args_hmac, protocol, subject, "tool call")` inside the current span: each piece
/// straight into one reused line, without dispatching an event.
pub fn audit(line: &AuditLine<'_>) {
    thread_local! {
        static LINE: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
    }
    LINE.with(|buf| {
        let Ok(mut out) = buf.try_borrow_mut() else {
            return;
        };
        out.clear();
        audit_line(&mut out, line);
        writer::line(out.as_bytes());
    });
}

pub(super) fn audit_line(out: &mut String, line: &AuditLine<'_>) {
    out.push_str("{\"timestamp\":\"");
    timestamp(out, std::time::SystemTime::now());
    out.push_str("\",\"level\":\"INFO\",\"message\":\"tool call\",\"tenant\":");
    // Only the tool id comes from the client; the rest are names the
    // configuration allows (letters, digits, '-', '_'), closed sets and hex,
    // which JSON writes as they are.
    plain(out, line.tenant);
    out.push_str(",\"tool\":");
    string(out, line.tool);
    if let Some(name) = line.name {
        out.push_str(",\"name\":");
        string(out, name);
    }
    out.push_str(",\"upstream\":");
    plain(out, line.upstream);
    out.push_str(",\"outcome\":");
    plain(out, line.outcome);
    out.push_str(",\"duration_ms\":");
    number(out, line.duration_ms);
    out.push_str(",\"args_hmac\":");
    plain(out, line.args_hmac);
    out.push_str(",\"protocol\":");
    plain(out, line.protocol);
    if line.truncated == Some(true) {
        out.push_str(",\"truncated\":true");
    }
    if line.cached == Some(true) {
        out.push_str(",\"cached\":true");
    }
    // Closed sets of plain words.
    if let Some(mode) = line.upstream_auth {
        out.push_str(",\"upstream_auth\":");
        plain(out, mode);
    }
    if let Some(credential) = line.credential {
        out.push_str(",\"credential\":");
        plain(out, credential);
    }
    if let Some(subject) = line.subject {
        out.push_str(",\"subject\":");
        string(out, subject);
    }
    if let Some(via) = line.via {
        out.push_str(",\"via\":");
        plain(out, via);
    }
    if let Some((trace, span)) = super::traces::ids() {
        super::traces::add_ids(out, &trace, &span);
    }
    out.push_str(",\"target\":\"mcp_gateway::audit\"");
    spans(out);
    out.push_str("}\n");
}

/// `now` as tracing-subscriber's `SystemTime` timer writes it: RFC 3339,
/// UTC, microseconds. The date and the second are formatted once a second
/// on each thread, the microseconds every time.
pub(super) fn timestamp(out: &mut String, now: std::time::SystemTime) {
    thread_local! {
        /// A second since the epoch, and its `YYYY-MM-DDTHH:MM:SS`.
        static SECOND: Cell<(u64, [u8; 19])> = const { Cell::new((u64::MAX, [0; 19])) };
    }
    let Ok(since) = now.duration_since(std::time::UNIX_EPOCH) else {
        let _ = write!(out, "{}", humantime::format_rfc3339_micros(now));
        return;
    };
    let (secs, mut head) = SECOND.get();
    if secs != since.as_secs() {
        // `YYYY-MM-DDTHH:MM:SSZ`, for the years 0-9999.
        let text = humantime::format_rfc3339_seconds(now).to_string();
        let Some(date_time) = text.strip_suffix('Z').filter(|t| t.len() == 19) else {
            let _ = write!(out, "{}", humantime::format_rfc3339_micros(now));
            return;
        };
        head.copy_from_slice(date_time.as_bytes());
        SECOND.set((since.as_secs(), head));
    }
    out.push_str(std::str::from_utf8(&head).unwrap_or("0000-00-00T00:00:00"));
    let mut micros = since.subsec_micros();
    let mut digits = *b".000000Z";
    for d in digits[1..7].iter_mut().rev() {
        *d = b'0' + (micros % 10) as u8;
        micros /= 10;
    }
    out.push_str(std::str::from_utf8(&digits).unwrap_or(".000000Z"));
}

/// `"span"` and `"spans"` as the JSON formatter writes them: the current
/// span, then every span from the root, the current [`Scope`] the
/// outermost; nothing outside any.
pub(super) fn spans(out: &mut String) {
    Scope::with_current(|scope| {
        let at = out.len();
        if ENTERED.get() > 0 {
            registry_spans(out);
        }
        if let Some(scope) = scope {
            add_scope(out, at, scope);
        }
    });
}

/// The spans entered, from the registry, as [`spans`] writes them.
pub(super) fn registry_spans(out: &mut String) {
    tracing::dispatcher::get_default(|dispatch| {
        let Some(registry) = dispatch.downcast_ref::<tracing_subscriber::Registry>() else {
            return;
        };
        let Some(current) = dispatch
            .current_span()
            .id()
            .and_then(|id| registry.span(id))
        else {
            return;
        };
        out.push_str(",\"span\":");
        span_object(out, &current);
        out.push_str(",\"spans\":[");
        for (i, span) in current.scope().from_root().enumerate() {
            if i > 0 {
                out.push(',');
            }
            span_object(out, &span);
        }
        out.push(']');
    });
}

/// Adds `scope` to the line `out` holds from `from` on, as the outermost
/// span: first in its `"spans"` list, or, when it has none, as its `"span"`
/// and its only one in `"spans"`. The list's key is found by `,"spans":[`,
/// which only the line's structure can hold: inside a JSON string every `"`
/// is escaped.
pub(super) fn add_scope(out: &mut String, from: usize, scope: &str) {
    const KEY: &str = ",\"spans\":[";
    if let Some(at) = out[from..].rfind(KEY) {
        let at = from + at + KEY.len();
        out.insert(at, ',');
        out.insert_str(at, scope);
    } else {
        out.push_str(",\"span\":");
        out.push_str(scope);
        out.push_str(KEY);
        out.push_str(scope);
        out.push(']');
    }
}
