//! Gemini (`POST /v1beta/models/{model}:generateContent` and `:streamGenerateContent?alt=sse`,
//! with `x-goog-api-key` or `?key=`): the model and whether to stream come from the path.

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Answer, Codec, Encode, Envelope, ErrorView, Parsed, Rendered, StreamStart};
use crate::exec::OutcomeClass;
use crate::protocol::chain::ChainSpec;
use crate::protocol::gemini::{StreamEncoder, error_body, request_from_value, response_to_value};
use crate::protocol::{ChatResponse, Protocol, StreamChunk};
use crate::server::AppState;
use crate::server::continuation::{Keep, Keeping};
use crate::server::error::ApiError;
use crate::server::pipeline;

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

/// `models/{model}:generateContent` and `:streamGenerateContent` (any other action is a 404;
/// `:countTokens` is routed beside it, by `server::routes`).
pub async fn handle(
    State(state): State<AppState>,
    Path(model_action): Path<String>,
    Query(q): Query<KeyQuery>,
    mut headers: HeaderMap,
    body: Body,
) -> Response {
    q.into_header(&mut headers);
    let stream = match model_action.rsplit_once(':') {
        Some((_, "generateContent")) => Some(false),
        Some((_, "streamGenerateContent")) => Some(true),
        _ => None,
    };
    let (Some(stream), Some((model, _))) = (stream, model_action.rsplit_once(':')) else {
        let e = ApiError::NotFound(format!("/v1beta/models/{model_action}"));
        return pipeline::refuse(&state, Gemini::ENDPOINT, &GeminiEnvelope, e);
    };
    let codec = Gemini {
        model: model.to_string(),
        stream,
    };
    pipeline::serve(state, headers, body, codec).await
}

/// A Gemini request: its model and action are the path's.
pub struct Gemini {
    model: String,
    stream: bool,
}

impl Codec for Gemini {
    type Extra = ();
    type Encoder = GeminiEncoder;
    const ENDPOINT: &'static str = "generateContent";

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
