//! The demo server's definitions and tools.

use std::time::Duration;

use serde_json::{Value, json};

use super::{Answer, error};

fn tool(name: &str, id: String, description: &str, input: Value, output: Value) -> Value {
    json!({"mcpId": id, "name": name, "description": description, "inputSchema": input, "outputSchema": output})
}

fn text_schema() -> Value {
    json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"], "additionalProperties": false})
}

/// A listed-only tool of a typical size (about 400 bytes of JSON), for scale benchmarks.
pub fn generated(name: &str, i: usize) -> Value {
    tool(
        &format!("gen{i}"),
        format!("mcp://{name}/tools/gen{i}:v1"),
        "A generated tool for scale benchmarks: listed, never called. It takes a query and a limit.",
        // Schemas differ from tool to tool, as real ones do.
        json!({"type": "object", "properties": {
            "query": {"type": "string", "maxLength": 100 + i},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100}
        }, "required": ["query"]}),
        json!({"type": "object", "properties": {"items": {"type": "array", "items": {"type": "string"}}}}),
    )
}

/// (tools, resources, prompts) of a server called `name`.
pub fn definitions(name: &str, test_tools: bool) -> (Vec<Value>, Vec<Value>, Vec<Value>) {
    let id = |kind: &str, t: &str| format!("mcp://{name}/{kind}/{t}");
    let mut tools = vec![
        tool(
            "echo",
            id("tools", "echo:v1"),
            "Returns the text it is given.",
            text_schema(),
            text_schema(),
        ),
        tool(
            "add",
            id("tools", "add:v1"),
            "Adds two numbers.",
            json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}),
            json!({"type": "object", "properties": {"sum": {"type": "number"}}, "required": ["sum"]}),
        ),
    ];
    let mut resources = vec![json!({
        "mcpId": id("resources", "motd"), "name": "motd", "description": "Message of the day.",
        "mediaType": "text/plain", "content": format!("Hello from {name}.")
    })];
    let prompts = vec![json!({
        "mcpId": id("prompts", "greeting"), "name": "greeting", "description": "A friendly system prompt.",
        "role": "system", "content": "You are a helpful assistant."
    })];
    if test_tools {
        let any = json!({"type": "object"});
        tools.extend([
            tool(
                "sleep",
                id("tools", "sleep"),
                "Answers after ms milliseconds.",
                json!({"type": "object", "properties": {"ms": {"type": "integer", "minimum": 0, "maximum": 600000}}, "required": ["ms"]}),
                json!({"type": "object", "properties": {"slept": {"type": "integer"}}, "required": ["slept"]}),
            ),
            tool("crash", id("tools", "crash"), "Exits the server process without answering.", any.clone(), any.clone()),
            tool("garbage", id("tools", "garbage"), "Prints a stray line on stdout, then answers.", any.clone(), any.clone()),
            tool("bad_frame", id("tools", "bad_frame"), "Writes a frame header claiming an absurd length.", any.clone(), any.clone()),
            tool("stderr_flood", id("tools", "stderr_flood"), "Writes many lines to stderr, fast.", any.clone(), any.clone()),
            tool("bad_output", id("tools", "bad_output"), "Returns output that breaks its schema.", any.clone(), text_schema()),
            tool("fail", id("tools", "fail"), "Returns the tool's own error.", any.clone(), any.clone()),
            tool(
                "pid",
                id("tools", "pid"),
                "Returns the server's process id.",
                any.clone(),
                json!({"type": "object", "properties": {"pid": {"type": "integer"}}, "required": ["pid"]}),
            ),
            tool("stderr", id("tools", "stderr"), "Writes text to stderr.", text_schema(), any.clone()),
            tool(
                "touch",
                id("tools", "touch"),
                "Changes the motd resource and announces it with mcp/resourceDidChange.",
                any.clone(),
                json!({"type": "object", "properties": {"version": {"type": "integer"}}, "required": ["version"]}),
            ),
            tool("legacy", format!("urn:{name}:legacy"), "An echo tool whose id is not an mcp:// URI.", text_schema(), text_schema()),
            // Broken on purpose: the gateway must leave these out and count them.
            json!({"mcpId": id("tools", "no-output-schema"), "name": "broken", "description": "d", "inputSchema": {}}),
            tool("broken2", id("tools", "bad-input-schema"), "d", json!({"type": 12}), any.clone()),
        ]);
        resources.push(json!({"mcpId": id("resources", "no-content"), "name": "broken", "description": "d", "mediaType": "text/plain"}));
    }
    (tools, resources, prompts)
}

fn text_arg(args: &Value) -> Option<String> {
    args.get("text").and_then(Value::as_str).map(str::to_owned)
}

/// Runs tool `id` with `args`.
pub async fn execute(name: &str, test_tools: bool, id: &str, args: &Value) -> Answer {
    let Some(short) = id
        .strip_prefix(&format!("mcp://{name}/tools/"))
        .or_else(|| (test_tools && id == format!("urn:{name}:legacy")).then_some("legacy"))
    else {
        return error(
            -32602,
            "Invalid params",
            Some(json!(format!("Unknown tool: {id}"))),
        );
    };
    let missing = |p: &str| {
        error(
            -32602,
            "Invalid params",
            Some(json!(format!("Missing required property: '{p}'"))),
        )
    };
    match (short, test_tools) {
        ("echo:v1", _) | ("legacy", true) => match text_arg(args) {
            Some(text) => Answer::Result(json!({"output": {"text": text}})),
            None => missing("text"),
        },
        ("add:v1", _) => match (
            args.get("a").and_then(Value::as_f64),
            args.get("b").and_then(Value::as_f64),
        ) {
            (Some(a), Some(b)) => Answer::Result(json!({"output": {"sum": a + b}})),
            _ => missing("a"),
        },
        ("sleep", true) => {
            let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Answer::Result(json!({"output": {"slept": ms}}))
        }
        ("crash", true) => Answer::Crash,
        ("garbage", true) => Answer::Raw(
            b"a stray print on stdout\n".to_vec(),
            Some(json!({"output": {}})),
        ),
        ("bad_frame", true) => {
            Answer::Raw(b"Content-Length: 99999999999999\r\n\r\n".to_vec(), None)
        }
        ("stderr_flood", true) => {
            Answer::StderrFlood(args.get("lines").and_then(Value::as_u64).unwrap_or(1000))
        }
        ("bad_output", true) => Answer::Result(json!({"output": {"text": 42}})),
        ("fail", true) => error(-32050, "tool failed", Some(json!({"reason": "requested"}))),
        ("pid", true) => Answer::Result(json!({"output": {"pid": std::process::id()}})),
        ("stderr", true) => {
            eprintln!("{}", text_arg(args).unwrap_or_default());
            Answer::Result(json!({"output": {}}))
        }
        _ => error(
            -32602,
            "Invalid params",
            Some(json!(format!("Unknown tool: {id}"))),
        ),
    }
}
