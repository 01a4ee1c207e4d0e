//! Logging: `tracing` to stderr (stdout may carry protocol frames), JSON by
//! default for log stacks, or human text. Filter with `MCP_GATEWAY_LOG`
//! (e.g. `info`, `mcp_gateway=debug`).
//!
//! JSON lines are handed to a writer thread of its own ([`writer`]): no
//! call waits for stderr, and a stderr that blocks costs dropped, counted
//! lines, never a stalled gateway. The audit line of every tool call (target
//! [`AUDIT`]) is written straight into the line, in the shape
//! tracing-subscriber's JSON formatter gives every other line, which keep
//! that formatter. Text lines (for a terminal) are written where they happen.

use std::fmt::{self, Write as _};
use std::io;

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::{Format, Json, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields, MakeWriter};
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
            builder
                .fmt_fields(SpanFields)
                .event_format(Lines {
                    json: tracing_subscriber::fmt::format().json().flatten_event(true),
                })
                .with_writer(Out)
                .try_init()
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

/// The JSON line format: tracing-subscriber's, but audit events are written
/// field by field into the line, with the spans' fields copied as recorded.
struct Lines {
    json: Format<Json>,
}

impl<S> FormatEvent<S, SpanFields> for Lines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, SpanFields>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        if meta.target() != AUDIT {
            return self.json.format_event(ctx, writer, event);
        }
        thread_local! {
            static LINE: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
        }
        LINE.with(|line| {
            let Ok(mut line) = line.try_borrow_mut() else {
                return self.json.format_event(ctx, writer, event);
            };
            line.clear();
            audit_line(&mut line, ctx, event)?;
            writer.write_str(&line)
        })
    }
}

/// An audit event as tracing-subscriber's JSON formatter writes it (with
/// `flatten_event`): timestamp, level, the event's fields in order, target,
/// the current span and the list of spans from the root.
fn audit_line<S>(
    out: &mut String,
    ctx: &FmtContext<'_, S, SpanFields>,
    event: &Event<'_>,
) -> fmt::Result
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let meta = event.metadata();
    // As tracing-subscriber's SystemTime writes it: RFC 3339, UTC, microseconds.
    write!(
        out,
        "{{\"timestamp\":\"{}\",\"level\":\"{}\"",
        humantime::format_rfc3339_micros(std::time::SystemTime::now()),
        meta.level().as_str()
    )?;
    let mut fields = FieldsJson {
        out: &mut *out,
        first: false,
    };
    event.record(&mut fields);
    out.push_str(",\"target\":");
    string(out, meta.target());
    let current = event
        .parent()
        .and_then(|id| ctx.span(id))
        .or_else(|| ctx.lookup_current());
    if let Some(current) = current {
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
    }
    out.push_str("}\n");
    Ok(())
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

/// Escapes what is written through it as the inside of a JSON string.
struct Escaped<'a>(&'a mut String);

/// The bytes a JSON string escapes: `"`, `\\` and the control characters.
const ESCAPES: [bool; 256] = {
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
        let mut buf = [0u8; 48];
        let mut rest = &mut buf[..];
        let written = match serde_json::to_writer(&mut rest, &value) {
            Ok(()) => 48 - rest.len(),
            Err(_) => 0,
        };
        self.out
            .push_str(std::str::from_utf8(&buf[..written]).unwrap_or("null"));
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
        let mut out = String::from("{");
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

    /// What `events` log, through a subscriber, as lines without their timestamps.
    fn lines(
        subscriber: impl Subscriber + Send + Sync + 'static,
        out: &Capture,
        events: fn(),
    ) -> Vec<String> {
        tracing::subscriber::with_default(subscriber, events);
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        text.lines()
            .map(|l| {
                let (head, rest) = l.split_once("\",\"level\"").unwrap();
                let stamp = head.strip_prefix("{\"timestamp\":\"").unwrap();
                // 2026-12-01T17:04:50.621894Z
                assert_eq!(stamp.len(), 27, "{stamp}");
                assert!(
                    stamp.ends_with('Z') && stamp.as_bytes()[19] == b'.',
                    "{stamp}"
                );
                rest.to_owned()
            })
            .collect()
    }

    fn events() {
        let span = tracing::info_span!(
            "request",
            request_id = "r\"1\u{1}\u{7f}é",
            tenant = tracing::field::Empty
        );
        let _in = span.enter();
        tracing::info!(target: AUDIT, tenant = "before", "tool call");
        span.record("tenant", "acme\\\n\t");
        for took in [0.1 + 0.2, 1e-7, 12345.678, f64::NAN] {
            tracing::info!(
                target: AUDIT,
                tenant = "acme",
                tool = "mcp://gateway/s/s/tools/é\"x\u{8}\u{c}\r😀",
                duration_ms = took,
                n = -3i64,
                ok = true,
                "tool call"
            );
        }
        tracing::warn!(other = "kept as tracing-subscriber writes it", "elsewhere");
        let inner = tracing::info_span!("inner", depth = 2u64);
        let _deeper = inner.enter();
        tracing::info!(target: AUDIT, outcome = "ok", "tool call");
        span.record("tenant", "again");
        tracing::info!(target: AUDIT, outcome = "ok", "tool call");
        drop(_deeper);
        drop(_in);
        tracing::info!(target: AUDIT, outcome = "no span", "tool call");
    }

    #[test]
    fn audit_lines_are_what_the_general_json_formatter_writes() {
        let fast = Capture::default();
        let general = Capture::default();
        let ours = lines(
            tracing_subscriber::fmt()
                .fmt_fields(SpanFields)
                .event_format(Lines {
                    json: tracing_subscriber::fmt::format().json().flatten_event(true),
                })
                .with_writer(fast.clone())
                .finish(),
            &fast,
            events,
        );
        let theirs = lines(
            tracing_subscriber::fmt()
                .json()
                .flatten_event(true)
                .with_writer(general.clone())
                .finish(),
            &general,
            events,
        );
        assert_eq!(ours.len(), 9);
        assert_eq!(ours.len(), theirs.len());
        for (a, b) in ours.iter().zip(&theirs) {
            assert_eq!(a, b);
        }
        assert!(ours[2].contains("\"span\":{\"request_id\":\"r\\\"1\\u0001\u{7f}é\",\"tenant\":\"acme\\\\\\n\\t\",\"name\":\"request\"}"), "{}", ours[2]);
    }
}
