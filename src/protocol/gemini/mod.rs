//! Gemini (`generateContent` / `streamGenerateContent?alt=sse`): client requests → canonical,
//! canonical → Gemini bodies for Gemini upstreams, and Gemini answers ↔ canonical. Pure.
//!
//! Gemini pairs a function response with its call by name (ids are optional), and sends a
//! function call whole, never in argument fragments: the stream encoder buffers OpenAI-style
//! fragments until the call is complete.
//!
//! One module per direction:
//! - `from_client`: a client's request (the model from the URL) → canonical;
//! - `to_client`: a canonical response → a Gemini response, and the error envelope;
//! - `stream_out`: canonical chunks → Gemini SSE events;
//! - `to_upstream`: a canonical request → a Gemini body;
//! - `from_upstream`: a Gemini response, and its stream events, → canonical.

mod from_client;
mod from_upstream;
mod stream_out;
mod to_client;
mod to_upstream;

#[cfg(test)]
mod tests;

pub use from_client::request_from_value;
pub use from_upstream::{StreamDecoder, response_from_value};
pub use stream_out::StreamEncoder;
pub use to_client::{error_body, response_to_value};
pub use to_upstream::request_to_value;

use serde_json::{Value, json};

use super::Usage;

fn finish_to(f: Option<&str>) -> &'static str {
    match f {
        Some("length") => "MAX_TOKENS",
        Some("content_filter") => "SAFETY",
        _ => "STOP",
    }
}

fn usage_to(u: &Usage) -> Value {
    let (i, o) = (u.input_tokens.unwrap_or(0), u.output_tokens.unwrap_or(0));
    let thoughts = u.reasoning_tokens.unwrap_or(0).min(o);
    let mut v = json!({
        "promptTokenCount": i,
        "candidatesTokenCount": o - thoughts,
        "totalTokenCount": u.total().unwrap_or(i + o),
    });
    if let Some(c) = u.cached_tokens {
        v["cachedContentTokenCount"] = c.into();
    }
    if thoughts > 0 {
        v["thoughtsTokenCount"] = thoughts.into();
    }
    v
}
