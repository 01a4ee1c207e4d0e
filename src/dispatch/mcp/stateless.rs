//! The 2026-07-28 revision's rules: which batches may be served, how an
//! error stands apart from its body, the checks of `_meta` and the mirrored
//! headers, and the fields every result of that revision carries.

use super::*;

/// Whether a JSON-RPC batch may be served: MCP v1.0 takes batches, and so
/// did the handshake era's first revision (2025-03-26); the revisions after
/// it removed them, so a batch that names one of those (in its headers or
/// in a message's `_meta`) is refused as a whole: its messages would skip
/// the checks a lone request gets (`Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`).
pub fn batch_allowed<'a>(
    http: &Mirrored<'_>,
    mut items: impl Iterator<Item = crate::jsonrpc::Incoming<'a>>,
) -> bool {
    let header_allows = http
        .protocol_version
        .is_none_or(|v| v == REVISIONS[0].as_bytes());
    let mirrors = http.method.is_some()
        || http.name.is_some()
        || http
            .all
            .is_some_and(|all| all.any_named(param_headers::PREFIX));
    if !header_allows || mirrors {
        return false;
    }
    items.all(|item| match item {
        crate::jsonrpc::Incoming::Request { method, params, .. }
        | crate::jsonrpc::Incoming::Notification { method, params } => {
            Era::of_request(&method, params, Some(http)) == Era::Handshake
        }
        _ => true,
    })
}

/// How a stateless-era error stands apart from its body, as that
/// revision's transport names it: a malformed request (and that revision's
/// own errors), an unknown method, or an answer like any other.
pub fn stateless_standing(code: Option<i64>) -> Standing {
    use crate::jsonrpc::codes::*;
    match code {
        Some(
            PARSE_ERROR
            | INVALID_REQUEST
            | INVALID_PARAMS
            | HEADER_MISMATCH
            | UNSUPPORTED_PROTOCOL_VERSION,
        ) => Standing::Malformed,
        Some(METHOD_NOT_FOUND) => Standing::UnknownMethod,
        _ => Standing::Answered,
    }
}

pub(super) fn header_mismatch(why: &str) -> GatewayError {
    GatewayError::HeaderMismatch(why.to_owned())
}

/// The stateless era's checks of a request, in its SDKs' order: the `_meta`
/// envelope (-32602), the mirrored headers on HTTP (-32020), then the
/// version (-32022, naming what is served). `named` is the body's value
/// that `Mcp-Name` mirrors (`params.name` or `params.uri`).
pub(super) fn check_stateless(
    method: &str,
    named: Option<Json<'_>>,
    envelope: [Option<Json<'_>>; 2],
    http: Option<&Mirrored<'_>>,
) -> Result<(), GatewayError> {
    let [Some(version), Some(_)] = envelope else {
        return Err(invalid(&format!(
            "params._meta must be an object carrying {VERSION_META:?} and {CAPABILITIES_META:?}"
        )));
    };
    let version = string_of(version);
    if let Some(h) = http {
        if h.repeated {
            return Err(header_mismatch(
                "MCP-Protocol-Version, Mcp-Method and Mcp-Name may each be sent once",
            ));
        }
        if h.protocol_version.is_none()
            || h.protocol_version != version.as_deref().map(str::as_bytes)
        {
            return Err(header_mismatch(
                "the MCP-Protocol-Version header does not match params._meta's protocol version",
            ));
        }
        if h.method != Some(method.as_bytes()) {
            return Err(header_mismatch(
                "the Mcp-Method header does not match the request's method",
            ));
        }
        if NAMED.contains(&method) {
            let body = named.and_then(string_of);
            if let Some(body) = body
                && h.name.and_then(param_headers::decode).as_deref() != Some(&*body)
            {
                return Err(header_mismatch(
                    "the Mcp-Name header does not match the request's name or uri",
                ));
            }
        }
    }
    let Some(version) = version else {
        return Err(invalid(
            "the protocol version in params._meta must be a string",
        ));
    };
    if version != STATELESS {
        return Err(GatewayError::UnsupportedVersion {
            requested: version.into_owned(),
            supported: &SUPPORTED,
        });
    }
    Ok(())
}

pub(super) fn server_info() -> Value {
    json!({"name": "mcp-gateway", "version": env!("CARGO_PKG_VERSION")})
}

/// A stateless-era result: `resultType`, the server's identity in `_meta`,
/// and for cacheable results `ttlMs` 0 and `cacheScope` private (listings
/// follow upstreams and reloads the gateway cannot foresee, and differ per
/// tenant; `subscriptions/listen` says when they change).
pub(super) fn stateless_result(method: &str, result: Out) -> Out {
    match result {
        Out::ToolError(v) => match stateless_result(method, Out::Value(v)) {
            Out::Value(v) => Out::ToolError(v),
            other => other,
        },
        Out::Value(mut result) => {
            if let Value::Object(m) = &mut result {
                // A task the call became, or a round that needs the
                // client's input, says so; every other result is complete.
                let kind = m.get("resultType").and_then(Value::as_str);
                if !matches!(kind, Some("task" | "input_required")) {
                    m.insert("resultType".into(), "complete".into());
                }
                let meta = m.entry("_meta").or_insert_with(|| json!({}));
                if let Value::Object(meta) = meta {
                    meta.insert(SERVER_INFO_META.into(), server_info());
                }
                if CACHEABLE.contains(&method) {
                    m.insert("ttlMs".into(), 0.into());
                    m.insert("cacheScope".into(), "private".into());
                }
            }
            Out::Value(result)
        }
        // Written results are the face's own, without `_meta`: the fields go
        // before the closing brace.
        Out::Written(mut text) => {
            if text.ends_with('}') {
                text.pop();
                text.push_str(STATELESS_FIELDS);
                if CACHEABLE.contains(&method) {
                    text.push_str(r#","ttlMs":0,"cacheScope":"private""#);
                }
                text.push('}');
            }
            Out::Written(text)
        }
        // The stateless era's `_meta` and the result's own, as one.
        Out::Meta(mut text, meta) => {
            if text.ends_with('}') {
                text.pop();
                let fields = STATELESS_FIELDS
                    .strip_suffix('}')
                    .unwrap_or(STATELESS_FIELDS);
                text.push_str(fields);
                text.push(',');
                text.push_str(&meta);
                text.push('}');
                if CACHEABLE.contains(&method) {
                    text.push_str(r#","ttlMs":0,"cacheScope":"private""#);
                }
                text.push('}');
            }
            Out::Written(text)
        }
    }
}

/// What the stateless era adds to a written result, at most.
pub(super) const STATELESS_ROOM: usize = STATELESS_FIELDS.len() + 40;
/// What every stateless-era result carries, as JSON members.
pub(super) const STATELESS_FIELDS: &str = concat!(
    r#","resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"mcp-gateway","version":""#,
    env!("CARGO_PKG_VERSION"),
    r#""}}"#
);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::value::RawValue;

    fn json(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap()
    }

    /// The `_meta` envelope of a stateless request naming `version`.
    fn envelope(version: &str) -> Box<RawValue> {
        json(&format!(
            r#"{{"{VERSION_META}":"{version}","{CAPABILITIES_META}":{{}}}}"#
        ))
    }

    fn check(
        method: &str,
        named: Option<&str>,
        meta: &RawValue,
        http: Option<&Mirrored<'_>>,
    ) -> Option<i64> {
        let named = named.map(json);
        let [version, capabilities] =
            members(Some(Json::from(meta)), [VERSION_META, CAPABILITIES_META]);
        check_stateless(
            method,
            named.as_deref().map(Json::from),
            [version, capabilities],
            http,
        )
        .err()
        .and_then(|e| e.code())
    }

    fn headers(
        version: &'static [u8],
        method: &'static [u8],
        name: Option<&'static [u8]>,
    ) -> Mirrored<'static> {
        Mirrored {
            protocol_version: Some(version),
            method: Some(method),
            name,
            ..Mirrored::default()
        }
    }

    #[test]
    fn a_stateless_request_is_checked_in_the_sdks_order() {
        use crate::jsonrpc::codes::{
            HEADER_MISMATCH, INVALID_PARAMS, UNSUPPORTED_PROTOCOL_VERSION,
        };
        let ok = envelope(STATELESS);
        assert_eq!(check("tools/list", None, &ok, None), None);
        // The envelope first: without its capabilities it is invalid, whatever else is wrong.
        let bare = json(r#"{"io.modelcontextprotocol/protocolVersion":"1999-01-01"}"#);
        assert_eq!(check("tools/list", None, &bare, None), Some(INVALID_PARAMS));
        // Then the mirrored headers, before the version.
        let old = envelope("1999-01-01");
        let wrong_method = headers(b"1999-01-01", b"tools/call", None);
        assert_eq!(
            check("tools/list", None, &old, Some(&wrong_method)),
            Some(HEADER_MISMATCH)
        );
        assert_eq!(
            check("tools/list", None, &old, None),
            Some(UNSUPPORTED_PROTOCOL_VERSION)
        );
        let version_differs = headers(b"2025-11-25", b"tools/list", None);
        assert_eq!(
            check("tools/list", None, &ok, Some(&version_differs)),
            Some(HEADER_MISMATCH)
        );
        let repeated = Mirrored {
            repeated: true,
            ..headers(b"2026-07-28", b"tools/list", None)
        };
        assert_eq!(
            check("tools/list", None, &ok, Some(&repeated)),
            Some(HEADER_MISMATCH)
        );
        // Mcp-Name mirrors the body's name, encoded or not.
        let named = headers(b"2026-07-28", b"tools/call", Some(b"echo"));
        assert_eq!(
            check("tools/call", Some(r#""echo""#), &ok, Some(&named)),
            None
        );
        assert_eq!(
            check("tools/call", Some(r#""other""#), &ok, Some(&named)),
            Some(HEADER_MISMATCH)
        );
        let encoded = headers(b"2026-07-28", b"tools/call", Some(b"=?base64?ZWNobw==?="));
        assert_eq!(
            check("tools/call", Some(r#""echo""#), &ok, Some(&encoded)),
            None
        );
        // A version that is not a string.
        let number = json(&format!(
            r#"{{"{VERSION_META}":1,"{CAPABILITIES_META}":{{}}}}"#
        ));
        assert_eq!(
            check("tools/list", None, &number, None),
            Some(INVALID_PARAMS)
        );
    }

    #[test]
    fn errors_stand_as_the_revisions_transport_says() {
        use crate::jsonrpc::codes::*;
        for code in [
            PARSE_ERROR,
            INVALID_REQUEST,
            INVALID_PARAMS,
            HEADER_MISMATCH,
            UNSUPPORTED_PROTOCOL_VERSION,
        ] {
            assert_eq!(
                stateless_standing(Some(code)),
                Standing::Malformed,
                "{code}"
            );
        }
        assert_eq!(
            stateless_standing(Some(METHOD_NOT_FOUND)),
            Standing::UnknownMethod
        );
        assert_eq!(stateless_standing(Some(-32001)), Standing::Answered);
        assert_eq!(stateless_standing(None), Standing::Answered);
    }

    #[test]
    fn batches_are_served_only_where_a_revision_had_them() {
        let messages = |texts: &'static [&'static str]| {
            texts.iter().map(|t| {
                let raw: &'static RawValue = Box::leak(json(t));
                crate::jsonrpc::classify(raw)
            })
        };
        let plain: &'static [&'static str] = &[r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#];
        assert!(batch_allowed(&Mirrored::default(), messages(plain)));
        let first = Mirrored {
            protocol_version: Some(REVISIONS[0].as_bytes()),
            ..Mirrored::default()
        };
        assert!(batch_allowed(&first, messages(plain)));
        let later = Mirrored {
            protocol_version: Some(b"2025-06-18"),
            ..Mirrored::default()
        };
        assert!(!batch_allowed(&later, messages(plain)));
        let mirrored = Mirrored {
            method: Some(b"tools/list"),
            ..Mirrored::default()
        };
        assert!(!batch_allowed(&mirrored, messages(plain)));
        let stateless: &'static [&'static str] = &[
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
        ];
        assert!(!batch_allowed(&Mirrored::default(), messages(stateless)));
    }

    #[test]
    fn stateless_results_carry_the_revisions_fields() {
        let Out::Value(listed) = stateless_result("tools/list", Out::Value(json!({"tools": []})))
        else {
            panic!("a value stays a value");
        };
        assert_eq!(listed["resultType"], "complete");
        assert_eq!(listed["ttlMs"], 0);
        assert_eq!(listed["cacheScope"], "private");
        assert_eq!(listed["_meta"][SERVER_INFO_META]["name"], "mcp-gateway");
        let Out::Value(called) = stateless_result("tools/call", Out::Value(json!({"content": []})))
        else {
            panic!("a value stays a value");
        };
        assert_eq!(called["resultType"], "complete");
        assert!(
            called.get("ttlMs").is_none(),
            "a call's result is not cacheable"
        );
        // A result the face wrote gets the same members before its closing brace.
        let Out::Written(text) =
            stateless_result("resources/read", Out::Written(r#"{"contents":[]}"#.into()))
        else {
            panic!("written stays written");
        };
        let read: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(read["resultType"], "complete");
        assert_eq!(read["cacheScope"], "private");
        assert_eq!(
            read["_meta"][SERVER_INFO_META]["version"],
            env!("CARGO_PKG_VERSION")
        );
        assert!(STATELESS_FIELDS.len() <= STATELESS_ROOM);
    }
}
