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
//!
//! On the edge's own HTTP/1.1 path a request's id and tenant are a
//! [`Scope`], not a `tracing` span, where the JSON log is on: every line
//! written in it still carries them as its `request` span, at a fraction of
//! what making, entering and looking up a span costs.

use std::cell::Cell;
use std::fmt::{self, Write as _};
use std::io;

use std::sync::atomic::{AtomicBool, Ordering};

use tracing::field::{Field, Visit};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields, MakeWriter};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;

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
    match format {
        LogFormat::Json => {
            writer::start();
            let set = json(filter, Out).try_init().is_ok();
            DIRECT.store(set, Ordering::Relaxed);
        }
        LogFormat::Text => {
            // Colours for a terminal only: into a pipe or a file they are
            // escape codes in every line (NO_COLOR turns them off anywhere).
            use std::io::IsTerminal;
            let colours = io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            let _ = tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_writer(io::stderr)
                .with_ansi(colours)
                .try_init();
        }
    }
}

/// The JSON log's subscriber: tracing-subscriber's JSON lines (with
/// `flatten_event`), spans' fields kept as [`SpanFields`], the current
/// [`Scope`] shown as a span, and [`Entered`] counting the spans entered.
fn json<W>(filter: EnvFilter, writer: W) -> impl tracing::Subscriber + Send + Sync + 'static
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .fmt_fields(SpanFields)
        .event_format(InScope(
            tracing_subscriber::fmt::format().json().flatten_event(true),
        ))
        .with_writer(writer)
        .finish()
        .with(Entered)
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

/// Whether audit lines are kept: the filter's say. Where the JSON log is on
/// its subscriber and filter are the process's for good, so it is asked once.
pub fn audit_enabled() -> bool {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ask = || tracing::enabled!(target: AUDIT, tracing::Level::INFO);
    if audit_direct() {
        *ENABLED.get_or_init(ask)
    } else {
        ask()
    }
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
    out.push_str("{\"timestamp\":\"");
    timestamp(out, std::time::SystemTime::now());
    out.push_str("\",\"level\":\"INFO\",\"message\":\"tool call\",\"tenant\":");
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

/// `now` as tracing-subscriber's `SystemTime` timer writes it: RFC 3339,
/// UTC, microseconds. The date and the second are formatted once a second
/// on each thread, the microseconds every time.
fn timestamp(out: &mut String, now: std::time::SystemTime) {
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
fn spans(out: &mut String) {
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
fn registry_spans(out: &mut String) {
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
fn add_scope(out: &mut String, from: usize, scope: &str) {
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

/// A request's place in the log where no `tracing` span is made for it: the
/// JSON object its `request` span would show (`request_id`, `tenant`,
/// `name`), written once per request. Every JSON line written while it is
/// current on a thread ([`Scope::run`]) carries it as that span would be
/// carried: the outermost in `spans`, and `span` unless a span is entered
/// inside it.
#[derive(Default)]
pub struct Scope {
    object: String,
}

thread_local! {
    /// The current [`Scope`]'s object; empty outside any.
    static CURRENT: Cell<String> = const { Cell::new(String::new()) };
    /// Spans entered and not yet exited on this thread ([`Entered`]).
    static ENTERED: Cell<u32> = const { Cell::new(0) };
}

impl Scope {
    /// Makes this the scope of the request `request_id` of `tenant`: the
    /// fields of `tracing::info_span!("request", request_id, tenant)`.
    pub fn set(&mut self, request_id: &str, tenant: Option<&str>) {
        let out = &mut self.object;
        out.clear();
        out.push_str("{\"request_id\":");
        string(out, request_id);
        if let Some(tenant) = tenant {
            out.push_str(",\"tenant\":");
            string(out, tenant);
        }
        out.push_str(",\"name\":\"request\"}");
    }

    /// Runs `f` (a poll of the request's future) with this scope current on
    /// this thread, and the one before it current again afterwards.
    pub fn run<R>(&mut self, f: impl FnOnce() -> R) -> R {
        struct Restore<'a> {
            to: &'a mut String,
            before: String,
        }
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                *self.to = CURRENT.replace(std::mem::take(&mut self.before));
            }
        }
        let before = CURRENT.replace(std::mem::take(&mut self.object));
        let _restore = Restore {
            to: &mut self.object,
            before,
        };
        f()
    }

    /// Calls `f` with the current scope's object, if there is one.
    fn with_current<R>(f: impl FnOnce(Option<&str>) -> R) -> R {
        let object = CURRENT.take();
        let r = f(Some(object.as_str()).filter(|o| !o.is_empty()));
        CURRENT.set(object);
        r
    }
}

/// Counts the spans entered on each thread, so that a line written outside
/// every span need not look for one in the registry.
struct Entered;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Entered {
    fn on_enter(&self, _: &tracing::span::Id, _: tracing_subscriber::layer::Context<'_, S>) {
        ENTERED.set(ENTERED.get() + 1);
    }

    fn on_exit(&self, _: &tracing::span::Id, _: tracing_subscriber::layer::Context<'_, S>) {
        ENTERED.set(ENTERED.get().saturating_sub(1));
    }
}

/// The JSON event format, with the current [`Scope`] among the line's spans.
struct InScope<F>(F);

impl<S, N, F> FormatEvent<S, N> for InScope<F>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> fmt::Result {
        Scope::with_current(|scope| {
            let Some(scope) = scope else {
                return self.0.format_event(ctx, writer, event);
            };
            let mut line = String::new();
            self.0.format_event(ctx, Writer::new(&mut line), event)?;
            // `{...}` and its newline: the spans go before the `}`.
            let Some(close) = line.rfind('}') else {
                return writer.write_str(&line);
            };
            let tail = line.split_off(close);
            add_scope(&mut line, 0, scope);
            line.push_str(&tail);
            writer.write_str(&line)
        })
    }
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

/// Where the first byte of `s` that a JSON string escapes is. Eight bytes
/// at a time while none of them is one (`"`, `\`, or below 0x20): the
/// tests of a word for a byte below `n` are exact as to whether there is one.
fn first_escaped(s: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([1; 8]);
    const HIGH: u64 = ONES << 7;
    let below = |x: u64, n: u8| x.wrapping_sub(ONES * u64::from(n)) & !x & HIGH;
    let mut words = s.chunks_exact(8);
    let mut at = 0;
    for word in words.by_ref() {
        let x = u64::from_ne_bytes(word.try_into().unwrap_or_default());
        let found = below(x, 0x20)
            | below(x ^ (ONES * u64::from(b'"')), 1)
            | below(x ^ (ONES * u64::from(b'\\')), 1);
        if found != 0 {
            break;
        }
        at += 8;
    }
    s[at..]
        .iter()
        .position(|&b| ESCAPES[usize::from(b)])
        .map(|i| at + i)
}

impl fmt::Write for Escaped<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut rest = s;
        while let Some(at) = first_escaped(rest.as_bytes()) {
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
        tracing::subscriber::with_default(json(EnvFilter::new("trace"), ours.clone()), || {
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

    /// Requests, each with a span of its own inside it and lines written
    /// before, in and after that span; `request` runs its closure as the
    /// request `id` of `tenant`.
    /// Runs its last argument as the request of an id and a tenant.
    type Request<'a> = &'a dyn Fn(&str, Option<&str>, &dyn Fn());

    fn requests(request: Request<'_>, audit: &dyn Fn(&str)) {
        tracing::info!("before any request");
        for (id, tenant) in [
            ("r\"1\\\u{1}é-a-long-one-of-many-words", Some("acme\n\t")),
            ("0123456789abcdef", None),
            ("second-on-the-connection", Some("beta")),
        ] {
            request(id, tenant, &|| {
                audit("first");
                tracing::warn!(n = 3u64, "in the request");
                let inner = tracing::info_span!("inner", depth = 2u64);
                inner.in_scope(|| {
                    audit("nested");
                    tracing::info!(x = -1i64, "in its span");
                });
                audit("after the span");
            });
            tracing::info!("between requests");
        }
    }

    #[test]
    fn lines_in_a_scope_are_what_they_are_in_the_request_span_it_stands_for() {
        let audit_line_of = |tool: &str| {
            let mut out = String::new();
            audit_line(
                &mut out,
                &AuditLine {
                    tenant: "acme",
                    tool,
                    upstream: "files",
                    outcome: "ok",
                    duration_ms: 1.5,
                    args_hmac: "00ff",
                    protocol: "v1",
                    subject: None,
                },
            );
            out
        };
        // In scopes, with the JSON log's own subscriber; the audit lines
        // written straight, in order among the others.
        let ours = Capture::default();
        tracing::subscriber::with_default(json(EnvFilter::new("trace"), ours.clone()), || {
            let mut scope = Scope::default();
            let scope = std::cell::RefCell::new(&mut scope);
            requests(
                &|id, tenant, f| {
                    let mut scope = scope.borrow_mut();
                    scope.set(id, tenant);
                    scope.run(f);
                },
                &|tool| {
                    use io::Write as _;
                    ours.clone()
                        .write_all(audit_line_of(tool).as_bytes())
                        .unwrap();
                },
            );
        });
        // In real spans, everything through the general formatter.
        let theirs = Capture::default();
        let general = tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_writer(theirs.clone())
            .finish();
        tracing::subscriber::with_default(general, || {
            requests(
                &|id, tenant, f| {
                    tracing::info_span!("request", request_id = id, tenant).in_scope(f)
                },
                &|tool| {
                    tracing::info!(
                        target: AUDIT,
                        tenant = "acme",
                        tool,
                        upstream = "files",
                        outcome = "ok",
                        duration_ms = 1.5,
                        args_hmac = "00ff",
                        protocol = "v1",
                        "tool call"
                    )
                },
            );
        });
        let (ours, theirs) = (lines(&ours), lines(&theirs));
        assert_eq!(ours.len(), 1 + 3 * 6);
        assert_eq!(ours, theirs);
        assert!(
            ours[1].contains("\"span\":{\"request_id\":\"r\\\"1\\\\\\u0001é-a-long-one-of-many-words\",\"tenant\":\"acme\\n\\t\",\"name\":\"request\"}"),
            "{}",
            ours[1]
        );
        assert!(
            !ours[0].contains("span") && !ours[6].contains("span"),
            "outside any request"
        );
    }

    #[test]
    fn the_word_at_a_time_search_finds_the_first_byte_to_escape() {
        let naive = |s: &[u8]| s.iter().position(|&b| ESCAPES[usize::from(b)]);
        let mut cases: Vec<Vec<u8>> =
            vec![Vec::new(), b"plain text, long enough for words".to_vec()];
        for len in [1, 7, 8, 9, 15, 16, 17, 31] {
            for at in 0..len {
                for b in [
                    0u8, 0x1f, b'"', b'\\', 0x20, 0x7f, 0x80, 0xff, b'!', b'#', b'[', b']',
                ] {
                    let mut s = vec![b'a'; len];
                    s[at] = b;
                    cases.push(s.clone());
                    // and a second one further on
                    if at + 3 < len {
                        s[at + 3] = b'"';
                        cases.push(s);
                    }
                }
            }
        }
        for s in &cases {
            assert_eq!(first_escaped(s), naive(s), "{s:?}");
        }
    }

    #[test]
    fn timestamps_are_humantimes_rfc3339_with_microseconds() {
        use std::time::{Duration, UNIX_EPOCH};
        let at = |secs: u64, nanos: u32| UNIX_EPOCH + Duration::new(secs, nanos);
        // The same second twice (the second from the cache), the next, a
        // jump back, the epoch and a leap day.
        for t in [
            at(1_764_612_345, 999_999_999),
            at(1_764_612_345, 1_000),
            at(1_764_612_346, 0),
            at(1_700_000_000, 123_456_789),
            at(0, 0),
            at(951_782_400, 7_000),
            std::time::SystemTime::now(),
        ] {
            let mut out = String::new();
            timestamp(&mut out, t);
            assert_eq!(out, humantime::format_rfc3339_micros(t).to_string());
        }
    }
}
