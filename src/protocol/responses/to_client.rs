//! The canonical answer → a Response object.

use serde_json::Value;

use super::echo::skeleton;
use super::{Echo, message_item, reasoning_item, status_of, usage_json};
use crate::protocol::{ChatResponse, Content, ToolCall};

/// The canonical answer → a Response object.
pub fn response_to_value(resp: &ChatResponse, echo: &Echo, model: &str) -> Value {
    let choice = resp.choices.first();
    let (status, incomplete) = status_of(choice.and_then(|c| c.finish_reason.as_deref()));
    let mut r = skeleton(echo, resp.model.as_deref().unwrap_or(model), status);
    r["incomplete_details"] = incomplete;
    let mut output = Vec::new();
    let tag = &echo.id[5..];
    if let Some(c) = choice {
        if let Some(reasoning) = c.message.reasoning.as_deref().filter(|t| !t.is_empty()) {
            output.push(reasoning_item(&format!("rs_{tag}"), reasoning));
        }
        let text = c.message.content.as_ref().map(Content::text);
        if let Some(t) = text.filter(|t| !t.is_empty()) {
            output.push(message_item(&format!("msg_{tag}"), &t, "completed"));
        }
        for (n, call) in c.message.tool_calls.iter().enumerate() {
            if let ToolCall::Function {
                id,
                name,
                arguments,
                ..
            } = call
            {
                let call_id = id.clone().unwrap_or_else(|| format!("call_{tag}_{n}"));
                output.push(echo.call_item(
                    &format!("fc_{tag}_{n}"),
                    &call_id,
                    name,
                    arguments.as_deref().unwrap_or("{}"),
                    "completed",
                ));
            }
        }
    }
    r["output"] = Value::Array(output);
    if let Some(u) = &resp.usage {
        r["usage"] = usage_json(u);
    }
    r
}
