//! A round's outcome as the bus carries it between replicas: the tool's
//! result, another round, a failure, or a report of the round on the way.

use super::*;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
#[serde(tag = "k", rename_all = "snake_case")]
enum News {
    /// The tool's result: the upstream's result text, and where its
    /// output lies in it (see [`Answer`]).
    Value {
        j: String,
        r: Option<(usize, usize)>,
    },
    Blocks {
        j: String,
        r: (usize, usize),
    },
    Object {
        j: String,
    },
    /// Another round: the client's `input_required` result.
    Round {
        j: serde_json::Value,
    },
    /// The upstream's failure.
    Failed {
        e: String,
        m: String,
    },
    /// A progress report of the round (the params, as the upstream sent them).
    Progress {
        j: String,
    },
    /// A log line of the round (its params).
    Message {
        j: String,
    },
}

/// A round's progress report or log line, as news; `None` for other reports.
pub(super) fn report(report: &Report) -> Option<String> {
    let news = match report {
        Report::Progress(j) => News::Progress {
            j: j.get().to_owned(),
        },
        Report::Message(j) => News::Message {
            j: j.get().to_owned(),
        },
        Report::Ask(_) | Report::Withdrawn(_) => return None,
    };
    serde_json::to_string(&news).ok()
}

/// Whether a news is a report of the round (not its outcome).
pub(super) fn is_report(news: &str) -> bool {
    news.starts_with(r#"{"k":"progress""#) || news.starts_with(r#"{"k":"message""#)
}

/// The report a news is, if it is one (not the round's outcome).
pub(super) fn heard(news: &str) -> Option<Report> {
    if !is_report(news) {
        return None;
    }
    let buf = |j: String| {
        serde_json::value::RawValue::from_string(j)
            .ok()
            .map(JsonBuf::from)
    };
    match serde_json::from_str::<News>(news).ok()? {
        News::Progress { j } => buf(j).map(Report::Progress),
        News::Message { j } => buf(j).map(Report::Message),
        _ => None,
    }
}

pub(super) fn encode(outcome: &Result<Answer, GatewayError>) -> String {
    let news = match outcome {
        Ok(Answer::Value(j, r)) => News::Value {
            j: j.get().to_owned(),
            r: r.as_ref().map(|r| (r.start, r.end)),
        },
        Ok(Answer::Blocks(j, r)) => News::Blocks {
            j: j.get().to_owned(),
            r: (r.start, r.end),
        },
        Ok(Answer::Object(j)) => News::Object {
            j: j.get().to_owned(),
        },
        Err(GatewayError::InputRequired(round)) => News::Round {
            j: (**round).clone(),
        },
        Err(GatewayError::Upstream { error, .. }) => {
            let (e, m) = failure(error);
            News::Failed { e, m }
        }
        Err(other) => News::Failed {
            e: "protocol_error".into(),
            m: other.to_string(),
        },
    };
    serde_json::to_string(&news).unwrap_or_default()
}

pub(super) fn decode(
    news: &str,
    upstream: &Arc<str>,
    _entry: &ToolEntry,
) -> Result<Answer, GatewayError> {
    let failed = |error| GatewayError::Upstream {
        upstream: upstream.clone(),
        error,
    };
    let buf = |text: String| {
        serde_json::value::RawValue::from_string(text)
            .map(JsonBuf::from)
            .map_err(|_| failed(CallError::protocol("the other replica's news is not JSON")))
    };
    let within = |j: &JsonBuf, (start, end): (usize, usize)| {
        (start <= end
            && end <= j.get().len()
            && j.get().is_char_boundary(start)
            && j.get().is_char_boundary(end))
        .then_some(start..end)
        .ok_or_else(|| {
            failed(CallError::protocol(
                "the other replica's news is out of bounds",
            ))
        })
    };
    let news: News = serde_json::from_str(news).map_err(|_| {
        failed(CallError::protocol(
            "the other replica's news is unreadable",
        ))
    })?;
    match news {
        News::Value { j, r } => {
            let j = buf(j)?;
            let r = r.map(|r| within(&j, r)).transpose()?;
            Ok(Answer::Value(j, r))
        }
        News::Blocks { j, r } => {
            let j = buf(j)?;
            let r = within(&j, r)?;
            Ok(Answer::Blocks(j, r))
        }
        News::Object { j } => Ok(Answer::Object(buf(j)?)),
        News::Round { j } => Err(GatewayError::InputRequired(Box::new(j))),
        News::Progress { .. } | News::Message { .. } => Err(failed(CallError::protocol(
            "the other replica sent a report where the round's outcome was due",
        ))),
        News::Failed { e, m } => Err(failed(call_error(&e, m))),
    }
}

/// An upstream's failure as news carries it: its kind and its text
/// (the upstream's error object, as JSON text, for `upstream_error`).
pub(in crate::dispatch::core) fn failure(error: &CallError) -> (String, String) {
    let m = match error {
        CallError::Remote(raw) => raw.get().to_owned(),
        CallError::Tool(text) => text.clone(),
        other => other.to_string(),
    };
    (error.outcome().to_owned(), m)
}

/// The failure a news carries (see [`failure`]).
pub(in crate::dispatch::core) fn call_error(e: &str, m: String) -> CallError {
    match e {
        "timeout" => CallError::Timeout,
        "unavailable" => CallError::Unavailable(m.into()),
        "upstream_error" => match serde_json::value::RawValue::from_string(m.clone()) {
            Ok(raw) => CallError::Remote(JsonBuf::from(raw)),
            Err(_) => CallError::Protocol(m.into()),
        },
        "tool_error" => CallError::Tool(m),
        "over_capacity" => CallError::OverCapacity,
        _ => CallError::Protocol(m.into()),
    }
}
