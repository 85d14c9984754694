//! Anthropic Messages, as a client protocol and as an upstream. Pure: no I/O, no global state.
//!
//! One module per direction:
//! - `from_client`: a client's request → canonical (its history as OpenAI-shaped turns);
//! - `to_client`: a canonical response → an Anthropic `message`, and the error envelope;
//! - `stream_out`: canonical chunks → Anthropic stream events;
//! - `to_upstream`: a canonical request → an Anthropic Messages body;
//! - `from_upstream`: an Anthropic `message`, and its stream events, → canonical.

mod from_client;
mod from_upstream;
mod stream_out;
mod to_client;
mod to_upstream;

#[cfg(test)]
mod tests;

pub use super::Decoded;
pub use from_client::request_from_value;
pub use from_upstream::{StreamDecoder, response_from_value};
pub use stream_out::StreamEncoder;
pub use to_client::{error_body, response_to_value};
pub use to_upstream::request_to_value;

use serde_json::{Value, json};

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
    let cached = cached.unwrap_or(0);
    // Complete as Anthropic writes it; a translated answer knows of no cache writes.
    json!({
        "input_tokens": input.saturating_sub(cached),
        "output_tokens": output,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
    })
}
