//! How an error is written in a client's protocol: the view every envelope reads
//! ([`ErrorView`]), the trait each protocol implements ([`Envelope`]), and OpenAI's envelope,
//! the default of every route that is not a protocol's own. A leaf: the codecs, the request
//! context and `ApiError` all build on it.

use serde_json::Value;

use crate::protocol::openai::error_body;

/// An error as every protocol's envelope reads it.
pub struct ErrorView<'a> {
    pub status: u16,
    /// OpenAI's `type` (`invalid_request_error`, `rate_limit_error`, `server_error`...).
    pub kind: &'static str,
    pub code: &'a str,
    pub message: &'a str,
    pub param: Option<&'a str>,
    /// The attempts an exhausted request made, by channel, model, status and reason.
    pub attempts: Option<&'a Value>,
    /// The counts of a request too long for any model's window.
    pub context: Option<&'a Value>,
}

/// How a client protocol writes an error body.
pub trait Envelope: Sync {
    fn body(&self, e: &ErrorView) -> Value;
    /// An upstream error body already in this envelope's shape, returned to the client as is.
    fn speaks(&self, body: &Value) -> bool;
    /// Whether an upstream's rejection goes back as it came (`context_window`: it says the
    /// prompt is too long for the model).
    fn passes(&self, body: &Value, _context_window: bool) -> bool {
        self.speaks(body)
    }
}

/// `{"error": {"message", "type", "param", "code", "attempts" | "context"}}`.
pub struct OpenAiEnvelope;

impl Envelope for OpenAiEnvelope {
    fn body(&self, e: &ErrorView) -> Value {
        let extra = match (e.context, e.attempts) {
            (Some(c), _) => Some(("context", c.clone())),
            (None, Some(a)) => Some(("attempts", a.clone())),
            (None, None) => None,
        };
        error_body(e.message, e.kind, e.code, e.param, extra)
    }

    /// Anthropic's (`"type": "error"`) and Gemini's (`error.status`) are not this one; the
    /// rest (OpenAI's, vLLM's top-level error) is.
    fn speaks(&self, body: &Value) -> bool {
        !(body["type"] == "error" || body["error"]["status"].is_string())
    }
}
