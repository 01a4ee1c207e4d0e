//! What a call reports before its answer, as this face sends it: log
//! messages at the client's level, progress under the client's own token.

use serde_json::{Map, Value, json};

use crate::jsonrpc::{Json, JsonBuf};

use super::*;

/// The protocol's log levels, least severe first (RFC 5424's, as the
/// protocol names them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

impl LogLevel {
    pub fn parse(name: &str) -> Option<LogLevel> {
        Some(match name {
            "debug" => LogLevel::Debug,
            "info" => LogLevel::Info,
            "notice" => LogLevel::Notice,
            "warning" => LogLevel::Warning,
            "error" => LogLevel::Error,
            "critical" => LogLevel::Critical,
            "alert" => LogLevel::Alert,
            "emergency" => LogLevel::Emergency,
            _ => return None,
        })
    }

    /// Its name in the protocol.
    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Notice => "notice",
            LogLevel::Warning => "warning",
            LogLevel::Error => "error",
            LogLevel::Critical => "critical",
            LogLevel::Alert => "alert",
            LogLevel::Emergency => "emergency",
        }
    }

    /// The level a JSON value names (a string), if it is one.
    fn of(value: Option<Json<'_>>) -> Option<LogLevel> {
        LogLevel::parse(&string_of(value?)?)
    }
}

/// What `logging/setLevel` takes, for the error that refuses other params.
pub const LEVEL_PARAMS: &str = "params must be an object {\"level\": one of debug, info, notice, warning, error, critical, alert, emergency}";

/// The level of a `logging/setLevel` request's params.
pub fn level_of(params: Option<Json<'_>>) -> Option<LogLevel> {
    let [level] = members(params, ["level"]);
    LogLevel::of(level)
}

/// The log level a 2026-07-28 request asks for in its `_meta` (without it,
/// it hears no log lines).
#[cfg(test)]
pub(super) fn requested_level(params: Option<Json<'_>>) -> Option<LogLevel> {
    asked_reports(params).1
}

/// A call's log line (its `notifications/message` params, as the upstream
/// sent them) for a client at `level`: the notification, or `None` when
/// the line is less severe (or names no level).
pub(super) fn message_notification(params: &JsonBuf, level: LogLevel) -> Option<Vec<u8>> {
    let [own] = members(Some(params.as_json()), ["level"]);
    if LogLevel::of(own)? < level {
        return None;
    }
    let mut out = Vec::with_capacity(params.get().len() + 64);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","method":"notifications/message","params":"#);
    out.extend_from_slice(params.get().as_bytes());
    out.push(b'}');
    Some(out)
}

/// The progress token a request's `_meta` carries (a string or an integer,
/// as the protocol allows).
#[cfg(test)]
pub(super) fn progress_token(params: Option<Json<'_>>) -> Option<Value> {
    asked_reports(params).0
}

/// What a request's `_meta` asks to hear before its result, read in one
/// pass: its progress token (a string or an integer, as the protocol
/// allows) and the log level of the 2026-07-28 revision.
pub(super) fn asked_reports(params: Option<Json<'_>>) -> (Option<Value>, Option<LogLevel>) {
    let [token, level] = members(meta_of(params), ["progressToken", LOG_LEVEL_META]);
    let token = token
        .and_then(|t| serde_json::from_str::<Value>(t.get()).ok())
        .filter(|t| t.is_string() || t.is_i64() || t.is_u64());
    (token, LogLevel::of(level))
}

/// An upstream's progress report as the client's `notifications/progress`:
/// the client's own token in place of the gateway's.
pub(super) fn progress_notification(report: &JsonBuf, token: &Value) -> Option<Vec<u8>> {
    let mut params: Map<String, Value> = serde_json::from_str(report.get()).ok()?;
    params.insert("progressToken".into(), token.clone());
    serde_json::to_vec(&json!({
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": params,
    }))
    .ok()
}

#[cfg(test)]
mod tests;
