//! Anthropic's answers → canonical (Anthropic as the upstream): a whole `message`, and the
//! stream decoder.

use serde_json::{Map, Value};

use crate::protocol::{
    ChatResponse, Choice, Content, Decoded, Delta, InvalidUpstream, Message, Role, StreamChunk,
    ToolCall, ToolCallDelta, Usage,
};

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

fn usage_from(u: &Value) -> Option<Usage> {
    u.as_object()?;
    let cached = u.get("cache_read_input_tokens").and_then(Value::as_u64);
    let written = u.get("cache_creation_input_tokens").and_then(Value::as_u64);
    Some(Usage {
        // Every prompt token, as OpenAI and Gemini count them: uncached, read, written.
        input_tokens: u
            .get("input_tokens")
            .and_then(Value::as_u64)
            .map(|n| n + cached.unwrap_or(0) + written.unwrap_or(0)),
        output_tokens: u.get("output_tokens").and_then(Value::as_u64),
        total_tokens: None,
        cached_tokens: cached,
        // Anthropic counts thinking in `output_tokens` without saying how much of it.
        reasoning_tokens: None,
        cache_write_tokens: written,
        extra: Map::new(),
    })
}

/// An Anthropic `message` → canonical response.
pub fn response_from_value(v: &Value) -> Result<ChatResponse, InvalidUpstream> {
    if v.get("type").and_then(Value::as_str) != Some("message") {
        return Err(InvalidUpstream {
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
        choices: vec![Choice {
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
        as_sent: None,
    })
}

/// Anthropic stream events → canonical chunks, one event at a time.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    id: Option<String>,
    model: Option<String>,
    input_tokens: Option<u64>,
    cached_tokens: Option<u64>,
    cache_write_tokens: Option<u64>,
    /// Anthropic block index → OpenAI tool-call index.
    tool_index: std::collections::HashMap<u64, u32>,
}

impl StreamDecoder {
    fn chunk(&self, delta: Delta, finish: Option<String>, usage: Option<Usage>) -> Decoded {
        Decoded::Chunk(StreamChunk::single(
            self.id.clone(),
            self.model.clone(),
            delta,
            finish,
            usage,
        ))
    }

    pub fn event(&mut self, data: &Value) -> Decoded {
        match data["type"].as_str() {
            Some("message_start") => {
                let m = &data["message"];
                self.id = m["id"].as_str().map(str::to_string);
                self.model = m["model"].as_str().map(str::to_string);
                let start = usage_from(&m["usage"]);
                self.input_tokens = start.as_ref().and_then(|u| u.input_tokens);
                self.cached_tokens = start.as_ref().and_then(|u| u.cached_tokens);
                self.cache_write_tokens = start.and_then(|u| u.cache_write_tokens);
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
                let index = data["index"].as_u64().unwrap_or(0);
                // A block started again is ignored (found by fuzzing): numbered anew, it
                // left the next block's call the same number as its own.
                if self.tool_index.contains_key(&index) {
                    return Decoded::Nothing;
                }
                let n = self.tool_index.len() as u32;
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
                        // Arguments of a block that is no client tool call (a server_tool_use
                        // such as web search, or one never started) are not a call's: found
                        // by fuzzing, they were appended to the first call. The raw event
                        // still reaches an Anthropic client.
                        let Some(&call) = self.tool_index.get(&index) else {
                            return Decoded::Nothing;
                        };
                        Delta {
                            tool_calls: vec![ToolCallDelta {
                                index: call,
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
                    u.cache_write_tokens = u.cache_write_tokens.or(self.cache_write_tokens);
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
