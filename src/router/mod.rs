//! Candidate selection: pure functions over the snapshot. No I/O, no clock, no global RNG: the
//! caller passes the random source, so tests seed it and `route/explain` can show a plan without
//! calling anyone.

use std::sync::Arc;
use std::time::Duration;

use crate::config::{GatewayKey, Snapshot};
use crate::health::{Skip, Standing};

mod chain;
mod explain;
mod strategy;

pub use chain::{Chain, ChainSource, Step, chain};
pub use explain::{CandidateView, ExcludedView, ModelView, explain};
pub use strategy::{Estimate, Measured, Signal, Strategy, Why, reason};

/// One place to try: a channel (index into the snapshot) and the upstream's name for the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub channel: usize,
    pub upstream_model: Arc<str>,
    /// This attempt would be the channel's half-open trial.
    pub half_open: bool,
    /// What an attempt here costs.
    pub price: Option<Arc<crate::pricing::Price>>,
}

/// Moves the candidates `late` says are near their budget after the others, keeping each
/// group's order (budget-aware routing: a channel past its soft share is tried last, not
/// refused).
pub fn demote(candidates: &mut Vec<Candidate>, late: impl Fn(&Candidate) -> bool) {
    if !candidates.iter().any(&late) {
        return;
    }
    let (mut front, back): (Vec<_>, Vec<_>) = candidates.drain(..).partition(|c| !late(c));
    front.extend(back);
    *candidates = front;
}

/// A channel left out of the plan by its health, and why.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Skipped {
    pub channel: usize,
    pub reason: Skip,
    /// For a rate-limit cooldown: when it ends.
    pub retry_in: Option<Duration>,
}

/// A channel serving the model that the key may not use, or that is switched off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Excluded {
    Disabled,
    NotInKeyGroups,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub candidates: Vec<Candidate>,
    pub skipped: Vec<Skipped>,
    /// Left out by configuration, not health (shown by `route/explain`).
    pub excluded: Vec<(usize, Excluded)>,
    /// Why the first candidate is first (`None`: there is none).
    pub why: Option<Why>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("the model `{0}` does not exist or you do not have access to it")]
    ModelNotFound(String),
    #[error("no channel is available for the model `{0}`")]
    NoAvailableChannel(String),
}

/// A tier: the key's group rank, then the channel priority.
pub type Tier = (usize, u32);

/// Given a tier and its (channel, weight) items, the index of the item to try first.
pub type FirstPick<'a> = &'a dyn Fn(Tier, &[(usize, f64)]) -> usize;

/// How the first try inside a tier is drawn.
pub enum Pick<'a> {
    /// P = w·h / Σ w·h.
    Random(&'a mut fastrand::Rng),
    /// Given the tier and its (channel, weight) items, returns the index of the item to try
    /// first (the caller keeps the rotation state: smooth weighted round robin).
    RoundRobin(FirstPick<'a>),
    /// Heaviest first: the expected order, for `route/explain`.
    Heaviest,
    /// By a strategy over measured signals; the rest of the tier in weighted order.
    Measured(Measured<'a>),
}

/// A candidate with what ordering it reads: its tier, its weight × health, health's factor,
/// and (under a measured strategy) its signal, read once per plan.
pub(crate) struct Entry {
    tier: Tier,
    weight: f64,
    factor: f64,
    signal: Signal,
    cand: Candidate,
}

/// What the request asks of its plan beyond its key's view.
#[derive(Debug, Clone, Copy, Default)]
pub struct Prefer<'a> {
    /// The channel the request's session (or the response it continues) is bound to: tried
    /// first where it is a candidate and takes bindings.
    pub bound: Option<&'a str>,
    /// The only channel that may serve (a continuation of a response only it keeps).
    pub only: Option<&'a str>,
    /// Only channels that count tokens in this protocol (a count forwarded upstream).
    pub counting: Option<crate::protocol::Protocol>,
}

/// The ordered attempt plan for a model as `key` sees it: only channels in the key's groups;
/// tiers by the key's group preference, then ascending priority; inside a tier the first try is
/// drawn with P = w·h / Σ w·h (h = the channel's health factor), the rest follow in weighted
/// order (sampling without replacement). Channels whose health says skip are left out and
/// listed. `standing` is the health view: it is read, never written. Then `prefer`: only the
/// one channel it allows, its bound channel first.
pub fn plan(
    snap: &Snapshot,
    key: &GatewayKey,
    model: &str,
    standing: &dyn Fn(usize) -> Standing,
    pick: Pick<'_>,
    prefer: Prefer<'_>,
) -> Result<Plan, RouteError> {
    let mut plan = ordered(snap, key, model, standing, pick)?;
    if let Some(only) = prefer.only {
        let named = |i: usize| snap.channels.get(i).is_some_and(|c| &*c.name == only);
        plan.candidates.retain(|c| named(c.channel));
        plan.skipped.retain(|s| named(s.channel));
        plan.why = Some(Why::Alone);
    }
    if let Some(p) = prefer.counting {
        let counts = |i: usize| {
            snap.channels
                .get(i)
                .is_some_and(|c| c.upstream.counts_in() == Some(p))
        };
        plan.candidates.retain(|c| counts(c.channel));
        plan.skipped.retain(|s| counts(s.channel));
    }
    if let Some(i) = prefer.bound.and_then(|b| {
        snap.channels
            .iter()
            .position(|c| &*c.name == b && c.affinity)
    }) {
        bind_first(&mut plan, i);
    }
    if plan.candidates.is_empty() {
        plan.why = None;
    }
    Ok(plan)
}

fn ordered(
    snap: &Snapshot,
    key: &GatewayKey,
    model: &str,
    standing: &dyn Fn(usize) -> Standing,
    pick: Pick<'_>,
) -> Result<Plan, RouteError> {
    let routes = snap
        .models
        .get(model)
        .ok_or_else(|| RouteError::ModelNotFound(model.to_string()))?;
    let mut eligible: Vec<Entry> = Vec::with_capacity(routes.len());
    let mut skipped = Vec::new();
    let mut excluded = Vec::new();
    let mut enabled = 0;
    let mut visible = 0;
    for r in routes {
        let Some(c) = snap.channels.get(r.channel) else {
            continue;
        };
        let Some(rank) = key.group_rank(c) else {
            excluded.push((r.channel, Excluded::NotInKeyGroups));
            continue;
        };
        visible += 1;
        if !c.enabled {
            excluded.push((r.channel, Excluded::Disabled));
            continue;
        }
        enabled += 1;
        let st = standing(r.channel);
        if let Some(reason) = st.skip {
            skipped.push(Skipped {
                channel: r.channel,
                reason,
                retry_in: st.retry_in,
            });
            continue;
        }
        eligible.push(Entry {
            tier: (rank, c.priority),
            weight: f64::from(c.weight) * st.factor,
            factor: st.factor,
            signal: Signal::default(),
            cand: Candidate {
                channel: r.channel,
                upstream_model: r.upstream_model.clone(),
                half_open: st.half_open,
                price: r.price.clone(),
            },
        });
    }
    if visible == 0 {
        return Err(RouteError::ModelNotFound(model.to_string()));
    }
    if enabled == 0 {
        return Err(RouteError::NoAvailableChannel(model.to_string()));
    }
    // Stable sort keeps config order inside a tier before the weighted shuffle.
    eligible.sort_by_key(|e| e.tier);
    let mut pick = pick;
    let mut why = None;
    let mut start = 0;
    while start < eligible.len() {
        let t = eligible[start].tier;
        let end = eligible[start..]
            .iter()
            .position(|e| e.tier != t)
            .map_or(eligible.len(), |k| start + k);
        let tier = &mut eligible[start..end];
        let w = order_tier(&mut pick, t, tier);
        why = why.or(Some(w));
        start = end;
    }
    Ok(Plan {
        candidates: eligible.into_iter().map(|e| e.cand).collect(),
        skipped,
        excluded,
        why,
    })
}

/// Orders one tier as `pick` says; returns why its first entry is first.
fn order_tier(pick: &mut Pick<'_>, t: Tier, tier: &mut [Entry]) -> Why {
    match pick {
        Pick::Random(rng) => {
            weighted_order(tier, rng);
            if tier.len() == 1 {
                Why::Alone
            } else {
                Why::Drawn
            }
        }
        Pick::RoundRobin(first) => {
            let items: Vec<(usize, f64)> =
                tier.iter().map(|e| (e.cand.channel, e.weight)).collect();
            let i = first(t, &items).min(tier.len() - 1);
            tier.swap(0, i);
            // The rest in a deterministic order too: heaviest first.
            tier[1..].sort_by(|a, b| b.weight.total_cmp(&a.weight));
            if tier.len() == 1 {
                Why::Alone
            } else {
                Why::RoundRobin
            }
        }
        Pick::Heaviest => {
            tier.sort_by(|a, b| b.weight.total_cmp(&a.weight));
            if tier.len() == 1 {
                Why::Alone
            } else {
                Why::Heaviest
            }
        }
        Pick::Measured(m) => {
            for e in tier.iter_mut() {
                e.signal = (m.signal)(e.cand.channel);
            }
            let (i, why) = strategy::first(m, tier);
            tier.swap(0, i);
            // The rest in weighted order, then (but for `p2c`) by the strategy's own figure:
            // a failover goes to the next fastest, least busy or cheapest.
            weighted_order(&mut tier[1..], m.rng);
            strategy::order_rest(m, &mut tier[1..]);
            why
        }
    }
}

/// Puts a session's bound channel first, bypassing the normal order, if it is a candidate
/// (not when its health says skip: the plan goes on without it).
fn bind_first(plan: &mut Plan, bound: usize) {
    if let Some(i) = plan.candidates.iter().position(|c| c.channel == bound) {
        let c = plan.candidates.remove(i);
        plan.candidates.insert(0, c);
        plan.why = Some(Why::Bound);
    }
}

/// Reorders a tier in place: each position is drawn from the remaining entries by weight.
fn weighted_order(tier: &mut [Entry], rng: &mut fastrand::Rng) {
    for i in 0..tier.len().saturating_sub(1) {
        let total: f64 = tier[i..].iter().map(|e| e.weight).sum();
        if total <= 0.0 {
            return;
        }
        let mut draw = rng.f64() * total;
        let mut pick = tier.len() - 1;
        for (j, e) in tier.iter().enumerate().skip(i) {
            if draw < e.weight {
                pick = j;
                break;
            }
            draw -= e.weight;
        }
        tier.swap(i, pick);
    }
}

#[cfg(test)]
mod strategy_tests;
#[cfg(test)]
mod tests;
