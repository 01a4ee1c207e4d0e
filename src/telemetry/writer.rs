//! The log writer: each JSON line is appended to a buffer that a thread of
//! its own writes to stderr, many lines at a time, so that no call waits for
//! stderr or pays a system call of its own. When the writer falls behind
//! (stderr blocked, a log pipeline that stopped reading) and [`CAP`] bytes
//! wait, further lines are dropped and counted
//! (`mcp_gateway_log_lines_dropped_total`), never blocking a call.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// Most bytes of lines waiting to be written: about 9,000 audit lines.
const CAP: usize = 4 << 20;

/// How long the writer gathers lines after the first before it writes them.
/// Waking the thread and writing costs about as much as copying tens of
/// kilobytes, so a wake-up is shared by as many lines as come meanwhile,
/// while a busy gateway's batch stays far below [`CAP`]. A line reaches
/// stderr at most this much later than it was formatted (its timestamp is
/// when it happened).
const GATHER: Duration = Duration::from_millis(25);

struct Sink {
    pending: Mutex<Vec<u8>>,
    /// Most bytes `pending` holds.
    cap: usize,
    ready: Condvar,
    /// Held while a batch is written, so that batches leave in order
    /// (the writer thread and [`flush`]); its buffer is reused.
    out: Mutex<Vec<u8>>,
    dropped: AtomicU64,
    running: AtomicBool,
}

static SINK: Sink = Sink::new(CAP);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Sink {
    const fn new(cap: usize) -> Self {
        Sink {
            pending: Mutex::new(Vec::new()),
            cap,
            ready: Condvar::new(),
            out: Mutex::new(Vec::new()),
            dropped: AtomicU64::new(0),
            running: AtomicBool::new(false),
        }
    }

    /// Queues one whole line, or drops and counts it when `cap` bytes wait.
    fn push(&self, buf: &[u8]) {
        let mut pending = lock(&self.pending);
        if pending.len() + buf.len() > self.cap {
            drop(pending);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let first = pending.is_empty();
        pending.extend_from_slice(buf);
        drop(pending);
        if first {
            self.ready.notify_one();
        }
    }

    /// Waits until some line is queued.
    fn wait(&self) {
        let mut pending = lock(&self.pending);
        while pending.is_empty() {
            pending = self
                .ready
                .wait(pending)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Writes every line queued so far to `to`, in the order they came.
    fn write_out(&self, to: &mut impl Write) {
        let mut out = lock(&self.out);
        std::mem::swap(&mut *lock(&self.pending), &mut *out);
        if !out.is_empty() {
            // A write error (stderr closed) loses these lines: there is
            // nowhere else to put them.
            let _ = to.write_all(&out);
            out.clear();
        }
    }
}

/// Starts the writer thread (once). Without it, lines are written where
/// they are formatted.
pub fn start() {
    if SINK.running.swap(true, Ordering::AcqRel) {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("log-writer".into())
        .spawn(|| {
            loop {
                SINK.wait();
                std::thread::sleep(GATHER);
                SINK.write_out(&mut std::io::stderr().lock());
            }
        });
    if spawned.is_err() {
        SINK.running.store(false, Ordering::Release);
    }
}

/// Lines dropped because the writer was [`CAP`] bytes behind.
pub fn dropped() -> u64 {
    SINK.dropped.load(Ordering::Relaxed)
}

/// Queues one whole line (or writes it, when no writer runs).
pub(super) fn line(buf: &[u8]) {
    if SINK.running.load(Ordering::Acquire) {
        SINK.push(buf);
    } else {
        let _ = std::io::stderr().write_all(buf);
    }
}

/// Writes out every line queued so far, before this returns.
pub fn flush() {
    SINK.write_out(&mut std::io::stderr().lock());
}

#[cfg(test)]
mod tests;
