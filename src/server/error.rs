//! Every error a client can see, each mapped to exactly one HTTP status and code and rendered in
//! the OpenAI error envelope.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::exec::ExecError;
use crate::protocol::openai::error_body;
use crate::protocol::{InvalidRequest, Protocol, anthropic, gemini};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("missing or invalid API key; send `Authorization: Bearer <key>` or `x-api-key: <key>`")]
    Unauthorized,
    #[error("the request body is not valid JSON: {0}")]
    InvalidJson(String),
    #[error("{0}")]
    Invalid(#[from] InvalidRequest),
    #[error("the request body is larger than the limit of {limit} bytes")]
    TooLarge { limit: usize },
    #[error("could not read the request body")]
    BodyRead,
    #[error("the request body did not arrive within the request timeout")]
    BodyTimeout,
    #[error("unknown route {0}")]
    NotFound(String),
    #[error("method not allowed on this route")]
    MethodNotAllowed,
    /// The request was routed and attempted; carries the attempts for the body.
    #[error("{err}")]
    Exec {
        err: Box<ExecError>,
        attempts: Value,
    },
    #[error("{0}")]
    Admin(String),
    #[error("the request log is unavailable")]
    LogUnavailable,
    #[error("header {name}: expected {expected}")]
    BadHeader {
        name: &'static str,
        expected: &'static str,
    },
    /// A Responses request continuing a response this gateway does not have.
    #[error("previous response with id {0:?} not found")]
    PreviousResponseNotFound(String),
    /// Gateways chained into each other: refused so retries cannot multiply down the chain.
    #[error("routing loop detected: the request has passed {hops} gateways (the limit is {max})")]
    LoopDetected { hops: u32, max: u32 },
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        let code = match self {
            ApiError::Unauthorized => 401,
            ApiError::InvalidJson(_) | ApiError::Invalid(_) | ApiError::BodyRead => 400,
            ApiError::TooLarge { .. } => 413,
            ApiError::BodyTimeout => 408,
            ApiError::NotFound(_) | ApiError::PreviousResponseNotFound(_) => 404,
            ApiError::MethodNotAllowed => 405,
            ApiError::Exec { err, .. } => err.status(),
            ApiError::Admin(_) => 400,
            ApiError::LogUnavailable => 503,
            ApiError::BadHeader { .. } => 400,
            ApiError::LoopDetected { .. } => 508,
        };
        StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_GATEWAY)
    }

    pub fn code(&self) -> &'static str {
        match self {
            ApiError::Unauthorized => "invalid_api_key",
            ApiError::InvalidJson(_) => "invalid_json",
            ApiError::Invalid(_) => "invalid_request",
            ApiError::TooLarge { .. } => "request_too_large",
            ApiError::BodyRead => "body_read_error",
            ApiError::BodyTimeout => "request_body_timeout",
            ApiError::NotFound(_) => "not_found",
            ApiError::PreviousResponseNotFound(_) => "previous_response_not_found",
            ApiError::MethodNotAllowed => "method_not_allowed",
            ApiError::Exec { err, .. } => err.code(),
            ApiError::Admin(_) => "invalid_config",
            ApiError::LogUnavailable => "log_unavailable",
            ApiError::BadHeader { .. } => "invalid_header",
            ApiError::LoopDetected { .. } => "loop_detected",
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            ApiError::Unauthorized => "authentication_error",
            ApiError::Exec { err, .. } => match err.status() {
                429 => "rate_limit_error",
                400..=499 => "invalid_request_error",
                _ => "server_error",
            },
            ApiError::LogUnavailable | ApiError::LoopDetected { .. } => "server_error",
            _ => "invalid_request_error",
        }
    }
}

impl ApiError {
    /// The error in the client's own protocol's envelope (same status and headers).
    pub fn render(self, protocol: Protocol) -> Response {
        let mut resp = self.into_response();
        // The Responses API shares OpenAI's error envelope.
        if matches!(protocol, Protocol::OpenAiChat | Protocol::OpenAiResponses) {
            return resp;
        }
        // Same status and headers; the body rewritten into Anthropic's envelope. The message
        // is ours, or for the upstream's verdict on the request, the upstream's own message.
        let status = resp.status().as_u16();
        let (parts, body) = resp.into_parts();
        let _ = body;
        let message = match parts.extensions.get::<Message>() {
            Some(Message(m)) => m.clone(),
            None => "error".to_string(),
        };
        let v = match protocol {
            Protocol::Gemini => gemini::error_body(status, &message),
            _ => anthropic::error_body(status, &message),
        };
        resp = Response::from_parts(parts, axum::body::Body::from(v.to_string()));
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        resp.headers_mut().remove(header::CONTENT_LENGTH);
        resp
    }
}

/// The human message of an error, carried to protocol renderers.
#[derive(Clone)]
struct Message(String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        // The upstream's own verdict on the client's request goes back as it came.
        if let ApiError::Exec { err, .. } = &self
            && let ExecError::Rejected(p) = &**err
        {
            let ct = p
                .content_type
                .as_deref()
                .and_then(|c| HeaderValue::from_str(c).ok())
                .unwrap_or(HeaderValue::from_static("application/json"));
            // For another protocol's envelope: the upstream's own message about the request.
            let parsed = serde_json::from_slice::<serde_json::Value>(&p.body).ok();
            let mut message = parsed
                .as_ref()
                .and_then(|v| v.pointer("/error/message")?.as_str().map(str::to_string))
                .unwrap_or_else(|| self.to_string());
            // Anthropic's and Gemini's envelopes are not OpenAI's: an OpenAI client gets the
            // message in its own, with the code SDKs and agents act on for a context overflow.
            let foreign = parsed
                .as_ref()
                .is_some_and(|v| v["type"] == "error" || v["error"]["status"].is_string());
            let body = if foreign {
                let code = if p.context_window {
                    "context_length_exceeded"
                } else {
                    self.code()
                };
                let e = error_body(&message, "invalid_request_error", code, None, None);
                bytes::Bytes::from(e.to_string())
            } else {
                p.body.clone()
            };
            // Claude Code and the Anthropic SDK recognise an overflow by Anthropic's wording.
            if p.context_window && !message.starts_with("prompt is too long") {
                message = format!("prompt is too long: {message}");
            }
            let ct = if foreign {
                HeaderValue::from_static("application/json")
            } else {
                ct
            };
            let mut resp = (status, [(header::CONTENT_TYPE, ct)], body).into_response();
            // A loop found downstream is final here too.
            if p.status == 508 {
                resp.headers_mut()
                    .insert("x-should-retry", HeaderValue::from_static("false"));
            }
            resp.extensions_mut().insert(Message(message));
            return resp;
        }
        let message = self.to_string();
        let param = match &self {
            ApiError::Invalid(e) => e.param.clone(),
            ApiError::PreviousResponseNotFound(_) => Some("previous_response_id".into()),
            _ => None,
        };
        let extra = match &self {
            ApiError::Exec { err, attempts } => Some(match &**err {
                // The counts, for a client that trims on its own and tries again.
                ExecError::ContextTooLong(o) => (
                    "context",
                    serde_json::json!({
                        "model": &*o.model,
                        "prompt_tokens_minimum": o.needed,
                        "prompt_tokens_budget": o.budget,
                        "context_window": o.context_window,
                        "reserved_output_tokens": o.reserved,
                    }),
                ),
                _ => ("attempts", attempts.clone()),
            }),
            _ => None,
        };
        let body = error_body(
            &self.to_string(),
            self.kind(),
            self.code(),
            param.as_deref(),
            extra,
        );
        let mut resp = (
            status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body.to_string(),
        )
            .into_response();
        if let ApiError::Exec { err, .. } = &self {
            if err.exhausted() {
                resp.headers_mut()
                    .insert("x-should-retry", HeaderValue::from_static("false"));
            }
            if let ExecError::AllRateLimited { retry_after } = &**err {
                let secs = retry_after.as_secs_f64().ceil().max(1.0) as u64;
                if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                    resp.headers_mut().insert(header::RETRY_AFTER, v);
                }
            }
        }
        if let ApiError::LoopDetected { .. } = self {
            resp.headers_mut()
                .insert("x-should-retry", HeaderValue::from_static("false"));
        }
        if let ApiError::Unauthorized = self {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp.extensions_mut().insert(Message(message));
        resp
    }
}
