//! A client's request (the model from the URL) → canonical.

use serde_json::{Map, Value, json};

use crate::protocol::{
    ChatRequest, InvalidRequest, MaxTokensField, Message, Part, Protocol, ResponseFormat, Role,
    Stop, Tool, ToolCall,
};

fn bad(param: &str, message: impl Into<String>) -> InvalidRequest {
    InvalidRequest::new(param, message)
}

/// Client body (model from the URL) → canonical request.
pub fn request_from_value(
    body: Value,
    model: &str,
    stream: bool,
) -> Result<ChatRequest, InvalidRequest> {
    let client_body = body.clone();
    let Value::Object(mut m) = body else {
        return Err(InvalidRequest {
            param: None,
            message: "the request body must be a JSON object".into(),
        });
    };
    let mut messages = Vec::new();
    let system = m
        .shift_remove("systemInstruction")
        .or_else(|| m.shift_remove("system_instruction"));
    if let Some(sys) = system {
        let text = parts_text(&sys["parts"]);
        if !text.is_empty() {
            messages.push(Message::new(Role::System, text));
        }
    }
    let contents = match m.shift_remove("contents") {
        Some(Value::Array(a)) if !a.is_empty() => a,
        _ => return Err(bad("contents", "is required and must be a non-empty array")),
    };
    read_contents(contents, &mut messages)?;
    let gc = m
        .shift_remove("generationConfig")
        .or_else(|| m.shift_remove("generation_config"));
    let gc = gc.as_ref();
    let number = |k: &str| {
        gc.and_then(|g| g.get(k))
            .and_then(Value::as_number)
            .cloned()
    };
    let tools = tools_of(&mut m);
    let tool_choice = tool_choice_of(&mut m);
    let response_format = gc.and_then(response_format_of);
    // Generation settings with no canonical field (thinkingConfig, topK...): named among the
    // request's own fields, so that crossing protocols says they stayed behind. (A Gemini
    // channel gets the client's body as is.)
    for k in gc
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|g| g.keys())
    {
        let carried = matches!(
            k.as_str(),
            "maxOutputTokens" | "temperature" | "topP" | "stopSequences"
        ) || (response_format.is_some() && RESPONSE_FIELDS.contains(&k.as_str()));
        if !carried {
            m.insert(format!("generationConfig.{k}"), Value::Null);
        }
    }
    Ok(ChatRequest {
        model: model.to_string(),
        messages,
        stream,
        stream_include_usage: false,
        max_tokens: gc
            .and_then(|g| g.get("maxOutputTokens"))
            .and_then(Value::as_u64)
            .map(|n| (MaxTokensField::MaxTokens, n)),
        temperature: number("temperature"),
        top_p: number("topP"),
        stop: gc
            .and_then(|g| g.get("stopSequences"))
            .and_then(Value::as_array)
            .map(|a| {
                Stop::Many(
                    a.iter()
                        .filter_map(|s| s.as_str().map(str::to_string))
                        .collect(),
                )
            }),
        tools,
        tool_choice,
        origin: Protocol::Gemini,
        raw: Some(client_body),
        extra: m,
        hops: 0,
        response_format,
    })
}

/// The generation settings that say what shape the answer takes, in both spellings.
const RESPONSE_FIELDS: [&str; 6] = [
    "responseMimeType",
    "responseJsonSchema",
    "responseSchema",
    "response_mime_type",
    "response_json_schema",
    "response_schema",
];

/// A JSON answer, with the schema it must match: `responseJsonSchema` (a JSON Schema, as the
/// google-genai SDK and Gemini CLI send it) or `responseSchema` (Gemini's OpenAPI subset). Only
/// an object crosses: other protocols' schemas must have one at the root (an enum of text, a
/// list, stay behind and are named).
fn response_format_of(gc: &Value) -> Option<ResponseFormat> {
    let field = |camel: &str, snake: &str| gc.get(camel).or_else(|| gc.get(snake));
    let json = field("responseMimeType", "response_mime_type")
        .and_then(Value::as_str)
        .is_some_and(|m| m == "application/json");
    if !json {
        return None;
    }
    let schema = match field("responseJsonSchema", "response_json_schema") {
        Some(s) => Some(s.clone()),
        None => field("responseSchema", "response_schema").map(json_schema_of),
    };
    match schema {
        None => Some(ResponseFormat::Json),
        Some(s) if s["type"] == "object" => Some(ResponseFormat::Schema {
            name: None,
            schema: s,
            strict: None,
        }),
        Some(_) => None,
    }
}

/// Gemini's OpenAPI-subset schema as JSON Schema: its types are upper case (`OBJECT`).
pub(super) fn json_schema_of(schema: &Value) -> Value {
    match schema {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| {
                    let v = match (k.as_str(), v) {
                        ("type", Value::String(t)) => Value::String(t.to_ascii_lowercase()),
                        _ => json_schema_of(v),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(json_schema_of).collect()),
        other => other.clone(),
    }
}

/// `contents` → canonical messages, each marked with the turn it came from.
fn read_contents(contents: Vec<Value>, messages: &mut Vec<Message>) -> Result<(), InvalidRequest> {
    // Function calls seen so far, so that a response can be paired with its call's id.
    let mut call_ids: Vec<(String, String)> = Vec::new();
    for (i, c) in contents.into_iter().enumerate() {
        let from = messages.len();
        turn(&c, i, &mut call_ids, messages)?;
        for m in &mut messages[from..] {
            m.source = Some(i as u32);
        }
    }
    Ok(())
}

/// One turn → canonical messages: its function responses first, each a tool message paired
/// with its call's id, then the turn itself.
fn turn(
    c: &Value,
    i: usize,
    call_ids: &mut Vec<(String, String)>,
    messages: &mut Vec<Message>,
) -> Result<(), InvalidRequest> {
    let role = match c.get("role").and_then(Value::as_str) {
        Some("model") => Role::Assistant,
        Some("user") | None => Role::User,
        Some(other) => {
            return Err(bad(
                &format!("contents[{i}].role"),
                format!("unknown role {other:?}"),
            ));
        }
    };
    let mut parts = Vec::new();
    let mut calls = Vec::new();
    let mut reasoning = String::new();
    for (j, p) in c["parts"].as_array().into_iter().flatten().enumerate() {
        if let Some(t) = p.get("text").and_then(Value::as_str) {
            if p.get("thought").and_then(Value::as_bool) == Some(true) {
                reasoning.push_str(t);
            } else {
                parts.push(Part::Text {
                    text: t.to_string(),
                    extra: Map::new(),
                });
            }
        } else if let Some(d) = p.get("inlineData").or_else(|| p.get("inline_data")) {
            let mime = d
                .get("mimeType")
                .or_else(|| d.get("mime_type"))
                .and_then(Value::as_str)
                .unwrap_or("image/png");
            let data = d["data"].as_str().unwrap_or_default();
            parts.push(Part::Image {
                url: format!("data:{mime};base64,{data}"),
                detail: None,
                extra: Map::new(),
            });
        } else if let Some(f) = p.get("fileData").or_else(|| p.get("file_data")) {
            let uri = f
                .get("fileUri")
                .or_else(|| f.get("file_uri"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            parts.push(Part::Image {
                url: uri.to_string(),
                detail: None,
                extra: Map::new(),
            });
        } else if let Some(fc) = p.get("functionCall").or_else(|| p.get("function_call")) {
            let name = fc["name"].as_str().unwrap_or_default().to_string();
            let id = fc["id"]
                .as_str()
                .map_or_else(|| format!("call_{i}_{j}"), str::to_string);
            call_ids.push((name.clone(), id.clone()));
            calls.push(ToolCall::Function {
                id: Some(id),
                name,
                arguments: Some(fc.get("args").map_or_else(|| "{}".into(), Value::to_string)),
                extra: Map::new(),
            });
        } else if let Some(fr) = p
            .get("functionResponse")
            .or_else(|| p.get("function_response"))
        {
            let name = fr["name"].as_str().unwrap_or_default();
            let id = fr["id"].as_str().map(str::to_string).or_else(|| {
                call_ids
                    .iter()
                    .rev()
                    .find(|(n, _)| n == name)
                    .map(|(_, id)| id.clone())
            });
            messages.push(Message {
                tool_call_id: id,
                name: Some(name.to_string()),
                ..Message::new(Role::Tool, response_text(&fr["response"]))
            });
        }
    }
    messages.extend(Message::from_blocks(role, parts, calls, reasoning));
    Ok(())
}

/// A function's response as a tool result's text: the JSON object, except the one wrapping
/// the gateway writes for a result that is text (`{"result": text}`), which is that text again.
fn response_text(r: &Value) -> String {
    match r
        .as_object()
        .filter(|o| o.len() == 1)
        .and_then(|o| o.get("result"))
    {
        Some(Value::String(text)) => text.clone(),
        _ => r.to_string(),
    }
}

/// `tools` → canonical tools: the function declarations of every tool.
fn tools_of(m: &mut Map<String, Value>) -> Vec<Tool> {
    m.shift_remove("tools")
        .and_then(|t| t.as_array().cloned())
        .unwrap_or_default()
        .into_iter()
        .flat_map(|t| {
            t.get("functionDeclarations")
                .or_else(|| t.get("function_declarations"))
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        })
        .map(|f| Tool::Function {
            name: f["name"].as_str().unwrap_or_default().to_string(),
            description: f["description"].as_str().map(str::to_string),
            // `parametersJsonSchema`: a JSON Schema, as Gemini CLI and the google-genai SDK
            // send MCP tools; `parameters`: Gemini's OpenAPI subset.
            parameters: f
                .get("parametersJsonSchema")
                .or_else(|| f.get("parameters_json_schema"))
                .cloned()
                .or_else(|| f.get("parameters").map(json_schema_of)),
            extra: Map::new(),
        })
        .collect()
}

/// `toolConfig` → its Chat Completions `tool_choice`.
fn tool_choice_of(m: &mut Map<String, Value>) -> Option<Value> {
    m.shift_remove("toolConfig")
        .or_else(|| m.shift_remove("tool_config"))
        .and_then(|tc| {
            let fc = tc
                .get("functionCallingConfig")
                .or_else(|| tc.get("function_calling_config"))?
                .clone();
            Some(match fc["mode"].as_str() {
                Some("ANY") => match fc["allowedFunctionNames"].as_array().map(Vec::as_slice) {
                    Some([one]) => json!({"type": "function", "function": {"name": one}}),
                    _ => json!("required"),
                },
                Some("NONE") => json!("none"),
                _ => json!("auto"),
            })
        })
}

fn parts_text(parts: &Value) -> String {
    parts
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("\n")
}
