//! A canonical response → a Gemini response, and Gemini's error envelope.

use serde_json::{Value, json};

use super::{finish_to, usage_to};
use crate::protocol::{ChatResponse, Content, Part, ToolCall};

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
