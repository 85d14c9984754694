//! A canonical response → an Anthropic `message`, and Anthropic's error envelope.

use serde_json::{Value, json};

use super::{message_id, stop_reason, usage_json};
use crate::protocol::{ChatResponse, Content, Part, ToolCall};

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
