//! Admission at the door: a request's worst case held against its key's budget and limits
//! before its first attempt (the channels' are held in the attempt loop). The holds ride with
//! the request's charges and are settled to its real cost when its answer ends.

use std::sync::Arc;

use super::ApiError;
use super::ctx::Ctx;
use crate::config::quota::Quota;
use crate::config::teams::Membership;
use crate::config::{GatewayKey, Snapshot};
use crate::router::Chain;
use crate::spend::{Admission, Ask, Holds, Levels, Meter, Verdict};

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

/// Holds `ask` on the key's scope, and on every level of its team and its end user's when it
/// has one: `Ok` with nothing when none has limits; refused in the client's envelope
/// otherwise (a budget's refusal is final: no failover, no retry).
pub async fn admit(
    meter: &Arc<Meter>,
    snap: &Snapshot,
    key: &GatewayKey,
    ask: Ask,
    ctx: &mut Ctx,
) -> Result<(), ApiError> {
    if key.require_user && ctx.end_user.is_none() {
        return Err(ApiError::UserRequired);
    }
    match &key.team {
        None => admit_to(meter, snap, key, &key.quota, ask, ctx).await,
        Some(team) => admit_levels(meter, snap, key, team, ask, ctx, false).await,
    }
}

/// A call that costs nothing and carries no tokens (a count, a model list): held to the
/// `rpm` of its key (and of the key's team's levels) alone, in the same counters its chat
/// requests take from.
pub async fn admit_request(
    meter: &Arc<Meter>,
    snap: &Snapshot,
    key: &GatewayKey,
    ctx: &mut Ctx,
) -> Result<(), ApiError> {
    match &key.team {
        None => admit_to(meter, snap, key, &rpm(&key.quota), Ask::default(), ctx).await,
        Some(team) => admit_levels(meter, snap, key, team, Ask::default(), ctx, true).await,
    }
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

/// A team key's request: its end user (when the team limits end users), the key and every
/// team level up to the organisation, held in one step or not at all. `rpm_only`: only each
/// level's `rpm` applies (a call that costs nothing).
async fn admit_levels(
    meter: &Arc<Meter>,
    snap: &Snapshot,
    key: &GatewayKey,
    team: &Membership,
    ask: Ask,
    ctx: &mut Ctx,
    rpm_only: bool,
) -> Result<(), ApiError> {
    let user = match (&team.users, &ctx.end_user) {
        (Some(u), Some(id)) => Some((u.scope(id), u)),
        _ => None,
    };
    let all = user
        .iter()
        .map(|(s, u)| (s, &u.limits.quota))
        .chain(std::iter::once((&key.scope, &key.quota)))
        .chain(team.levels.iter().map(|(s, q)| (s, q)));
    let owned: Vec<(Arc<str>, Quota)>;
    let mut levels: Vec<(Arc<str>, &Quota)> = if rpm_only {
        owned = all.map(|(s, q)| (s.clone(), rpm(q))).collect();
        owned.iter().map(|(s, q)| (s.clone(), q)).collect()
    } else {
        all.map(|(s, q)| (s.clone(), q)).collect()
    };
    levels.retain(|(_, q)| !q.is_empty());
    if levels.is_empty() {
        return Ok(());
    }
    let tracked = user
        .as_ref()
        .filter(|(s, _)| levels.first().is_some_and(|(f, _)| f == s))
        .map(|(_, u)| (&u.team, u.limits.max_tracked));
    let l = Levels {
        tag: team.tag.clone(),
        levels,
        user: tracked,
    };
    match Box::pin(meter.admit_levels(&l, ask, snap.server.hold_ttl)).await {
        Admission::Held(held) => {
            let mut holds = Holds::new(meter.clone());
            held.into_iter().for_each(|h| holds.push(h));
            ctx.holds = Some(holds);
            Ok(())
        }
        Admission::Refused(r) => Err(ApiError::Refused(Box::new(r))),
        Admission::Unavailable => Err(ApiError::BudgetUnavailable),
    }
}

/// A quota's `rpm` alone.
fn rpm(q: &Quota) -> Quota {
    Quota {
        rpm: q.rpm,
        rate_fail: q.rate_fail,
        ..Quota::default()
    }
}
