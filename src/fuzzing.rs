//! Entry points for the fuzz targets in `fuzz/`, also replayed over the stored
//! corpora by the normal test run (`tests/it/fuzz_corpus.rs`), so a regression
//! is caught without a fuzzer. Each one panics only when an invariant breaks.
#![allow(clippy::expect_used, reason = "a fuzz target's panic is its finding")]

use bytes::{BufMut, BytesMut};
use serde_json::value::RawValue;
use tokio_util::codec::Decoder;

use crate::config::{Config, Secrets};
use crate::jsonrpc::Json;
use crate::jsonrpc::message::parse_upstream;
use crate::jsonrpc::{ContentLengthCodec, Incoming, classify, write_error};
use crate::protocol::mcpid;

/// The framing codec, fed whole and byte by byte, with and without resync:
/// never a panic, never a frame over the limit, never a buffer past the bounds.
pub fn codec(data: &[u8]) {
    const LIMIT: usize = 1024;
    for resync in [false, true] {
        let fresh = || {
            let c = ContentLengthCodec::new(LIMIT).with_max_header_bytes(256);
            if resync { c.resynchronizing(4096) } else { c }
        };
        let mut whole = Vec::new();
        let mut codec = fresh();
        let mut buf = BytesMut::from(data);
        while let Ok(Some(frame)) = codec.decode(&mut buf) {
            assert!(frame.len() <= LIMIT);
            whole.push(frame);
        }
        // The same bytes one at a time give the same frames (up to the first error).
        let mut codec = fresh();
        let mut buf = BytesMut::new();
        let mut split = Vec::new();
        'feed: for &b in data {
            buf.put_u8(b);
            loop {
                match codec.decode(&mut buf) {
                    Ok(Some(frame)) => split.push(frame),
                    Ok(None) => break,
                    Err(_) => break 'feed,
                }
            }
            assert!(buf.len() <= LIMIT + 4096 + 256);
        }
        // Without resync, how the bytes arrive never changes what is decoded.
        if !resync {
            assert_eq!(split, whole, "a split feed decoded differently");
        }
    }
}

/// The JSON-RPC envelope: classification never panics, and every reply it
/// asks for is valid JSON that echoes the id it read.
pub fn envelope(data: &[u8]) {
    // The one-pass classification answers only what the general path would.
    let fast = crate::jsonrpc::classify_bytes(data).map(|m| format!("{m:?}"));
    // The scanner behind it, held to serde directly: what it accepts serde
    // reads, with the same members.
    if let Ok(text) = std::str::from_utf8(data) {
        scan_agrees(text);
        // So is the one-pass reading of arguments and outputs.
        use crate::protocol::instance::Instance;
        if let Some(fast) = Instance::read(text) {
            let by_serde = serde_json::from_str::<Instance<'_>>(text).ok();
            assert_eq!(
                Some(fast),
                by_serde,
                "one-pass reading differs from serde's"
            );
        }
    }
    let Ok(raw) = serde_json::from_slice::<&RawValue>(data) else {
        assert!(
            fast.is_none(),
            "classified bytes that are not one JSON value"
        );
        return;
    };
    if let Some(fast) = fast {
        assert_eq!(fast, format!("{:?}", classify(raw)));
    }

    // Likewise for upstream messages read in one pass.
    if let Some(fast) = crate::jsonrpc::message::parse_upstream_text(raw.get()) {
        assert_eq!(format!("{fast:?}"), format!("{:?}", parse_upstream(raw)));
    }
    let _ = parse_upstream(raw);
    let items: Vec<&RawValue> = if raw.get().starts_with('[') {
        serde_json::from_str(raw.get()).unwrap_or_default()
    } else {
        vec![raw]
    };
    for item in items {
        if let Incoming::Invalid { id, error } = classify(item) {
            let mut out = Vec::new();
            write_error(&mut out, id, &error);
            // Valid JSON, echoing the id byte for byte. (Not parsed into a Value:
            // an id such as 1e99999 is valid JSON that no f64 can hold.)
            #[derive(serde::Deserialize)]
            struct Reply<'a> {
                #[serde(borrow)]
                id: &'a RawValue,
                error: Code,
            }
            #[derive(serde::Deserialize)]
            struct Code {
                #[allow(dead_code)]
                code: i64,
            }
            let reply: Reply<'_> = serde_json::from_slice(&out).expect("replies are JSON");
            assert_eq!(reply.id.get(), id.map_or("null", Json::get));
            let _ = reply.error;
        }
    }
}

/// [`crate::jsonrpc::scan::object`] against serde's reading of the same members.
fn scan_agrees(text: &str) {
    fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
        serde::Deserialize::deserialize(d).map(Some)
    }
    #[derive(serde::Deserialize)]
    struct Two<'a> {
        #[serde(borrow, default, deserialize_with = "present")]
        id: Option<&'a RawValue>,
        #[serde(borrow, default, deserialize_with = "present")]
        arguments: Option<&'a RawValue>,
    }
    let keys = ["id", "arguments"];
    let scanned = crate::jsonrpc::scan::object(text, keys);
    // On valid JSON, the reading that trusts the grammar finds the same; where
    // the validating scan declines, what it finds is what serde reads (or
    // serde refuses too: nesting past its limit).
    if let Ok(raw) = serde_json::from_str::<&RawValue>(text) {
        let trusted = crate::jsonrpc::scan::members_of(Json::from(raw), keys);
        match (scanned, trusted) {
            (Some(_), _) => assert_eq!(trusted, scanned, "the trusting reading differs"),
            (None, Some([id, arguments])) => {
                if let Ok(two) = serde_json::from_str::<Two<'_>>(text) {
                    assert_eq!(id.map(Json::get), two.id.map(RawValue::get));
                    assert_eq!(arguments.map(Json::get), two.arguments.map(RawValue::get));
                }
            }
            (None, None) => {}
        }
    }
    let Some([id, arguments]) = scanned else {
        return;
    };
    assert!(text.trim_start().starts_with('{'), "scanned a non-object");
    let two: Two<'_> = serde_json::from_str(text).expect("serde reads what the scanner accepts");
    assert_eq!(id.map(Json::get), two.id.map(RawValue::get));
    assert_eq!(arguments.map(Json::get), two.arguments.map(RawValue::get));
}

struct NoSecrets;
impl Secrets for NoSecrets {
    fn var(&self, _: &str) -> Option<String> {
        None
    }
    fn file(&self, _: &std::path::Path) -> Option<String> {
        None
    }
}

/// The config loader: any text is a config or a list of problems, never a panic.
pub fn config(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Err(e) = Config::from_yaml(text, &NoSecrets) {
            let _ = e.to_string();
        }
    }
}

/// The mcpId mapping: `parse` inverts `namespace`, and accepts only what it makes.
pub fn mcp_id(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (name, id) = text.split_once('\n').unwrap_or(("u", &text));
    let upstream: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .take(64)
        .collect();
    let upstream = if upstream.is_empty() {
        "u".to_owned()
    } else {
        upstream
    };
    let ns = mcpid::namespace("gw", &upstream, id);
    let (u, back) = mcpid::parse("gw", &ns).expect("a namespaced id parses");
    assert_eq!((u, back.as_ref()), (upstream.as_str(), id));
    if let Some((u, original)) = mcpid::parse("gw", &text) {
        assert_eq!(mcpid::namespace("gw", u, &original), text);
    }
}

/// The agent edge's request-head parser: never a panic; a head it takes lies
/// within the bytes read, declares a body within the limit, and was not taken
/// from any shorter prefix (the connection re-parses as bytes arrive).
pub fn http_head(data: &[u8]) {
    use crate::http::h1::{Parsed, parse};
    const LIMIT: usize = 1000;
    let Parsed::Head(head) = parse(data, LIMIT) else {
        return;
    };
    assert!(head.len <= data.len() && head.body_len <= LIMIT);
    for end in 0..head.len {
        assert!(
            !matches!(parse(&data[..end], LIMIT), Parsed::Head(_)),
            "a head taken from {end} of its {} bytes",
            head.len
        );
    }
}

/// The upstream response parser (`upstream::http_pool`): never a panic; the
/// same answer, body and leftover however the bytes arrive; a body within
/// the limit.
pub fn http_response(data: &[u8]) {
    use crate::upstream::http_pool::read_answer;
    const LIMIT: usize = 4096;
    let whole = read_answer(data, data.len(), LIMIT);
    if let (Ok((_, body, _)), _) = &whole {
        assert!(body.len() <= LIMIT);
    }
    for step in [1, 2, 5] {
        assert_eq!(
            read_answer(data, step, LIMIT),
            whole,
            "read {step} bytes at a time"
        );
    }
}
