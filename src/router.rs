//! Candidate selection: pure functions over the snapshot. No I/O, no clock, no global RNG: the
//! caller passes the random source, so tests seed it and `route/explain` can show a plan without
//! calling anyone.

use std::sync::Arc;

use crate::config::Snapshot;

/// One place to try: a channel (index into the snapshot) and the upstream's name for the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub channel: usize,
    pub upstream_model: Arc<str>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("the model `{0}` does not exist or you do not have access to it")]
    ModelNotFound(String),
    #[error("no channel is available for the model `{0}`")]
    NoAvailableChannel(String),
}

/// The ordered attempt plan for a model: tiers by ascending priority; inside a tier the first
/// try is drawn with P = w/Σw, the rest follow in weighted order (sampling without replacement).
pub fn plan(
    snap: &Snapshot,
    model: &str,
    rng: &mut fastrand::Rng,
) -> Result<Vec<Candidate>, RouteError> {
    let routes = snap
        .models
        .get(model)
        .ok_or_else(|| RouteError::ModelNotFound(model.to_string()))?;
    let mut eligible: Vec<(u32, u32, Candidate)> = routes
        .iter()
        .filter_map(|r| {
            let c = snap.channels.get(r.channel)?;
            c.enabled.then(|| {
                (
                    c.priority,
                    c.weight,
                    Candidate {
                        channel: r.channel,
                        upstream_model: r.upstream_model.clone(),
                    },
                )
            })
        })
        .collect();
    if eligible.is_empty() {
        return Err(RouteError::NoAvailableChannel(model.to_string()));
    }
    // Stable sort keeps config order inside a tier before the weighted shuffle.
    eligible.sort_by_key(|(prio, _, _)| *prio);
    let mut out = Vec::with_capacity(eligible.len());
    let mut start = 0;
    while start < eligible.len() {
        let prio = eligible[start].0;
        let end = eligible[start..]
            .iter()
            .position(|(p, _, _)| *p != prio)
            .map_or(eligible.len(), |k| start + k);
        weighted_order(&mut eligible[start..end], rng);
        start = end;
    }
    out.extend(eligible.into_iter().map(|(_, _, c)| c));
    Ok(out)
}

/// Reorders a tier in place: each position is drawn from the remaining entries by weight.
fn weighted_order<T>(tier: &mut [(u32, u32, T)], rng: &mut fastrand::Rng) {
    for i in 0..tier.len().saturating_sub(1) {
        let total: u64 = tier[i..].iter().map(|(_, w, _)| u64::from(*w)).sum();
        if total == 0 {
            return;
        }
        let mut draw = rng.u64(0..total);
        let mut pick = i;
        for (j, (_, w, _)) in tier.iter().enumerate().skip(i) {
            let w = u64::from(*w);
            if draw < w {
                pick = j;
                break;
            }
            draw -= w;
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

    fn names(s: &Snapshot, plan: &[Candidate]) -> Vec<String> {
        plan.iter()
            .map(|c| s.channels[c.channel].name.to_string())
            .collect()
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
            let p = names(&s, &plan(&s, "m", &mut rng).unwrap());
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
            let p = plan(&s, "m", &mut rng).unwrap();
            *counts
                .entry(s.channels[p[0].channel].name.to_string())
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
            let mut p = names(&s, &plan(&s, "m", &mut rng).unwrap());
            p.sort();
            assert_eq!(p, ["a", "b", "c"]);
        }
    }

    #[test]
    fn unknown_model_and_disabled_channels() {
        let s = snap(&[channel("a", 1, 1, "enabled = false")].concat());
        let mut rng = fastrand::Rng::with_seed(1);
        assert_eq!(
            plan(&s, "nope", &mut rng),
            Err(RouteError::ModelNotFound("nope".into()))
        );
        assert_eq!(
            plan(&s, "m", &mut rng),
            Err(RouteError::NoAvailableChannel("m".into()))
        );
    }
}
