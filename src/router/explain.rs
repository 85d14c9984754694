//! The plan for one model as `route/explain` shows it.

use std::sync::Arc;

use super::{Estimate, Excluded, Measured, Pick, Prefer, RouteError, Signal, Strategy, plan};
use crate::config::{GatewayKey, Snapshot};
use crate::health::Standing;

/// One candidate channel as `route/explain` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CandidateView {
    pub channel: Arc<str>,
    pub upstream_model: Arc<str>,
    pub group_rank: usize,
    pub tier: u32,
    pub weight: u32,
    pub health_score: f64,
    pub circuit: &'static str,
    /// The chance a weighted draw tries this channel first in its tier (w·h / Σ w·h).
    pub first_try_share: f64,
    /// What a measured strategy reads of it (absent under `weighted`): the expected latency
    /// (to the first token for a stream), requests in flight, the prompt cache's recent share.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cached_share: Option<f64>,
}

/// The channel a measured strategy would try first now, and why.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FirstTry {
    pub channel: Arc<str>,
    /// `{strategy}.{why}`, as the request log's `route_reason`.
    pub reason: String,
}

/// A channel left out of the plan, and why.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ExcludedView {
    pub channel: Arc<str>,
    pub reason: &'static str,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ModelView {
    pub strategy: &'static str,
    /// Under a measured strategy: its choice now (`latency` without exploring).
    pub first_try: Option<FirstTry>,
    pub candidates: Vec<CandidateView>,
    pub excluded: Vec<ExcludedView>,
}

/// The plan for one model as the attempt loop would read it, in its expected order (heaviest
/// first inside a tier; under a measured strategy, its choice first), with health scores,
/// circuit states, what the strategy reads, and the reason for every exclusion.
pub fn explain(
    snap: &Snapshot,
    key: &GatewayKey,
    model: &str,
    standing: &dyn Fn(usize) -> Standing,
    signal: &dyn Fn(usize) -> Signal,
    estimate: Estimate,
) -> Result<ModelView, RouteError> {
    let strategy = snap.routing.strategy(model);
    let mut plan = plan(
        snap,
        key,
        model,
        standing,
        Pick::Heaviest,
        Prefer::default(),
    )?;
    let first_try = (strategy != Strategy::Weighted)
        .then(|| first_try(snap, key, model, standing, signal, estimate, strategy))
        .transpose()?
        .flatten();
    if let Some((i, _)) = &first_try
        && let Some(at) = plan.candidates.iter().position(|c| c.channel == *i)
    {
        let c = plan.candidates.remove(at);
        plan.candidates.insert(0, c);
    }
    let measured = strategy != Strategy::Weighted;
    let effective = |i: usize| {
        let c = &snap.channels[i];
        f64::from(c.weight) * standing(i).factor
    };
    let tier_of = |i: usize| {
        let c = &snap.channels[i];
        (key.group_rank(c).unwrap_or(0), c.priority)
    };
    let candidates = plan
        .candidates
        .iter()
        .map(|cand| {
            let c = &snap.channels[cand.channel];
            let st = standing(cand.channel);
            let tier = tier_of(cand.channel);
            let total: f64 = plan
                .candidates
                .iter()
                .filter(|o| tier_of(o.channel) == tier)
                .map(|o| effective(o.channel))
                .sum();
            CandidateView {
                channel: c.name.clone(),
                upstream_model: cand.upstream_model.clone(),
                group_rank: tier.0,
                tier: c.priority,
                weight: c.weight,
                health_score: (st.score * 10.0).round() / 10.0,
                circuit: if st.half_open { "half_open" } else { "closed" },
                first_try_share: if total > 0.0 {
                    (effective(cand.channel) / total * 1000.0).round() / 1000.0
                } else {
                    0.0
                },
                latency_ms: measured
                    .then(|| signal(cand.channel).latency)
                    .flatten()
                    .map(|s| (s * 10_000.0).round() / 10.0),
                in_flight: measured.then(|| signal(cand.channel).in_flight),
                cached_share: measured
                    .then(|| (signal(cand.channel).cached_share * 1000.0).round() / 1000.0),
            }
        })
        .collect();
    // Channels of other groups stay invisible to the key, as they are everywhere else.
    let mut excluded: Vec<ExcludedView> = plan
        .excluded
        .iter()
        .filter(|(_, why)| *why == Excluded::Disabled)
        .map(|(i, _)| ExcludedView {
            channel: snap.channels[*i].name.clone(),
            reason: "disabled",
        })
        .collect();
    excluded.extend(plan.skipped.iter().map(|s| ExcludedView {
        channel: snap.channels[s.channel].name.clone(),
        reason: s.reason.as_str(),
    }));
    Ok(ModelView {
        strategy: strategy.as_str(),
        first_try: first_try.map(|(i, reason)| FirstTry {
            channel: snap.channels[i].name.clone(),
            reason,
        }),
        candidates,
        excluded,
    })
}

/// The channel `strategy` would try first now (without exploring; ties and `p2c`'s draw
/// seeded, so the answer is stable), and its reason.
fn first_try(
    snap: &Snapshot,
    key: &GatewayKey,
    model: &str,
    standing: &dyn Fn(usize) -> Standing,
    signal: &dyn Fn(usize) -> Signal,
    estimate: Estimate,
    strategy: Strategy,
) -> Result<Option<(usize, String)>, RouteError> {
    let mut rng = fastrand::Rng::with_seed(0);
    let p = plan(
        snap,
        key,
        model,
        standing,
        Pick::Measured(Measured {
            strategy,
            signal,
            estimate,
            exploration: 0.0,
            rng: &mut rng,
        }),
        Prefer::default(),
    )?;
    Ok(p.candidates
        .first()
        .zip(p.why)
        .map(|(c, why)| (c.channel, super::reason(strategy, why).to_string())))
}
