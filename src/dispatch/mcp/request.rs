//! How a request is told to be of this protocol, which revision and era
//! it is in, and what its `_meta` and mirrored headers carry, read once
//! (`Scanned`) for every step after.

use std::borrow::Cow;

use crate::jsonrpc::Json;

use super::*;

/// The protocol's methods that the face answers or knows (a closed set, also
/// the `method` label of its metrics).
pub(super) const METHODS: [&str; 21] = [
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "logging/setLevel",
    "server/discover",
    "subscriptions/listen",
    "completion/complete",
    "notifications/cancelled",
    "tasks/get",
    "tasks/result",
    "tasks/list",
    "tasks/cancel",
    "tasks/update",
];

/// Methods that exist only in the stateless era (`tasks/update`: the tasks
/// extension's).
pub(super) const STATELESS_ONLY: [&str; 3] =
    ["server/discover", "subscriptions/listen", "tasks/update"];
/// Methods the stateless era removed.
pub(super) const HANDSHAKE_ONLY: [&str; 7] = [
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
    // The tasks extension has neither (a task's result comes with `tasks/get`).
    "tasks/result",
    "tasks/list",
];
/// Requests whose name (or uri, or task id) the `Mcp-Name` header mirrors.
pub(super) const NAMED: [&str; 6] = [
    "tools/call",
    "prompts/get",
    "resources/read",
    "tasks/get",
    "tasks/cancel",
    "tasks/update",
];
/// Results that carry `ttlMs` and `cacheScope` in the stateless era.
pub(super) const CACHEABLE: [&str; 6] = [
    "server/discover",
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];

/// Whether a request or notification is in the Model Context Protocol: one
/// of its methods, a `notifications/...`, or an `initialize` whose params
/// carry `protocolVersion` (MCP v1.0's carry `clientCapabilities`).
pub fn speaks(method: &str, params: Option<Json<'_>>) -> bool {
    if method == "initialize" {
        let [version, meta] = members(params, ["protocolVersion", "_meta"]);
        let [stateless] = members(meta, [VERSION_META]);
        return version.is_some() || stateless.is_some();
    }
    METHODS.contains(&method) || method.starts_with("notifications/")
}

/// The revision an `initialize` settles on: the client's own when the face
/// serves it, the newest of the handshake era otherwise.
pub fn negotiated(params: Option<Json<'_>>) -> &'static str {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Init<'a> {
        #[serde(borrow)]
        protocol_version: Cow<'a, str>,
    }
    let asked = params.and_then(|p| serde_json::from_str::<Init<'_>>(p.get()).ok());
    asked
        .and_then(|i| REVISIONS.iter().find(|r| **r == i.protocol_version))
        .copied()
        .unwrap_or(REVISIONS[REVISIONS.len() - 1])
}

/// A request's `params._meta`, if it has one.
pub fn meta_of(params: Option<Json<'_>>) -> Option<Json<'_>> {
    // Text without the key, and without an escape that could spell it, has none.
    let text = params?.get();
    if !holds!(text, "\"_meta\"") && memchr::memchr(b'\\', text.as_bytes()).is_none() {
        return None;
    }
    let [meta] = members(params, ["_meta"]);
    meta
}

/// What a request's `params._meta` carries of trace context
/// (`traceparent`, `tracestate`, `baggage`), read only when its text
/// names a `traceparent` at all.
pub fn trace_meta(params: Option<Json<'_>>) -> [Option<Cow<'_, str>>; 3] {
    if params.is_none_or(|p| !holds!(p.get(), "traceparent")) {
        return [None, None, None];
    }
    members(meta_of(params), ["traceparent", "tracestate", "baggage"])
        .map(|v| v.and_then(string_of))
}

/// What a request names (a tool's or prompt's name, an MCP v1.0 tool's
/// id), for the span that answers it.
pub fn target_of(params: Option<Json<'_>>) -> Option<Cow<'_, str>> {
    let [name, id] = members(params, ["name", "id"]);
    name.or(id).and_then(string_of)
}

/// The protocol version a request's `_meta` names (the 2026-07-28 revision's).
pub fn meta_version(params: Option<Json<'_>>) -> Option<Cow<'_, str>> {
    let [version] = members(meta_of(params), [VERSION_META]);
    version.and_then(string_of)
}

/// The headers of an HTTP request that mirror its body (`MCP-Protocol-Version`,
/// `Mcp-Method`, `Mcp-Name`), and `Mcp-Session-Id`. Empty off HTTP.
#[derive(Default, Clone, Copy, Debug)]
pub struct Mirrored<'a> {
    pub protocol_version: Option<&'a [u8]>,
    pub method: Option<&'a [u8]>,
    pub name: Option<&'a [u8]>,
    pub session: Option<&'a [u8]>,
    /// One of them was sent more than once (readers would disagree on which counts).
    pub repeated: bool,
    /// Every header, where the request may carry `Mcp-Param-*` ones (hyper's
    /// path; the edge's own hands such requests to it).
    pub all: Option<&'a dyn Headers>,
}

/// A request's headers as the face reads them, whatever carried them (the
/// HTTP edge's header map implements it).
pub trait Headers: Sync + std::fmt::Debug {
    /// Every value of the header `name` (lower case), in the order sent.
    fn values(&self, name: &str) -> Vec<&[u8]>;
    /// Whether the name of any header starts with `prefix` (lower case).
    fn any_named(&self, prefix: &str) -> bool;
}

impl Mirrored<'_> {
    /// Whether the headers alone put the request in the Model Context Protocol.
    pub fn say_modelcontext(&self) -> bool {
        self.protocol_version.is_some() || self.session.is_some()
    }
}

/// What the face reads of every request's params (its `_meta`, the
/// members that name its target and its arguments, the 2026-07-28
/// revision's envelope and rounds, what asks for reports and traces):
/// scanned once, one pass over the params and one over `_meta`, where the
/// request is first looked at, and handed on.
#[derive(Clone, Copy)]
pub struct Scanned<'a> {
    pub(super) call: Call<'a>,
    /// What names the request's target: `uri` for `resources/read`, `taskId`
    /// for a task's requests, `name` otherwise.
    pub(super) named: Option<Json<'a>>,
    /// The version and the client capabilities `_meta` names.
    pub(super) envelope: [Option<Json<'a>>; 2],
    /// `_meta.progressToken`.
    pub(super) progress_token: Option<Json<'a>>,
    /// Whether `_meta` carries a `traceparent`.
    pub(super) traced: bool,
}

impl<'a> Scanned<'a> {
    /// Scans a request's params.
    pub fn of(method: &str, params: Option<Json<'a>>) -> Self {
        // One pass over params, `_meta` read where it stands.
        let (
            [_, name, uri, arguments, task, responses, state],
            [
                version,
                capabilities,
                progress_token,
                log_level,
                traceparent,
            ],
        ) = crate::jsonrpc::scan::members_nested(
            params,
            [
                "_meta",
                "name",
                "uri",
                "arguments",
                "task",
                "inputResponses",
                "requestState",
            ],
            0,
            [
                VERSION_META,
                CAPABILITIES_META,
                "progressToken",
                LOG_LEVEL_META,
                "traceparent",
            ],
        );
        let named = match method {
            "resources/read" => uri,
            "tasks/get" | "tasks/cancel" | "tasks/update" => members(params, ["taskId"])[0],
            _ => name,
        };
        Scanned {
            call: Call {
                params,
                name,
                arguments,
                task,
                answers: [responses, state],
                capabilities,
                log_level,
            },
            named,
            envelope: [version, capabilities],
            progress_token,
            traced: traceparent.is_some(),
        }
    }

    /// Whether it continues an `input_required` round: a `tools/call`
    /// carrying `requestState` (see `crate::dispatch::continues_round`).
    pub fn continues_round(&self, method: &str) -> bool {
        method == "tools/call" && self.call.answers[1].is_some()
    }

    /// Whether `_meta` carries trace context (what [`trace_meta`] reads).
    pub fn traced(&self) -> bool {
        self.traced
    }

    /// The era the request is in: [`Era::of_request`], from what was scanned.
    pub fn era(&self, method: &str, http: Option<&Mirrored<'_>>) -> Era {
        Era::given(method, self.envelope[0].is_some(), http)
    }

    /// Whether a call may report before its answer (its `_meta` carries a
    /// `progressToken` or a 2026-07-28 log level that can be read): its
    /// transport then gives it somewhere to put the reports.
    pub fn may_report(&self, method: &str) -> bool {
        method == "tools/call"
            && (self.progress_token.is_some() || self.call.log_level.is_some())
            && matches!(asked_reports(self.call.params), (Some(_), _) | (_, Some(_)))
    }
}

/// The era a request is in.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Era {
    Handshake,
    Stateless,
}

impl Era {
    /// The era of a request: stateless when its `_meta` names a protocol
    /// version, when its `MCP-Protocol-Version` header names one that is not
    /// of the handshake era, or when its method exists only in that era.
    pub fn of(method: &str, meta: Option<Json<'_>>, http: Option<&Mirrored<'_>>) -> Era {
        let [version] = members(meta, [VERSION_META]);
        Era::given(method, version.is_some(), http)
    }

    /// [`Era::of`] a request's params, whose `_meta` is read only when its
    /// headers and method leave the era open.
    pub fn of_request(method: &str, params: Option<Json<'_>>, http: Option<&Mirrored<'_>>) -> Era {
        if header_says(http) || STATELESS_ONLY.contains(&method) {
            return Era::Stateless;
        }
        Era::of(method, meta_of(params), http)
    }

    /// [`Era::of`], once it is known whether `_meta` names a version.
    pub(super) fn given(method: &str, meta_says: bool, http: Option<&Mirrored<'_>>) -> Era {
        if header_says(http) || meta_says || STATELESS_ONLY.contains(&method) {
            Era::Stateless
        } else {
            Era::Handshake
        }
    }
}

/// Whether an `MCP-Protocol-Version` header names a revision that is not of the handshake era.
pub(super) fn header_says(http: Option<&Mirrored<'_>>) -> bool {
    http.and_then(|h| h.protocol_version)
        .is_some_and(|v| !REVISIONS.iter().any(|r| r.as_bytes() == v))
}

/// A JSON string's text: borrowed when it holds no escape, else decoded;
/// `None` when the value is not a string.
pub(super) fn string_of(value: Json<'_>) -> Option<Cow<'_, str>> {
    let text = value.get();
    match text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        Some(inner) if !inner.contains('\\') => Some(Cow::Borrowed(inner)),
        _ => serde_json::from_str(text).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::value::RawValue;

    fn json(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap()
    }

    #[test]
    fn a_request_is_of_the_protocol_by_its_method_or_its_handshake() {
        let official = json(r#"{"protocolVersion":"2025-11-25","capabilities":{}}"#);
        let v1 = json(r#"{"clientCapabilities":{}}"#);
        let stateless =
            json(r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#);
        assert!(speaks("initialize", Some(Json::from(&*official))));
        assert!(speaks("initialize", Some(Json::from(&*stateless))));
        assert!(!speaks("initialize", Some(Json::from(&*v1))));
        assert!(!speaks("initialize", None));
        assert!(speaks("tools/call", None));
        assert!(speaks("notifications/initialized", None));
        assert!(!speaks("mcp/executeTool", None));
        assert!(!speaks("tools/unknown", None));
    }

    #[test]
    fn the_handshake_settles_on_the_clients_revision_or_the_newest() {
        // The stateless revision has no handshake; an unknown one gets the newest.
        for (asked, settled) in [
            ("2025-03-26", "2025-03-26"),
            ("2025-06-18", "2025-06-18"),
            ("2026-07-28", "2025-11-25"),
            ("1999-01-01", "2025-11-25"),
        ] {
            let params = json(&format!(r#"{{"protocolVersion":"{asked}"}}"#));
            assert_eq!(negotiated(Some(Json::from(&*params))), settled, "{asked}");
        }
        assert_eq!(negotiated(None), "2025-11-25");
    }

    #[test]
    fn the_era_follows_meta_the_version_header_or_the_method() {
        let meta = json(r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}"#);
        assert_eq!(
            Era::of("tools/list", Some(Json::from(&*meta)), None),
            Era::Stateless
        );
        assert_eq!(Era::of("tools/list", None, None), Era::Handshake);
        assert_eq!(Era::of("server/discover", None, None), Era::Stateless);
        let header = |v: &'static [u8]| Mirrored {
            protocol_version: Some(v),
            ..Mirrored::default()
        };
        assert_eq!(
            Era::of("tools/list", None, Some(&header(b"2025-06-18"))),
            Era::Handshake
        );
        assert_eq!(
            Era::of("tools/list", None, Some(&header(b"2026-07-28"))),
            Era::Stateless
        );
        // A version the handshake era does not know is not of that era.
        assert_eq!(
            Era::of("tools/list", None, Some(&header(b"2099-01-01"))),
            Era::Stateless
        );
        assert!(header(b"2025-06-18").say_modelcontext());
        assert!(!Mirrored::default().say_modelcontext());
    }

    #[test]
    fn members_are_read_past_what_the_fast_scan_declines() {
        // An escaped key, and a key named twice (the last counts), as serde reads them.
        let escaped = json(r#"{"_m\u0065ta":{"a":1}}"#);
        assert_eq!(
            meta_of(Some(Json::from(&*escaped))).map(Json::get),
            Some(r#"{"a":1}"#)
        );
        let twice = json(r#"{"_meta":1,"_meta":2}"#);
        assert_eq!(meta_of(Some(Json::from(&*twice))).map(Json::get), Some("2"));
        let array = json("[1]");
        assert_eq!(meta_of(Some(Json::from(&*array))), None);
        let escaped_string = json(r#""a\"b""#);
        assert_eq!(
            string_of(Json::from(&*escaped_string)).as_deref(),
            Some("a\"b")
        );
        let number = json("1");
        assert_eq!(string_of(Json::from(&*number)), None);
    }
}
