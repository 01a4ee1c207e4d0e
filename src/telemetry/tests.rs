//! Unit tests of `telemetry`.

#[test]
fn a_duration_is_written_to_the_microsecond() {
    let ms = super::millis(std::time::Duration::from_nanos(27_469));
    assert_eq!(serde_json::to_string(&ms).unwrap(), "0.027");
}

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
        name: (tool == "nested").then_some("say \"it\""),
        upstream: "files",
        outcome,
        duration_ms: took,
        args_hmac: "00ff",
        protocol: "v1",
        truncated: (tool == "nested").then_some(true),
        cached: (outcome == "ok").then_some(true),
        upstream_auth: (tool == "nested").then_some("client_credentials"),
        credential: (tool == "nested").then_some("cached"),
        subject: (tool == "nested").then_some("agent \"7\"\n"),
        via: None,
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
                name = l.name,
                upstream = l.upstream,
                outcome = l.outcome,
                duration_ms = l.duration_ms,
                args_hmac = l.args_hmac,
                protocol = l.protocol,
                truncated = l.truncated,
                cached = l.cached,
                upstream_auth = l.upstream_auth,
                credential = l.credential,
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
                name: None,
                upstream: "files",
                outcome: "ok",
                duration_ms: 1.5,
                args_hmac: "00ff",
                protocol: "v1",
                truncated: None,
                cached: None,
                upstream_auth: None,
                credential: None,
                subject: None,
                via: None,
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
            &|id, tenant, f| tracing::info_span!("request", request_id = id, tenant).in_scope(f),
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
    let mut cases: Vec<Vec<u8>> = vec![Vec::new(), b"plain text, long enough for words".to_vec()];
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
