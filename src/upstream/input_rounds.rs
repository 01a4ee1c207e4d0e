//! A server that speaks only the 2026-07-28 revision asks for a call's
//! input the revision's way: it ends the call `input_required`, with its
//! questions (`inputRequests`) and a `requestState`, and is called again
//! with the answers (`inputResponses`) and that state. A caller of the
//! handshake era is asked those questions as that era's requests during
//! its call (`elicitation/create`, `sampling/createMessage`,
//! `roots/list`), handed on as a handshake-era upstream's own requests
//! are (see `progress::Ask`), and the gateway calls the server again with
//! the answers, round after round, until it answers. The state stays
//! in the gateway, inside the call: the client never holds it.
//!
//! A caller that cannot be asked (an MCP v1.0 agent, a call whose client
//! hears nothing before its result) is declared no capabilities, and a
//! server that asks it anyway fails the call with -32603. So does a
//! question its client did not declare it answers, one it does not answer
//! within `gateway.server_request_timeout_ms`, or an error it answers.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::progress::{ASKED, Ask, AskReply, Report};
use super::{CallError, Round, StatelessCall, Upstream};
use crate::jsonrpc::{Json, JsonBuf};
use crate::metrics::ServerRequest;
use crate::protocol::ToolEntry;
use crate::protocol::tool_result::Answer;

/// Rounds of one call before the gateway stops asking its client.
const MAX_ROUNDS: usize = 16;

/// Questions in one round: more is not a server asking a person.
const MAX_QUESTIONS: usize = 16;

/// What the gateway declares for a call whose client can be asked: what
/// it can take to a handshake-era client (see `mc::initialize_params`).
const ASKABLE: &str = r#"{"elicitation":{"form":{},"url":{}},"sampling":{},"roots":{}}"#;

/// The level a call's log lines are asked at when its client hears them:
/// every line; the client's own level filters them on the way.
const EVERY_LEVEL: &str = r#""debug""#;

/// How long a question waits for its client when nothing else says.
pub(super) const DEFAULT_WAIT: Duration = Duration::from_secs(300);

/// The part of an `input_required` result a round reads.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InputRound {
    #[serde(default)]
    input_requests: BTreeMap<String, Question>,
    request_state: Option<String>,
}

#[derive(Deserialize)]
struct Question {
    method: String,
    params: Option<Box<RawValue>>,
}

/// The call fails with -32603 saying `why`.
fn unanswered(why: String) -> CallError {
    let error = serde_json::json!({"code": crate::jsonrpc::codes::INTERNAL_ERROR, "message": why});
    CallError::Remote(JsonBuf::from(
        serde_json::value::to_raw_value(&error).unwrap_or_else(|_| unreachable!("a JSON value")),
    ))
}

impl Upstream {
    /// `tools/call` of a caller of another era on a server that speaks only
    /// the 2026-07-28 revision (see the module's doc): `reports` takes the
    /// call's progress, its log lines and its questions for the client.
    pub(super) async fn call_in_rounds(
        &self,
        tool: &ToolEntry,
        arguments: Json<'_>,
        reports: Option<&(dyn Fn(Report) + Sync)>,
    ) -> Result<Answer, CallError> {
        let mirrored = mirrored(tool, arguments);
        let askable: Option<&RawValue> = reports.and_then(|_| serde_json::from_str(ASKABLE).ok());
        let level: Option<&RawValue> = reports
            .filter(|_| self.mc.logs())
            .and_then(|_| serde_json::from_str(EVERY_LEVEL).ok());
        let mut responses: Option<JsonBuf> = None;
        let mut state: Option<String> = None;
        for _ in 0..MAX_ROUNDS {
            let call = StatelessCall {
                arguments,
                capabilities: askable.map(Json::from),
                log_level: level.map(Json::from),
                input_responses: responses.as_ref().map(JsonBuf::as_json),
                request_state: state.as_deref(),
                mirrored: &mirrored,
            };
            let result = match self.call_stateless(tool, &call, reports).await? {
                Round::Done(answer) => return Ok(answer),
                Round::InputRequired(result) => result,
            };
            let Some(heard) = reports else {
                return Err(unanswered(format!(
                    "the upstream {} needs input its caller cannot be asked for",
                    self.name
                )));
            };
            let round: InputRound = serde_json::from_str(result.get())
                .map_err(|_| CallError::protocol("an input_required result that cannot be read"))?;
            responses = Some(self.ask_caller(round.input_requests, heard).await?);
            state = round.request_state;
        }
        Err(CallError::protocol(format!(
            "the upstream asked for input in more than {MAX_ROUNDS} rounds of one call"
        )))
    }

    /// Asks the call's client each question of a round at once, and waits
    /// (within the gateway's wait for a client) for every answer: the
    /// round's `inputResponses`.
    async fn ask_caller(
        &self,
        questions: BTreeMap<String, Question>,
        heard: &(dyn Fn(Report) + Sync),
    ) -> Result<JsonBuf, CallError> {
        if questions.is_empty() || questions.len() > MAX_QUESTIONS {
            return Err(CallError::protocol(format!(
                "an input_required result with {} questions",
                questions.len()
            )));
        }
        let (wait, counted) = self.asked_within();
        let mut asked = Vec::with_capacity(questions.len());
        for (key, question) in questions {
            if question.method == "ping" || !ASKED.contains(&question.method.as_str()) {
                counted.server_request(ServerRequest::Refused);
                return Err(unanswered(format!(
                    "the upstream {} asked for {}, which no client answers",
                    self.name, question.method
                )));
            }
            let (reply, answered) = tokio::sync::oneshot::channel();
            let id = serde_json::value::to_raw_value(&key)
                .map_err(|_| CallError::protocol("an input request key that is not text"))?;
            let params = question
                .params
                .map(|p| with_elicitation_id(&question.method, p));
            heard(Report::Ask(Ask {
                id: JsonBuf::from(id),
                method: question.method.as_str().into(),
                params: params.map(JsonBuf::from),
                reply,
            }));
            asked.push((key, question.method, answered));
        }
        let waiting = &counted.server_requests_waiting;
        let n = asked.len() as i64;
        waiting.add(n);
        let _waiting = super::scopeguard(|| waiting.sub(n));
        let deadline = tokio::time::Instant::now() + wait;
        let mut answers = serde_json::Map::new();
        for (key, method, answered) in asked {
            let outcome = tokio::time::timeout_at(deadline, answered).await;
            let why = match outcome {
                Ok(Ok(AskReply::Answered(Ok(result)))) => {
                    counted.server_request(ServerRequest::Forwarded);
                    let result: Box<RawValue> = serde_json::from_str(result.get())
                        .map_err(|_| CallError::protocol("a client answer that is not JSON"))?;
                    let result = serde_json::to_value(result)
                        .map_err(|_| CallError::protocol("a client answer that is not JSON"))?;
                    answers.insert(key, result);
                    continue;
                }
                Ok(Ok(AskReply::Answered(Err(error)))) => {
                    counted.server_request(ServerRequest::Forwarded);
                    return Err(CallError::Remote(error));
                }
                Ok(Ok(AskReply::Refused(why))) => {
                    counted.server_request(ServerRequest::Refused);
                    why
                }
                Ok(Err(_)) | Err(_) => {
                    counted.server_request(ServerRequest::Unanswered);
                    "the client did not answer in time, or its call ended"
                }
            };
            return Err(unanswered(format!(
                "the upstream {} asked for {method}: {why}",
                self.name
            )));
        }
        let answers = serde_json::value::to_raw_value(&answers)
            .map_err(|_| CallError::protocol("the answers cannot be written"))?;
        Ok(JsonBuf::from(answers))
    }

    /// How long its questions wait for a client, and where they are
    /// counted (a child of one session counts in the gateway's metrics).
    fn asked_within(&self) -> (Duration, &crate::metrics::Metrics) {
        match self.serves_one_session() {
            Some((wait, counted)) => (*wait, counted),
            None => (self.answer_wait, &self.metrics),
        }
    }
}

/// A URL-mode elicitation as the handshake era writes it: that era's
/// requests carry an `elicitationId` (its clients refuse one without), the
/// 2026-07-28 revision's do not. The gateway names each question it hands
/// on with an id of its own, unique and unguessable; the answer goes back
/// to the upstream under the question's key, which the round keeps, so the
/// upstream never sees the id. One the upstream wrote is kept as it is.
fn with_elicitation_id(method: &str, params: Box<RawValue>) -> Box<RawValue> {
    if method != "elicitation/create" {
        return params;
    }
    let Ok(serde_json::Value::Object(mut fields)) = serde_json::from_str(params.get()) else {
        return params;
    };
    if fields.get("mode").and_then(serde_json::Value::as_str) != Some("url")
        || fields.contains_key("elicitationId")
    {
        return params;
    }
    let mut nonce = [0u8; 16];
    let _ = getrandom::fill(&mut nonce);
    let id: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
    fields.insert("elicitationId".into(), format!("mcp-gateway-{id}").into());
    serde_json::value::to_raw_value(&fields).unwrap_or(params)
}

/// The `Mcp-Param-*` headers of a call of `tool` with these arguments: the
/// revision has the client mirror the arguments the tool's schema marks.
/// Most schemas mark none, which is seen before anything is parsed.
fn mirrored(tool: &ToolEntry, arguments: Json<'_>) -> Vec<(String, String)> {
    use crate::modelcontext::param_headers;
    let schema = tool.input_schema();
    if !schema.contains("x-mcp-header") {
        return Vec::new();
    }
    let (Ok(schema), Ok(arguments)) = (
        serde_json::from_str(schema),
        serde_json::from_str(arguments.get()),
    ) else {
        return Vec::new();
    };
    param_headers::headers_for(&param_headers::mirrors(&schema), &arguments)
}
