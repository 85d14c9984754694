//! Gemini (`generateContent` / `streamGenerateContent?alt=sse`): client requests → canonical,
//! canonical → Gemini bodies for Gemini upstreams, and Gemini answers ↔ canonical. Pure.
//!
//! Gemini pairs a function response with its call by name (ids are optional), and sends a
//! function call whole, never in argument fragments: the stream encoder buffers OpenAI-style
//! fragments until the call is complete.

use serde_json::{Map, Value, json};

use super::{
    ChatRequest, ChatResponse, Choice, ChunkChoice, Content, Delta, InvalidRequest,
    InvalidUpstream, MaxTokensField, Message, Part, Protocol, Role, Stop, StreamChunk, Tool,
    ToolCall, ToolCallDelta, Usage,
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
    // Function calls seen so far, so that a response can be paired with its call's id.
    let mut call_ids: Vec<(String, String)> = Vec::new();
    for (i, c) in contents.into_iter().enumerate() {
        let from = messages.len();
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
                    ..Message::new(Role::Tool, fr["response"].to_string())
                });
            }
        }
        messages.extend(Message::from_blocks(role, parts, calls, reasoning));
        for m in &mut messages[from..] {
            m.source = Some(i as u32);
        }
    }
    let gc = m
        .shift_remove("generationConfig")
        .or_else(|| m.shift_remove("generation_config"));
    let gc = gc.as_ref();
    let number = |k: &str| {
        gc.and_then(|g| g.get(k))
            .and_then(Value::as_number)
            .cloned()
    };
    let tools = m
        .shift_remove("tools")
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
            parameters: f
                .get("parameters")
                .or_else(|| f.get("parametersJsonSchema"))
                .cloned(),
            extra: Map::new(),
        })
        .collect();
    let tool_choice = m
        .shift_remove("toolConfig")
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
        });
    // Generation settings with no canonical field (responseSchema, thinkingConfig, topK...):
    // named among the request's own fields, so that crossing protocols says they stayed behind.
    // (A Gemini channel gets the client's body as is.)
    for k in gc
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|g| g.keys())
    {
        if !matches!(
            k.as_str(),
            "maxOutputTokens" | "temperature" | "topP" | "stopSequences"
        ) {
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

/// Canonical request → Gemini body (the model goes in the URL).
pub fn request_to_value(req: &ChatRequest) -> Value {
    // Same protocol: the client's own body (the model is in the URL).
    if req.origin == Protocol::Gemini
        && let Some(raw) = &req.raw
    {
        return raw.clone();
    }
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
    for m in &req.messages {
        let mut parts = Vec::new();
        match &m.content {
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
    let mut body = Map::new();
    body.insert("contents".into(), Value::Array(contents));
    if !system.is_empty() {
        body.insert(
            "systemInstruction".into(),
            json!({"parts": [{"text": system.join("\n\n")}]}),
        );
    }
    let decls: Vec<Value> = req
        .tools
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
                if let Some(p) = parameters {
                    f["parameters"] = p.clone();
                }
                Some(f)
            }
            Tool::Other(_) => None,
        })
        .collect();
    if !decls.is_empty() {
        body.insert("tools".into(), json!([{"functionDeclarations": decls}]));
    }
    if let Some(tc) = &req.tool_choice {
        let cfg = match tc {
            Value::String(s) if s == "required" => Some(json!({"mode": "ANY"})),
            Value::String(s) if s == "none" => Some(json!({"mode": "NONE"})),
            Value::String(_) => Some(json!({"mode": "AUTO"})),
            Value::Object(o) => o
                .get("function")
                .and_then(|f| f.get("name"))
                .map(|n| json!({"mode": "ANY", "allowedFunctionNames": [n]})),
            _ => None,
        };
        if let Some(c) = cfg {
            body.insert("toolConfig".into(), json!({"functionCallingConfig": c}));
        }
    }
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

fn finish_from(f: Option<&str>) -> Option<String> {
    f.map(|f| {
        match f {
            "MAX_TOKENS" => "length",
            "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII" => {
                "content_filter"
            }
            _ => "stop",
        }
        .to_string()
    })
}

fn finish_to(f: Option<&str>) -> &'static str {
    match f {
        Some("length") => "MAX_TOKENS",
        Some("content_filter") => "SAFETY",
        _ => "STOP",
    }
}

fn usage_from(u: &Value) -> Option<Usage> {
    u.as_object()?;
    Some(Usage {
        input_tokens: u["promptTokenCount"].as_u64(),
        output_tokens: u["candidatesTokenCount"].as_u64(),
        total_tokens: u["totalTokenCount"].as_u64(),
        cached_tokens: u["cachedContentTokenCount"].as_u64(),
        extra: Map::new(),
    })
}

fn usage_to(u: &Usage) -> Value {
    let (i, o) = (u.input_tokens.unwrap_or(0), u.output_tokens.unwrap_or(0));
    let mut v = json!({"promptTokenCount": i, "candidatesTokenCount": o, "totalTokenCount": u.total_tokens.unwrap_or(i + o)});
    if let Some(c) = u.cached_tokens {
        v["cachedContentTokenCount"] = c.into();
    }
    v
}

/// One Gemini (partial) response → its text, reasoning, function calls and finish.
struct Candidate {
    text: String,
    reasoning: String,
    calls: Vec<(String, String)>,
    finish: Option<String>,
}

fn candidate(v: &Value) -> Candidate {
    let c = &v["candidates"][0];
    let mut out = Candidate {
        text: String::new(),
        reasoning: String::new(),
        calls: Vec::new(),
        finish: finish_from(c["finishReason"].as_str()),
    };
    for p in c["content"]["parts"].as_array().into_iter().flatten() {
        if let Some(t) = p["text"].as_str() {
            if p["thought"].as_bool() == Some(true) {
                out.reasoning.push_str(t);
            } else {
                out.text.push_str(t);
            }
        }
        if let Some(fc) = p.get("functionCall") {
            out.calls.push((
                fc["name"].as_str().unwrap_or_default().to_string(),
                fc["args"].to_string(),
            ));
        }
    }
    if !out.calls.is_empty() && out.finish.as_deref() == Some("stop") {
        out.finish = Some("tool_calls".into());
    }
    out
}

/// A Gemini response → canonical.
pub fn response_from_value(v: &Value) -> Result<ChatResponse, InvalidUpstream> {
    if !v["candidates"].is_array() {
        return Err(InvalidUpstream {
            what: "gemini response",
            message: "missing candidates".into(),
        });
    }
    let c = candidate(v);
    let calls = c
        .calls
        .into_iter()
        .enumerate()
        .map(|(i, (name, args))| ToolCall::Function {
            id: Some(format!("call_{i}")),
            name,
            arguments: Some(args),
            extra: Map::new(),
        })
        .collect();
    Ok(ChatResponse {
        id: v["responseId"].as_str().map(str::to_string),
        model: v["modelVersion"].as_str().map(str::to_string),
        created: None,
        choices: vec![Choice {
            index: 0,
            message: Message {
                content: (!c.text.is_empty()).then_some(Content::Text(c.text)),
                tool_calls: calls,
                reasoning: (!c.reasoning.is_empty()).then_some(c.reasoning),
                ..Message::new(Role::Assistant, "")
            },
            finish_reason: c.finish,
            extra: Map::new(),
        }],
        usage: usage_from(&v["usageMetadata"]),
        extra: Map::new(),
        raw: None,
    })
}

/// Canonical response → a Gemini response.
pub fn response_to_value(resp: &ChatResponse, model: &str) -> Value {
    let choice = resp.choices.first();
    let mut parts = Vec::new();
    if let Some(c) = choice {
        if let Some(r) = &c.message.reasoning {
            parts.push(json!({"text": r, "thought": true}));
        }
        match &c.message.content {
            Some(Content::Text(t)) if !t.is_empty() => parts.push(json!({"text": t})),
            Some(Content::Parts(ps)) => {
                for p in ps {
                    if let Part::Text { text, .. } = p {
                        parts.push(json!({"text": text}));
                    }
                }
            }
            _ => {}
        }
        for call in &c.message.tool_calls {
            if let ToolCall::Function {
                name, arguments, ..
            } = call
            {
                let args: Value = arguments
                    .as_deref()
                    .and_then(|a| serde_json::from_str(a).ok())
                    .unwrap_or_else(|| json!({}));
                parts.push(json!({"functionCall": {"name": name, "args": args}}));
            }
        }
    }
    let mut v = json!({
        "candidates": [{"content": {"role": "model", "parts": parts},
            "finishReason": finish_to(choice.and_then(|c| c.finish_reason.as_deref())), "index": 0}],
        "modelVersion": resp.model.as_deref().unwrap_or(model),
    });
    if let Some(u) = &resp.usage {
        v["usageMetadata"] = usage_to(u);
    }
    v
}

/// Gemini's error envelope.
pub fn error_body(status: u16, message: &str) -> Value {
    let s = match status {
        400 | 413 | 422 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        429 => "RESOURCE_EXHAUSTED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        _ => "INTERNAL",
    };
    json!({"error": {"code": status, "message": message, "status": s}})
}

/// Gemini SSE data → canonical chunks (each Gemini event is a partial response).
#[derive(Debug, Default)]
pub struct StreamDecoder {
    calls: u32,
    started: bool,
}

impl StreamDecoder {
    pub fn event(&mut self, v: &Value) -> StreamChunk {
        let c = candidate(v);
        let mut tool_calls = Vec::new();
        for (name, args) in c.calls {
            tool_calls.push(ToolCallDelta {
                index: self.calls,
                id: Some(format!("call_{}", self.calls)),
                kind: Some("function".into()),
                function: true,
                name: Some(name),
                arguments: Some(args),
                extra: Map::new(),
            });
            self.calls += 1;
        }
        let role = (!self.started).then_some(Role::Assistant);
        self.started = true;
        StreamChunk {
            id: v["responseId"].as_str().map(str::to_string),
            model: v["modelVersion"].as_str().map(str::to_string),
            created: None,
            choices: vec![ChunkChoice {
                index: 0,
                delta: Delta {
                    role,
                    content: (!c.text.is_empty()).then_some(c.text),
                    reasoning: (!c.reasoning.is_empty()).then_some(c.reasoning),
                    tool_calls,
                    extra: Map::new(),
                },
                finish_reason: c.finish,
                extra: Map::new(),
            }],
            usage: usage_from(&v["usageMetadata"]),
            extra: Map::new(),
            raw: None,
        }
    }
}

/// Canonical chunks → Gemini SSE events. Text goes out as it comes; a function call is held
/// until its arguments are complete (Gemini has no argument fragments).
#[derive(Debug, Default)]
pub struct StreamEncoder {
    /// Tool-call index → (name, arguments so far).
    pending: std::collections::BTreeMap<u32, (String, String)>,
    finish: Option<String>,
    usage: Option<Usage>,
    /// The upstream speaks Gemini too and its events are written as they came.
    passthrough: bool,
}

fn data(out: &mut Vec<u8>, v: &Value) {
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(v.to_string().as_bytes());
    out.extend_from_slice(b"\n\n");
}

impl StreamEncoder {
    pub fn chunk(&mut self, c: &StreamChunk, model: &str, out: &mut Vec<u8>) {
        if let Some(raw) = c.raw.as_ref().filter(|r| r.protocol == Protocol::Gemini) {
            self.passthrough = true;
            raw.write(out);
            return;
        }
        if let Some(u) = &c.usage {
            self.usage = Some(u.clone());
        }
        let Some(ch) = c.choices.first() else {
            return;
        };
        for tc in &ch.delta.tool_calls {
            let e = self.pending.entry(tc.index).or_default();
            if let Some(n) = &tc.name {
                e.0.push_str(n);
            }
            if let Some(a) = &tc.arguments {
                e.1.push_str(a);
            }
        }
        if let Some(f) = &ch.finish_reason {
            self.finish = Some(f.clone());
        }
        let mut parts = Vec::new();
        if let Some(r) = ch.delta.reasoning.as_deref().filter(|r| !r.is_empty()) {
            parts.push(json!({"text": r, "thought": true}));
        }
        if let Some(t) = ch.delta.content.as_deref().filter(|t| !t.is_empty()) {
            parts.push(json!({"text": t}));
        }
        if !parts.is_empty() {
            data(
                out,
                &json!({"candidates": [{"content": {"role": "model", "parts": parts}, "index": 0}], "modelVersion": model}),
            );
        }
    }

    /// The end: the held function calls, the finish reason and usage.
    pub fn done(&mut self, model: &str, out: &mut Vec<u8>) {
        if self.passthrough {
            // The upstream's own last event carried the finish reason and usage.
            return;
        }
        let parts: Vec<Value> = std::mem::take(&mut self.pending)
            .into_values()
            .map(|(name, args)| {
                let args: Value = serde_json::from_str(&args).unwrap_or_else(|_| json!({}));
                json!({"functionCall": {"name": name, "args": args}})
            })
            .collect();
        let mut v = json!({"candidates": [{"content": {"role": "model", "parts": parts},
            "finishReason": finish_to(self.finish.as_deref()), "index": 0}], "modelVersion": model});
        if let Some(u) = &self.usage {
            v["usageMetadata"] = usage_to(u);
        }
        data(out, &v);
    }

    /// A fault after the stream began: Gemini's error object, and nothing after it.
    pub fn fault(&mut self, message: &str, out: &mut Vec<u8>) {
        data(out, &error_body(500, message));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::openai::{RequestBody, chunk_from_value};

    #[test]
    fn a_gemini_request_becomes_openai_turns_and_back() {
        let body = json!({
            "systemInstruction": {"parts": [{"text": "Be brief."}]},
            "contents": [
                {"role": "user", "parts": [{"text": "Weather in Paris?"}]},
                {"role": "model", "parts": [{"functionCall": {"name": "weather", "args": {"city": "Paris"}}}]},
                {"role": "user", "parts": [{"functionResponse": {"name": "weather", "response": {"temp": 21}}}]}
            ],
            "tools": [{"functionDeclarations": [{"name": "weather", "parameters": {"type": "object"}}]}],
            "toolConfig": {"functionCallingConfig": {"mode": "ANY"}},
            "generationConfig": {"maxOutputTokens": 100, "temperature": 0.2, "stopSequences": ["END"]}
        });
        let req = request_from_value(body, "gemini-x", false).unwrap();
        let out = serde_json::to_value(RequestBody {
            req: &req,
            model: "gpt",
            force_usage: false,
        })
        .unwrap();
        let msgs = out["messages"].as_array().unwrap();
        assert_eq!(msgs[0]["content"], "Be brief.");
        let id = msgs[2]["tool_calls"][0]["id"].as_str().unwrap();
        assert_eq!(
            msgs[2]["tool_calls"][0]["function"]["arguments"],
            "{\"city\":\"Paris\"}"
        );
        assert_eq!(
            msgs[3]["tool_call_id"], id,
            "the response is paired with its call"
        );
        assert_eq!(out["tool_choice"], "required");
        assert_eq!(out["max_tokens"], 100);
        // And back to Gemini for a Gemini upstream: the same turns.
        let back = request_to_value(&req);
        assert_eq!(
            back["contents"][1]["parts"][0]["functionCall"]["args"],
            json!({"city": "Paris"})
        );
        assert_eq!(
            back["contents"][2]["parts"][0]["functionResponse"]["name"],
            "weather"
        );
        assert_eq!(back["systemInstruction"]["parts"][0]["text"], "Be brief.");
        assert_eq!(back["generationConfig"]["maxOutputTokens"], 100);
    }

    #[test]
    fn streamed_tool_call_fragments_are_held_until_complete() {
        let mut enc = StreamEncoder::default();
        let mut out = Vec::new();
        for c in [
            json!({"choices": [{"index": 0, "delta": {"content": "Let me check."}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{\"ci"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "ty\":\"Paris\"}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 5, "completion_tokens": 7}}),
        ] {
            enc.chunk(&chunk_from_value(c).unwrap(), "g", &mut out);
        }
        enc.done("g", &mut out);
        let text = String::from_utf8(out).unwrap();
        let events: Vec<Value> = text
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        assert_eq!(events.len(), 2);
        assert_eq!(
            events[0]["candidates"][0]["content"]["parts"][0]["text"],
            "Let me check."
        );
        let call = &events[1]["candidates"][0]["content"]["parts"][0]["functionCall"];
        assert_eq!(call["args"], json!({"city": "Paris"}));
        assert_eq!(events[1]["usageMetadata"]["candidatesTokenCount"], 7);
    }
}
