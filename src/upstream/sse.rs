//! Server-sent events as a Streamable HTTP upstream sends them: each
//! complete event's `data` (its lines joined), and what a client needs to
//! resume a stream that ended early: the last event id seen and the
//! `retry` the server asked for (the SSE rules: an `id` field sets the last
//! event id, also on an event without data; `retry` holds digits only).

use std::borrow::Cow;
use std::time::Duration;

use bytes::Bytes;

/// Where the first complete event at or after `from` ends: (end of its
/// text, end of the blank line after it).
fn event_end(buf: &[u8], from: usize) -> Option<(usize, usize)> {
    let mut i = from;
    while i < buf.len() {
        if buf[i] == b'\n' {
            if buf.get(i + 1) == Some(&b'\n') {
                return Some((i, i + 2));
            }
            if buf.get(i + 1) == Some(&b'\r') && buf.get(i + 2) == Some(&b'\n') {
                return Some((i, i + 3));
            }
        }
        i += 1;
    }
    None
}

/// One event's fields.
#[derive(Debug, Default, PartialEq)]
pub struct Event<'a> {
    /// Its `data:` lines joined by newlines (one line borrowed as it is).
    pub data: Option<Cow<'a, [u8]>>,
    /// Its `id`, when it has one without a NUL.
    pub id: Option<&'a [u8]>,
    /// Its `retry`, when it is digits.
    pub retry: Option<Duration>,
}

fn fields(event: &[u8]) -> Event<'_> {
    let mut e = Event::default();
    for line in event.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let (name, value) = match line.iter().position(|&b| b == b':') {
            // A comment.
            Some(0) => continue,
            Some(at) => {
                let value = &line[at + 1..];
                (&line[..at], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &[][..]),
        };
        match name {
            b"data" => {
                e.data = Some(match e.data.take() {
                    None => Cow::Borrowed(value),
                    Some(before) => {
                        let mut joined = before.into_owned();
                        joined.push(b'\n');
                        joined.extend_from_slice(value);
                        Cow::Owned(joined)
                    }
                });
            }
            b"id" if !value.contains(&0) => e.id = Some(value),
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                e.retry = std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .map(Duration::from_millis);
            }
            _ => {}
        }
    }
    e
}

/// Hands every complete event of `buf` from `from` on to `each`; returns
/// where the incomplete rest starts.
pub fn each_event(buf: &[u8], mut from: usize, mut each: impl FnMut(Event<'_>)) -> usize {
    while let Some((text, end)) = event_end(buf, from) {
        each(fields(&buf[from..text]));
        from = end;
    }
    from
}

/// What resuming a stream needs: the last event id and the retry asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resume {
    pub last_id: Option<String>,
    pub retry: Option<Duration>,
}

impl Resume {
    /// Takes in what an event says.
    pub fn saw(&mut self, event: &Event<'_>) {
        if let Some(id) = event.id {
            self.last_id = Some(String::from_utf8_lossy(id).into_owned());
        }
        if let Some(retry) = event.retry {
            self.retry = Some(retry);
        }
    }
}

/// Server-sent events as they arrive: the `data` of each complete event.
#[derive(Default)]
pub struct EventBuffer {
    buf: Vec<u8>,
    pub resume: Resume,
}

impl EventBuffer {
    /// A buffer for a stream resumed from `at`.
    pub fn resuming(at: Resume) -> Self {
        EventBuffer {
            buf: Vec::new(),
            resume: at,
        }
    }

    pub fn push(&mut self, chunk: &Bytes) {
        self.buf.extend_from_slice(chunk);
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// The data of the complete events received so far, taken out.
    pub fn take_data(&mut self) -> Vec<Vec<u8>> {
        let mut all = Vec::new();
        let resume = &mut self.resume;
        let rest = each_event(&self.buf, 0, |e| {
            resume.saw(&e);
            if let Some(data) = e.data {
                all.push(data.into_owned());
            }
        });
        self.buf.drain(..rest);
        all
    }
}

#[cfg(test)]
mod tests;
