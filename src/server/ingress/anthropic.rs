//! Anthropic Messages (`POST /v1/messages`; `anthropic-version` and `anthropic-beta` headers
//! are accepted and not needed): read into the canonical request, served by any channel,
//! answered as Anthropic (an Anthropic upstream's own body and events as they came).

use serde_json::Value;

use super::openai::chat_parse;
use super::{Answer, Codec, Encode, Envelope, ErrorView, Parsed, Rendered, StreamStart};
use crate::exec::OutcomeClass;
use crate::protocol::anthropic::{
    StreamEncoder, error_body, request_from_value, response_to_value,
};
use crate::protocol::{ChatResponse, Protocol, StreamChunk};
use crate::server::continuation::{Keep, Keeping};
use crate::server::error::ApiError;

pub struct Anthropic;

impl Codec for Anthropic {
    type Extra = ();
    type Encoder = AnthropicEncoder;
    const ENDPOINT: &'static str = "messages";
    const PROTOCOL: crate::protocol::Protocol = crate::protocol::Protocol::AnthropicMessages;

    fn envelope(&self) -> &'static dyn Envelope {
        &AnthropicEnvelope
    }

    fn parse(&self, body: Value) -> Result<Parsed<()>, ApiError> {
        chat_parse(body, request_from_value)
    }

    fn render(&self, resp: ChatResponse, _: &(), a: &Answer) -> Rendered {
        let mut v = match resp.raw {
            // From an Anthropic upstream: its own body, thinking signatures and all.
            Some(raw) if raw.protocol == Protocol::AnthropicMessages => raw.body,
            _ => response_to_value(&resp, a.model),
        };
        if let (Some(ext), Some(obj)) = (a.ext.clone(), v.as_object_mut()) {
            obj.insert("switchyard".into(), ext);
        }
        Rendered {
            body: serde_json::to_vec(&v).unwrap_or_default().into(),
            keep: None,
        }
    }

    fn encoder(&self, _: (), s: StreamStart) -> (AnthropicEncoder, Option<Keep>) {
        let enc = AnthropicEncoder {
            enc: StreamEncoder::default(),
            model: s.answer.model.to_string(),
        };
        (enc, None)
    }
}

/// Anthropic events; `model` is what the client asked for (used when the upstream is silent).
pub struct AnthropicEncoder {
    enc: StreamEncoder,
    model: String,
}

impl Encode for AnthropicEncoder {
    fn chunk(&mut self, c: &mut StreamChunk, out: &mut Vec<u8>) {
        self.enc.chunk(c, &self.model, out);
    }

    fn fault(&mut self, class: OutcomeClass, out: &mut Vec<u8>) {
        self.enc.fault(super::fault_message(class).1, out);
    }

    fn done(&mut self, out: &mut Vec<u8>) -> Option<Keeping> {
        self.enc.done(out);
        None
    }
}

/// `{"type": "error", "error": {"type", "message", "code", "param", "attempts" | "context"}}`:
/// Anthropic's envelope, with the gateway's code and what the request tried beside its words.
pub struct AnthropicEnvelope;

impl Envelope for AnthropicEnvelope {
    fn body(&self, e: &ErrorView) -> Value {
        // Claude Code and the Anthropic SDK recognise an overflow by Anthropic's wording.
        let mut v = if e.code == "context_length_exceeded"
            && !e.message.starts_with("prompt is too long")
        {
            error_body(e.status, &format!("prompt is too long: {}", e.message))
        } else {
            error_body(e.status, e.message)
        };
        if let Some(err) = v["error"].as_object_mut() {
            err.insert("code".into(), e.code.into());
            if let Some(p) = e.param {
                err.insert("param".into(), p.into());
            }
            if let Some(a) = e.attempts {
                err.insert("attempts".into(), a.clone());
            }
            if let Some(c) = e.context {
                err.insert("context".into(), c.clone());
            }
        }
        v
    }

    fn speaks(&self, body: &Value) -> bool {
        body["type"] == "error"
    }

    /// An overflow reaches Claude Code in the words it acts on, whatever Anthropic's were.
    fn passes(&self, body: &Value, context_window: bool) -> bool {
        let worded = |v: &Value| {
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("prompt is too long"))
        };
        self.speaks(body) && (!context_window || worded(body))
    }
}
