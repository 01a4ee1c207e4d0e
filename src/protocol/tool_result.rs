//! A tool call's result as the core holds it, in neither protocol's shape:
//! the upstream's answer, kept as the text it arrived as, and where in it lies
//! what the tool produced. Each face renders it once (MCP v1.0's
//! `{"output": ...}`, the Model Context Protocol's `{content, structuredContent}`),
//! so a call is never rewritten into one protocol's shape and back.

use std::ops::Range;

use crate::jsonrpc::scan::{Json, JsonBuf};

/// What an upstream answered a tool call with, before the core checks it
/// against the tool's listed output schema.
#[derive(Debug)]
pub enum Answer {
    /// A result object of MCP v1.0: the tool's output is its `output` member.
    Object(JsonBuf),
    /// A value of the tool's own output schema at this place in the answer
    /// (`None`: the answer carries none).
    Value(JsonBuf, Option<Range<usize>>),
    /// Content blocks (an array) at this place in the answer: a tool without
    /// an output schema of its own.
    Blocks(JsonBuf, Range<usize>),
}

/// What a tool produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// A JSON value the tool's output schema describes.
    Value,
    /// Content blocks: an array of objects, each with a string `type`.
    Blocks,
}

/// A tool call's result, checked: the answer and where its output lies.
#[derive(Debug)]
pub struct ToolResult {
    answer: JsonBuf,
    at: Range<usize>,
    output: Output,
    /// The answer is itself a result object of MCP v1.0 (with whatever its
    /// upstream put beside `output`), forwardable to an MCP v1.0 agent as is.
    object: bool,
    /// Cut to the tenant's output budget: what the faces add.
    cut: Option<Box<Cut>>,
    /// Answered from the tenant's result cache, kept this many ms ago.
    age_ms: Option<u64>,
}

/// What a result cut to its budget carries beside its output.
#[derive(Debug)]
pub struct Cut {
    /// `_meta["dev.mcp-gateway/truncated"]`.
    pub mark: serde_json::Value,
    /// The blocks that follow a structured value's text block (a note and
    /// the pages' links); a cut of blocks holds them already.
    pub tail: Vec<serde_json::Value>,
    /// How many of a cut of blocks' last blocks are the gateway's own (the
    /// note and the links), not the upstream's.
    pub appended: usize,
}

impl ToolResult {
    /// `at` is where the output lies in `answer`: a whole JSON value (of an
    /// array, for blocks).
    pub fn new(answer: JsonBuf, at: Range<usize>, output: Output, object: bool) -> Self {
        debug_assert!(answer.get().get(at.clone()).is_some());
        ToolResult {
            answer,
            at,
            output,
            object,
            cut: None,
            age_ms: None,
        }
    }

    /// A result answered from the cache, kept `age_ms` ago.
    pub fn aged(
        answer: JsonBuf,
        at: Range<usize>,
        output: Output,
        object: bool,
        age_ms: u64,
    ) -> Self {
        ToolResult {
            age_ms: Some(age_ms),
            ..ToolResult::new(answer, at, output, object)
        }
    }

    /// The same result, not said to be from the cache.
    pub fn without_age(self) -> Self {
        ToolResult {
            age_ms: None,
            ..self
        }
    }

    /// How long ago a result answered from the cache was kept.
    pub fn age_ms(&self) -> Option<u64> {
        self.age_ms
    }

    /// What the cache keeps of it: the answer, where its output lies, what
    /// the output is, and whether the answer is an MCP v1.0 result object.
    pub fn parts(&self) -> (&JsonBuf, Range<usize>, Output, bool) {
        (&self.answer, self.at.clone(), self.output, self.object)
    }

    /// A result cut to its budget: `output`'s text is the whole answer.
    pub fn cut(answer: JsonBuf, output: Output, cut: Cut) -> Self {
        let at = 0..answer.get().len();
        ToolResult {
            answer,
            at,
            output,
            object: false,
            cut: Some(Box::new(cut)),
            age_ms: None,
        }
    }

    /// What was cut, if the result was.
    pub fn cut_off(&self) -> Option<&Cut> {
        self.cut.as_deref()
    }

    /// The tool's output: a value or an array of content blocks.
    pub fn output(&self) -> (Output, Json<'_>) {
        (self.output, self.answer.sub(self.at.clone()))
    }

    /// The answer, when it is a result object of MCP v1.0; otherwise itself.
    pub fn into_object(self) -> Result<JsonBuf, ToolResult> {
        if self.object {
            Ok(self.answer)
        } else {
            Err(self)
        }
    }
}
