//! Calls beside chat through the same attempt loop (tiers, health, credentials, failover): a
//! token count forwarded to channels that count in the client's protocol, and a response read
//! from (or deleted at) the one channel that keeps it. Each attempt is bounded by the channel's
//! `timeout_ms`; nothing is fitted, and the credential's tokens are not charged.

use serde_json::Value;
use tokio::time::{Instant, timeout_at};

use super::{
    ExecError, Failure, Job, Limit, OutcomeClass, Passthrough, Report, chain, classify, within,
};
use crate::protocol::Protocol;
use crate::provider::{KeptCall, UpstreamError};

/// The client's counting body of protocol `p`, counted by the first channel of the route that
/// answers (the route keeps only channels that count in `p`).
pub async fn count_tokens(
    job: &Job<'_>,
    report: &mut Report,
    p: Protocol,
    body: &Value,
    hops: u32,
) -> Result<Value, ExecError> {
    let (v, _) = chain::run(job, report, None, |c| async move {
        let ch = c.channel;
        within(
            Limit::of(ch.timeout, c.limits.timeout),
            ch.upstream
                .count_tokens(p, body, &c.upstream_model, c.via(), hops),
        )
        .await
    })
    .await?;
    Ok(v)
}

/// A response kept by the upstream of the route's only channel.
pub async fn kept_response(
    job: &Job<'_>,
    report: &mut Report,
    id: &str,
    call: KeptCall<'_>,
    hops: u32,
) -> Result<Value, ExecError> {
    let (v, _) = chain::run(job, report, None, |c| async move {
        let ch = c.channel;
        let limit = Limit::of(ch.timeout, c.limits.timeout);
        match timeout_at(
            Instant::now() + limit.within,
            ch.upstream.kept_response(id, call, c.via(), hops),
        )
        .await
        {
            Err(_) => Err(limit.expired("attempt timeout")),
            Ok(Err(e)) => Err(unknown_is_the_answer(e)),
            Ok(Ok(v)) => Ok(v),
        }
    })
    .await?;
    Ok(v)
}

/// A 404 from the upstream that keeps the response says it has no such response (deleted,
/// expired): the client's answer, as it came, not a misconfigured channel.
fn unknown_is_the_answer(e: UpstreamError) -> Failure {
    match e {
        UpstreamError::Status {
            status: 404,
            body,
            content_type,
            ..
        } => Failure {
            class: OutcomeClass::ClientError,
            status: Some(404),
            retry_after: None,
            passthrough: Some(Passthrough {
                status: 404,
                body,
                content_type,
                context_window: false,
            }),
            detail: "the upstream keeps no such response".into(),
            neutral: false,
        },
        e => classify(e),
    }
}
