//! Admission at the door: a request's worst case held against its key's budget and limits
//! before its first attempt (the channels' are held in the attempt loop). The holds ride with
//! the request's charges and are settled to its real cost when its answer ends.

use std::sync::Arc;

use super::ApiError;
use super::ctx::Ctx;
use crate::config::quota::Quota;
use crate::config::{GatewayKey, Snapshot};
use crate::router::Chain;
use crate::spend::{Ask, Holds, Meter, Verdict};

/// The reply tokens a request reserves: its own `max_tokens`, else the server's default.
pub fn reply_reservation(snap: &Snapshot, max_tokens: Option<u64>) -> u64 {
    max_tokens.unwrap_or(snap.server.reserve_output_tokens)
}

/// The most the request can cost on any channel of its chain: prompt × input rate + reply ×
/// output rate at the dearest price that may serve it.
pub fn worst_case(snap: &Snapshot, chain: &Chain, prompt: u64, reply: u64) -> Ask {
    let mut micros = 0;
    for step in &chain.steps {
        for route in snap.models.get(&step.model).into_iter().flatten() {
            let Some(ch) = snap.channels.get(route.channel) else {
                continue;
            };
            if let Some(p) = snap.price(ch, &step.model, &route.upstream_model) {
                micros = micros.max(p.worst_case(prompt, reply));
            }
        }
    }
    Ask {
        micros,
        tokens: prompt.saturating_add(reply),
    }
}

/// Holds `ask` on the key's scope: `Ok` with nothing when the key has no limits; refused in
/// the client's envelope otherwise (a budget's refusal is final: no failover, no retry).
pub async fn admit(
    meter: &Arc<Meter>,
    snap: &Snapshot,
    key: &GatewayKey,
    ask: Ask,
    ctx: &mut Ctx,
) -> Result<(), ApiError> {
    admit_to(meter, snap, key, &key.quota, ask, ctx).await
}

/// A call that costs nothing and carries no tokens (a count, a model list): held to the key's
/// `rpm` alone, in the same counter its chat requests take from.
pub async fn admit_request(
    meter: &Arc<Meter>,
    snap: &Snapshot,
    key: &GatewayKey,
    ctx: &mut Ctx,
) -> Result<(), ApiError> {
    let rpm = Quota {
        rpm: key.quota.rpm,
        rate_fail: key.quota.rate_fail,
        ..Quota::default()
    };
    admit_to(meter, snap, key, &rpm, Ask::default(), ctx).await
}

async fn admit_to(
    meter: &Arc<Meter>,
    snap: &Snapshot,
    key: &GatewayKey,
    quota: &Quota,
    ask: Ask,
    ctx: &mut Ctx,
) -> Result<(), ApiError> {
    if quota.is_empty() {
        return Ok(());
    }
    let hold = snap.server.hold_ttl;
    // Boxed: the shared counters' futures are large.
    match Box::pin(meter.admit(&key.scope, quota, ask, hold)).await {
        Verdict::Held(h) => {
            let mut holds = Holds::new(meter.clone());
            holds.push(h);
            ctx.holds = Some(holds);
            Ok(())
        }
        Verdict::Refused(r) => Err(ApiError::Refused(Box::new(r))),
        Verdict::Unavailable => Err(ApiError::BudgetUnavailable),
    }
}
