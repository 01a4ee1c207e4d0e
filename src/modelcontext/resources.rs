//! Resources of the protocol: a listed resource read as text within bounds,
//! and the params and notifications that name a uri.

use super::*;

/// A resource of `resources/list`: its uri, or why it cannot be mapped.
pub fn resource_uri(def: &Map<String, Value>) -> Result<&str, LeftOut> {
    let uri = def
        .get("uri")
        .and_then(Value::as_str)
        .filter(|u| !u.is_empty());
    let Some(uri) = uri else {
        return Err(left_out(
            None,
            Unmapped::Invalid,
            "a resource without a uri",
        ));
    };
    if name_of(def).is_none() {
        return Err(left_out(
            Some(uri),
            Unmapped::Invalid,
            "a resource without a name",
        ));
    }
    Ok(uri)
}

/// A resource's text read with `resources/read`, and its media type when the read says one.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceText {
    pub text: String,
    pub mime: Option<String>,
}

/// Reads a `resources/read` result: exactly one text content, within `cap` bytes.
pub fn read_resource_text(uri: &str, result: &str, cap: usize) -> Result<ResourceText, LeftOut> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Content {
        #[serde(default)]
        text: Option<String>,
        #[serde(default)]
        blob: Option<Value>,
        #[serde(default)]
        mime_type: Option<String>,
    }
    #[derive(Deserialize)]
    struct Read {
        contents: Vec<Content>,
    }
    let read: Read = serde_json::from_str(result).map_err(|e| {
        left_out(
            Some(uri),
            Unmapped::ReadFailed,
            format!("the read result cannot be read: {e}"),
        )
    })?;
    let [content] = <[Content; 1]>::try_from(read.contents).map_err(|contents| {
        left_out(
            Some(uri),
            Unmapped::SeveralContents,
            format!("the read answered {} contents, not one", contents.len()),
        )
    })?;
    match (content.text, content.blob) {
        (Some(text), None) if text.len() <= cap => Ok(ResourceText {
            text,
            mime: content.mime_type,
        }),
        (Some(text), None) => Err(left_out(
            Some(uri),
            Unmapped::TooLarge,
            format!("{} bytes of text, over the cap of {cap}", text.len()),
        )),
        (None, Some(_)) => Err(left_out(
            Some(uri),
            Unmapped::Binary,
            "binary contents (a blob) cannot be carried as text",
        )),
        _ => Err(left_out(
            Some(uri),
            Unmapped::ReadFailed,
            "the content has neither text nor a blob (or both)",
        )),
    }
}

/// A resource mapped onto an MCP v1.0 definition, with the text read for it.
pub fn resource(def: &Map<String, Value>, uri: &str, read: &ResourceText) -> Map<String, Value> {
    let media = read
        .mime
        .as_deref()
        .or_else(|| def.get("mimeType").and_then(Value::as_str))
        .unwrap_or("text/plain");
    let mut out = Map::new();
    out.insert("mcpId".into(), original_id(Kind::Resource, uri).into());
    out.insert("name".into(), name_of(def).unwrap_or(uri).into());
    out.insert(
        "description".into(),
        def.get("description")
            .and_then(Value::as_str)
            .unwrap_or("")
            .into(),
    );
    out.insert("mediaType".into(), media.into());
    out.insert("content".into(), read.text.clone().into());
    out
}

/// A resource template of `resources/templates/list`: always left out.
pub fn template(def: &Map<String, Value>) -> LeftOut {
    let key = def.get("uriTemplate").and_then(Value::as_str);
    left_out(
        key,
        Unmapped::Template,
        "a resource template names many resources and lists none",
    )
}

/// The params of `resources/read` and `resources/subscribe`.
pub fn uri_params(uri: &str) -> String {
    json!({ "uri": uri }).to_string()
}

/// The uri of a `notifications/resources/updated`.
pub fn updated_uri(params: Option<&str>) -> Option<String> {
    #[derive(Deserialize)]
    struct Updated {
        uri: String,
    }
    serde_json::from_str::<Updated>(params?).ok().map(|u| u.uri)
}
