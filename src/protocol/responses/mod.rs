//! OpenAI Responses API (`POST /v1/responses`) ↔ the canonical request, response and stream.
//!
//! A Responses request is read whole (the client sends its history, as Codex does with
//! `store: false`, or the server puts a kept conversation before its input for a
//! `previous_response_id`): its input items become Chat Completions messages (instructions first,
//! a function call and the assistant text before it one turn, each call output a tool message),
//! its fields their Chat Completions equivalents (`max_output_tokens`, `text.format`,
//! `reasoning.effort`), and it is then read as an OpenAI chat request, so every channel kind
//! serves it. Hosted tools (web search, file search...) have no Chat Completions form: they are
//! dropped and named in `x-switchyard-translation`. `custom` tools (free-form input) travel as
//! functions with one `input` string and come back as `custom_tool_call`s.
//!
//! Answers are rebuilt as Responses objects; streams as the documented event sequence:
//! `response.created`, `response.in_progress`, per output item `response.output_item.added`,
//! its part and delta events, `response.output_item.done`, and `response.completed` (or
//! `response.incomplete` at the token limit, `response.failed` after a fault).
//!
//! One module per direction:
//! - `from_client`: a client's request → canonical and its `Echo`, and continuing a kept
//!   conversation (`previous_response_id`);
//! - `echo`: what the answer repeats of the request, and the conversation kept after it;
//! - `to_client`: a canonical answer → a Response object;
//! - `stream_out`: canonical chunks → Responses stream events;
//! - `to_upstream`: the client's body for an upstream that speaks the Responses API;
//! - `from_upstream`: such an upstream's answer, and its stream events, → canonical.

mod echo;
mod from_client;
mod from_upstream;
mod items;
mod stream_out;
mod to_client;
mod to_upstream;

#[cfg(test)]
mod tests;

pub use echo::{Echo, Kept, MAX_KEPT_BYTES};
pub use from_client::{continue_from, previous_response_id, request_from_value};
pub use from_upstream::{StreamDecoder, response_from_value};
pub use items::{ItemsQuery, input_items, items_page};
pub use stream_out::StreamEncoder;
pub use to_client::response_to_value;
pub use to_upstream::for_upstream;

use serde_json::{Value, json};

use super::Usage;

fn usage_json(u: &Usage) -> Value {
    let input = u.input_tokens.unwrap_or(0);
    let output = u.output_tokens.unwrap_or(0);
    let reasoning = u.reasoning_tokens.unwrap_or(0);
    json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": u.cached_tokens.unwrap_or(0)},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": u.total().unwrap_or(input + output),
    })
}

/// `completed`, or `incomplete` with its reason, from a finish reason.
fn status_of(finish: Option<&str>) -> (&'static str, Value) {
    match finish {
        Some("length") => ("incomplete", json!({"reason": "max_output_tokens"})),
        Some("content_filter") => ("incomplete", json!({"reason": "content_filter"})),
        _ => ("completed", Value::Null),
    }
}

fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({"type": "message", "id": id, "status": status, "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]})
}

fn reasoning_item(id: &str, text: &str) -> Value {
    json!({"type": "reasoning", "id": id,
        "summary": [{"type": "summary_text", "text": text}]})
}
