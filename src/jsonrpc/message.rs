//! Reading and writing JSON-RPC 2.0 messages without re-encoding what passes through.
//!
//! Classification follows the JSON-RPC 2.0 specification to the letter:
//! a message is a notification when it has no `id` member and its `method` is a
//! string; a notification never gets a reply, even when it is malformed. Every
//! other invalid message gets `-32600` with its id when the id could be read,
//! `null` otherwise.
//!
//! Longer than most files for its tests (about 200 lines).

use std::borrow::Cow;

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use super::error::ErrorObject;
use super::scan::{self, Json};

/// The members of a JSON-RPC message, all kept raw so that nothing is lost or
/// re-encoded. `Some(null)` (member present, value null) differs from `None`
/// (member absent): JSON-RPC gives the two different meanings.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    jsonrpc: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    method: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    params: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    result: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    error: Option<&'a RawValue>,
}

/// Keeps a present member, `null` included, as `Some`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// The envelope's members, each as its raw text.
struct Members<'a> {
    jsonrpc: Option<Json<'a>>,
    id: Option<Json<'a>>,
    method: Option<Json<'a>>,
    params: Option<Json<'a>>,
    result: Option<Json<'a>>,
    error: Option<Json<'a>>,
}

impl<'a> From<Envelope<'a>> for Members<'a> {
    fn from(e: Envelope<'a>) -> Self {
        Members {
            jsonrpc: e.jsonrpc.map(Json::from),
            id: e.id.map(Json::from),
            method: e.method.map(Json::from),
            params: e.params.map(Json::from),
            result: e.result.map(Json::from),
            error: e.error.map(Json::from),
        }
    }
}

/// The envelope of a text that holds exactly one JSON object, scanned in one
/// pass; `None` for anything else, and for what the scanner leaves to serde.
fn scan_members(text: &str) -> Option<Members<'_>> {
    let [jsonrpc, id, method, params, result, error] = scan::object(
        text,
        ["jsonrpc", "id", "method", "params", "result", "error"],
    )?;
    Some(Members {
        jsonrpc,
        id,
        method,
        params,
        result,
        error,
    })
}

/// What one incoming message (agent to gateway, or client to server) asks for.
#[derive(Debug)]
pub enum Incoming<'a> {
    Request {
        id: Json<'a>,
        method: Cow<'a, str>,
        params: Option<Json<'a>>,
    },
    Notification {
        method: Cow<'a, str>,
        params: Option<Json<'a>>,
    },
    /// A response (to a request this side sent): `id` and exactly one of
    /// `result` and `error`. Answered by nothing; what it means is the
    /// receiver's to say (a Model Context Protocol server takes it, an MCP
    /// v1.0 one, which sends no requests, refuses it as an invalid request).
    Response {
        id: Json<'a>,
        outcome: Result<Json<'a>, Json<'a>>,
    },
    /// Not a valid request: answer with this error, echoing `id` (or null).
    Invalid {
        id: Option<Json<'a>>,
        error: ErrorObject,
    },
    /// A malformed notification: JSON-RPC forbids any reply.
    Ignored,
}

fn first_byte(raw: &RawValue) -> u8 {
    raw.get().as_bytes().first().copied().unwrap_or(b' ')
}

/// A JSON-RPC id may be a string, a number or null.
fn is_valid_id(raw: Json<'_>) -> bool {
    matches!(raw.first_byte(), b'"' | b'-' | b'0'..=b'9' | b'n')
}

/// A JSON string's value, borrowed unless it holds escapes; `None` for any other JSON value.
pub fn as_string(raw: Json<'_>) -> Option<Cow<'_, str>> {
    if raw.first_byte() != b'"' {
        return None;
    }
    // Valid JSON already: a string without escapes is the text between its quotes.
    match raw.get().trim_ascii() {
        // A byte loop: these strings are short, and a memchr call costs more.
        text if !text.bytes().any(|b| b == b'\\') && text.len() >= 2 => {
            Some(Cow::Borrowed(&text[1..text.len() - 1]))
        }
        text => serde_json::from_str::<Cow<'_, str>>(text).ok(),
    }
}

impl Incoming<'_> {
    /// The message as a side that sends no requests reads it: a response
    /// is then an invalid request, as JSON-RPC 2.0 has it (no method).
    pub fn without_responses(self) -> Self {
        match self {
            Incoming::Response { id, .. } => Incoming::Invalid {
                id: Some(id),
                error: ErrorObject::invalid_request("method must be a string"),
            },
            other => other,
        }
    }
}

fn parse_envelope(raw: &RawValue) -> Option<Envelope<'_>> {
    // serde would also read a struct from a JSON array; a message must be an object.
    if first_byte(raw) != b'{' {
        return None;
    }
    serde_json::from_str::<Envelope<'_>>(raw.get()).ok()
}

/// Classifies one already-parsed JSON value as a request, a notification, or an error to send.
pub fn classify(raw: &RawValue) -> Incoming<'_> {
    let Some(env) = parse_envelope(raw) else {
        return Incoming::Invalid {
            id: None,
            error: ErrorObject::invalid_request("a message must be a JSON object"),
        };
    };
    classify_members(env.into())
}

/// [`classify`] straight from the bytes of a body that holds exactly one JSON
/// object: one pass instead of two. `None` for anything else (not an object,
/// not JSON, trailing bytes, a duplicate member): the caller takes the general
/// path, which gives those their proper answers.
pub fn classify_bytes(bytes: &[u8]) -> Option<Incoming<'_>> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace())?;
    if *first != b'{' {
        return None;
    }
    // JSON text is UTF-8 throughout: checked once for the whole body.
    let text = std::str::from_utf8(bytes).ok()?;
    scan_members(text).map(classify_members)
}

fn classify_members(env: Members<'_>) -> Incoming<'_> {
    let method = env.method.and_then(as_string);
    let id = match env.id {
        None => None,
        Some(id) if is_valid_id(id) => Some(id),
        Some(_) => {
            return Incoming::Invalid {
                id: None,
                error: ErrorObject::invalid_request("id must be a string, a number or null"),
            };
        }
    };
    let is_notification = id.is_none() && method.is_some();
    let fail = |why: &str| {
        if is_notification {
            Incoming::Ignored
        } else {
            Incoming::Invalid {
                id,
                error: ErrorObject::invalid_request(why),
            }
        }
    };
    if env.jsonrpc.and_then(as_string).as_deref() != Some("2.0") {
        return fail("jsonrpc must be exactly \"2.0\"");
    }
    let Some(method) = method else {
        return match (id, env.result, env.error, env.method) {
            (Some(id), Some(result), None, None) => Incoming::Response {
                id,
                outcome: Ok(result),
            },
            (Some(id), None, Some(error), None) if error.first_byte() == b'{' => {
                Incoming::Response {
                    id,
                    outcome: Err(error),
                }
            }
            _ => fail("method must be a string"),
        };
    };
    // MCP v1.0 spells "no params" as `"params": null` for its listing methods, so
    // null reads as absent; any other non-structured value is invalid (JSON-RPC 2.0).
    let params = env.params.filter(|p| p.get() != "null");
    if let Some(params) = params {
        if !matches!(params.first_byte(), b'{' | b'[') {
            return fail("params must be an object or an array");
        }
    }
    match id {
        Some(id) => Incoming::Request { id, method, params },
        None => Incoming::Notification { method, params },
    }
}

/// One message from an upstream server to the gateway.
#[derive(Debug)]
pub enum UpstreamMessage<'a> {
    /// A response: `Ok(result)` or `Err(error object)`, both raw.
    Response {
        id: Json<'a>,
        outcome: Result<Json<'a>, Json<'a>>,
    },
    Notification {
        method: Cow<'a, str>,
        params: Option<Json<'a>>,
    },
    /// A request from the server to the client: answered by the gateway,
    /// or forwarded to the client whose call it relates to.
    Request {
        id: Json<'a>,
        method: Cow<'a, str>,
        params: Option<Json<'a>>,
    },
}

#[derive(Deserialize)]
struct ErrorShape<'a> {
    #[allow(dead_code)]
    code: i64,
    #[allow(dead_code)]
    #[serde(borrow)]
    message: Cow<'a, str>,
}

/// A message from an upstream that breaks JSON-RPC 2.0.
#[derive(Debug, Clone, Copy)]
pub struct Malformed<'a> {
    /// The id of the request it answers, when it is a response whose id is
    /// valid: that call has had its answer, a broken one, and fails now.
    pub id: Option<Json<'a>>,
    pub why: &'static str,
}

impl Malformed<'_> {
    fn bare(why: &'static str) -> Self {
        Malformed { id: None, why }
    }
}

/// Parses and checks one message an upstream sent. `Err` says why it breaks JSON-RPC 2.0.
pub fn parse_upstream(raw: &RawValue) -> Result<UpstreamMessage<'_>, Malformed<'_>> {
    let env = parse_envelope(raw).ok_or(Malformed::bare("not a JSON-RPC object"))?;
    upstream_message(env.into())
}

/// [`parse_upstream`] of a text that holds exactly one JSON object, in one
/// pass; `None` for anything else (the caller takes the general path).
pub fn parse_upstream_text(text: &str) -> Option<Result<UpstreamMessage<'_>, Malformed<'_>>> {
    scan_members(text).map(upstream_message)
}

fn upstream_message(env: Members<'_>) -> Result<UpstreamMessage<'_>, Malformed<'_>> {
    if let Some(method) = env.method {
        if env.jsonrpc.and_then(as_string).as_deref() != Some("2.0") {
            return Err(Malformed::bare("jsonrpc is not \"2.0\""));
        }
        let method = as_string(method).ok_or(Malformed::bare("method is not a string"))?;
        return Ok(match env.id {
            Some(id) => UpstreamMessage::Request {
                id,
                method,
                params: env.params,
            },
            None => UpstreamMessage::Notification {
                method,
                params: env.params,
            },
        });
    }
    let id = env.id.ok_or(Malformed::bare("response without id"))?;
    if !is_valid_id(id) {
        return Err(Malformed::bare(
            "response id is not a string, number or null",
        ));
    }
    let broken = |why| Malformed { id: Some(id), why };
    if env.jsonrpc.and_then(as_string).as_deref() != Some("2.0") {
        return Err(broken("jsonrpc is not \"2.0\""));
    }
    let outcome = match (env.result, env.error) {
        (Some(result), None) => Ok(result),
        (None, Some(error)) => {
            serde_json::from_str::<ErrorShape<'_>>(error.get()).map_err(|_| {
                broken("error is not an object with an integer code and a string message")
            })?;
            Err(error)
        }
        _ => {
            return Err(broken(
                "a response must hold exactly one of result and error",
            ));
        }
    };
    Ok(UpstreamMessage::Response { id, outcome })
}

/// The body of a reply.
#[derive(Debug, Clone, Copy)]
pub enum Reply<'a> {
    /// A raw `result` value.
    Result(&'a [u8]),
    /// A raw `error` object, passed through as the upstream wrote it.
    RawError(&'a [u8]),
    /// An error object of the gateway's own.
    Error(&'a ErrorObject),
}

/// Appends one response object to `buf`, echoing `id` exactly (`null` when `None`).
pub fn write_reply(buf: &mut Vec<u8>, id: Option<Json<'_>>, reply: Reply<'_>) {
    if let Reply::Result(raw) = reply {
        write_result_head(buf, id);
        buf.extend_from_slice(raw);
        buf.push(b'}');
        return;
    }
    buf.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    buf.extend_from_slice(id.map_or("null", Json::get).as_bytes());
    match reply {
        Reply::Result(_) => {}
        Reply::RawError(raw) => {
            buf.extend_from_slice(br#","error":"#);
            buf.extend_from_slice(raw);
        }
        Reply::Error(err) => {
            buf.extend_from_slice(br#","error":"#);
            // Serializing a struct of integers and strings into a Vec cannot fail.
            let _ = serde_json::to_writer(&mut *buf, err);
        }
    }
    buf.push(b'}');
}

/// Appends a result response up to its result: the result and a `}` follow.
pub fn write_result_head(buf: &mut Vec<u8>, id: Option<Json<'_>>) {
    buf.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    buf.extend_from_slice(id.map_or("null", Json::get).as_bytes());
    buf.extend_from_slice(br#","result":"#);
}

/// Appends an error response.
pub fn write_error(buf: &mut Vec<u8>, id: Option<Json<'_>>, err: &ErrorObject) {
    write_reply(buf, id, Reply::Error(err));
}

#[cfg(test)]
mod tests;
