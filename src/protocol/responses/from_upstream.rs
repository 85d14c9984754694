//! An upstream that speaks the Responses API: its answer, and its stream events, → canonical.

use serde_json::{Map, Value, json};

use crate::protocol::{
    ChatResponse, Choice, Content, Decoded, Delta, InvalidUpstream, Message, Protocol, RawBody,
    Role, StreamChunk, ToolCall, ToolCallDelta, Usage,
};

/// A Responses API answer (from an upstream that speaks it) → the canonical answer, with the
/// body itself kept for a Responses client.
pub fn response_from_value(v: Value) -> Result<ChatResponse, InvalidUpstream> {
    let Some(items) = v.get("output").and_then(Value::as_array) else {
        return Err(InvalidUpstream {
            what: "response",
            message: "missing output array".into(),
        });
    };
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut calls = Vec::new();
    for item in items {
        match item["type"].as_str() {
            Some("message") => {
                for p in item["content"].as_array().into_iter().flatten() {
                    text.push_str(p["text"].as_str().unwrap_or_default());
                }
            }
            Some("reasoning") => {
                for p in item["summary"].as_array().into_iter().flatten() {
                    reasoning.push_str(p["text"].as_str().unwrap_or_default());
                }
            }
            Some(kind @ ("function_call" | "custom_tool_call")) => {
                let arguments = if kind == "function_call" {
                    item["arguments"].as_str().unwrap_or("{}").to_string()
                } else {
                    json!({"input": item["input"]}).to_string()
                };
                calls.push(ToolCall::Function {
                    id: item["call_id"].as_str().map(str::to_string),
                    name: item["name"].as_str().unwrap_or_default().to_string(),
                    arguments: Some(arguments),
                    extra: Map::new(),
                });
            }
            _ => {}
        }
    }
    let finish = finish_of(&v, !calls.is_empty());
    let message = Message {
        content: (!text.is_empty()).then_some(Content::Text(text)),
        tool_calls: calls,
        reasoning: (!reasoning.is_empty()).then_some(reasoning),
        ..Message::new(Role::Assistant, "")
    };
    Ok(ChatResponse {
        id: v["id"].as_str().map(str::to_string),
        model: v["model"].as_str().map(str::to_string),
        created: v["created_at"].as_u64(),
        choices: vec![Choice {
            index: 0,
            message,
            finish_reason: Some(finish.into()),
            extra: Map::new(),
        }],
        usage: usage_from(&v["usage"]),
        extra: Map::new(),
        raw: Some(RawBody {
            protocol: Protocol::OpenAiResponses,
            body: v,
        }),
        as_sent: None,
    })
}

/// The chat finish reason a Response's status says.
fn finish_of(response: &Value, called: bool) -> &'static str {
    match (
        response["status"].as_str(),
        response["incomplete_details"]["reason"].as_str(),
    ) {
        (Some("incomplete"), Some("max_output_tokens")) => "length",
        (Some("incomplete"), Some("content_filter")) => "content_filter",
        _ if called => "tool_calls",
        _ => "stop",
    }
}

fn usage_from(u: &Value) -> Option<Usage> {
    let input = u.get("input_tokens")?.as_u64();
    Some(Usage {
        input_tokens: input,
        output_tokens: u["output_tokens"].as_u64(),
        total_tokens: u["total_tokens"].as_u64(),
        cached_tokens: u["input_tokens_details"]["cached_tokens"].as_u64(),
        reasoning_tokens: u["output_tokens_details"]["reasoning_tokens"].as_u64(),
        cache_write_tokens: None,
        extra: Map::new(),
    })
}

/// Responses API stream events (from an upstream that speaks it) → canonical chunks: text,
/// reasoning and tool-call deltas for the commit point and the log; lifecycle events carry
/// nothing canonical. Ends with `response.completed` (or `.incomplete`).
#[derive(Debug, Default)]
pub struct StreamDecoder {
    id: Option<String>,
    model: Option<String>,
    /// The output index of each call announced so far (`output_item.added`): a call's chat
    /// tool index is its place here.
    calls: Vec<u64>,
}

impl StreamDecoder {
    /// The chat tool-call index of the call announced at `output_index`.
    fn tool_index(&self, output_index: u64) -> Option<u32> {
        let i = self.calls.iter().position(|o| *o == output_index)?;
        Some(i as u32)
    }
}

impl StreamDecoder {
    fn chunk(
        &self,
        delta: Delta,
        finish: Option<String>,
        usage: Option<Usage>,
    ) -> Box<StreamChunk> {
        StreamChunk::single(self.id.clone(), self.model.clone(), delta, finish, usage)
    }

    pub fn event(&mut self, event: &str, data: &Value) -> Decoded {
        let ty = data["type"].as_str().unwrap_or(event);
        let output_index = data["output_index"].as_u64().unwrap_or(0);
        let delta = |f: &dyn Fn(&mut Delta)| {
            let mut d = Delta::default();
            f(&mut d);
            d
        };
        match ty {
            "response.created" => {
                self.id = data["response"]["id"].as_str().map(str::to_string);
                self.model = data["response"]["model"].as_str().map(str::to_string);
                Decoded::Nothing
            }
            "response.output_text.delta" => {
                let t = data["delta"].as_str().unwrap_or_default().to_string();
                Decoded::Chunk(self.chunk(delta(&|d| d.content = Some(t.clone())), None, None))
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                let t = data["delta"].as_str().unwrap_or_default().to_string();
                Decoded::Chunk(self.chunk(delta(&|d| d.reasoning = Some(t.clone())), None, None))
            }
            "response.output_item.added"
                if matches!(
                    data["item"]["type"].as_str(),
                    Some("function_call" | "custom_tool_call")
                ) =>
            {
                // Found by fuzzing: a repeated announcement gave the call its name twice.
                if self.tool_index(output_index).is_some() {
                    return Decoded::Nothing;
                }
                self.calls.push(output_index);
                let index = (self.calls.len() - 1) as u32;
                let item = &data["item"];
                let call = ToolCallDelta {
                    index,
                    id: item["call_id"].as_str().map(str::to_string),
                    kind: Some("function".into()),
                    function: true,
                    name: item["name"].as_str().map(str::to_string),
                    arguments: None,
                    extra: Map::new(),
                };
                Decoded::Chunk(self.chunk(
                    delta(&|d| d.tool_calls = vec![call.clone()]),
                    None,
                    None,
                ))
            }
            "response.function_call_arguments.delta" | "response.custom_tool_call_input.delta" => {
                // Found by fuzzing: arguments of a call never announced (no name, no id) were
                // a call of their own, which a late announcement then named; no client could
                // run it, so they belong to no call.
                let Some(index) = self.tool_index(output_index) else {
                    return Decoded::Nothing;
                };
                let call = ToolCallDelta {
                    index,
                    id: None,
                    kind: None,
                    function: true,
                    name: None,
                    arguments: data["delta"].as_str().map(str::to_string),
                    extra: Map::new(),
                };
                Decoded::Chunk(self.chunk(
                    delta(&|d| d.tool_calls = vec![call.clone()]),
                    None,
                    None,
                ))
            }
            "response.completed" | "response.incomplete" => {
                let r = &data["response"];
                let finish = finish_of(r, !self.calls.is_empty());
                Decoded::Last(self.chunk(
                    Delta::default(),
                    Some(finish.into()),
                    usage_from(&r["usage"]),
                ))
            }
            "response.failed" | "error" => Decoded::Error,
            _ => Decoded::Nothing,
        }
    }
}
