//! A canonical request → a Gemini body (Gemini as the upstream).

use serde_json::{Map, Value, json};

use crate::protocol::{
    ChatRequest, Content, Message, Part, Protocol, ResponseFormat, Role, Tool, ToolCall,
};

/// Canonical request → Gemini body (the model goes in the URL).
pub fn request_to_value(req: &ChatRequest) -> Value {
    // Same protocol: the client's own body (the model is in the URL).
    if req.origin == Protocol::Gemini
        && let Some(raw) = &req.raw
    {
        return raw.clone();
    }
    let (system, contents) = contents_of(&req.messages);
    let mut body = Map::new();
    body.insert("contents".into(), Value::Array(contents));
    if !system.is_empty() {
        body.insert(
            "systemInstruction".into(),
            json!({"parts": [{"text": system.join("\n\n")}]}),
        );
    }
    let decls = declarations(&req.tools);
    if !decls.is_empty() {
        body.insert("tools".into(), json!([{"functionDeclarations": decls}]));
    }
    if let Some(c) = req.tool_choice.as_ref().and_then(function_calling_config) {
        body.insert("toolConfig".into(), json!({"functionCallingConfig": c}));
    }
    let gc = generation_config(req);
    if !gc.is_empty() {
        body.insert("generationConfig".into(), Value::Object(gc));
    }
    if req.origin == Protocol::Gemini {
        for (k, v) in &req.extra {
            body.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    Value::Object(body)
}

/// The system text, and the contents: tool results as function responses in user turns,
/// consecutive turns of the same role merged.
fn contents_of(messages: &[Message]) -> (Vec<String>, Vec<Value>) {
    let mut system = Vec::new();
    let mut contents: Vec<Value> = Vec::new();
    // Tool call id → function name, for the responses that follow.
    let mut names: Vec<(String, String)> = Vec::new();
    let mut push = |role: &str, parts: Vec<Value>| {
        if parts.is_empty() {
            return;
        }
        match contents.last_mut() {
            Some(last) if last["role"] == role => {
                if let Some(a) = last["parts"].as_array_mut() {
                    a.extend(parts);
                }
            }
            _ => contents.push(json!({"role": role, "parts": parts})),
        }
    };
    for m in messages {
        let mut parts = parts_of(m.content.as_ref());
        match m.role {
            Role::System | Role::Developer => {
                for p in parts {
                    if let Some(t) = p["text"].as_str() {
                        system.push(t.to_string());
                    }
                }
            }
            Role::Tool => {
                let id = m.tool_call_id.clone().unwrap_or_default();
                let name = m
                    .name
                    .clone()
                    .or_else(|| names.iter().find(|(i, _)| *i == id).map(|(_, n)| n.clone()));
                let text: String = parts.iter().filter_map(|p| p["text"].as_str()).collect();
                // Gemini wants an object: JSON output as is, anything else wrapped.
                let response = serde_json::from_str::<Value>(&text)
                    .ok()
                    .filter(Value::is_object)
                    .unwrap_or_else(|| json!({"result": text}));
                push(
                    "user",
                    vec![
                        json!({"functionResponse": {"name": name.unwrap_or_default(), "response": response}}),
                    ],
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
                        names.push((id.clone().unwrap_or_default(), name.clone()));
                        let args: Value = arguments
                            .as_deref()
                            .and_then(|a| serde_json::from_str(a).ok())
                            .unwrap_or_else(|| json!({}));
                        parts.push(json!({"functionCall": {"name": name, "args": args}}));
                    }
                }
                push("model", parts);
            }
            _ => push("user", parts),
        }
    }
    (system, contents)
}

/// A message's text and images as Gemini parts.
fn parts_of(content: Option<&Content>) -> Vec<Value> {
    let mut parts = Vec::new();
    match content {
        Some(Content::Text(t)) if !t.is_empty() => parts.push(json!({"text": t})),
        Some(Content::Parts(ps)) => {
            for p in ps {
                match p {
                    Part::Text { text, .. } => parts.push(json!({"text": text})),
                    Part::Image { url, .. } => {
                        if let Some(rest) = url.strip_prefix("data:")
                            && let Some((mime, data)) = rest.split_once(";base64,")
                        {
                            parts.push(json!({"inlineData": {"mimeType": mime, "data": data}}));
                        } else {
                            parts.push(json!({"fileData": {"fileUri": url}}));
                        }
                    }
                    Part::Other(_) => {}
                }
            }
        }
        _ => {}
    }
    parts
}

/// Canonical function tools → Gemini function declarations (others have no Gemini form).
fn declarations(tools: &[Tool]) -> Vec<Value> {
    tools
        .iter()
        .filter_map(|t| match t {
            Tool::Function {
                name,
                description,
                parameters,
                ..
            } => {
                let mut f = json!({"name": name});
                if let Some(d) = description {
                    f["description"] = json!(d);
                }
                // Canonical parameters are JSON Schema (`additionalProperties`, `$ref`...), which
                // Gemini's `parameters` (an OpenAPI subset) refuses and `parametersJsonSchema` takes.
                if let Some(p) = parameters {
                    f["parametersJsonSchema"] = p.clone();
                }
                Some(f)
            }
            Tool::Other(_) => None,
        })
        .collect()
}

/// A Chat Completions `tool_choice` → Gemini's function calling config, when it has one.
fn function_calling_config(tc: &Value) -> Option<Value> {
    match tc {
        Value::String(s) if s == "required" => Some(json!({"mode": "ANY"})),
        Value::String(s) if s == "none" => Some(json!({"mode": "NONE"})),
        Value::String(_) => Some(json!({"mode": "AUTO"})),
        Value::Object(o) => o
            .get("function")
            .and_then(|f| f.get("name"))
            .map(|n| json!({"mode": "ANY", "allowedFunctionNames": [n]})),
        _ => None,
    }
}

/// The output limit, sampling settings and stop sequences as a `generationConfig`.
fn generation_config(req: &ChatRequest) -> Map<String, Value> {
    let mut gc = Map::new();
    if let Some((_, n)) = req.max_tokens {
        gc.insert("maxOutputTokens".into(), json!(n));
    }
    if let Some(t) = &req.temperature {
        gc.insert("temperature".into(), Value::Number(t.clone()));
    }
    if let Some(t) = &req.top_p {
        gc.insert("topP".into(), Value::Number(t.clone()));
    }
    if let Some(s) = &req.stop {
        gc.insert("stopSequences".into(), json!(s.sequences()));
    }
    if let Some(f) = req.response_format() {
        gc.insert("responseMimeType".into(), json!("application/json"));
        if let ResponseFormat::Schema { schema, .. } = f {
            gc.insert("responseJsonSchema".into(), schema);
        }
    }
    gc
}
