//! Gemini (`POST /v1beta/models/{model}:generateContent` and `:streamGenerateContent?alt=sse`,
//! with `x-goog-api-key` or `?key=`): the model and whether to stream come from the path.

use axum::http::{HeaderMap, HeaderValue};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Answer, Codec, Encode, Envelope, ErrorView, Parsed, Rendered, StreamStart};
use crate::exec::OutcomeClass;
use crate::protocol::chain::ChainSpec;
use crate::protocol::gemini::{StreamEncoder, error_body, request_from_value, response_to_value};
use crate::protocol::{ChatResponse, Protocol, StreamChunk};
use crate::server::continuation::{Keep, Keeping};
use crate::server::error::ApiError;

#[derive(Deserialize)]
pub struct KeyQuery {
    key: Option<String>,
}

impl KeyQuery {
    /// The key may come as a query parameter: presented like the header form.
    pub fn into_header(self, headers: &mut HeaderMap) {
        if let Some(k) = self
            .key
            .as_deref()
            .and_then(|k| HeaderValue::from_str(k).ok())
        {
            headers.insert("x-goog-api-key", k);
        }
    }
}

/// A Gemini request: its model and action are the path's.
pub struct Gemini {
    model: String,
    stream: bool,
}

impl Gemini {
    /// The codec of `models/{model}:generateContent` or `:streamGenerateContent`; `None` for
    /// any other action.
    pub fn for_path(model_action: &str) -> Option<Gemini> {
        let (model, action) = model_action.rsplit_once(':')?;
        let stream = match action {
            "generateContent" => false,
            "streamGenerateContent" => true,
            _ => return None,
        };
        Some(Gemini {
            model: model.to_string(),
            stream,
        })
    }
}

impl Codec for Gemini {
    type Extra = ();
    type Encoder = GeminiEncoder;
    const ENDPOINT: &'static str = "generateContent";
    const PROTOCOL: crate::protocol::Protocol = crate::protocol::Protocol::Gemini;

    fn envelope(&self) -> &'static dyn Envelope {
        &GeminiEnvelope
    }

    fn path_target(&self) -> Option<(&str, bool)> {
        Some((&self.model, self.stream))
    }

    fn parse(&self, body: Value) -> Result<Parsed<()>, ApiError> {
        Ok(Parsed {
            req: request_from_value(body, &self.model, self.stream)?,
            spec: ChainSpec::default(),
            extra: (),
        })
    }

    fn render(&self, resp: ChatResponse, _: &(), a: &Answer) -> Rendered {
        let body = match &resp.raw {
            // From a Gemini upstream: its own body, thought signatures and all.
            Some(raw) if raw.protocol == Protocol::Gemini => serde_json::to_vec(&raw.body),
            _ => serde_json::to_vec(&response_to_value(&resp, a.model)),
        };
        Rendered {
            body: body.unwrap_or_default().into(),
            keep: None,
        }
    }

    fn encoder(&self, _: (), s: StreamStart) -> (GeminiEncoder, Option<Keep>) {
        let enc = GeminiEncoder {
            enc: StreamEncoder::default(),
            model: s.answer.model.to_string(),
        };
        (enc, None)
    }
}

/// Gemini partial responses, one `data:` event each.
pub struct GeminiEncoder {
    enc: StreamEncoder,
    model: String,
}

impl Encode for GeminiEncoder {
    fn chunk(&mut self, c: &mut StreamChunk, out: &mut Vec<u8>) {
        self.enc.chunk(c, &self.model, out);
    }

    fn fault(&mut self, class: OutcomeClass, out: &mut Vec<u8>) {
        self.enc.fault(super::fault_message(class).1, out);
    }

    fn done(&mut self, out: &mut Vec<u8>) -> Option<Keeping> {
        self.enc.done(&self.model, out);
        None
    }
}

/// The type URL of the attempts entry in a Gemini error's `details`.
pub const ATTEMPTS_TYPE: &str = "type.googleapis.com/switchyard.v1.Attempts";

/// `{"error": {"code", "message", "status", "details": [ErrorInfo, Attempts]}}`: Google's
/// envelope, the gateway's code as a `google.rpc.ErrorInfo` reason, and what the request tried
/// as its own details entry.
pub struct GeminiEnvelope;

impl Envelope for GeminiEnvelope {
    fn body(&self, e: &ErrorView) -> Value {
        let mut v = error_body(e.status, e.message);
        let mut info = json!({
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": e.code,
            "domain": "switchyard",
        });
        if let Some(p) = e.param {
            info["metadata"] = json!({ "param": p });
        }
        let mut details = vec![info];
        if let Some(a) = e.attempts {
            details.push(json!({"@type": ATTEMPTS_TYPE, "attempts": a}));
        }
        if let Some(c) = e.context {
            details
                .push(json!({"@type": "type.googleapis.com/switchyard.v1.Context", "context": c}));
        }
        v["error"]["details"] = Value::Array(details);
        v
    }

    fn speaks(&self, body: &Value) -> bool {
        body["error"]["status"].is_string()
    }
}
