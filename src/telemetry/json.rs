//! JSON text written by hand for log lines: numbers, strings and their
//! escapes, a span's fields, as serde_json and tracing-subscriber write them.

use super::*;

/// A number as serde_json writes it (`null` for NaN and the infinities).
pub(super) fn number(out: &mut String, value: impl serde::Serialize) {
    let mut buf = [0u8; 48];
    let mut rest = &mut buf[..];
    let written = match serde_json::to_writer(&mut rest, &value) {
        Ok(()) => 48 - rest.len(),
        Err(_) => 0,
    };
    out.push_str(std::str::from_utf8(&buf[..written]).unwrap_or("null"));
}

/// A span as the JSON formatter shows it: its fields, then its `name`.
pub(super) fn span_object<S>(out: &mut String, span: &tracing_subscriber::registry::SpanRef<'_, S>)
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
pub(super) fn string(out: &mut String, s: &str) {
    out.push('"');
    let _ = Escaped(out).write_str(s);
    out.push('"');
}

/// A JSON string of text known to need no escaping (checked in debug builds).
pub(super) fn plain(out: &mut String, s: &str) {
    debug_assert!(
        !s.bytes().any(|b| ESCAPES[usize::from(b)]),
        "{s:?} needs escaping"
    );
    out.push('"');
    out.push_str(s);
    out.push('"');
}

/// Escapes what is written through it as the inside of a JSON string.
pub(super) struct Escaped<'a>(&'a mut String);

/// The bytes a JSON string escapes: `"`, `\\` and the control characters.
pub(super) static ESCAPES: [bool; 256] = {
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
pub(super) fn first_escaped(s: &[u8]) -> Option<usize> {
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
pub(super) struct FieldsJson<'a> {
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
pub(super) struct SpanFields;

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
pub(super) fn member_named(json: &str, name: &str) -> bool {
    json.match_indices(name)
        .any(|(at, _)| json[..at].ends_with('"') && json[at + name.len()..].starts_with("\":"))
}
