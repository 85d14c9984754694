//! Every error a client can see, each mapped to exactly one HTTP status and code, and rendered
//! in the client's protocol's envelope (with the attempts an exhausted request made).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::envelope::{Envelope, ErrorView, OpenAiEnvelope};
use crate::exec::{ExecError, Passthrough};
use crate::protocol::InvalidRequest;

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
    /// A Responses read or delete naming a response this key never got (or one gone).
    #[error("no response with id {0:?} is kept for this key")]
    ResponseNotFound(String),
    /// The response is kept by its channel's upstream, which cannot answer now.
    #[error(
        "the response is kept by the upstream of channel {0}, which cannot answer now: retry later"
    )]
    ResponseUnavailable(String),
    /// Gateways chained into each other: refused so retries cannot multiply down the chain.
    #[error("routing loop detected: the request has passed {hops} gateways (the limit is {max})")]
    LoopDetected { hops: u32, max: u32 },
    /// The admin API's refusals.
    #[error(transparent)]
    Control(#[from] super::control::ControlError),
    /// The key's budget or one of its limits has no room for the request.
    #[error("{}", refusal_message(.0))]
    Refused(Box<crate::spend::Refusal>),
    #[error("the counter this key's budget is kept in cannot be reached; the budget fails closed")]
    BudgetUnavailable,
    #[error(
        "this key's requests must name an end user: `user` (OpenAI), `metadata.user_id` (Anthropic), `labels.user` (Gemini) or the `x-switchyard-user` header"
    )]
    UserRequired,
    /// A bearer token shaped as a JWT that is not a valid one from an accepted issuer.
    #[error("{0}")]
    InvalidToken(crate::auth::jwt::TokenError),
    #[error("team {team} may not use model {model:?}")]
    ModelNotAllowed {
        team: std::sync::Arc<str>,
        model: String,
    },
}

/// A scope as a client is told it: `key:<name>`, `team:<name>`, and an end user as
/// `user:<id>` (its team, part of the scope, is the key's own).
pub fn shown_scope(scope: &str) -> std::borrow::Cow<'_, str> {
    match scope.strip_prefix("user:").and_then(|s| s.split_once('/')) {
        Some((_, id)) => format!("user:{id}").into(),
        None => scope.into(),
    }
}

fn refusal_message(r: &crate::spend::Refusal) -> String {
    use crate::spend::Limit;
    let who = shown_scope(&r.scope).replacen(':', " ", 1);
    let wait = r.retry_after.as_secs_f64().ceil().max(1.0) as u64;
    match r.limit {
        Limit::Budget => format!(
            "the budget of {who} has no room for this request: {} of {} USD spent or held by requests in flight",
            crate::store::ledger::usd(r.used as i64),
            crate::store::ledger::usd(r.cap as i64),
        ),
        Limit::Rpm => format!(
            "{who} may send {} requests a minute; retry in {wait} s",
            r.cap
        ),
        Limit::Tpm => format!("{who} may use {} tokens a minute; retry in {wait} s", r.cap),
        Limit::Concurrency => format!(
            "{who} may have {} requests in flight at once; retry in {wait} s",
            r.cap
        ),
    }
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        let code = match self {
            ApiError::Unauthorized => 401,
            ApiError::InvalidJson(_) | ApiError::Invalid(_) | ApiError::BodyRead => 400,
            ApiError::TooLarge { .. } => 413,
            ApiError::BodyTimeout => 408,
            ApiError::NotFound(_)
            | ApiError::PreviousResponseNotFound(_)
            | ApiError::ResponseNotFound(_) => 404,
            ApiError::ResponseUnavailable(_) => 503,
            ApiError::MethodNotAllowed => 405,
            ApiError::Exec { err, .. } => err.status(),
            ApiError::Admin(_) => 400,
            ApiError::LogUnavailable => 503,
            ApiError::BadHeader { .. } => 400,
            ApiError::LoopDetected { .. } => 508,
            ApiError::Control(e) => e.status(),
            ApiError::Refused(_) => 429,
            ApiError::BudgetUnavailable => 503,
            ApiError::UserRequired => 400,
            ApiError::InvalidToken(_) => 401,
            ApiError::ModelNotAllowed { .. } => 403,
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
            ApiError::ResponseNotFound(_) => "response_not_found",
            ApiError::ResponseUnavailable(_) => "response_unavailable",
            ApiError::MethodNotAllowed => "method_not_allowed",
            ApiError::Exec { err, .. } => err.code(),
            ApiError::Admin(_) => "invalid_config",
            ApiError::LogUnavailable => "log_unavailable",
            ApiError::BadHeader { .. } => "invalid_header",
            ApiError::LoopDetected { .. } => "loop_detected",
            ApiError::Control(e) => e.code(),
            ApiError::Refused(r) if r.limit == crate::spend::Limit::Budget => "budget_exceeded",
            ApiError::Refused(_) => "rate_limit_exceeded",
            ApiError::BudgetUnavailable => "budget_unavailable",
            ApiError::UserRequired => "user_required",
            ApiError::InvalidToken(_) => "invalid_token",
            ApiError::ModelNotAllowed { .. } => "model_not_allowed",
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            ApiError::Unauthorized | ApiError::InvalidToken(_) => "authentication_error",
            ApiError::Exec { err, .. } => match err.status() {
                429 => "rate_limit_error",
                400..=499 => "invalid_request_error",
                _ => "server_error",
            },
            ApiError::LogUnavailable
            | ApiError::LoopDetected { .. }
            | ApiError::ResponseUnavailable(_)
            | ApiError::BudgetUnavailable => "server_error",
            // What OpenAI's SDKs and the agents built on them treat as final.
            ApiError::Refused(r) if r.limit == crate::spend::Limit::Budget => "insufficient_quota",
            ApiError::Refused(_) => "rate_limit_error",
            ApiError::ModelNotAllowed { .. } => "permission_error",
            ApiError::Control(e) => match e.status() {
                403 => "permission_error",
                429 => "rate_limit_error",
                503 => "server_error",
                _ => "invalid_request_error",
            },
            _ => "invalid_request_error",
        }
    }
}

impl ApiError {
    /// The error in the client's own protocol's envelope.
    pub fn render(self, env: &dyn Envelope) -> Response {
        let status = self.status();
        if let ApiError::Exec { err, .. } = &self
            && let ExecError::Rejected(p) = &**err
        {
            return rejected(status, p, self.code(), env);
        }
        let message = self.to_string();
        let refused = match &self {
            ApiError::Refused(r) => Some(shown_scope(&r.scope)),
            _ => None,
        };
        let param = match &self {
            ApiError::Invalid(e) => e.param.as_deref(),
            ApiError::PreviousResponseNotFound(_) => Some("previous_response_id"),
            ApiError::Control(e) => e.param(),
            ApiError::UserRequired => Some("user"),
            ApiError::ModelNotAllowed { .. } => Some("model"),
            ApiError::Refused(_) => refused.as_deref(),
            _ => None,
        };
        let (attempts, context) = match &self {
            ApiError::Exec { err, attempts } => match &**err {
                // The counts, for a client that trims on its own and tries again.
                ExecError::ContextTooLong(o) => (
                    None,
                    Some(json!({
                        "model": &*o.model,
                        "prompt_tokens_minimum": o.needed,
                        "prompt_tokens_budget": o.budget,
                        "context_window": o.context_window,
                        "reserved_output_tokens": o.reserved,
                    })),
                ),
                _ => (Some(attempts), None),
            },
            _ => (None, None),
        };
        let body = env.body(&ErrorView {
            status: status.as_u16(),
            kind: self.kind(),
            code: self.code(),
            message: &message,
            param,
            attempts,
            context: context.as_ref(),
        });
        let mut resp = (status, json_type(), body.to_string()).into_response();
        self.headers(&mut resp);
        resp
    }

    /// What an SDK acts on beside the body: not to retry an exhausted gateway, when to try
    /// again, how to authenticate.
    fn headers(&self, resp: &mut Response) {
        let h = resp.headers_mut();
        if let ApiError::Exec { err, .. } = self {
            if err.exhausted() {
                h.insert("x-should-retry", HeaderValue::from_static("false"));
            }
            if let ExecError::AllRateLimited { retry_after } = &**err {
                let secs = retry_after.as_secs_f64().ceil().max(1.0) as u64;
                h.insert(header::RETRY_AFTER, HeaderValue::from(secs));
            }
        }
        if let ApiError::Control(e) = self
            && let Some(s) = e.retry_after()
        {
            h.insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        if let ApiError::Refused(r) = self {
            refusal_headers(r, h);
        }
        if let ApiError::LoopDetected { .. } = self {
            h.insert("x-should-retry", HeaderValue::from_static("false"));
        }
        if let ApiError::Unauthorized = self {
            h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let ApiError::InvalidToken(_) = self {
            h.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer error=\"invalid_token\""),
            );
        }
    }
}

/// A budget's refusal is final; a rate limit's says when to come back, as OpenAI says it.
fn refusal_headers(r: &crate::spend::Refusal, h: &mut axum::http::HeaderMap) {
    use crate::spend::Limit;
    let what = match r.limit {
        Limit::Budget => {
            h.insert("x-should-retry", HeaderValue::from_static("false"));
            return;
        }
        Limit::Tpm => "tokens",
        Limit::Rpm => "requests",
        Limit::Concurrency => "concurrency",
    };
    let secs = r.retry_after.as_secs_f64().ceil().max(1.0) as u64;
    h.insert(header::RETRY_AFTER, HeaderValue::from(secs));
    let name = |k: &str| format!("x-ratelimit-{k}-{what}");
    let pairs = [
        (name("limit"), r.cap.to_string()),
        (name("remaining"), r.cap.saturating_sub(r.used).to_string()),
        (name("reset"), format!("{secs}s")),
    ];
    for (k, v) in pairs {
        if let (Ok(k), Ok(v)) = (
            axum::http::HeaderName::try_from(k),
            HeaderValue::from_str(&v),
        ) {
            h.insert(k, v);
        }
    }
}

fn json_type() -> [(header::HeaderName, HeaderValue); 1] {
    [(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    )]
}

/// The upstream's own verdict on the client's request: as it came when it is already in the
/// client's envelope, else its message in the client's envelope, with the code SDKs and agents
/// act on for a context overflow.
fn rejected(status: StatusCode, p: &Passthrough, code: &str, env: &dyn Envelope) -> Response {
    let parsed = serde_json::from_slice::<Value>(&p.body).ok();
    let mut resp = if env.passes(parsed.as_ref().unwrap_or(&Value::Null), p.context_window) {
        let ct = p
            .content_type
            .as_deref()
            .and_then(|c| HeaderValue::from_str(c).ok())
            .unwrap_or(HeaderValue::from_static("application/json"));
        (status, [(header::CONTENT_TYPE, ct)], p.body.clone()).into_response()
    } else {
        let fallback = format!("the upstream rejected the request (HTTP {})", p.status);
        let message = parsed
            .as_ref()
            .and_then(|v| v.pointer("/error/message")?.as_str())
            .unwrap_or(&fallback);
        let code = if p.context_window {
            "context_length_exceeded"
        } else {
            code
        };
        let body = env.body(&ErrorView {
            status: status.as_u16(),
            kind: "invalid_request_error",
            code,
            message,
            param: None,
            attempts: None,
            context: None,
        });
        (status, json_type(), body.to_string()).into_response()
    };
    // A loop found downstream is final here too.
    if p.status == 508 {
        resp.headers_mut()
            .insert("x-should-retry", HeaderValue::from_static("false"));
    }
    resp
}

/// Routes outside any client protocol (admin, `/v1/models`, embeddings) answer in OpenAI's.
impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.render(&OpenAiEnvelope)
    }
}
