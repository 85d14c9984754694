//! Candidate selection: pure functions over the snapshot. No I/O, no clock, no global RNG: the
//! caller passes the random source, so tests seed it and `route/explain` can show a plan without
//! calling anyone.

use std::sync::Arc;
use std::time::Duration;

use crate::config::Snapshot;
use crate::health::{Skip, Standing};

/// One place to try: a channel (index into the snapshot) and the upstream's name for the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub channel: usize,
    pub upstream_model: Arc<str>,
    /// This attempt would be the channel's half-open trial.
    pub half_open: bool,
}

/// A channel left out of the plan by its health, and why.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Skipped {
    pub channel: usize,
    pub reason: Skip,
    /// For a rate-limit cooldown: when it ends.
    pub retry_in: Option<Duration>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub candidates: Vec<Candidate>,
    pub skipped: Vec<Skipped>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("the model `{0}` does not exist or you do not have access to it")]
    ModelNotFound(String),
    #[error("no channel is available for the model `{0}`")]
    NoAvailableChannel(String),
}

/// The ordered attempt plan for a model: tiers by ascending priority; inside a tier the first
/// try is drawn with P = w·h / Σ w·h (h = the channel's health factor), the rest follow in
/// weighted order (sampling without replacement). Channels whose health says skip are left out
/// and listed. `standing` is the health view: it is read, never written.
/// Given a tier's priority and its (channel, weight) items, the index of the item to try first.
pub type FirstPick<'a> = &'a dyn Fn(u32, &[(usize, f64)]) -> usize;

/// How the first try inside a tier is drawn.
pub enum Pick<'a> {
    /// P = w·h / Σ w·h.
    Random(&'a mut fastrand::Rng),
    /// Smooth weighted round robin: given the tier's priority and its (channel, weight) items,
    /// returns the index of the item to try first (the caller keeps the rotation state).
    RoundRobin(FirstPick<'a>),
}

pub fn plan(
    snap: &Snapshot,
    model: &str,
    standing: &dyn Fn(usize) -> Standing,
    pick: Pick<'_>,
) -> Result<Plan, RouteError> {
    let routes = snap
        .models
        .get(model)
        .ok_or_else(|| RouteError::ModelNotFound(model.to_string()))?;
    let mut eligible: Vec<(u32, f64, Candidate)> = Vec::with_capacity(routes.len());
    let mut skipped = Vec::new();
    let mut enabled = 0;
    for r in routes {
        let Some(c) = snap.channels.get(r.channel) else {
            continue;
        };
        if !c.enabled {
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
        eligible.push((
            c.priority,
            f64::from(c.weight) * st.factor,
            Candidate {
                channel: r.channel,
                upstream_model: r.upstream_model.clone(),
                half_open: st.half_open,
            },
        ));
    }
    if enabled == 0 {
        return Err(RouteError::NoAvailableChannel(model.to_string()));
    }
    // Stable sort keeps config order inside a tier before the weighted shuffle.
    eligible.sort_by_key(|(prio, _, _)| *prio);
    let mut pick = pick;
    let mut start = 0;
    while start < eligible.len() {
        let prio = eligible[start].0;
        let end = eligible[start..]
            .iter()
            .position(|(p, _, _)| *p != prio)
            .map_or(eligible.len(), |k| start + k);
        let tier = &mut eligible[start..end];
        match &mut pick {
            Pick::Random(rng) => weighted_order(tier, rng),
            Pick::RoundRobin(first) => {
                let items: Vec<(usize, f64)> =
                    tier.iter().map(|(_, w, c)| (c.channel, *w)).collect();
                let i = first(prio, &items).min(tier.len() - 1);
                tier.swap(0, i);
                // The rest in a deterministic order too: heaviest first.
                tier[1..].sort_by(|a, b| b.1.total_cmp(&a.1));
            }
        }
        start = end;
    }
    Ok(Plan {
        candidates: eligible.into_iter().map(|(_, _, c)| c).collect(),
        skipped,
    })
}

/// Reorders a tier in place: each position is drawn from the remaining entries by weight.
fn weighted_order<T>(tier: &mut [(u32, f64, T)], rng: &mut fastrand::Rng) {
    for i in 0..tier.len().saturating_sub(1) {
        let total: f64 = tier[i..].iter().map(|(_, w, _)| *w).sum();
        if total <= 0.0 {
            return;
        }
        let mut draw = rng.f64() * total;
        let mut pick = tier.len() - 1;
        for (j, (_, w, _)) in tier.iter().enumerate().skip(i) {
            if draw < *w {
                pick = j;
                break;
            }
            draw -= *w;
        }
        tier.swap(i, pick);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_str;
    use crate::provider::HttpClients;

    fn snap(text: &str) -> Snapshot {
        load_str(text, "t.toml", &|_| None, &HttpClients::default()).unwrap()
    }

    fn channel(name: &str, prio: u32, weight: u32, extra: &str) -> String {
        format!(
            "[[channels]]\nname = \"{name}\"\nprovider = \"mock\"\nmodels = [\"m\"]\npriority = {prio}\nweight = {weight}\n{extra}\n"
        )
    }

    fn names(s: &Snapshot, plan: &Plan) -> Vec<String> {
        plan.candidates
            .iter()
            .map(|c| s.channels[c.channel].name.to_string())
            .collect()
    }

    fn healthy(_: usize) -> Standing {
        Standing::healthy()
    }

    #[test]
    fn tiers_are_exhausted_in_priority_order() {
        let s = snap(
            &[
                channel("low", 3, 1, ""),
                channel("a", 1, 1, ""),
                channel("mid", 2, 1, ""),
                channel("b", 1, 1, ""),
            ]
            .concat(),
        );
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..50 {
            let p = names(
                &s,
                &plan(&s, "m", &healthy, Pick::Random(&mut rng)).unwrap(),
            );
            assert_eq!(p.len(), 4);
            let mut first_two = p[..2].to_vec();
            first_two.sort();
            assert_eq!(first_two, ["a", "b"]);
            assert_eq!(&p[2..], ["mid", "low"]);
        }
    }

    #[test]
    fn weighted_first_try_matches_weights_within_tolerance() {
        let s = snap(
            &[
                channel("a", 1, 1, ""),
                channel("b", 1, 3, ""),
                channel("c", 1, 6, ""),
            ]
            .concat(),
        );
        let mut rng = fastrand::Rng::with_seed(42);
        let n = 20_000;
        let mut counts = std::collections::HashMap::new();
        for _ in 0..n {
            let p = plan(&s, "m", &healthy, Pick::Random(&mut rng)).unwrap();
            *counts
                .entry(s.channels[p.candidates[0].channel].name.to_string())
                .or_insert(0u32) += 1;
        }
        for (name, w) in [("a", 0.1), ("b", 0.3), ("c", 0.6)] {
            let share = f64::from(counts[name]) / f64::from(n);
            assert!((share - w).abs() < 0.02, "{name}: {share} vs {w}");
        }
    }

    #[test]
    fn whole_tier_is_tried_once_each() {
        let s = snap(
            &[
                channel("a", 1, 5, ""),
                channel("b", 1, 1, ""),
                channel("c", 1, 1, ""),
            ]
            .concat(),
        );
        let mut rng = fastrand::Rng::with_seed(1);
        for _ in 0..100 {
            let mut p = names(
                &s,
                &plan(&s, "m", &healthy, Pick::Random(&mut rng)).unwrap(),
            );
            p.sort();
            assert_eq!(p, ["a", "b", "c"]);
        }
    }

    #[test]
    fn unknown_model_and_disabled_channels() {
        let s = snap(&[channel("a", 1, 1, "enabled = false")].concat());
        let mut rng = fastrand::Rng::with_seed(1);
        assert_eq!(
            plan(&s, "nope", &healthy, Pick::Random(&mut rng)),
            Err(RouteError::ModelNotFound("nope".into()))
        );
        assert_eq!(
            plan(&s, "m", &healthy, Pick::Random(&mut rng)),
            Err(RouteError::NoAvailableChannel("m".into()))
        );
    }

    #[test]
    fn health_scales_weights_and_skips_are_listed() {
        let s = snap(
            &[
                channel("a", 1, 1, ""),
                channel("b", 1, 1, ""),
                channel("c", 1, 1, ""),
            ]
            .concat(),
        );
        let mut rng = fastrand::Rng::with_seed(9);
        // a at full health, b at 25, c skipped (circuit open).
        let view = |i: usize| match i {
            0 => Standing::healthy(),
            1 => Standing {
                score: 25.0,
                factor: 0.25,
                ..Standing::healthy()
            },
            _ => Standing {
                skip: Some(Skip::CircuitOpen),
                ..Standing::healthy()
            },
        };
        let n = 20_000;
        let mut first_a = 0;
        for _ in 0..n {
            let p = plan(&s, "m", &view, Pick::Random(&mut rng)).unwrap();
            assert_eq!(p.candidates.len(), 2);
            assert_eq!(p.skipped.len(), 1);
            assert_eq!(p.skipped[0].reason, Skip::CircuitOpen);
            if p.candidates[0].channel == 0 {
                first_a += 1;
            }
        }
        // P(a first) = 1 / (1 + 0.25) = 0.8.
        let share = f64::from(first_a) / f64::from(n);
        assert!((share - 0.8).abs() < 0.02, "{share}");
    }
}
