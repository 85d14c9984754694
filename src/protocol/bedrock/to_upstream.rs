//! A canonical request → the body of Bedrock's Converse API (`POST /model/{id}/converse` and
//! `/converse-stream`), and the InvokeModel body an Anthropic model on Bedrock takes.

use serde_json::{Map, Value, json};

use crate::protocol::{ChatRequest, Content, Message, Part, Protocol, Role, Tool, ToolCall};

/// The `anthropic_version` Bedrock's InvokeModel wants in an Anthropic Messages body.
pub const BEDROCK_ANTHROPIC_VERSION: &str = "bedrock-2023-05-31";

/// Canonical request → Converse body. System messages become `system`; tool results become
/// `toolResult` blocks in a user turn; consecutive turns of one role are merged (Converse wants
/// them alternating); what has no common field goes in `additionalModelRequestFields`.
pub fn request_to_value(req: &ChatRequest) -> Value {
    let (system, turns) = turns_of(&req.messages);
    let mut body = Map::new();
    body.insert(
        "messages".into(),
        Value::Array(
            turns
                .into_iter()
                .map(|(role, content)| json!({"role": role, "content": content}))
                .collect(),
        ),
    );
    if !system.is_empty() {
        let blocks: Vec<Value> = system.into_iter().map(|t| json!({"text": t})).collect();
        body.insert("system".into(), Value::Array(blocks));
    }
    let mut inference = Map::new();
    if let Some((_, n)) = req.max_tokens {
        inference.insert("maxTokens".into(), json!(n));
    }
    if let Some(t) = &req.temperature {
        inference.insert("temperature".into(), Value::Number(t.clone()));
    }
    if let Some(t) = &req.top_p {
        inference.insert("topP".into(), Value::Number(t.clone()));
    }
    if let Some(s) = &req.stop {
        inference.insert("stopSequences".into(), json!(s.sequences()));
    }
    if !inference.is_empty() {
        body.insert("inferenceConfig".into(), Value::Object(inference));
    }
    if let Some(tc) = tool_config(req) {
        body.insert("toolConfig".into(), tc);
    }
    let additional = additional_fields(req);
    if !additional.is_empty() {
        body.insert(
            "additionalModelRequestFields".into(),
            Value::Object(additional),
        );
    }
    Value::Object(body)
}

/// An Anthropic Messages body for InvokeModel: the client's own (an Anthropic client: thinking
/// signatures, `cache_control`, betas as sent) or the canonical request written as one, with
/// Bedrock's `anthropic_version`, and no `model` or `stream` (the path says both).
pub fn invoke_body(req: &ChatRequest, model: &str) -> Value {
    let mut v = crate::protocol::anthropic::request_to_value(req, model);
    if let Some(o) = v.as_object_mut() {
        o.remove("model");
        o.remove("stream");
        o.insert("anthropic_version".into(), BEDROCK_ANTHROPIC_VERSION.into());
    }
    v
}

/// What an Anthropic client sends that Converse has no field for, and Claude on Bedrock takes
/// as a model field: `top_k`, `thinking`. (Other clients' extras are their protocols'.)
fn additional_fields(req: &ChatRequest) -> Map<String, Value> {
    let mut out = Map::new();
    if req.origin == Protocol::AnthropicMessages {
        for k in ["top_k", "thinking"] {
            if let Some(v) = req.extra.get(k) {
                out.insert(k.into(), v.clone());
            }
        }
    }
    out
}

/// The system text, and the turns: tool results in user turns, same-role turns merged.
fn turns_of(messages: &[Message]) -> (Vec<String>, Vec<(&'static str, Vec<Value>)>) {
    let mut system = Vec::new();
    let mut turns = crate::protocol::crossing::Turns::default();
    for m in messages {
        let mut blocks = content_blocks(m.content.as_ref());
        match m.role {
            Role::System | Role::Developer => {
                system.extend(
                    blocks
                        .iter()
                        .filter_map(|b| b["text"].as_str().map(str::to_string)),
                );
            }
            Role::Tool => {
                let mut content: Vec<Value> = blocks
                    .into_iter()
                    .filter(|b| b.get("text").is_some() || b.get("image").is_some())
                    .collect();
                if content.is_empty() {
                    // Converse wants at least one block: an empty result is an empty text.
                    content.push(json!({"text": ""}));
                }
                let id = m.tool_call_id.clone().unwrap_or_default();
                turns.push(
                    "user",
                    vec![json!({"toolResult": {"toolUseId": id, "content": content}})],
                );
            }
            Role::Assistant => {
                blocks.extend(m.tool_calls.iter().filter_map(tool_use));
                turns.push("assistant", blocks);
            }
            _ => turns.push("user", blocks),
        }
    }
    (system, turns.0)
}

fn tool_use(c: &ToolCall) -> Option<Value> {
    let ToolCall::Function {
        id,
        name,
        arguments,
        ..
    } = c
    else {
        return None;
    };
    let input: Value = arguments
        .as_deref()
        .and_then(|a| serde_json::from_str(a).ok())
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    Some(
        json!({"toolUse": {"toolUseId": id.clone().unwrap_or_default(), "name": name, "input": input}}),
    )
}

/// A message's text, images and documents as Converse content blocks.
fn content_blocks(content: Option<&Content>) -> Vec<Value> {
    match content {
        Some(Content::Text(t)) if !t.is_empty() => vec![json!({"text": t})],
        Some(Content::Parts(ps)) => {
            let mut docs = 0;
            ps.iter()
                .filter_map(|p| match p {
                    Part::Text { text, .. } => Some(json!({"text": text})),
                    Part::Image { url, .. } => image_block(url),
                    Part::Other(v) => {
                        docs += 1;
                        document_block(v, docs)
                    }
                })
                .collect()
        }
        _ => Vec::new(),
    }
}

/// `data:<media>;base64,<bytes>` → the media type and the base64 bytes.
fn data_url(url: &str) -> Option<(&str, &str)> {
    url.strip_prefix("data:")?.split_once(";base64,")
}

/// An inline image → Converse's `image` block (Converse takes bytes, not URLs: a linked image
/// has no block and is left out).
fn image_block(url: &str) -> Option<Value> {
    let (media, data) = data_url(url)?;
    let format = media.strip_prefix("image/")?;
    let format = if format == "jpg" { "jpeg" } else { format };
    Some(json!({"image": {"format": format, "source": {"bytes": data}}}))
}

/// A document part as a client protocol wrote it (Anthropic's `document` with a base64 source,
/// OpenAI's `file` with `file_data`, Gemini's `inlineData`) → Converse's `document` block.
fn document_block(v: &Value, n: usize) -> Option<Value> {
    let (media, data) = if v["type"] == "document" && v["source"]["type"] == "base64" {
        (
            v["source"]["media_type"].as_str()?,
            v["source"]["data"].as_str()?,
        )
    } else if let Some(fd) = v["file"]["file_data"].as_str().or(v["file_data"].as_str()) {
        data_url(fd)?
    } else if let Some(inline) = v.get("inlineData").or(v.get("inline_data")) {
        let media = inline["mimeType"]
            .as_str()
            .or(inline["mime_type"].as_str())?;
        (media, inline["data"].as_str()?)
    } else {
        return None;
    };
    let format = match media {
        "application/pdf" => "pdf",
        "text/csv" => "csv",
        "text/plain" => "txt",
        "text/html" => "html",
        "text/markdown" => "md",
        "application/msword" => "doc",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document" => "docx",
        "application/vnd.ms-excel" => "xls",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet" => "xlsx",
        _ => return None,
    };
    Some(
        json!({"document": {"format": format, "name": format!("document-{n}"), "source": {"bytes": data}}}),
    )
}

/// The function tools as Converse's `toolConfig`, with the choice. Converse has no `none`
/// choice: the tools stay (history with tool blocks needs them) and the choice is left out.
fn tool_config(req: &ChatRequest) -> Option<Value> {
    let tools: Vec<Value> = req
        .tools
        .iter()
        .filter_map(|t| match t {
            Tool::Function {
                name,
                description,
                parameters,
                ..
            } => {
                let mut spec = json!({"name": name, "inputSchema": {"json":
                    parameters.clone().unwrap_or_else(|| json!({"type": "object"}))}});
                if let Some(d) = description.as_ref().filter(|d| !d.is_empty()) {
                    spec["description"] = json!(d);
                }
                Some(json!({"toolSpec": spec}))
            }
            Tool::Other(_) => None,
        })
        .collect();
    if tools.is_empty() {
        return None;
    }
    let mut tc = json!({ "tools": tools });
    let choice = match &req.tool_choice {
        Some(Value::String(s)) if s == "required" => Some(json!({"any": {}})),
        Some(Value::String(s)) if s == "auto" => Some(json!({"auto": {}})),
        Some(Value::Object(o)) => o
            .get("function")
            .and_then(|f| f.get("name"))
            .map(|n| json!({"tool": {"name": n}})),
        _ => None,
    };
    if let Some(c) = choice {
        tc["toolChoice"] = c;
    }
    Some(tc)
}
