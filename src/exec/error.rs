//! Why a request was not served: each variant maps to exactly one HTTP status and code.

use std::time::Duration;

use super::Passthrough;
use crate::context::fit::Overflow;
use crate::router::RouteError;

/// Why a request was not served. Each variant maps to exactly one HTTP status and code.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error(transparent)]
    Route(#[from] RouteError),
    #[error("every upstream for this request is rate limited")]
    AllRateLimited { retry_after: Duration },
    #[error("every upstream attempt for this request failed")]
    AllAttemptsFailed,
    #[error("every model of the chain failed")]
    AllModelsFailed,
    #[error("the request deadline passed before any upstream answered")]
    Deadline,
    /// The upstream judged the request itself malformed (400/413/422): its answer, as is.
    #[error("the upstream rejected the request (HTTP {})", .0.status)]
    Rejected(Passthrough),
    /// A continued response lives only on its channel, which could not serve.
    #[error(
        "the response this request continues was made by channel {0}, which cannot serve now, and its conversation is not kept by the gateway (store: false, or the upstream keeps it): retry later, or send the whole conversation as input"
    )]
    PreviousResponseUnavailable(String),
    /// Trimming is on and the instructions, tools and latest turn alone exceed the window.
    // Worded as Anthropic words it: Claude Code and the Anthropic SDK act on that prefix.
    #[error(
        "prompt is too long: {} tokens > {} maximum for {} (its context window of {} tokens less {} reserved for the reply; the instructions, tools and latest turn are never trimmed)",
        .0.needed, .0.budget, .0.model, .0.context_window, .0.reserved
    )]
    ContextTooLong(Overflow),
}

impl ExecError {
    pub fn status(&self) -> u16 {
        match self {
            ExecError::Route(RouteError::ModelNotFound(_)) => 404,
            ExecError::Route(RouteError::NoAvailableChannel(_)) => 503,
            ExecError::AllRateLimited { .. } => 429,
            ExecError::AllAttemptsFailed | ExecError::AllModelsFailed => 502,
            ExecError::Deadline => 504,
            ExecError::Rejected(p) => p.status,
            ExecError::ContextTooLong(_) => 400,
            ExecError::PreviousResponseUnavailable(_) => 503,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            ExecError::Route(RouteError::ModelNotFound(_)) => "model_not_found",
            ExecError::Route(RouteError::NoAvailableChannel(_)) => "no_available_channel",
            ExecError::AllRateLimited { .. } => "all_rate_limited",
            ExecError::AllAttemptsFailed => "all_attempts_failed",
            ExecError::AllModelsFailed => "all_models_failed",
            ExecError::Deadline => "request_timeout",
            ExecError::Rejected(_) => "upstream_rejected_request",
            ExecError::ContextTooLong(_) => "context_length_exceeded",
            ExecError::PreviousResponseUnavailable(_) => "previous_response_unavailable",
        }
    }

    /// The gateway itself gave up: SDKs must not multiply the attempts by retrying.
    pub fn exhausted(&self) -> bool {
        matches!(
            self,
            ExecError::Route(RouteError::NoAvailableChannel(_))
                | ExecError::AllRateLimited { .. }
                | ExecError::AllAttemptsFailed
                | ExecError::AllModelsFailed
                | ExecError::Deadline
        )
    }
}
