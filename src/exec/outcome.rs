//! Outcome classes (DESIGN.md "Outcome classes"): what one attempt's failure means for the
//! request. Whether a class is retried or failed over is an explicit property, never a default.

use std::time::Duration;

use bytes::Bytes;

use crate::protocol::chain::FailOn;
use crate::provider::UpstreamError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutcomeClass {
    ConnectionError,
    Timeout,
    ServerError,
    RateLimit,
    Misrouted,
    ClientError,
    AuthError,
    /// A 400 to a request translated for another provider while it carried history only its
    /// own provider accepts (signed thinking, thought signatures): our defect, not the client's.
    TranslationError,
    /// A gateway downstream refused the request as a routing loop (508): final, never retried
    /// or failed over, so chained gateways cannot multiply the attempts.
    Blocked,
    /// The upstream said the prompt exceeds the model's context window: the client's request,
    /// unless the model's route names a larger context fallback.
    ContextWindow,
}

impl OutcomeClass {
    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeClass::ConnectionError => "connection_error",
            OutcomeClass::Timeout => "timeout",
            OutcomeClass::ServerError => "server_error",
            OutcomeClass::RateLimit => "rate_limit",
            OutcomeClass::Misrouted => "misrouted",
            OutcomeClass::ClientError => "client_error",
            OutcomeClass::AuthError => "auth_error",
            OutcomeClass::TranslationError => "translation_error",
            OutcomeClass::Blocked => "blocked",
            OutcomeClass::ContextWindow => "context_window",
        }
    }

    /// Which of a chain's `on` classes this failure is (misroutes, refused credentials and
    /// translation defects count as the upstream's failure); `None` never moves a chain on.
    pub fn fail_on(self) -> Option<FailOn> {
        match self {
            OutcomeClass::ConnectionError => Some(FailOn::ConnectionError),
            OutcomeClass::Timeout => Some(FailOn::Timeout),
            OutcomeClass::RateLimit => Some(FailOn::RateLimit),
            OutcomeClass::ServerError
            | OutcomeClass::Misrouted
            | OutcomeClass::AuthError
            | OutcomeClass::TranslationError => Some(FailOn::ServerError),
            OutcomeClass::ClientError | OutcomeClass::Blocked | OutcomeClass::ContextWindow => None,
        }
    }

    /// Every class, for tables and tests.
    pub const ALL: [OutcomeClass; 10] = [
        OutcomeClass::ConnectionError,
        OutcomeClass::Timeout,
        OutcomeClass::ServerError,
        OutcomeClass::RateLimit,
        OutcomeClass::Misrouted,
        OutcomeClass::ClientError,
        OutcomeClass::AuthError,
        OutcomeClass::TranslationError,
        OutcomeClass::Blocked,
        OutcomeClass::ContextWindow,
    ];

    /// The classes that move a request on to another channel. A class not listed (a new one
    /// too) ends the request: failing over is a decision, never a default.
    pub const FAIL_OVER: [OutcomeClass; 7] = [
        OutcomeClass::ConnectionError,
        OutcomeClass::Timeout,
        OutcomeClass::ServerError,
        OutcomeClass::RateLimit,
        OutcomeClass::Misrouted,
        OutcomeClass::AuthError,
        OutcomeClass::TranslationError,
    ];

    /// The classes the same channel is tried again for, when the channel allows retries
    /// (a rate limit only on the last candidate: see `judge`).
    pub const RETRY_SAME: [OutcomeClass; 3] = [
        OutcomeClass::ConnectionError,
        OutcomeClass::Timeout,
        OutcomeClass::ServerError,
    ];

    pub fn fails_over(self) -> bool {
        Self::FAIL_OVER.contains(&self)
    }

    pub fn retries_same_channel(self) -> bool {
        Self::RETRY_SAME.contains(&self)
    }
}

/// The upstream's own answer to a request it judged malformed: returned to the client as is.
#[derive(Debug, Clone)]
pub struct Passthrough {
    pub status: u16,
    pub body: Bytes,
    pub content_type: Option<String>,
    /// The upstream said the prompt exceeds the model's context window: a client of another
    /// protocol is told so in its own terms (OpenAI's code, Anthropic's message).
    pub context_window: bool,
}

/// One failed attempt, classified.
#[derive(Debug)]
pub struct Failure {
    pub class: OutcomeClass,
    pub status: Option<u16>,
    pub retry_after: Option<Duration>,
    pub passthrough: Option<Passthrough>,
    /// For the operator's log only: never sent to a client (it can quote upstream text).
    pub detail: String,
    /// Says nothing about the channel (the caller's own tighter timeout ran out).
    pub neutral: bool,
}

impl Failure {
    /// A stream that ended before any content or finish reason.
    pub fn empty_stream() -> Failure {
        Failure {
            class: OutcomeClass::ServerError,
            status: None,
            retry_after: None,
            passthrough: None,
            detail: "stream ended before any content".into(),
            neutral: false,
        }
    }

    pub fn timeout(what: &str) -> Failure {
        Failure {
            class: OutcomeClass::Timeout,
            status: None,
            retry_after: None,
            passthrough: None,
            detail: what.to_string(),
            neutral: false,
        }
    }
}

/// Whether an upstream's answer to a request says its prompt exceeds the model's context
/// window. OpenAI (and compatible servers) say so by code; Anthropic and Gemini have no code
/// for it, only their documented messages under a generic invalid-argument type.
pub fn context_exceeded(protocol: crate::protocol::Protocol, p: &Passthrough) -> bool {
    use crate::protocol::Protocol;
    if !matches!(p.status, 400 | 413) {
        return false;
    }
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&p.body) else {
        return false;
    };
    // vLLM puts its error at the top level (`{"object": "error", "message", "code": 400}`).
    let e = if v["error"].is_object() {
        &v["error"]
    } else {
        &v
    };
    let message = e["message"].as_str().unwrap_or_default();
    match protocol {
        // OpenAI's code; a compatible server without codes (vLLM) uses OpenAI's wording.
        Protocol::OpenAiChat | Protocol::OpenAiResponses => {
            e["code"] == "context_length_exceeded"
                || (!e["code"].is_string()
                    && message.starts_with("This model's maximum context length is"))
        }
        Protocol::AnthropicMessages => {
            e["type"] == "invalid_request_error"
                && (message.starts_with("prompt is too long")
                    || message.starts_with("input length and `max_tokens` exceed context limit"))
        }
        Protocol::Gemini => {
            e["status"] == "INVALID_ARGUMENT"
                && message.contains("exceeds the maximum number of tokens")
        }
    }
}

pub fn classify(err: UpstreamError) -> Failure {
    let detail = err.to_string();
    let plain = |class| Failure {
        class,
        status: None,
        retry_after: None,
        passthrough: None,
        detail: detail.clone(),
        neutral: false,
    };
    match err {
        UpstreamError::Connect(_) | UpstreamError::Broken(_) => {
            plain(OutcomeClass::ConnectionError)
        }
        UpstreamError::Invalid(_) | UpstreamError::StreamError => plain(OutcomeClass::ServerError),
        UpstreamError::Status {
            status,
            retry_after,
            body,
            content_type,
        } => {
            let class = match status {
                // Only these say the request itself is wrong: anywhere else it would be too.
                400 | 413 | 422 => OutcomeClass::ClientError,
                429 => OutcomeClass::RateLimit,
                508 => OutcomeClass::Blocked,
                401..=403 => OutcomeClass::AuthError,
                // Wrong path or method for this upstream: the channel is misconfigured.
                404 | 405 | 410 => OutcomeClass::Misrouted,
                408 => OutcomeClass::Timeout,
                // Any other status (409, 415, 451, 5xx, 529...) is this upstream's failure.
                _ => OutcomeClass::ServerError,
            };
            let passthrough = matches!(class, OutcomeClass::ClientError | OutcomeClass::Blocked)
                .then_some(Passthrough {
                    status,
                    body,
                    content_type,
                    context_window: false,
                });
            Failure {
                class,
                status: Some(status),
                retry_after,
                passthrough,
                detail,
                neutral: false,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(s: u16) -> OutcomeClass {
        classify(UpstreamError::Status {
            status: s,
            retry_after: None,
            body: Bytes::new(),
            content_type: None,
        })
        .class
    }

    #[test]
    fn statuses_map_to_the_design_table() {
        assert_eq!(status(500), OutcomeClass::ServerError);
        assert_eq!(status(529), OutcomeClass::ServerError);
        assert_eq!(status(429), OutcomeClass::RateLimit);
        assert_eq!(status(404), OutcomeClass::Misrouted);
        assert_eq!(status(401), OutcomeClass::AuthError);
        assert_eq!(status(403), OutcomeClass::AuthError);
        for s in [400, 413, 422] {
            assert_eq!(status(s), OutcomeClass::ClientError);
            assert!(!status(s).fails_over());
        }
        for s in [405, 409, 410, 415, 451] {
            assert!(status(s).fails_over(), "{s}");
        }
        assert!(!OutcomeClass::RateLimit.retries_same_channel());
        assert!(OutcomeClass::RateLimit.fails_over());
        assert!(OutcomeClass::ServerError.retries_same_channel());
        assert_eq!(
            classify(UpstreamError::Connect("refused".into())).class,
            OutcomeClass::ConnectionError
        );
    }

    #[test]
    fn context_overflows_are_recognised_per_provider() {
        use crate::protocol::Protocol;
        let p = |status, body: &'static str| Passthrough {
            status,
            body: Bytes::from_static(body.as_bytes()),
            content_type: None,
            context_window: false,
        };
        let openai = p(
            400,
            r#"{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
        );
        let anthropic = p(
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#,
        );
        let gemini = p(
            400,
            r#"{"error":{"code":400,"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}"#,
        );
        assert!(context_exceeded(Protocol::OpenAiChat, &openai));
        assert!(context_exceeded(Protocol::AnthropicMessages, &anthropic));
        assert!(context_exceeded(Protocol::Gemini, &gemini));
        let vllm = p(
            400,
            r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.","type":"BadRequestError","param":null,"code":400}"#,
        );
        // vLLM sends a numeric code: the wording decides only when no string code is given.
        assert!(context_exceeded(Protocol::OpenAiChat, &vllm));
        let codeless = p(
            400,
            r#"{"error":{"message":"This model's maximum context length is 4096 tokens.","type":"invalid_request_error"}}"#,
        );
        assert!(context_exceeded(Protocol::OpenAiChat, &codeless));
        let output = p(
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, decrease input length or `max_tokens` and try again"}}"#,
        );
        assert!(context_exceeded(Protocol::AnthropicMessages, &output));
        // Another provider's shape, another 400, or the same words without OpenAI's code.
        assert!(!context_exceeded(Protocol::OpenAiChat, &anthropic));
        let other = p(
            400,
            r#"{"error":{"message":"maximum context length exceeded","type":"invalid_request_error","code":"invalid_value"}}"#,
        );
        assert!(!context_exceeded(Protocol::OpenAiChat, &other));
        assert!(!context_exceeded(Protocol::OpenAiChat, &p(500, "{}")));
    }

    #[test]
    fn only_client_errors_carry_the_upstream_body() {
        let f = classify(UpstreamError::Status {
            status: 500,
            retry_after: None,
            body: Bytes::from_static(b"secret upstream text"),
            content_type: None,
        });
        assert!(f.passthrough.is_none());
        let f = classify(UpstreamError::Status {
            status: 400,
            retry_after: None,
            body: Bytes::from_static(b"{}"),
            content_type: None,
        });
        assert_eq!(f.passthrough.unwrap().status, 400);
    }
}
