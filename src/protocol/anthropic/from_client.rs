//! A client's request → canonical. History becomes OpenAI-shaped turns.

use serde_json::{Map, Value, json};

use crate::protocol::json_kind as kind;
use crate::protocol::{
    ChatRequest, InvalidRequest, MaxTokensField, Message, Part, Protocol, ResponseFormat, Role,
    Stop, Tool, ToolCall,
};

fn expect_obj(v: Value, path: &str) -> Result<Map<String, Value>, InvalidRequest> {
    match v {
        Value::Object(m) => Ok(m),
        other => Err(InvalidRequest::new(
            path,
            format!("expected an object, got {}", kind(&other)),
        )),
    }
}

fn take_str(
    m: &mut Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<String>, InvalidRequest> {
    match m.shift_remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(InvalidRequest::new(
            join(path, key),
            format!("expected a string, got {}", kind(&other)),
        )),
    }
}

fn join(base: &str, key: &str) -> String {
    if base.is_empty() {
        key.to_string()
    } else {
        format!("{base}.{key}")
    }
}

/// The text of a `system` value or a `tool_result` content: a string or text blocks.
fn text_of(v: Value, path: &str) -> Result<String, InvalidRequest> {
    match v {
        Value::String(s) => Ok(s),
        Value::Array(blocks) => {
            let mut out = String::new();
            for (i, b) in blocks.into_iter().enumerate() {
                let mut b = expect_obj(b, &format!("{path}[{i}]"))?;
                if b.get("type").and_then(Value::as_str) == Some("text") {
                    if !out.is_empty() {
                        out.push('\n');
                    }
                    out.push_str(
                        &take_str(&mut b, "text", &format!("{path}[{i}]"))?.unwrap_or_default(),
                    );
                }
            }
            Ok(out)
        }
        Value::Null => Ok(String::new()),
        other => Err(InvalidRequest::new(
            path,
            format!("expected a string or text blocks, got {}", kind(&other)),
        )),
    }
}

/// Client body → canonical request. History becomes OpenAI-shaped turns: a `tool_result`
/// block becomes a tool message (ids kept), `tool_use` an assistant tool call.
pub fn request_from_value(body: Value) -> Result<ChatRequest, InvalidRequest> {
    let client_body = body.clone();
    let mut m = expect_obj(body, "").map_err(|_| InvalidRequest {
        param: None,
        message: "the request body must be a JSON object".into(),
    })?;
    let model = take_str(&mut m, "model", "")?
        .filter(|s| !s.is_empty())
        .ok_or_else(|| InvalidRequest::new("model", "is required"))?;
    let max_tokens = match m.shift_remove("max_tokens") {
        Some(Value::Number(n)) if n.as_u64().is_some() => n.as_u64(),
        None | Some(Value::Null) => return Err(InvalidRequest::new("max_tokens", "is required")),
        Some(other) => {
            return Err(InvalidRequest::new(
                "max_tokens",
                format!("expected a non-negative integer, got {}", kind(&other)),
            ));
        }
    };
    let messages = messages_of(&mut m)?;
    let number = |m: &mut Map<String, Value>, key: &str| match m.shift_remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => Ok(Some(n)),
        Some(other) => Err(InvalidRequest::new(
            key,
            format!("expected a number, got {}", kind(&other)),
        )),
    };
    let temperature = number(&mut m, "temperature")?;
    let top_p = number(&mut m, "top_p")?;
    let stop = match m.shift_remove("stop_sequences") {
        None | Some(Value::Null) => None,
        Some(Value::Array(a)) => Some(Stop::Many(
            a.into_iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect(),
        )),
        Some(other) => {
            return Err(InvalidRequest::new(
                "stop_sequences",
                format!("expected an array of strings, got {}", kind(&other)),
            ));
        }
    };
    let stream = match m.shift_remove("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => b,
        Some(other) => {
            return Err(InvalidRequest::new(
                "stream",
                format!("expected a boolean, got {}", kind(&other)),
            ));
        }
    };
    let tools = tools_of(&mut m)?;
    let tool_choice = tool_choice_of(&mut m)?;
    let response_format = output_format_of(&mut m);
    Ok(ChatRequest {
        model,
        messages,
        stream,
        stream_include_usage: false,
        max_tokens: max_tokens.map(|n| (MaxTokensField::MaxTokens, n)),
        temperature,
        top_p,
        stop,
        tools,
        tool_choice,
        origin: Protocol::AnthropicMessages,
        raw: Some(client_body),
        // Anthropic-only fields (metadata, top_k, thinking...): kept for an Anthropic upstream,
        // never sent to another protocol's upstream.
        extra: m,
        hops: 0,
        response_format,
    })
}

/// `output_config.format` (or the older top-level `output_format`): JSON matching a schema.
fn output_format_of(m: &mut Map<String, Value>) -> Option<ResponseFormat> {
    let schema = |f: &Value| {
        (f["type"] == "json_schema").then(|| ResponseFormat::Schema {
            name: None,
            schema: f.get("schema").cloned().unwrap_or(Value::Null),
            strict: None,
        })
    };
    if let Some(Value::Object(cfg)) = m.get_mut("output_config")
        && let Some(f) = cfg.get("format").and_then(schema)
    {
        cfg.shift_remove("format");
        // Nothing else in it: nothing of it stays behind when the request crosses over.
        if cfg.is_empty() {
            m.shift_remove("output_config");
        }
        return Some(f);
    }
    let f = m.get("output_format").and_then(schema)?;
    m.shift_remove("output_format");
    Some(f)
}

/// `system` and `messages` → canonical messages, each marked with the turn it came from.
fn messages_of(m: &mut Map<String, Value>) -> Result<Vec<Message>, InvalidRequest> {
    let mut messages = Vec::new();
    if let Some(system) = m.shift_remove("system") {
        let text = text_of(system, "system")?;
        if !text.is_empty() {
            messages.push(Message::new(Role::System, text));
        }
    }
    let raw = match m.shift_remove("messages") {
        Some(Value::Array(a)) if !a.is_empty() => a,
        Some(Value::Array(_)) => {
            return Err(InvalidRequest::new(
                "messages",
                "must contain at least one message",
            ));
        }
        None | Some(Value::Null) => return Err(InvalidRequest::new("messages", "is required")),
        Some(other) => {
            return Err(InvalidRequest::new(
                "messages",
                format!("expected an array, got {}", kind(&other)),
            ));
        }
    };
    for (i, v) in raw.into_iter().enumerate() {
        let from = messages.len();
        turn(v, &format!("messages[{i}]"), &mut messages)?;
        for m in &mut messages[from..] {
            m.source = Some(i as u32);
        }
    }
    Ok(messages)
}

/// `tools` → canonical tools (server tools kept as sent).
fn tools_of(m: &mut Map<String, Value>) -> Result<Vec<Tool>, InvalidRequest> {
    match m.shift_remove("tools") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .into_iter()
            .enumerate()
            .map(|(i, t)| tool(t, &format!("tools[{i}]")))
            .collect(),
        Some(other) => Err(InvalidRequest::new(
            "tools",
            format!("expected an array, got {}", kind(&other)),
        )),
    }
}

/// `tool_choice` → its Chat Completions form.
fn tool_choice_of(m: &mut Map<String, Value>) -> Result<Option<Value>, InvalidRequest> {
    match m.shift_remove("tool_choice") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(tc)) => Ok(Some(match tc.get("type").and_then(Value::as_str) {
            Some("any") => json!("required"),
            Some("none") => json!("none"),
            Some("tool") => {
                let name = tc.get("name").and_then(Value::as_str).unwrap_or_default();
                json!({"type": "function", "function": {"name": name}})
            }
            _ => json!("auto"),
        })),
        Some(other) => Err(InvalidRequest::new(
            "tool_choice",
            format!("expected an object, got {}", kind(&other)),
        )),
    }
}

/// One Anthropic turn → one or more canonical messages.
fn turn(v: Value, path: &str, out: &mut Vec<Message>) -> Result<(), InvalidRequest> {
    let mut m = expect_obj(v, path)?;
    let role = match take_str(&mut m, "role", path)?.as_deref() {
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        // Claude Code may put a system turn in `messages`.
        Some("system") => Role::System,
        Some(other) => {
            return Err(InvalidRequest::new(
                join(path, "role"),
                format!("expected user or assistant, got {other:?}"),
            ));
        }
        None => return Err(InvalidRequest::new(join(path, "role"), "is required")),
    };
    let blocks = match m.shift_remove("content") {
        Some(Value::String(s)) => {
            out.push(Message::new(role, s));
            return Ok(());
        }
        Some(Value::Array(a)) => a,
        None | Some(Value::Null) => Vec::new(),
        Some(other) => {
            return Err(InvalidRequest::new(
                join(path, "content"),
                format!("expected a string or content blocks, got {}", kind(&other)),
            ));
        }
    };
    let mut parts = Vec::new();
    let mut calls = Vec::new();
    let mut reasoning = String::new();
    for (i, b) in blocks.into_iter().enumerate() {
        let bp = format!("{path}.content[{i}]");
        let mut b = expect_obj(b, &bp)?;
        match b.get("type").and_then(Value::as_str) {
            Some("text") => parts.push(Part::Text {
                text: take_str(&mut b, "text", &bp)?.unwrap_or_default(),
                extra: Map::new(),
            }),
            Some("image") => {
                let src = b.get("source").cloned().unwrap_or(Value::Null);
                let url = match src.get("type").and_then(Value::as_str) {
                    Some("base64") => format!(
                        "data:{};base64,{}",
                        src.get("media_type")
                            .and_then(Value::as_str)
                            .unwrap_or("image/png"),
                        src.get("data").and_then(Value::as_str).unwrap_or_default()
                    ),
                    _ => src
                        .get("url")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                };
                parts.push(Part::Image {
                    url,
                    detail: None,
                    extra: Map::new(),
                });
            }
            Some("tool_use") => calls.push(ToolCall::Function {
                id: take_str(&mut b, "id", &bp)?,
                name: take_str(&mut b, "name", &bp)?.unwrap_or_default(),
                arguments: Some(b.get("input").map_or_else(|| "{}".into(), Value::to_string)),
                extra: Map::new(),
            }),
            Some("tool_result") => {
                // Results come first, each its own tool message, paired by id.
                let id = take_str(&mut b, "tool_use_id", &bp)?;
                let text = text_of(
                    b.shift_remove("content").unwrap_or(Value::Null),
                    &join(&bp, "content"),
                )?;
                out.push(Message {
                    tool_call_id: id,
                    ..Message::new(Role::Tool, text)
                });
            }
            Some("thinking") => {
                // The signature only Anthropic can check is dropped on the way to others.
                reasoning.push_str(
                    b.get("thinking")
                        .and_then(Value::as_str)
                        .unwrap_or_default(),
                );
            }
            _ => parts.push(Part::Other(Value::Object(b))),
        }
    }
    out.extend(Message::from_blocks(role, parts, calls, reasoning));
    Ok(())
}

fn tool(v: Value, path: &str) -> Result<Tool, InvalidRequest> {
    let mut m = expect_obj(v, path)?;
    // Custom tools have no type (or "custom"); server tools (bash, web search...) have others.
    match m.get("type").and_then(Value::as_str) {
        None | Some("custom") => {}
        Some(_) => return Ok(Tool::Other(Value::Object(m))),
    }
    Ok(Tool::Function {
        name: take_str(&mut m, "name", path)?.unwrap_or_default(),
        description: take_str(&mut m, "description", path)?,
        parameters: m.shift_remove("input_schema"),
        extra: Map::new(),
    })
}
