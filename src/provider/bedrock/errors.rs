//! Bedrock's refusals, read by their exception type (`x-amzn-ErrorType`, else the body's
//! `__type`), as the status the outcome classes read: throttling is a rate limit, a model not
//! ready or a service fault a server error, a model timeout a timeout, a refused or expired
//! credential an auth error (the channel's next credential is tried), a validation error the
//! client's own (in Anthropic's envelope, a context overflow in Anthropic's words, so the
//! context fallbacks take it as they take Anthropic's).

use bytes::Bytes;
use serde_json::{Value, json};

use crate::provider::UpstreamError;

/// The exception type named by a Bedrock error (`ThrottlingException:http://…` → its name).
pub fn exception_type(header: Option<&str>, body: &[u8]) -> Option<String> {
    if let Some(h) = header {
        return Some(h.split(':').next().unwrap_or(h).trim().to_string());
    }
    let v: Value = serde_json::from_slice(body).ok()?;
    let t = v["__type"].as_str()?;
    Some(t.rsplit('#').next().unwrap_or(t).to_string())
}

/// The status an exception is classified by.
fn status_for(kind: &str, status: u16) -> u16 {
    match kind {
        "ThrottlingException" | "ServiceQuotaExceededException" => 429,
        "ServiceUnavailableException" | "ModelNotReadyException" => 503,
        "InternalServerException" | "ModelStreamErrorException" | "ModelErrorException" => 500,
        "ModelTimeoutException" => 408,
        "AccessDeniedException" => 403,
        "UnrecognizedClientException"
        | "ExpiredTokenException"
        | "InvalidSignatureException"
        | "IncompleteSignatureException"
        | "MissingAuthenticationTokenException" => 401,
        "ValidationException" => 400,
        "ResourceNotFoundException" => 404,
        _ => status,
    }
}

/// Whether a validation message says the prompt is longer than the model's window.
fn overflow(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("too long")
        || m.contains("too many input tokens")
        || m.contains("exceeds the maximum")
        || m.contains("context length")
        || m.contains("context window")
}

/// A Bedrock error as the status its exception means; a validation error's body in
/// Anthropic's envelope.
pub fn classified(err: UpstreamError, kind: Option<&str>) -> UpstreamError {
    let UpstreamError::Status {
        status,
        retry_after,
        body,
        content_type,
    } = err
    else {
        return err;
    };
    let Some(kind) = kind else {
        return UpstreamError::Status {
            status,
            retry_after,
            body,
            content_type,
        };
    };
    let mapped = status_for(kind, status);
    let body = if mapped == 400 {
        let message = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| {
                v["message"]
                    .as_str()
                    .or(v["Message"].as_str())
                    .map(str::to_string)
            })
            .unwrap_or_else(|| "the request was not valid".into());
        let message = if overflow(&message) && !message.starts_with("prompt is too long") {
            format!("prompt is too long: {message}")
        } else {
            message
        };
        let v = json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}});
        Bytes::from(v.to_string())
    } else {
        body
    };
    UpstreamError::Status {
        status: mapped,
        retry_after,
        content_type: Some("application/json".into()),
        body,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_of(kind: &str, status: u16) -> u16 {
        let e = UpstreamError::Status {
            status,
            retry_after: None,
            body: Bytes::from_static(br#"{"message":"m"}"#),
            content_type: None,
        };
        match classified(e, Some(kind)) {
            UpstreamError::Status { status, .. } => status,
            _ => 0,
        }
    }

    #[test]
    fn each_exception_reads_as_its_class() {
        let table = [
            ("ThrottlingException", 429, 429),
            ("ModelNotReadyException", 429, 503),
            ("ServiceUnavailableException", 503, 503),
            ("InternalServerException", 500, 500),
            ("ModelTimeoutException", 408, 408),
            ("AccessDeniedException", 403, 403),
            ("UnrecognizedClientException", 403, 401),
            ("ExpiredTokenException", 403, 401),
            ("ValidationException", 400, 400),
            ("SomethingNew", 418, 418),
        ];
        for (kind, sent, want) in table {
            assert_eq!(status_of(kind, sent), want, "{kind}");
        }
    }

    #[test]
    fn a_validation_error_speaks_anthropic_and_an_overflow_says_so_its_way() {
        let e = UpstreamError::Status {
            status: 400,
            retry_after: None,
            body: Bytes::from_static(br#"{"message":"Input is too long for requested model."}"#),
            content_type: None,
        };
        let UpstreamError::Status { body, .. } = classified(e, Some("ValidationException")) else {
            panic!("a status");
        };
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(
            v["error"]["message"],
            "prompt is too long: Input is too long for requested model."
        );
        assert_eq!(
            exception_type(
                Some("ThrottlingException:http://internal.amazon.com/coral/"),
                b""
            ),
            Some("ThrottlingException".into())
        );
        assert_eq!(
            exception_type(None, br#"{"__type":"com.amazon#ValidationException"}"#),
            Some("ValidationException".into())
        );
    }
}
