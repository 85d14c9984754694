//! Anthropic Messages: client requests → canonical, canonical responses and stream chunks →
//! Anthropic's wire format. Pure: no I/O, no global state. (Anthropic as an upstream comes
//! later; until then a request from an Anthropic client is served by any channel through the
//! canonical types.)

use serde_json::{Map, Value, json};

use super::{
    ChatRequest, ChatResponse, Content, InvalidRequest, MaxTokensField, Message, Part, Protocol,
    Role, Stop, StreamChunk, Tool, ToolCall,
};

use super::json_kind as kind;

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
    let tools = match m.shift_remove("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .into_iter()
            .enumerate()
            .map(|(i, t)| tool(t, &format!("tools[{i}]")))
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(InvalidRequest::new(
                "tools",
                format!("expected an array, got {}", kind(&other)),
            ));
        }
    };
    let tool_choice = match m.shift_remove("tool_choice") {
        None | Some(Value::Null) => None,
        Some(Value::Object(tc)) => Some(match tc.get("type").and_then(Value::as_str) {
            Some("any") => json!("required"),
            Some("none") => json!("none"),
            Some("tool") => {
                let name = tc.get("name").and_then(Value::as_str).unwrap_or_default();
                json!({"type": "function", "function": {"name": name}})
            }
            _ => json!("auto"),
        }),
        Some(other) => {
            return Err(InvalidRequest::new(
                "tool_choice",
                format!("expected an object, got {}", kind(&other)),
            ));
        }
    };
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
    })
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

/// OpenAI finish reason → Anthropic stop reason.
fn stop_reason(finish: Option<&str>) -> &'static str {
    match finish {
        Some("length") => "max_tokens",
        Some("tool_calls" | "function_call") => "tool_use",
        Some("content_filter") => "refusal",
        _ => "end_turn",
    }
}

fn message_id(id: Option<&str>) -> String {
    match id {
        Some(i) if i.starts_with("msg_") => i.to_string(),
        Some(i) => format!("msg_{i}"),
        None => "msg_switchyard".into(),
    }
}

/// Anthropic counts cache reads apart from `input_tokens`; the canonical count includes them.
fn usage_json(input: u64, output: u64, cached: Option<u64>) -> Value {
    let mut v =
        json!({"input_tokens": input.saturating_sub(cached.unwrap_or(0)), "output_tokens": output});
    if let Some(c) = cached {
        v["cache_read_input_tokens"] = c.into();
    }
    v
}

/// Canonical response → an Anthropic `message`.
pub fn response_to_value(resp: &ChatResponse, model: &str) -> Value {
    let choice = resp.choices.first();
    let mut content = Vec::new();
    if let Some(c) = choice {
        // Another provider's reasoning, as an unsigned thinking block: Claude could not check
        // it, so it is removed again before any Anthropic upstream (see `request_to_value`).
        if let Some(r) = c.message.reasoning.as_deref().filter(|r| !r.is_empty()) {
            content.push(json!({"type": "thinking", "thinking": r, "signature": ""}));
        }
        match &c.message.content {
            Some(Content::Text(t)) if !t.is_empty() => {
                content.push(json!({"type": "text", "text": t}))
            }
            Some(Content::Parts(ps)) => {
                for p in ps {
                    if let Part::Text { text, .. } = p {
                        content.push(json!({"type": "text", "text": text}));
                    }
                }
            }
            _ => {}
        }
        for call in &c.message.tool_calls {
            if let ToolCall::Function {
                id,
                name,
                arguments,
                ..
            } = call
            {
                let input: Value = arguments
                    .as_deref()
                    .and_then(|a| serde_json::from_str(a).ok())
                    .unwrap_or_else(|| json!({}));
                content.push(json!({"type": "tool_use", "id": id.clone().unwrap_or_default(), "name": name, "input": input}));
            }
        }
    }
    let usage = resp.usage.as_ref();
    json!({
        "id": message_id(resp.id.as_deref()),
        "type": "message",
        "role": "assistant",
        "model": resp.model.as_deref().unwrap_or(model),
        "content": content,
        "stop_reason": stop_reason(choice.and_then(|c| c.finish_reason.as_deref())),
        "stop_sequence": null,
        "usage": usage_json(
            usage.and_then(|u| u.input_tokens).unwrap_or(0),
            usage.and_then(|u| u.output_tokens).unwrap_or(0),
            usage.and_then(|u| u.cached_tokens),
        ),
    })
}

/// Anthropic's error envelope.
pub fn error_body(status: u16, message: &str) -> Value {
    let kind = match status {
        400 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        _ => "api_error",
    };
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Block {
    Thinking,
    Text,
    /// A tool_use block, for this OpenAI tool-call index.
    Tool(u32),
}

/// Canonical stream chunks → Anthropic stream events, one chunk at a time.
#[derive(Debug, Default)]
pub struct StreamEncoder {
    started: bool,
    open: Option<(u32, Block)>,
    next_index: u32,
    stop_reason: Option<&'static str>,
    input_tokens: u64,
    output_tokens: u64,
    cached_tokens: Option<u64>,
    /// The upstream speaks Anthropic too and its events are written as they came.
    passthrough: bool,
    /// In passthrough, the upstream's own `error` event went out.
    upstream_failed: bool,
}

fn event(out: &mut Vec<u8>, name: &str, data: &Value) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    out.extend_from_slice(data.to_string().as_bytes());
    out.extend_from_slice(b"\n\n");
}

impl StreamEncoder {
    fn close(&mut self, out: &mut Vec<u8>) {
        if let Some((index, _)) = self.open.take() {
            event(
                out,
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": index}),
            );
        }
    }

    fn open_block(&mut self, block: Block, start: Value, out: &mut Vec<u8>) -> u32 {
        self.close(out);
        let index = self.next_index;
        self.next_index += 1;
        event(
            out,
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": start}),
        );
        self.open = Some((index, block));
        index
    }

    pub fn chunk(&mut self, c: &StreamChunk, model: &str, out: &mut Vec<u8>) {
        if let Some(raw) = c
            .raw
            .as_ref()
            .filter(|r| r.protocol == Protocol::AnthropicMessages)
        {
            self.passthrough = true;
            self.upstream_failed |= raw.event.as_deref() == Some("error");
            raw.write(out);
            return;
        }
        if let Some(u) = &c.usage {
            self.input_tokens = u.input_tokens.unwrap_or(self.input_tokens);
            self.cached_tokens = u.cached_tokens.or(self.cached_tokens);
            self.output_tokens = u.output_tokens.unwrap_or(self.output_tokens);
        }
        if !self.started {
            self.started = true;
            event(
                out,
                "message_start",
                &json!({"type": "message_start", "message": {
                    "id": message_id(c.id.as_deref()), "type": "message", "role": "assistant",
                    "model": c.model.as_deref().unwrap_or(model), "content": [],
                    "stop_reason": null, "stop_sequence": null,
                    "usage": usage_json(self.input_tokens, 0, self.cached_tokens),
                }}),
            );
        }
        let Some(choice) = c.choices.first() else {
            return;
        };
        let d = &choice.delta;
        if let Some(r) = d.reasoning.as_deref().filter(|r| !r.is_empty()) {
            let index = match self.open {
                Some((i, Block::Thinking)) => i,
                _ => self.open_block(
                    Block::Thinking,
                    json!({"type": "thinking", "thinking": "", "signature": ""}),
                    out,
                ),
            };
            event(
                out,
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "thinking_delta", "thinking": r}}),
            );
        }
        if let Some(text) = d.content.as_deref().filter(|t| !t.is_empty()) {
            let index = match self.open {
                Some((i, Block::Text)) => i,
                _ => self.open_block(Block::Text, json!({"type": "text", "text": ""}), out),
            };
            event(
                out,
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "text_delta", "text": text}}),
            );
        }
        for tc in &d.tool_calls {
            let index = match (self.open, &tc.id) {
                (Some((i, Block::Tool(t))), None) if t == tc.index => i,
                _ => self.open_block(
                    Block::Tool(tc.index),
                    json!({"type": "tool_use", "id": tc.id.clone().unwrap_or_default(),
                        "name": tc.name.clone().unwrap_or_default(), "input": {}}),
                    out,
                ),
            };
            if let Some(args) = tc.arguments.as_deref().filter(|a| !a.is_empty()) {
                event(
                    out,
                    "content_block_delta",
                    &json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": args}}),
                );
            }
        }
        if let Some(f) = choice.finish_reason.as_deref() {
            self.stop_reason = Some(stop_reason(Some(f)));
        }
    }

    /// `message_delta`'s usage: the output, and the prompt's cache reads once they are known.
    fn delta_usage(&self) -> Value {
        match self.cached_tokens {
            Some(_) => usage_json(self.input_tokens, self.output_tokens, self.cached_tokens),
            None => json!({"output_tokens": self.output_tokens}),
        }
    }

    /// The end of a complete stream: close the open block, then the message.
    pub fn done(&mut self, out: &mut Vec<u8>) {
        if self.passthrough {
            // The upstream's own block stops and `message_delta` went out already.
            event(out, "message_stop", &json!({"type": "message_stop"}));
            return;
        }
        self.close(out);
        event(
            out,
            "message_delta",
            &json!({"type": "message_delta",
                "delta": {"stop_reason": self.stop_reason.unwrap_or("end_turn"), "stop_sequence": null},
                "usage": self.delta_usage()}),
        );
        event(out, "message_stop", &json!({"type": "message_stop"}));
    }

    /// A fault after the stream began: Anthropic's `event: error`, and nothing after it.
    pub fn fault(&mut self, message: &str, out: &mut Vec<u8>) {
        if !self.upstream_failed {
            event(out, "error", &error_body(500, message));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::openai::{RequestBody, chunk_from_value};

    #[test]
    fn a_claude_code_style_request_becomes_openai_turns() {
        let req = request_from_value(json!({
            "model": "claude-x", "max_tokens": 1024, "stream": true,
            "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": "List the files."},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "I should call ls.", "signature": "sig"},
                    {"type": "text", "text": "Listing."},
                    {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {"path": "."}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "a.rs"}]},
                    {"type": "text", "text": "Now open it."}
                ]}
            ],
            "tools": [{"name": "ls", "description": "list", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any"},
            "stop_sequences": ["END"],
            "metadata": {"user_id": "u1"}
        }))
        .unwrap();
        let out = serde_json::to_value(RequestBody {
            req: &req,
            model: "gpt-x",
            force_usage: true,
        })
        .unwrap();
        let msgs = out["messages"].as_array().unwrap();
        assert_eq!(
            msgs[0],
            json!({"role": "system", "content": "You are Claude Code."})
        );
        assert_eq!(msgs[1]["content"], "List the files.");
        assert_eq!(msgs[2]["tool_calls"][0]["id"], "toolu_1");
        assert_eq!(
            msgs[2]["tool_calls"][0]["function"]["arguments"],
            "{\"path\":\".\"}"
        );
        assert_eq!(msgs[2]["reasoning_content"], "I should call ls.");
        assert_eq!(
            msgs[3],
            json!({"role": "tool", "content": "a.rs", "tool_call_id": "toolu_1"})
        );
        assert_eq!(msgs[4]["content"], "Now open it.");
        assert_eq!(
            out["tools"][0]["function"]["parameters"],
            json!({"type": "object"})
        );
        assert_eq!(out["tool_choice"], "required");
        assert_eq!(out["stop"], json!(["END"]));
        assert_eq!(out["max_tokens"], 1024);
        // Anthropic-only fields never reach an OpenAI upstream.
        assert!(out.get("metadata").is_none(), "{out}");
    }

    #[test]
    fn bad_requests_name_the_field() {
        let err = request_from_value(
            json!({"model": "m", "messages": [{"role": "user", "content": "x"}]}),
        )
        .unwrap_err();
        assert_eq!(err.param.as_deref(), Some("max_tokens"));
        let err = request_from_value(
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "robot", "content": "x"}]}),
        )
        .unwrap_err();
        assert_eq!(err.param.as_deref(), Some("messages[0].role"));
    }

    #[test]
    fn a_stream_of_text_then_a_tool_call_becomes_anthropic_events() {
        let mut enc = StreamEncoder::default();
        let mut out = Vec::new();
        for c in [
            json!({"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
            json!({"id": "c1", "choices": [{"index": 0, "delta": {"content": "Hi"}}]}),
            json!({"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "ls", "arguments": ""}}]}}]}),
            json!({"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"p\":1}"}}]}}]}),
            json!({"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            json!({"id": "c1", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4}}),
        ] {
            enc.chunk(&chunk_from_value(c).unwrap(), "m", &mut out);
        }
        enc.done(&mut out);
        let text = String::from_utf8(out).unwrap();
        let events: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("event: "))
            .collect();
        assert_eq!(
            events,
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        assert!(
            text.contains("\"partial_json\":\"{\\\"p\\\":1}\""),
            "{text}"
        );
        assert!(text.contains("\"stop_reason\":\"tool_use\""));
        assert!(text.contains("\"output_tokens\":4"));
    }

    #[test]
    fn cached_prompt_tokens_cross_every_pair() {
        use crate::protocol::{gemini, openai};
        // Anthropic counts cache reads and writes apart; canonically they are prompt tokens.
        let resp = response_from_value(&json!({"type": "message", "id": "m1", "model": "c",
            "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 3, "cache_read_input_tokens": 100,
                "cache_creation_input_tokens": 7, "output_tokens": 5}}))
        .unwrap();
        let u = resp.usage.clone().unwrap();
        assert_eq!((u.input_tokens, u.cached_tokens), (Some(110), Some(100)));
        let v = serde_json::to_value(openai::ResponseBody {
            resp: &resp,
            report: None,
        })
        .unwrap();
        assert_eq!(v["usage"]["prompt_tokens"], 110);
        assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 100);
        let g = gemini::response_to_value(&resp, "m");
        assert_eq!(g["usageMetadata"]["promptTokenCount"], 110);
        assert_eq!(g["usageMetadata"]["cachedContentTokenCount"], 100);

        let o = openai::response_from_value(json!({"id": "c", "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": "hi"}}],
            "usage": {"prompt_tokens": 103, "completion_tokens": 5, "total_tokens": 108,
                "prompt_tokens_details": {"cached_tokens": 100}}}))
        .unwrap();
        assert_eq!(
            response_to_value(&o, "m")["usage"],
            json!({"input_tokens": 3, "output_tokens": 5, "cache_read_input_tokens": 100})
        );
        let gm = gemini::response_from_value(&json!({"candidates": [{"content": {"role": "model",
                "parts": [{"text": "hi"}]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 103, "candidatesTokenCount": 5,
                "totalTokenCount": 108, "cachedContentTokenCount": 100}}))
        .unwrap();
        assert_eq!(
            response_to_value(&gm, "m")["usage"]["cache_read_input_tokens"],
            100
        );

        // Streamed: the final usage chunk's cache reads reach `message_delta`.
        let mut enc = StreamEncoder::default();
        let mut out = Vec::new();
        for c in [
            json!({"id": "c1", "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]}),
            json!({"id": "c1", "choices": [], "usage": {"prompt_tokens": 103, "completion_tokens": 5,
                "prompt_tokens_details": {"cached_tokens": 100}}}),
        ] {
            enc.chunk(&chunk_from_value(c).unwrap(), "m", &mut out);
        }
        enc.done(&mut out);
        let text = String::from_utf8(out).unwrap();
        let delta: Value = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str::<Value>(d).unwrap())
            .find(|d| d["type"] == "message_delta")
            .unwrap();
        assert_eq!(
            delta["usage"],
            json!({"input_tokens": 3, "output_tokens": 5, "cache_read_input_tokens": 100})
        );
    }

    #[test]
    fn other_providers_reasoning_is_an_unsigned_thinking_block_that_never_reaches_claude() {
        let mut enc = StreamEncoder::default();
        let mut out = Vec::new();
        for c in [
            json!({"id": "c1", "choices": [{"index": 0, "delta": {"role": "assistant", "reasoning_content": "Hmm"}}]}),
            json!({"id": "c1", "choices": [{"index": 0, "delta": {"reasoning_content": ", yes."}}]}),
            json!({"id": "c1", "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": "stop"}]}),
        ] {
            enc.chunk(&chunk_from_value(c).unwrap(), "m", &mut out);
        }
        enc.done(&mut out);
        let text = String::from_utf8(out).unwrap();
        let data: Vec<Value> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        assert_eq!(
            data[1]["content_block"],
            json!({"type": "thinking", "thinking": "", "signature": ""})
        );
        assert_eq!(
            data[2]["delta"],
            json!({"type": "thinking_delta", "thinking": "Hmm"})
        );
        assert_eq!(data[3]["delta"]["thinking"], ", yes.");
        assert_eq!(data[4], json!({"type": "content_block_stop", "index": 0}));
        assert_eq!(data[5]["content_block"]["type"], "text");
        assert_eq!(data[5]["index"], 1);

        let resp = crate::protocol::openai::response_from_value(json!({
            "id": "c2", "model": "m", "choices": [{"index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": "Hi", "reasoning_content": "Hmm."}}]}))
        .unwrap();
        let v = response_to_value(&resp, "m");
        assert_eq!(
            v["content"],
            json!([{"type": "thinking", "thinking": "Hmm.", "signature": ""},
                {"type": "text", "text": "Hi"}])
        );

        // Sent back in history to Claude: the unsigned block goes, Claude's own signed one stays.
        let req = request_from_value(json!({"model": "m", "max_tokens": 64, "messages": [
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Hmm.", "signature": ""},
                {"type": "text", "text": "Hi"}]},
            {"role": "user", "content": "Again"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Mine.", "signature": "sig-1"},
                {"type": "text", "text": "Hi again"}]},
            {"role": "user", "content": "Bye"}]}))
        .unwrap();
        let body = request_to_value(&req, "claude");
        assert_eq!(
            body["messages"][1]["content"],
            json!([{"type": "text", "text": "Hi"}])
        );
        assert_eq!(body["messages"][3]["content"][0]["signature"], "sig-1");
    }

    #[test]
    fn stripping_our_thinking_keeps_claude_s_rules() {
        // A turn that was only our thinking goes; our thinking in the last assistant turn
        // means this request runs without extended thinking.
        let req = request_from_value(json!({"model": "m", "max_tokens": 64,
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "messages": [
                {"role": "user", "content": "Hello"},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "Hmm.", "signature": ""}]},
                {"role": "user", "content": "Run ls"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "ls it is.", "signature": ""},
                    {"type": "tool_use", "id": "t1", "name": "ls", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.rs"}]}]}))
        .unwrap();
        let body = request_to_value(&req, "claude");
        let roles: Vec<&str> = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["user", "user", "assistant", "user"]);
        assert!(body.get("thinking").is_none());
        assert!(!req.has_provider_only_history());

        // Claude's own signed (or redacted) thinking is provider-only history; a tool argument
        // that happens to be called `signature` is not.
        let tool_arg = request_from_value(json!({"model": "m", "max_tokens": 64, "messages": [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "sign",
                "input": {"signature": "abc", "cache_control": "none"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}]}))
        .unwrap();
        assert!(!tool_arg.has_provider_only_history());
        assert!(tool_arg.translation_losses(Protocol::OpenAiChat).is_empty());
        let redacted = request_from_value(json!({"model": "m", "max_tokens": 64, "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "x"},
                {"type": "text", "text": "Hello"}]},
            {"role": "user", "content": "Again"}]}))
        .unwrap();
        assert!(redacted.has_provider_only_history());
    }

    #[test]
    fn a_raw_event_is_written_back_line_for_line() {
        let mut out = Vec::new();
        crate::protocol::RawEvent {
            protocol: Protocol::AnthropicMessages,
            event: Some("ping".into()),
            data: "{\"type\":\n\"ping\"}".into(),
        }
        .write(&mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "event: ping\ndata: {\"type\":\ndata: \"ping\"}\n\n"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Anthropic as the upstream: canonical request → Anthropic body; Anthropic answers → canonical.

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
    let mut system = Vec::new();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    let mut push = |role: &'static str, blocks: Vec<Value>| {
        if blocks.is_empty() {
            return;
        }
        match turns.last_mut() {
            Some((r, b)) if *r == role => b.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    };
    for m in &req.messages {
        let mut blocks = Vec::new();
        match &m.content {
            Some(Content::Text(t)) if !t.is_empty() => {
                blocks.push(json!({"type": "text", "text": t}))
            }
            Some(Content::Parts(ps)) => {
                for p in ps {
                    match p {
                        Part::Text { text, .. } => {
                            blocks.push(json!({"type": "text", "text": text}))
                        }
                        Part::Image { url, .. } => {
                            blocks.push(json!({"type": "image", "source": image_source(url)}))
                        }
                        Part::Other(_) => {}
                    }
                }
            }
            _ => {}
        }
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
                push(
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
                push("assistant", blocks);
            }
            _ => push("user", blocks),
        }
    }
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
    let tools: Vec<Value> = req
        .tools
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
        .collect();
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(tc) = &req.tool_choice {
        let choice = match tc {
            Value::String(s) if s == "required" => Some(json!({"type": "any"})),
            Value::String(s) if s == "none" => Some(json!({"type": "none"})),
            Value::String(_) => Some(json!({"type": "auto"})),
            Value::Object(o) => o
                .get("function")
                .and_then(|f| f.get("name"))
                .map(|n| json!({"type": "tool", "name": n})),
            _ => None,
        };
        if let Some(c) = choice {
            body.insert("tool_choice".into(), c);
        }
    }
    if req.stream {
        body.insert("stream".into(), json!(true));
    }
    // Same protocol: the client's own Anthropic fields go along (metadata, top_k, thinking...).
    if req.origin == Protocol::AnthropicMessages {
        for (k, v) in &req.extra {
            body.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    Value::Object(body)
}

/// Anthropic stop reason → OpenAI finish reason.
fn finish_reason(stop: Option<&str>) -> Option<String> {
    stop.map(|s| {
        match s {
            "max_tokens" => "length",
            "tool_use" => "tool_calls",
            "refusal" => "content_filter",
            _ => "stop",
        }
        .to_string()
    })
}

fn usage_from(u: &Value) -> Option<super::Usage> {
    u.as_object()?;
    let cached = u.get("cache_read_input_tokens").and_then(Value::as_u64);
    let written = u.get("cache_creation_input_tokens").and_then(Value::as_u64);
    Some(super::Usage {
        // Every prompt token, as OpenAI and Gemini count them: uncached, read, written.
        input_tokens: u
            .get("input_tokens")
            .and_then(Value::as_u64)
            .map(|n| n + cached.unwrap_or(0) + written.unwrap_or(0)),
        output_tokens: u.get("output_tokens").and_then(Value::as_u64),
        total_tokens: None,
        cached_tokens: cached,
        extra: Map::new(),
    })
}

/// An Anthropic `message` → canonical response.
pub fn response_from_value(v: &Value) -> Result<ChatResponse, super::InvalidUpstream> {
    if v.get("type").and_then(Value::as_str) != Some("message") {
        return Err(super::InvalidUpstream {
            what: "anthropic message",
            message: "missing type: message".into(),
        });
    }
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut calls = Vec::new();
    for b in v["content"].as_array().into_iter().flatten() {
        match b["type"].as_str() {
            Some("text") => text.push_str(b["text"].as_str().unwrap_or_default()),
            Some("thinking") => reasoning.push_str(b["thinking"].as_str().unwrap_or_default()),
            Some("tool_use") => calls.push(ToolCall::Function {
                id: b["id"].as_str().map(str::to_string),
                name: b["name"].as_str().unwrap_or_default().to_string(),
                arguments: Some(b["input"].to_string()),
                extra: Map::new(),
            }),
            _ => {}
        }
    }
    Ok(ChatResponse {
        id: v["id"].as_str().map(str::to_string),
        model: v["model"].as_str().map(str::to_string),
        created: None,
        choices: vec![super::Choice {
            index: 0,
            message: Message {
                content: (!text.is_empty()).then_some(Content::Text(text)),
                tool_calls: calls,
                reasoning: (!reasoning.is_empty()).then_some(reasoning),
                ..Message::new(Role::Assistant, "")
            },
            finish_reason: finish_reason(v["stop_reason"].as_str()),
            extra: Map::new(),
        }],
        usage: usage_from(&v["usage"]),
        extra: Map::new(),
        raw: None,
    })
}

/// Anthropic stream events → canonical chunks, one event at a time.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    id: Option<String>,
    model: Option<String>,
    input_tokens: Option<u64>,
    cached_tokens: Option<u64>,
    /// Anthropic block index → OpenAI tool-call index.
    tool_index: std::collections::HashMap<u64, u32>,
}

pub use super::Decoded;

impl StreamDecoder {
    fn chunk(
        &self,
        delta: super::Delta,
        finish: Option<String>,
        usage: Option<super::Usage>,
    ) -> Decoded {
        Decoded::Chunk(StreamChunk::single(
            self.id.clone(),
            self.model.clone(),
            delta,
            finish,
            usage,
        ))
    }

    pub fn event(&mut self, data: &Value) -> Decoded {
        use super::{Delta, ToolCallDelta};
        match data["type"].as_str() {
            Some("message_start") => {
                let m = &data["message"];
                self.id = m["id"].as_str().map(str::to_string);
                self.model = m["model"].as_str().map(str::to_string);
                let start = usage_from(&m["usage"]);
                self.input_tokens = start.as_ref().and_then(|u| u.input_tokens);
                self.cached_tokens = start.and_then(|u| u.cached_tokens);
                self.chunk(
                    Delta {
                        role: Some(Role::Assistant),
                        content: Some(String::new()),
                        ..Delta::default()
                    },
                    None,
                    None,
                )
            }
            Some("content_block_start") if data["content_block"]["type"] == "tool_use" => {
                let n = self.tool_index.len() as u32;
                let index = data["index"].as_u64().unwrap_or(0);
                self.tool_index.insert(index, n);
                let b = &data["content_block"];
                self.chunk(
                    Delta {
                        tool_calls: vec![ToolCallDelta {
                            index: n,
                            id: b["id"].as_str().map(str::to_string),
                            kind: Some("function".into()),
                            function: true,
                            name: b["name"].as_str().map(str::to_string),
                            arguments: Some(String::new()),
                            extra: Map::new(),
                        }],
                        ..Delta::default()
                    },
                    None,
                    None,
                )
            }
            Some("content_block_delta") => {
                let d = &data["delta"];
                let delta = match d["type"].as_str() {
                    Some("text_delta") => Delta {
                        content: d["text"].as_str().map(str::to_string),
                        ..Delta::default()
                    },
                    Some("thinking_delta") => Delta {
                        reasoning: d["thinking"].as_str().map(str::to_string),
                        ..Delta::default()
                    },
                    Some("input_json_delta") => {
                        let index = data["index"].as_u64().unwrap_or(0);
                        Delta {
                            tool_calls: vec![ToolCallDelta {
                                index: self.tool_index.get(&index).copied().unwrap_or(0),
                                id: None,
                                kind: None,
                                function: true,
                                name: None,
                                arguments: d["partial_json"].as_str().map(str::to_string),
                                extra: Map::new(),
                            }],
                            ..Delta::default()
                        }
                    }
                    _ => return Decoded::Nothing,
                };
                self.chunk(delta, None, None)
            }
            Some("message_delta") => {
                let mut usage = usage_from(&data["usage"]);
                if let Some(u) = usage.as_mut() {
                    u.input_tokens = u.input_tokens.or(self.input_tokens);
                    u.cached_tokens = u.cached_tokens.or(self.cached_tokens);
                }
                self.chunk(
                    Default::default(),
                    finish_reason(data["delta"]["stop_reason"].as_str()),
                    usage,
                )
            }
            Some("message_stop") => Decoded::End,
            Some("error") => Decoded::Error,
            _ => Decoded::Nothing,
        }
    }
}
