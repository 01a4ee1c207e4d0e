//! Logging: `tracing` to stderr (stdout may carry protocol frames), JSON by
//! default for log stacks, or human text. Filter with `MCP_GATEWAY_LOG`
//! (e.g. `info`, `mcp_gateway=debug`).
//!
//! JSON lines are handed to a writer thread of its own ([`writer`]): no
//! call waits for stderr, and a stderr that blocks costs dropped, counted
//! lines, never a stalled gateway. The audit line of every tool call is
//! written straight into a reused line ([`audit`]), in the shape
//! tracing-subscriber's JSON formatter gives every other line; spans keep
//! their fields as JSON text that a field recorded later is appended to
//! ([`SpanFields`]). Text lines (for a terminal) are written where they happen.

use std::fmt::{self, Write as _};
use std::io;

use std::sync::atomic::{AtomicBool, Ordering};

use tracing::field::{Field, Visit};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FormatFields, FormattedFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;

pub mod writer;

/// The target of audit lines.
pub const AUDIT: &str = "mcp_gateway::audit";

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Json,
    Text,
}

pub fn init(format: LogFormat) {
    let filter =
        EnvFilter::try_from_env("MCP_GATEWAY_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let _ = match format {
        LogFormat::Json => {
            writer::start();
            let set = builder
                .fmt_fields(SpanFields)
                .event_format(tracing_subscriber::fmt::format().json().flatten_event(true))
                .with_writer(Out)
                .try_init();
            DIRECT.store(set.is_ok(), Ordering::Relaxed);
            set
        }
        LogFormat::Text => builder.with_writer(io::stderr).try_init(),
    };
}

/// Writes out the log lines not yet written (at the end of `main`).
pub fn flush() {
    writer::flush();
}

/// JSON lines go to the log writer's queue.
struct Out;

impl<'a> MakeWriter<'a> for Out {
    type Writer = Queued;

    fn make_writer(&'a self) -> Queued {
        Queued
    }
}

/// Hands each whole line to [`writer`].
struct Queued;

impl io::Write for Queued {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        writer::line(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Whether audit lines are written by [`audit`] (the JSON format is on).
static DIRECT: AtomicBool = AtomicBool::new(false);

/// Whether [`audit`] writes the audit line; otherwise it is a `tracing`
/// event like any other (the text format, a test's own subscriber).
pub fn audit_direct() -> bool {
    DIRECT.load(Ordering::Relaxed)
}

/// The fields of a tool call's audit line (README, "Logs").
pub struct AuditLine<'a> {
    pub tenant: &'a str,
    pub tool: &'a str,
    pub upstream: &'a str,
    pub outcome: &'a str,
    pub duration_ms: f64,
    pub args_hmac: &'a str,
    pub protocol: &'a str,
    /// The token's subject, when the caller presented a JWT.
    pub subject: Option<&'a str>,
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

fn audit_line(out: &mut String, line: &AuditLine<'_>) {
    // As tracing-subscriber's SystemTime writes it: RFC 3339, UTC, microseconds.
    let _ = write!(
        out,
        "{{\"timestamp\":\"{}\",\"level\":\"INFO\",\"message\":\"tool call\",\"tenant\":",
        humantime::format_rfc3339_micros(std::time::SystemTime::now())
    );
    // Only the tool id comes from the client; the rest are names the
    // configuration allows (letters, digits, '-', '_'), closed sets and hex,
    // which JSON writes as they are.
    plain(out, line.tenant);
    out.push_str(",\"tool\":");
    string(out, line.tool);
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
    if let Some(subject) = line.subject {
        out.push_str(",\"subject\":");
        string(out, subject);
    }
    out.push_str(",\"target\":\"mcp_gateway::audit\"");
    spans(out);
    out.push_str("}\n");
}

/// `"span"` and `"spans"` as the JSON formatter writes them: the current
/// span, then every span from the root; nothing outside any span.
fn spans(out: &mut String) {
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

/// A number as serde_json writes it (`null` for NaN and the infinities).
fn number(out: &mut String, value: impl serde::Serialize) {
    let mut buf = [0u8; 48];
    let mut rest = &mut buf[..];
    let written = match serde_json::to_writer(&mut rest, &value) {
        Ok(()) => 48 - rest.len(),
        Err(_) => 0,
    };
    out.push_str(std::str::from_utf8(&buf[..written]).unwrap_or("null"));
}

/// A span as the JSON formatter shows it: its fields, then its `name`.
fn span_object<S>(out: &mut String, span: &tracing_subscriber::registry::SpanRef<'_, S>)
where
    S: for<'a> LookupSpan<'a>,
{
    let ext = span.extensions();
    let fields = ext
        .get::<FormattedFields<SpanFields>>()
        .map_or("", |f| f.fields.as_str());
    match fields.strip_suffix('}') {
        Some(open) if open.len() > 1 => {
            out.push_str(open);
            out.push(',');
        }
        _ => out.push('{'),
    }
    out.push_str("\"name\":");
    string(out, span.metadata().name());
    out.push('}');
}

/// A JSON string, escaped as serde_json escapes it: `"` and `\\`, and
/// control characters (short forms where JSON has them, else `\u00XX`).
fn string(out: &mut String, s: &str) {
    out.push('"');
    let _ = Escaped(out).write_str(s);
    out.push('"');
}

/// A JSON string of text known to need no escaping (checked in debug builds).
fn plain(out: &mut String, s: &str) {
    debug_assert!(
        !s.bytes().any(|b| ESCAPES[usize::from(b)]),
        "{s:?} needs escaping"
    );
    out.push('"');
    out.push_str(s);
    out.push('"');
}

/// Escapes what is written through it as the inside of a JSON string.
struct Escaped<'a>(&'a mut String);

/// The bytes a JSON string escapes: `"`, `\\` and the control characters.
static ESCAPES: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        t[b] = true;
        b += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

impl fmt::Write for Escaped<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut rest = s;
        while let Some(at) = rest.bytes().position(|b| ESCAPES[usize::from(b)]) {
            // Every byte escaped is ASCII, so `at` is on a char boundary.
            self.0.push_str(&rest[..at]);
            let b = rest.as_bytes()[at];
            match b {
                b'"' => self.0.push_str("\\\""),
                b'\\' => self.0.push_str("\\\\"),
                b'\n' => self.0.push_str("\\n"),
                b'\r' => self.0.push_str("\\r"),
                b'\t' => self.0.push_str("\\t"),
                0x08 => self.0.push_str("\\b"),
                0x0c => self.0.push_str("\\f"),
                _ => write!(self.0, "\\u{b:04x}")?,
            }
            rest = &rest[at + 1..];
        }
        self.0.push_str(rest);
        Ok(())
    }
}

/// Writes fields as JSON members (`"name":value`), each value as
/// tracing-serde gives it: strings and `Debug` text as strings, numbers as
/// serde_json writes them.
struct FieldsJson<'a> {
    out: &'a mut String,
    /// Whether the next member is the object's first (no comma before it).
    first: bool,
}

impl FieldsJson<'_> {
    fn name(&mut self, field: &Field) {
        if !std::mem::take(&mut self.first) {
            self.out.push(',');
        }
        string(self.out, field.name());
        self.out.push(':');
    }

    fn number(&mut self, field: &Field, value: impl serde::Serialize) {
        self.name(field);
        number(self.out, value);
    }
}

impl Visit for FieldsJson<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.name(field);
        string(self.out, value);
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.number(field, value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.number(field, value);
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.number(field, value);
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.number(field, value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.name(field);
        self.out.push('"');
        let _ = write!(Escaped(self.out), "{value:?}");
        self.out.push('"');
    }
}

/// Span fields as a JSON object, as tracing-subscriber's `JsonFields` keeps
/// them, except that a field recorded later (a request's tenant, once
/// known) is appended rather than the object parsed and written again; only
/// a field recorded twice takes that slower way.
struct SpanFields;

impl<'w> FormatFields<'w> for SpanFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        mut writer: Writer<'w>,
        fields: R,
    ) -> fmt::Result {
        let mut out = String::with_capacity(96);
        out.push('{');
        fields.record(&mut FieldsJson {
            out: &mut out,
            first: true,
        });
        out.push('}');
        writer.write_str(&out)
    }

    fn add_fields(
        &self,
        current: &'w mut FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> fmt::Result {
        let open = current.fields.strip_suffix('}').unwrap_or("");
        let mut again = false;
        fields.record(&mut |field: &Field, _: &dyn fmt::Debug| {
            again |= member_named(open, field.name());
        });
        if again {
            // A field recorded again replaces its value, as JsonFields does.
            let mut added = String::new();
            self.format_fields(Writer::new(&mut added), fields)?;
            let mut map: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(&current.fields).map_err(|_| fmt::Error)?;
            let newer: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(&added).map_err(|_| fmt::Error)?;
            map.extend(newer);
            current.fields = serde_json::to_string(&map).map_err(|_| fmt::Error)?;
            return Ok(());
        }
        let first = open.len() <= 1;
        if first {
            current.fields.clear();
            current.fields.push('{');
        } else {
            current.fields.pop();
        }
        fields.record(&mut FieldsJson {
            out: &mut current.fields,
            first,
        });
        current.fields.push('}');
        Ok(())
    }
}

/// Whether `"name":` occurs in `json` (perhaps inside a value: then the
/// caller merely takes its slower way).
fn member_named(json: &str, name: &str) -> bool {
    json.match_indices(name)
        .any(|(at, _)| json[..at].ends_with('"') && json[at + name.len()..].starts_with("\":"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Capture {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Capture {
        type Writer = Capture;
        fn make_writer(&'a self) -> Capture {
            self.clone()
        }
    }

    /// Strips a line's timestamp, checking its shape.
    fn untimed(l: &str) -> String {
        let (head, rest) = l.split_once("\",\"level\"").unwrap();
        let stamp = head.strip_prefix("{\"timestamp\":\"").unwrap();
        // 2026-12-01T17:04:50.621894Z
        assert_eq!(stamp.len(), 27, "{stamp}");
        assert!(
            stamp.ends_with('Z') && stamp.as_bytes()[19] == b'.',
            "{stamp}"
        );
        rest.to_owned()
    }

    fn lines(out: &Capture) -> Vec<String> {
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        text.lines().map(untimed).collect()
    }

    /// Spans, audit lines (through `audit`) and another line.
    fn events(audit: &dyn Fn(&AuditLine<'_>)) {
        let line = |tool, took, outcome| AuditLine {
            tenant: "acme",
            tool,
            upstream: "files",
            outcome,
            duration_ms: took,
            args_hmac: "00ff",
            protocol: "v1",
            subject: (tool == "nested").then_some("agent \"7\"\n"),
        };
        audit(&line("outside", 1.0, "ok"));
        let span = tracing::info_span!(
            "request",
            request_id = "r\"1\u{1}\u{7f}é",
            tenant = tracing::field::Empty
        );
        let _in = span.enter();
        audit(&line("before the tenant", 2.5, "ok"));
        span.record("tenant", "acme\\\n\t");
        for took in [0.1 + 0.2, 1e-7, 12345.678, f64::NAN] {
            audit(&line(
                "mcp://gateway/s/s/tools/é\"x\u{8}\u{c}\r😀",
                took,
                "denied",
            ));
        }
        tracing::warn!(
            other = "kept as tracing-subscriber writes it",
            n = 3u64,
            "elsewhere"
        );
        let inner = tracing::info_span!("inner", depth = 2u64, ok = true);
        let _deeper = inner.enter();
        audit(&line("nested", 0.0, "ok"));
        span.record("tenant", "again");
        audit(&line("recorded twice", 0.0, "ok"));
        tracing::info!(x = -1i64, "inner line");
    }

    #[test]
    fn audit_lines_and_spans_are_what_the_general_json_formatter_writes() {
        let ours = Capture::default();
        let direct = Arc::new(Mutex::new(Vec::new()));
        let subscriber = tracing_subscriber::fmt()
            .fmt_fields(SpanFields)
            .event_format(tracing_subscriber::fmt::format().json().flatten_event(true))
            .with_writer(ours.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            events(&|line| {
                let mut out = String::new();
                audit_line(&mut out, line);
                assert!(out.ends_with("}\n"));
                direct.lock().unwrap().push(untimed(out.trim_end()));
            })
        });
        let theirs = Capture::default();
        let general = tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_writer(theirs.clone())
            .finish();
        tracing::subscriber::with_default(general, || {
            events(&|l| {
                tracing::info!(
                    target: AUDIT,
                    tenant = l.tenant,
                    tool = l.tool,
                    upstream = l.upstream,
                    outcome = l.outcome,
                    duration_ms = l.duration_ms,
                    args_hmac = l.args_hmac,
                    protocol = l.protocol,
                    subject = l.subject,
                    "tool call"
                )
            })
        });
        let theirs = lines(&theirs);
        let (their_audit, their_other): (Vec<_>, Vec<_>) = theirs
            .into_iter()
            .partition(|l| l.contains("\"target\":\"mcp_gateway::audit\""));
        let direct = direct.lock().unwrap().clone();
        assert_eq!(direct.len(), 8);
        assert_eq!(direct, their_audit);
        assert_eq!(
            lines(&ours),
            their_other,
            "other lines, with the spans' fields"
        );
        assert!(
            direct[2].contains("\"span\":{\"request_id\":\"r\\\"1\\u0001\u{7f}é\",\"tenant\":\"acme\\\\\\n\\t\",\"name\":\"request\"}"),
            "{}",
            direct[2]
        );
        assert!(!direct[0].contains("\"span\""), "no span outside one");
    }
}
