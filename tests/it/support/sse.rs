//! Reading the gateway's event streams (`text/event-stream`) the way a
//! client of the Model Context Protocol does: events end at a blank line,
//! an event's `data:` lines together are one JSON-RPC message, and an event
//! without data (a priming event, a keep-alive comment) carries none.

use serde_json::Value;

/// The messages of a whole stream's text, in order; its last event may
/// lack the blank line after it.
pub fn messages(text: &str) -> Vec<Value> {
    events(text, false)
}

/// The messages of the events a blank line has ended so far, in order:
/// the rest of the text may still be arriving.
pub fn so_far(text: &str) -> Vec<Value> {
    events(text, true)
}

/// Reads `stream` until the messages it has carried satisfy `done`, and
/// returns them all; fails the test if the stream ends first.
pub async fn read_until(
    stream: &mut reqwest::Response,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let mut seen = String::new();
    super::within(async {
        loop {
            let messages = so_far(&seen);
            if done(&messages) {
                return messages;
            }
            let chunk = stream.chunk().await.unwrap();
            let chunk = chunk.unwrap_or_else(|| panic!("the stream ended after: {seen}"));
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await
}

/// The messages of the events in `text`; with `whole`, only of the events
/// a blank line has ended (the rest may still be arriving).
fn events(text: &str, whole: bool) -> Vec<Value> {
    let text = text.replace("\r\n", "\n");
    let mut parts: Vec<&str> = text.split("\n\n").collect();
    if whole {
        parts.pop();
    }
    parts
        .into_iter()
        .filter_map(|event| {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            let data = data.join("\n");
            (!data.trim().is_empty()).then(|| {
                serde_json::from_str(&data)
                    .unwrap_or_else(|e| panic!("an event's data is not JSON ({e}): {data}"))
            })
        })
        .collect()
}
