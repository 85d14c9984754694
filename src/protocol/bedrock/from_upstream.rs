//! Bedrock Converse answers → canonical: a whole `output.message`, and the ConverseStream
//! decoder (one event-stream message at a time: its `:event-type` and JSON payload).

use serde_json::{Map, Value};

use crate::protocol::{
    ChatResponse, Choice, Content, Decoded, Delta, InvalidUpstream, Message, Role, StreamChunk,
    ToolCall, ToolCallDelta, Usage,
};

/// Converse stop reason → OpenAI finish reason.
fn finish_reason(stop: &str) -> String {
    match stop {
        "max_tokens" | "model_context_window_exceeded" => "length",
        "tool_use" => "tool_calls",
        "guardrail_intervened" | "content_filtered" => "content_filter",
        _ => "stop",
    }
    .to_string()
}

/// Converse usage → canonical: every prompt token counted in `input_tokens`, as OpenAI and
/// Gemini count them (Converse's `inputTokens` leaves cache reads and writes out, as
/// Anthropic's does).
fn usage_from(u: &Value) -> Option<Usage> {
    u.as_object()?;
    let n = |k: &str| u.get(k).and_then(Value::as_u64);
    let (cached, written) = (n("cacheReadInputTokens"), n("cacheWriteInputTokens"));
    Some(Usage {
        input_tokens: n("inputTokens").map(|i| i + cached.unwrap_or(0) + written.unwrap_or(0)),
        output_tokens: n("outputTokens"),
        total_tokens: n("totalTokens"),
        cached_tokens: cached,
        reasoning_tokens: None,
        cache_write_tokens: written,
        extra: Map::new(),
    })
}

/// A Converse answer → canonical response.
pub fn response_from_value(v: &Value) -> Result<ChatResponse, InvalidUpstream> {
    let Some(blocks) = v["output"]["message"]["content"].as_array() else {
        return Err(InvalidUpstream {
            what: "converse answer",
            message: "missing output.message.content".into(),
        });
    };
    let (mut text, mut reasoning, mut calls) = (String::new(), String::new(), Vec::new());
    for b in blocks {
        if let Some(t) = b["text"].as_str() {
            text.push_str(t);
        } else if let Some(t) = b["reasoningContent"]["reasoningText"]["text"].as_str() {
            reasoning.push_str(t);
        } else if let Some(u) = b.get("toolUse") {
            calls.push(ToolCall::Function {
                id: u["toolUseId"].as_str().map(str::to_string),
                name: u["name"].as_str().unwrap_or_default().to_string(),
                arguments: Some(u["input"].to_string()),
                extra: Map::new(),
            });
        }
    }
    Ok(ChatResponse {
        id: None,
        model: None,
        created: None,
        choices: vec![Choice {
            index: 0,
            message: Message {
                content: (!text.is_empty()).then_some(Content::Text(text)),
                tool_calls: calls,
                reasoning: (!reasoning.is_empty()).then_some(reasoning),
                ..Message::new(Role::Assistant, "")
            },
            finish_reason: v["stopReason"].as_str().map(finish_reason),
            extra: Map::new(),
        }],
        usage: usage_from(&v["usage"]),
        extra: Map::new(),
        raw: None,
        as_sent: None,
    })
}

/// ConverseStream events → canonical chunks. The stream is complete at `metadata` (usage, the
/// last event) or, without one, once `messageStop` came.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    /// Converse block index → OpenAI tool-call index.
    tool_index: std::collections::HashMap<u64, u32>,
    stopped: bool,
}

impl StreamDecoder {
    /// The stream's end came after `messageStop`: complete.
    pub fn complete(&self) -> bool {
        self.stopped
    }

    /// One event: its type and its JSON payload.
    pub fn event(&mut self, kind: &str, data: &Value) -> Decoded {
        let chunk = |delta: Delta, finish: Option<String>, usage: Option<Usage>| {
            Decoded::Chunk(StreamChunk::single(None, None, delta, finish, usage))
        };
        match kind {
            "messageStart" => chunk(
                Delta {
                    role: Some(Role::Assistant),
                    content: Some(String::new()),
                    ..Delta::default()
                },
                None,
                None,
            ),
            "contentBlockStart" => {
                let Some(u) = data["start"].get("toolUse") else {
                    return Decoded::Nothing;
                };
                let index = data["contentBlockIndex"].as_u64().unwrap_or(0);
                if self.tool_index.contains_key(&index) {
                    return Decoded::Nothing;
                }
                let n = self.tool_index.len() as u32;
                self.tool_index.insert(index, n);
                let call = ToolCallDelta {
                    index: n,
                    id: u["toolUseId"].as_str().map(str::to_string),
                    kind: Some("function".into()),
                    function: true,
                    name: u["name"].as_str().map(str::to_string),
                    arguments: Some(String::new()),
                    extra: Map::new(),
                };
                chunk(
                    Delta {
                        tool_calls: vec![call],
                        ..Delta::default()
                    },
                    None,
                    None,
                )
            }
            "contentBlockDelta" => self
                .delta(data)
                .map_or(Decoded::Nothing, |d| chunk(d, None, None)),
            "messageStop" => {
                self.stopped = true;
                let stop = data["stopReason"].as_str().unwrap_or("end_turn");
                chunk(Delta::default(), Some(finish_reason(stop)), None)
            }
            "metadata" => match usage_from(&data["usage"]) {
                Some(u) => {
                    let mut c = StreamChunk::single(None, None, Delta::default(), None, None);
                    c.choices.clear();
                    c.usage = Some(u);
                    Decoded::Last(c)
                }
                None => Decoded::End,
            },
            _ => Decoded::Nothing,
        }
    }

    fn delta(&self, data: &Value) -> Option<Delta> {
        let d = &data["delta"];
        if let Some(t) = d["text"].as_str() {
            return Some(Delta {
                content: Some(t.to_string()),
                ..Delta::default()
            });
        }
        if let Some(t) = d["reasoningContent"]["text"].as_str() {
            return Some(Delta {
                reasoning: Some(t.to_string()),
                ..Delta::default()
            });
        }
        let input = d["toolUse"]["input"].as_str()?;
        // A block never started as a tool call is no call's.
        let index = data["contentBlockIndex"].as_u64().unwrap_or(0);
        let call = *self.tool_index.get(&index)?;
        Some(Delta {
            tool_calls: vec![ToolCallDelta {
                index: call,
                id: None,
                kind: None,
                function: true,
                name: None,
                arguments: Some(input.to_string()),
                extra: Map::new(),
            }],
            ..Delta::default()
        })
    }
}
