//! A request's prompt tokens for a model, counted the way OpenAI counts chat input (its
//! cookbook's `num_tokens_from_messages`: 3 tokens of framing per message, 1 more for a name,
//! 3 to prime the reply), with the model's own BPE; tool definitions and images are stated
//! estimates. For models without an offline tokenizer (Claude, Gemini) the count is an estimate
//! from cl100k_base plus 10 %, not yet calibrated against their APIs.

use crate::protocol::{ChatRequest, Content, Message, Part, Role, Tool, ToolCall};

/// Per message: `per_message[i]` is message i's tokens; `fixed` is what every request carries
/// (reply priming, tool definitions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counted {
    pub per_message: Vec<u64>,
    pub fixed: u64,
    /// Counted with the model's own tokenizer (else estimated).
    pub exact: bool,
}

impl Counted {
    pub fn total(&self) -> u64 {
        self.fixed + self.per_message.iter().sum::<u64>()
    }
}

/// OpenAI's documented cost of an image at `detail: low`; any other detail is estimated as a
/// 1024×1024 image at high detail (85 + 4 tiles × 170).
const IMAGE_LOW: u64 = 85;
const IMAGE_DEFAULT: u64 = 765;

/// Counts `req` for `model` (an upstream model name, e.g. `gpt-4o-2024-08-06`).
pub fn count_request(req: &ChatRequest, model: &str) -> Counted {
    let (encoding, exact) = match super::encoding_for(model) {
        Some(e) => (e, true),
        None => ("cl100k_base", false),
    };
    let n = |text: &str| super::count(encoding, text).unwrap_or(text.len().div_ceil(4)) as u64;
    let scale = |t: u64| if exact { t } else { t + t.div_ceil(10) };
    let per_message = req
        .messages
        .iter()
        .map(|m| scale(message_tokens(m, &n)))
        .collect();
    let tools: u64 = req
        .tools
        .iter()
        .map(|t| match t {
            // OpenAI renders definitions into a hidden system text; its exact form is not
            // published: name, description and schema plus a few tokens of framing.
            Tool::Function {
                name,
                description,
                parameters,
                ..
            } => {
                n(name)
                    + description.as_deref().map_or(0, &n)
                    + parameters.as_ref().map_or(0, |p| n(&p.to_string()))
                    + 8
            }
            Tool::Other(v) => n(&v.to_string()),
        })
        .sum();
    Counted {
        per_message,
        fixed: scale(3 + tools),
        exact,
    }
}

fn message_tokens(m: &Message, n: &dyn Fn(&str) -> u64) -> u64 {
    let role = match &m.role {
        Role::System => "system",
        Role::Developer => "developer",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
        Role::Other(r) => r.as_str(),
    };
    let mut t = 3 + n(role);
    if let Some(name) = &m.name {
        t += 1 + n(name);
    }
    match &m.content {
        Some(Content::Text(s)) => t += n(s),
        Some(Content::Parts(parts)) => {
            for p in parts {
                t += match p {
                    Part::Text { text, .. } => n(text),
                    Part::Image { detail, .. } => {
                        if detail.as_deref() == Some("low") {
                            IMAGE_LOW
                        } else {
                            IMAGE_DEFAULT
                        }
                    }
                    Part::Other(v) => n(&v.to_string()),
                };
            }
        }
        None => {}
    }
    for c in &m.tool_calls {
        t += match c {
            ToolCall::Function {
                name, arguments, ..
            } => 3 + n(name) + arguments.as_deref().map_or(0, n),
            ToolCall::Other(v) => n(&v.to_string()),
        };
    }
    if let Some(r) = &m.reasoning {
        t += n(r);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::openai::request_from_value;
    use serde_json::json;

    fn req(body: serde_json::Value) -> ChatRequest {
        request_from_value(body).unwrap()
    }

    #[test]
    fn chat_framing_follows_openais_formula() {
        // "Hello, world!" is 4 tokens; "user" 1: 3 + 1 + 4 per message, 3 to prime the reply.
        let r = req(
            json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "Hello, world!"}]}),
        );
        let c = count_request(&r, "gpt-4o-2024-08-06");
        assert!(c.exact);
        assert_eq!(c.per_message, [8]);
        assert_eq!(c.total(), 11);
        // A name costs one more token plus the name's own.
        let r = req(
            json!({"model": "gpt-4o", "messages": [{"role": "user", "name": "bob", "content": "Hello, world!"}]}),
        );
        assert_eq!(count_request(&r, "gpt-4o").per_message, [10]);
    }

    #[test]
    fn images_tools_and_calls_are_counted() {
        let r = req(json!({"model": "gpt-4o", "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "Hello, world!"},
                {"type": "image_url", "image_url": {"url": "data:x", "detail": "low"}},
                {"type": "image_url", "image_url": {"url": "data:y"}}]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]}
        ], "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather by city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]}));
        let c = count_request(&r, "gpt-4o");
        assert_eq!(c.per_message[0], 3 + 1 + 4 + 85 + 765);
        assert!(c.per_message[1] > 3 + 1 + 3, "{c:?}");
        assert!(c.fixed > 3 + 8, "{c:?}");
    }

    #[test]
    fn models_without_an_offline_tokenizer_get_a_marked_estimate() {
        let r =
            req(json!({"model": "x", "messages": [{"role": "user", "content": "Hello, world!"}]}));
        let c = count_request(&r, "claude-sonnet-4");
        assert!(!c.exact);
        // cl100k's 8 plus 10 %, rounded up.
        assert_eq!(c.per_message, [9]);
    }
}
