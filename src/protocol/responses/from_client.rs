//! A Responses request → the canonical request (read as an OpenAI chat request) and its
//! `Echo`; and a request that continues a kept conversation.

use serde_json::{Map, Value, json};

use super::Echo;
use crate::protocol::{ChatRequest, InvalidRequest, Protocol};

/// Request fields a Response object repeats as sent.
const ECHOED: &[&str] = &[
    "instructions",
    "max_output_tokens",
    "metadata",
    "parallel_tool_calls",
    "prompt_cache_key",
    "reasoning",
    "service_tier",
    "store",
    "temperature",
    "text",
    "tool_choice",
    "tools",
    "top_p",
    "truncation",
    "user",
];

/// Fields with the same name and meaning in Chat Completions: passed on as they are.
const SAME_IN_CHAT: &[&str] = &[
    "temperature",
    "top_p",
    "stream",
    "parallel_tool_calls",
    "prompt_cache_key",
    "user",
    "service_tier",
    "safety_identifier",
    "metadata",
];

fn bad(param: &str, message: impl Into<String>) -> InvalidRequest {
    InvalidRequest::new(param, message)
}

use crate::protocol::json_kind as kind;

fn random_hex(n: usize) -> String {
    let mut rng = fastrand::Rng::new();
    (0..n)
        .map(|_| char::from_digit(rng.u32(0..16), 16).unwrap_or('0'))
        .collect()
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The `previous_response_id` a request continues from, if any.
pub fn previous_response_id(body: &Value) -> Option<&str> {
    body.get("previous_response_id").and_then(Value::as_str)
}

/// A request's `input` as items (a string is one user message).
fn input_items(body: &Value) -> Vec<Value> {
    match &body["input"] {
        Value::String(s) => vec![json!({"role": "user", "content": s})],
        Value::Array(items) => items.clone(),
        _ => Vec::new(),
    }
}

/// Continues a kept conversation: its items, then the request's own input, and no
/// `previous_response_id` (the request is whole again, for any channel).
pub fn continue_from(body: &mut Value, kept: &str) -> Result<(), InvalidRequest> {
    let mut items: Vec<Value> = serde_json::from_str(kept).map_err(|_| InvalidRequest {
        param: Some("previous_response_id".into()),
        message: "the kept conversation of this response could not be read".into(),
    })?;
    items.extend(input_items(body));
    if let Some(o) = body.as_object_mut() {
        o.remove("previous_response_id");
        o.insert("input".into(), Value::Array(items));
    }
    Ok(())
}

/// A Responses request body → the canonical request (origin: OpenAI chat) and its echo.
pub fn request_from_value(body: Value) -> Result<(ChatRequest, Echo), InvalidRequest> {
    // The client's body as sent, for a channel that speaks the Responses API itself.
    let raw = body.clone();
    let store = body.get("store") != Some(&Value::Bool(false));
    // Copied only when it may be kept: Codex sends `store: false` and its whole history.
    let conversation = if store {
        input_items(&body)
    } else {
        Vec::new()
    };
    let Value::Object(mut m) = body else {
        return Err(InvalidRequest {
            param: None,
            message: "the request body must be a JSON object".into(),
        });
    };
    let mut fields = Map::new();
    for k in ECHOED {
        if let Some(v) = m.get(*k) {
            fields.insert((*k).into(), v.clone());
        }
    }
    let mut losses = Vec::new();
    let mut chat = Map::new();
    match m.remove("model") {
        Some(Value::String(s)) if !s.is_empty() => {
            chat.insert("model".into(), Value::String(s));
        }
        Some(Value::String(_)) | None | Some(Value::Null) => {
            return Err(bad("model", "is required"));
        }
        Some(other) => {
            return Err(bad(
                "model",
                format!("expected a string, got {}", kind(&other)),
            ));
        }
    }
    for k in SAME_IN_CHAT {
        if let Some(v) = m.remove(*k).filter(|v| !v.is_null()) {
            chat.insert((*k).into(), v);
        }
    }
    if let Some(n) = m.remove("max_output_tokens").filter(|v| !v.is_null()) {
        chat.insert("max_completion_tokens".into(), n);
    }
    if let Some(effort) = m
        .get("reasoning")
        .and_then(|r| r.get("effort"))
        .filter(|e| !e.is_null())
    {
        chat.insert("reasoning_effort".into(), effort.clone());
    }
    if let Some(format) = m.get("text").and_then(|t| t.get("format"))
        && let Some(f) = response_format(format)
    {
        chat.insert("response_format".into(), f);
    }
    let mut custom_tools = Vec::new();
    if let Some(tools) = m.remove("tools").filter(|v| !v.is_null()) {
        let out = tools_of(tools, &mut custom_tools, &mut losses)?;
        if !out.is_empty() {
            chat.insert("tools".into(), Value::Array(out));
        }
    }
    // Chat Completions refuses these without tools (every one may have been a hosted tool).
    if !chat.contains_key("tools") {
        chat.remove("parallel_tool_calls");
    }
    if let Some(tc) = m.remove("tool_choice").filter(|v| !v.is_null())
        && let Some(c) = tool_choice_of(&tc).filter(|_| chat.contains_key("tools"))
    {
        chat.insert("tool_choice".into(), c);
    }
    let (messages, sources) = messages_of(&mut m, &mut losses)?;
    chat.insert("messages".into(), Value::Array(messages));
    // The rest (include, store, truncation, stream_options...) is the Responses API's own.
    let mut req = crate::protocol::openai::request_from_value(Value::Object(chat))?;
    for (msg, s) in req.messages.iter_mut().zip(sources) {
        msg.source = s;
    }
    // Usage is always part of `response.completed`.
    req.stream_include_usage = true;
    req.origin = Protocol::OpenAiResponses;
    req.raw = Some(raw);
    losses.sort();
    losses.dedup();
    Ok((
        req,
        Echo {
            // `sy`: never hex, so an id this gateway made is told from an upstream's.
            id: format!("resp_sy{}", random_hex(30)),
            created_at: now_secs(),
            fields,
            custom_tools,
            losses,
            store,
            conversation,
        },
    ))
}

/// `text.format` → the Chat Completions `response_format`, for a JSON one.
fn response_format(format: &Value) -> Option<Value> {
    match format.get("type").and_then(Value::as_str) {
        Some("json_schema") => {
            let mut schema = Map::new();
            for k in ["name", "schema", "strict", "description"] {
                if let Some(v) = format.get(k) {
                    schema.insert(k.into(), v.clone());
                }
            }
            Some(json!({"type": "json_schema", "json_schema": schema}))
        }
        Some("json_object") => Some(json!({"type": "json_object"})),
        _ => None,
    }
}

/// Responses tools → Chat Completions tools: functions as they are, `custom` tools as functions
/// of one `input` string (their names kept in `custom_tools`); hosted tools are named in
/// `losses`.
fn tools_of(
    tools: Value,
    custom_tools: &mut Vec<String>,
    losses: &mut Vec<String>,
) -> Result<Vec<Value>, InvalidRequest> {
    let Value::Array(tools) = tools else {
        return Err(bad(
            "tools",
            format!("expected an array, got {}", kind(&tools)),
        ));
    };
    let mut out = Vec::new();
    for (i, t) in tools.into_iter().enumerate() {
        match t.get("type").and_then(Value::as_str) {
            Some("function") => {
                let name = t.get("name").and_then(Value::as_str).unwrap_or_default();
                if name.is_empty() {
                    return Err(bad(&format!("tools[{i}].name"), "is required"));
                }
                let mut f = Map::new();
                for k in ["name", "description", "parameters", "strict"] {
                    if let Some(v) = t.get(k).filter(|v| !v.is_null()) {
                        f.insert(k.into(), v.clone());
                    }
                }
                out.push(json!({"type": "function", "function": f}));
            }
            Some("custom") => {
                let name = t.get("name").and_then(Value::as_str).unwrap_or_default();
                custom_tools.push(name.to_string());
                out.push(json!({"type": "function", "function": {
                    "name": name,
                    "description": t.get("description").cloned().unwrap_or(Value::Null),
                    "parameters": {"type": "object", "properties": {"input": {"type": "string"}},
                                   "required": ["input"]},
                }}));
            }
            Some(other) => losses.push(format!("{other} tool")),
            None => return Err(bad(&format!("tools[{i}].type"), "is required")),
        }
    }
    Ok(out)
}

/// A Responses `tool_choice` → its Chat Completions form (a hosted tool's: `auto`).
fn tool_choice_of(tc: &Value) -> Option<Value> {
    match tc {
        Value::String(_) => Some(tc.clone()),
        Value::Object(o) => match o.get("type").and_then(Value::as_str) {
            Some("function" | "custom") => o
                .get("name")
                .map(|n| json!({"type": "function", "function": {"name": n}})),
            // Forcing a hosted tool: it is not there any more, let the model choose.
            _ => Some(json!("auto")),
        },
        _ => None,
    }
}

/// `instructions` and `input` → Chat Completions messages, with the input item each starts at.
fn messages_of(
    m: &mut Map<String, Value>,
    losses: &mut Vec<String>,
) -> Result<(Vec<Value>, Vec<Option<u32>>), InvalidRequest> {
    let mut messages: Vec<Value> = Vec::new();
    // Per message: the input item it starts at (trimming cuts the raw input by these).
    let mut sources: Vec<Option<u32>> = Vec::new();
    if let Some(i) = m.remove("instructions").filter(|v| !v.is_null()) {
        match i {
            Value::String(s) => {
                messages.push(json!({"role": "system", "content": s}));
                sources.push(None);
            }
            other => {
                return Err(bad(
                    "instructions",
                    format!("expected a string, got {}", kind(&other)),
                ));
            }
        }
    }
    match m.remove("input") {
        Some(Value::String(s)) => {
            messages.push(json!({"role": "user", "content": s}));
            sources.push(None);
        }
        Some(Value::Array(items)) => {
            for (i, item) in items.into_iter().enumerate() {
                input_item(item, i, &mut messages, losses)?;
                sources.resize(messages.len(), Some(i as u32));
            }
        }
        None | Some(Value::Null) => return Err(bad("input", "is required")),
        Some(other) => {
            return Err(bad(
                "input",
                format!(
                    "expected a string or an array of items, got {}",
                    kind(&other)
                ),
            ));
        }
    }
    if messages.is_empty() {
        return Err(bad("input", "must contain at least one message"));
    }
    Ok((messages, sources))
}

/// One input item → Chat Completions messages (a call joins the assistant turn before it).
fn input_item(
    item: Value,
    i: usize,
    out: &mut Vec<Value>,
    losses: &mut Vec<String>,
) -> Result<(), InvalidRequest> {
    let at = |f: &str| format!("input[{i}].{f}");
    let Value::Object(o) = item else {
        return Err(bad(
            &format!("input[{i}]"),
            format!("expected an object, got {}", kind(&item)),
        ));
    };
    let ty = o.get("type").and_then(Value::as_str);
    let pairs = matches!(
        ty,
        Some(
            "function_call"
                | "custom_tool_call"
                | "function_call_output"
                | "custom_tool_call_output"
        )
    );
    let call_id = match o.get("call_id") {
        Some(Value::String(id)) if !id.is_empty() => Value::String(id.clone()),
        _ if pairs => return Err(bad(&at("call_id"), "is required")),
        _ => Value::Null,
    };
    let call = |call_id: &Value, name: &Value, arguments: String| json!({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}});
    let push_call = |out: &mut Vec<Value>, c: Value| {
        // Calls after the assistant's text (or other calls) are one turn.
        if let Some(last) = out.last_mut().filter(|l| l["role"] == "assistant") {
            if !last["tool_calls"].is_array() {
                last["tool_calls"] = json!([]);
            }
            if let Some(a) = last["tool_calls"].as_array_mut() {
                a.push(c);
            }
        } else {
            out.push(json!({"role": "assistant", "content": null, "tool_calls": [c]}));
        }
    };
    match ty {
        None | Some("message") => {
            let role = o.get("role").and_then(Value::as_str).unwrap_or_default();
            if !matches!(role, "user" | "assistant" | "system" | "developer") {
                return Err(bad(
                    &at("role"),
                    format!("expected user, assistant, system or developer, got {role:?}"),
                ));
            }
            let content = match o.get("content") {
                Some(Value::String(s)) => Value::String(s.clone()),
                Some(Value::Array(parts)) => {
                    let mut out_parts = Vec::new();
                    for (j, p) in parts.iter().enumerate() {
                        out_parts.extend(content_part(p, &at(&format!("content[{j}]")), losses)?);
                    }
                    Value::Array(out_parts)
                }
                _ => return Err(bad(&at("content"), "is required")),
            };
            out.push(json!({"role": role, "content": content}));
        }
        Some("function_call") => {
            let args = o
                .get("arguments")
                .and_then(Value::as_str)
                .unwrap_or("{}")
                .to_string();
            push_call(
                out,
                call(&call_id, o.get("name").unwrap_or(&Value::Null), args),
            );
        }
        Some("custom_tool_call") => {
            let input = o.get("input").and_then(Value::as_str).unwrap_or_default();
            let args = json!({ "input": input }).to_string();
            push_call(
                out,
                call(&call_id, o.get("name").unwrap_or(&Value::Null), args),
            );
        }
        Some("function_call_output" | "custom_tool_call_output") => {
            let output = match o.get("output") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join("\n"),
                Some(other) => other.to_string(),
                None => String::new(),
            };
            out.push(json!({"role": "tool", "tool_call_id": call_id, "content": output}));
        }
        // Reasoning the client kept (encrypted for its own provider): not readable elsewhere.
        Some("reasoning") => {}
        Some(other) => losses.push(format!("{other} input items")),
    }
    Ok(())
}

/// A Responses content part → Chat Completions content parts.
fn content_part(
    p: &Value,
    path: &str,
    losses: &mut Vec<String>,
) -> Result<Option<Value>, InvalidRequest> {
    Ok(match p.get("type").and_then(Value::as_str) {
        Some("input_text" | "output_text" | "text") => Some(json!({
            "type": "text",
            "text": p.get("text").and_then(Value::as_str).unwrap_or_default(),
        })),
        Some("refusal") => Some(json!({
            "type": "text",
            "text": p.get("refusal").and_then(Value::as_str).unwrap_or_default(),
        })),
        Some("input_image") => match p.get("image_url").and_then(Value::as_str) {
            Some(url) => {
                let mut image = json!({ "url": url });
                if let Some(d) = p.get("detail").filter(|d| !d.is_null()) {
                    image["detail"] = d.clone();
                }
                Some(json!({"type": "image_url", "image_url": image}))
            }
            None => {
                losses.push("images by file_id".into());
                None
            }
        },
        Some("input_file") => {
            let mut file = Map::new();
            for k in ["file_id", "file_data", "filename"] {
                if let Some(v) = p.get(k) {
                    file.insert(k.into(), v.clone());
                }
            }
            Some(json!({"type": "file", "file": file}))
        }
        Some(_) => {
            losses.push("content parts of other types".into());
            None
        }
        None => return Err(bad(&format!("{path}.type"), "is required")),
    })
}
