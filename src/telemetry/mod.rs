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

mod audit;
mod export;
mod json;
mod scope;
pub mod traces;
pub mod writer;

pub use audit::*;

/// A duration in milliseconds, to the microsecond: `0.027`, not
/// `0.027469999999999998` (the shortest text of the rounded value).
pub fn millis(d: std::time::Duration) -> f64 {
    d.as_micros() as f64 / 1000.0
}
use json::*;
pub use scope::*;

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

#[cfg(test)]
mod tests;
