//! Gemini's answers → canonical (Gemini as the upstream): a whole response, and the stream
//! decoder.

use serde_json::{Map, Value};

use crate::protocol::{
    ChatResponse, Choice, ChunkChoice, Content, Delta, InvalidUpstream, Message, Role, StreamChunk,
    ToolCall, ToolCallDelta, Usage,
};

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

fn usage_from(u: &Value) -> Option<Usage> {
    u.as_object()?;
    let thoughts = u["thoughtsTokenCount"].as_u64();
    Some(Usage {
        input_tokens: u["promptTokenCount"].as_u64(),
        // Gemini counts thoughts apart from the candidates (and leaves a zero count out); the
        // canonical count has both.
        output_tokens: match (u["candidatesTokenCount"].as_u64(), thoughts) {
            (None, None) => None,
            (c, t) => Some(c.unwrap_or(0) + t.unwrap_or(0)),
        },
        total_tokens: u["totalTokenCount"].as_u64(),
        cached_tokens: u["cachedContentTokenCount"].as_u64(),
        reasoning_tokens: thoughts,
        cache_write_tokens: None,
        extra: Map::new(),
    })
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
        as_sent: None,
    })
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
