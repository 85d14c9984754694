//! A canonical request → an Anthropic Messages body (Anthropic as the upstream).

use serde_json::{Map, Value, json};

use crate::protocol::{
    ChatRequest, Content, Message, Part, Protocol, ResponseFormat, Role, Tool, ToolCall,
};

/// A `data:` URL → Anthropic's base64 image source; anything else → a URL source.
fn image_source(url: &str) -> Value {
    if let Some(rest) = url.strip_prefix("data:")
        && let Some((media, data)) = rest.split_once(";base64,")
    {
        return json!({"type": "base64", "media_type": media, "data": data});
    }
    json!({"type": "url", "url": url})
}

/// Removes the thinking blocks this gateway made from other providers' reasoning (no
/// signature): Anthropic rejects a thinking block it cannot verify.
fn strip_unsigned_thinking(body: &mut Map<String, Value>) {
    let Some(Value::Array(messages)) = body.get_mut("messages") else {
        return;
    };
    let last_assistant = messages.iter().rposition(|m| m["role"] == "assistant");
    let mut stripped_last = false;
    for (i, m) in messages.iter_mut().enumerate() {
        if let Some(Value::Array(blocks)) = m.get_mut("content") {
            let before = blocks.len();
            blocks.retain(|b| {
                b["type"] != "thinking" || b["signature"].as_str().is_some_and(|s| !s.is_empty())
            });
            stripped_last |= Some(i) == last_assistant && blocks.len() < before;
        }
    }
    // A turn that was only our thinking is gone; Anthropic merges the turns left adjacent.
    messages.retain(|m| !m["content"].as_array().is_some_and(Vec::is_empty));
    // With thinking on, Claude wants the last assistant turn to open with a (signed) thinking
    // block; that turn's thinking came from another provider, so this request goes without.
    if stripped_last {
        body.shift_remove("thinking");
    }
}

/// Canonical request → Anthropic Messages body for `model`. System messages become the
/// top-level `system`; tool results become `tool_result` blocks in a user turn; consecutive
/// turns of the same role are merged, as Anthropic requires alternation.
pub fn request_to_value(req: &ChatRequest, model: &str) -> Value {
    // Same protocol: the client's own body, model rewritten (stream set by the caller).
    if req.origin == Protocol::AnthropicMessages
        && let Some(Value::Object(raw)) = &req.raw
    {
        let mut body = raw.clone();
        body.insert("model".into(), json!(model));
        strip_unsigned_thinking(&mut body);
        return Value::Object(body);
    }
    let (system, turns) = turns_of(&req.messages);
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    // Anthropic requires max_tokens; without one from the client, a generous default.
    body.insert(
        "max_tokens".into(),
        json!(req.max_tokens.map_or(4096, |(_, n)| n)),
    );
    if !system.is_empty() {
        body.insert("system".into(), json!(system.join("\n\n")));
    }
    body.insert(
        "messages".into(),
        Value::Array(
            turns
                .into_iter()
                .map(|(role, content)| json!({"role": role, "content": content}))
                .collect(),
        ),
    );
    if let Some(t) = &req.temperature {
        body.insert("temperature".into(), Value::Number(t.clone()));
    }
    if let Some(t) = &req.top_p {
        body.insert("top_p".into(), Value::Number(t.clone()));
    }
    if let Some(s) = &req.stop {
        body.insert("stop_sequences".into(), json!(s.sequences()));
    }
    let tools = tools_of(&req.tools);
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(c) = req.tool_choice.as_ref().and_then(tool_choice_of) {
        body.insert("tool_choice".into(), c);
    }
    if req.stream {
        body.insert("stream".into(), json!(true));
    }
    // Anthropic has no mode for any JSON object: only a schema crosses.
    if let Some(ResponseFormat::Schema { schema, .. }) = req.response_format() {
        body.insert(
            "output_config".into(),
            json!({"format": {"type": "json_schema", "schema": schema}}),
        );
    }
    // Same protocol: the client's own Anthropic fields go along (metadata, top_k, thinking...).
    if req.origin == Protocol::AnthropicMessages {
        for (k, v) in &req.extra {
            body.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    Value::Object(body)
}

/// The system text, and the turns: tool results in user turns, consecutive turns of the same
/// role merged.
fn turns_of(messages: &[Message]) -> (Vec<String>, Vec<(&'static str, Vec<Value>)>) {
    let mut system = Vec::new();
    let mut turns = crate::protocol::crossing::Turns::default();
    for m in messages {
        let mut blocks = content_blocks(m.content.as_ref());
        match m.role {
            Role::System | Role::Developer => {
                for b in blocks {
                    if let Some(t) = b["text"].as_str() {
                        system.push(t.to_string());
                    }
                }
            }
            Role::Tool => {
                let text: Vec<&str> = blocks.iter().filter_map(|b| b["text"].as_str()).collect();
                turns.push(
                    "user",
                    vec![json!({"type": "tool_result",
                        "tool_use_id": m.tool_call_id.clone().unwrap_or_default(),
                        "content": text.join("\n")})],
                );
            }
            Role::Assistant => {
                for c in &m.tool_calls {
                    if let ToolCall::Function {
                        id,
                        name,
                        arguments,
                        ..
                    } = c
                    {
                        let input: Value = arguments
                            .as_deref()
                            .and_then(|a| serde_json::from_str(a).ok())
                            .unwrap_or_else(|| json!({}));
                        blocks.push(
                            json!({"type": "tool_use", "id": id.clone().unwrap_or_default(),
                            "name": name, "input": input}),
                        );
                    }
                }
                turns.push("assistant", blocks);
            }
            _ => turns.push("user", blocks),
        }
    }
    (system, turns.0)
}

/// A message's text and images as Anthropic content blocks.
fn content_blocks(content: Option<&Content>) -> Vec<Value> {
    let mut blocks = Vec::new();
    match content {
        Some(Content::Text(t)) if !t.is_empty() => blocks.push(json!({"type": "text", "text": t})),
        Some(Content::Parts(ps)) => {
            for p in ps {
                match p {
                    Part::Text { text, .. } => blocks.push(json!({"type": "text", "text": text})),
                    Part::Image { url, .. } => {
                        blocks.push(json!({"type": "image", "source": image_source(url)}))
                    }
                    Part::Other(_) => {}
                }
            }
        }
        _ => {}
    }
    blocks
}

/// Canonical function tools → Anthropic tools (others have no Anthropic form).
fn tools_of(tools: &[Tool]) -> Vec<Value> {
    tools
        .iter()
        .filter_map(|t| match t {
            Tool::Function {
                name,
                description,
                parameters,
                ..
            } => Some(json!({
                "name": name,
                "description": description,
                "input_schema": parameters.clone().unwrap_or_else(|| json!({"type": "object"})),
            })),
            Tool::Other(_) => None,
        })
        .collect()
}

/// A Chat Completions `tool_choice` → Anthropic's, when it has one.
fn tool_choice_of(tc: &Value) -> Option<Value> {
    match tc {
        Value::String(s) if s == "required" => Some(json!({"type": "any"})),
        Value::String(s) if s == "none" => Some(json!({"type": "none"})),
        Value::String(_) => Some(json!({"type": "auto"})),
        Value::Object(o) => o
            .get("function")
            .and_then(|f| f.get("name"))
            .map(|n| json!({"type": "tool", "name": n})),
        _ => None,
    }
}
