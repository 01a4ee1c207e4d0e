//! Prompts of the protocol: a listed prompt's name, one fetched without
//! arguments as a message, and the params that fetch it.

use super::*;

/// A prompt of `prompts/list`: its name when it can be fetched without arguments.
pub fn prompt_name(def: &Map<String, Value>) -> Result<&str, LeftOut> {
    let Some(name) = name_of(def) else {
        return Err(left_out(None, Unmapped::Invalid, "a prompt without a name"));
    };
    let required = def
        .get("arguments")
        .and_then(Value::as_array)
        .is_some_and(|args| {
            args.iter()
                .any(|a| a.get("required").and_then(Value::as_bool) == Some(true))
        });
    if required {
        return Err(left_out(
            Some(name),
            Unmapped::RequiredArguments,
            "the prompt has required arguments; MCP v1.0 prompts take none",
        ));
    }
    Ok(name)
}

/// A prompt mapped onto an MCP v1.0 definition from its `prompts/get` result:
/// exactly one message whose content is text.
pub fn prompt(
    def: &Map<String, Value>,
    name: &str,
    got: &str,
) -> Result<Map<String, Value>, LeftOut> {
    #[derive(Deserialize)]
    struct Message {
        role: String,
        content: Value,
    }
    #[derive(Deserialize)]
    struct Got {
        messages: Vec<Message>,
    }
    let unsupported = |why: String| left_out(Some(name), Unmapped::UnsupportedMessages, why);
    let got: Got = serde_json::from_str(got).map_err(|e| {
        left_out(
            Some(name),
            Unmapped::ReadFailed,
            format!("the prompts/get result cannot be read: {e}"),
        )
    })?;
    let [message] = <[Message; 1]>::try_from(got.messages)
        .map_err(|m| unsupported(format!("{} messages, not one", m.len())))?;
    if !matches!(message.role.as_str(), "user" | "assistant") {
        return Err(unsupported(format!("a message of role {:?}", message.role)));
    }
    let text = match (
        message.content.get("type").and_then(Value::as_str),
        message.content.get("text").and_then(Value::as_str),
    ) {
        (Some("text"), Some(text)) => text.to_owned(),
        (kind, _) => {
            return Err(unsupported(format!(
                "a message of {} content, not text",
                kind.unwrap_or("unknown")
            )));
        }
    };
    let mut out = Map::new();
    out.insert("mcpId".into(), original_id(Kind::Prompt, name).into());
    out.insert("name".into(), name.into());
    if let Some(d) = def.get("description").and_then(Value::as_str) {
        out.insert("description".into(), d.into());
    }
    out.insert("role".into(), message.role.into());
    out.insert("content".into(), text.into());
    Ok(out)
}

/// The params of `prompts/get` for a prompt fetched without arguments.
pub fn get_prompt_params(name: &str) -> String {
    json!({ "name": name }).to_string()
}
