//! How a router decides from its scores, and the levels it decides by. Pure.
//!
//! Each instance has a threshold and the router a margin, fixed in the config or `"auto"`:
//! derived, when the examples are embedded, from how the examples score against each other.
//! For every example, leave it out and ask what a prompt like it would score: against its own
//! instance's nearest other example (`same`), and against the nearest example of any other
//! instance (`other`). An instance's threshold is the midpoint of its examples' mean `same`
//! and mean `other`, lowered by [`PROMPT_GAP`] because a real prompt is further from the
//! examples than they are from each other; the margin is a share of the typical lead of
//! `same` over `other`. So the levels follow the embedder in use: a small local model whose
//! related sentences score 0.3 gets thresholds near 0.2, a large one near 0.6.
//!
//! The rule: the best instance wins when it clears its threshold, or when it leads the
//! runner-up by the margin (a clear lead wins below any level); otherwise the catchall serves.
//! An instance within the margin of the winner is too close to call: `failover = "ranked"`
//! tries it next. The catchall, given examples, is scored like any instance and can win. A
//! threshold written as a number keeps APISIX's rule (level only) unless a margin is written
//! too.

use std::sync::Arc;

use crate::config::{Level, RouterFailover, SemanticRouter};

use super::{Decision, dot};

/// The share of half the examples' mean `same` taken off the midpoint, because a prompt is
/// often further from the examples than they are from each other: with MiniLM on
/// `examples/semantic.toml` (as its examples were chosen), the prompts' median score for their
/// own instance was 0.85–1.25 × that instance's mean `same`, with a long tail below; the level
/// must sit under most of them.
const PROMPT_GAP: f32 = 0.35;
/// The margin as a share of the examples' median lead of `same` over `other`, and its bounds.
const MARGIN_SHARE: f32 = 0.25;
const MARGIN_MIN: f32 = 0.02;
const MARGIN_MAX: f32 = 0.10;
/// When the examples say nothing (one instance, one example each): these.
const FALLBACK_THRESHOLD: f32 = 0.5;
const FALLBACK_MARGIN: f32 = 0.05;

/// The levels a router decides by, once its examples are embedded.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// Per instance, by index: the similarity it must reach (`INFINITY` without examples).
    pub thresholds: Vec<f32>,
    /// Per instance: derived from the examples (`"auto"`), or fixed in the config.
    pub derived: Vec<bool>,
    pub margin: f32,
    pub margin_derived: bool,
}

/// Every example's leave-one-out similarities: (instance, same, other); `same` is `None` for
/// an instance's only example.
fn spreads(refs: &[(usize, Vec<Vec<f32>>)]) -> Vec<(usize, Option<f32>, Option<f32>)> {
    let mut out = Vec::new();
    for (i, vectors) in refs {
        for (k, v) in vectors.iter().enumerate() {
            let same = vectors
                .iter()
                .enumerate()
                .filter(|(m, _)| *m != k)
                .map(|(_, w)| dot(v, w))
                .reduce(f32::max);
            let other = refs
                .iter()
                .filter(|(j, _)| j != i)
                .flat_map(|(_, ws)| ws.iter().map(|w| dot(v, w)))
                .reduce(f32::max);
            out.push((*i, same, other));
        }
    }
    out
}

fn mean(v: impl Iterator<Item = f32>) -> Option<f32> {
    let (sum, n) = v.fold((0.0, 0u32), |(s, n), x| (s + x, n + 1));
    (n > 0).then(|| sum / n as f32)
}

fn median(mut v: Vec<f32>) -> Option<f32> {
    v.sort_by(f32::total_cmp);
    v.get(v.len() / 2).copied()
}

/// The rule for `router` whose examples embedded to `refs` (instance index, unit vectors).
pub fn calibrate(router: &SemanticRouter, refs: &[(usize, Vec<Vec<f32>>)]) -> Rule {
    let spreads = spreads(refs);
    let n = router.instances.len();
    let mut thresholds = vec![f32::INFINITY; n];
    let mut derived = vec![false; n];
    for (i, inst) in router.instances.iter().enumerate() {
        if !refs.iter().any(|(j, _)| *j == i) {
            continue;
        }
        let level = inst.threshold.unwrap_or(router.threshold);
        thresholds[i] = match level {
            Level::Fixed(t) => t,
            Level::Auto => {
                derived[i] = true;
                auto_threshold(&spreads, i)
            }
        };
    }
    let (margin, margin_derived) = match router.margin {
        Level::Fixed(m) => (m, false),
        Level::Auto => {
            let leads: Vec<f32> = spreads
                .iter()
                .filter_map(|(_, s, o)| Some(s.as_ref()? - o.as_ref()?))
                .collect();
            let m = median(leads).map_or(FALLBACK_MARGIN, |l| {
                (l * MARGIN_SHARE).clamp(MARGIN_MIN, MARGIN_MAX)
            });
            (m, true)
        }
    };
    Rule {
        thresholds,
        derived,
        margin,
        margin_derived,
    }
}

/// Instance `i`'s derived threshold: between what its examples score against each other and
/// against the others', lowered for prompts.
fn auto_threshold(spreads: &[(usize, Option<f32>, Option<f32>)], i: usize) -> f32 {
    let own: Vec<_> = spreads.iter().filter(|(j, _, _)| *j == i).collect();
    let same = mean(own.iter().filter_map(|(_, s, _)| *s));
    let other = mean(own.iter().filter_map(|(_, _, o)| *o));
    let t = match (same, other) {
        (Some(s), Some(o)) => (s + o) / 2.0 - PROMPT_GAP * s.max(0.0) / 2.0,
        (Some(s), None) => s * (1.0 - PROMPT_GAP),
        (None, Some(o)) => o,
        (None, None) => FALLBACK_THRESHOLD,
    };
    t.clamp(-1.0, 1.0)
}

impl Rule {
    /// The margin instance `i` is judged with: the router's when `i`'s threshold is derived or
    /// the margin is set in the config; none for a fixed threshold under an `"auto"` margin, so
    /// that a config written with numbers decides exactly as it did (APISIX's rule).
    fn margin_for(&self, i: usize) -> Option<f32> {
        (self.derived.get(i).copied().unwrap_or(false) || !self.margin_derived)
            .then_some(self.margin)
    }

    fn threshold(&self, i: usize) -> f32 {
        self.thresholds.get(i).copied().unwrap_or(f32::INFINITY)
    }

    /// The instance that wins `scores` (instance index, similarity; highest first): the best,
    /// when it clears its threshold or leads the runner-up by the margin; `None` when the
    /// catchall serves for want of a winner. What `semantic eval` counts.
    pub fn winner(&self, scores: &[(usize, f32)]) -> Option<usize> {
        let &(best, top) = scores.first()?;
        let runner = scores.get(1).map_or(f32::NEG_INFINITY, |(_, s)| *s);
        let leads = self.margin_for(best).is_some_and(|m| top - runner >= m);
        (top >= self.threshold(best) || leads).then_some(best)
    }
}

/// The decision from `scores` (instance index, similarity; highest first) under `rule`.
pub fn decide(router: &SemanticRouter, rule: &Arc<Rule>, scores: Vec<(usize, f32)>) -> Decision {
    let named: Vec<(Arc<str>, f32)> = scores
        .iter()
        .map(|(i, s)| (router.instances[*i].name.clone(), *s))
        .collect();
    let Some(best) = rule.winner(&scores) else {
        return fallback(router, named, Some(rule.clone()));
    };
    let top = scores.first().map_or(f32::NEG_INFINITY, |(_, s)| *s);
    let margin = rule.margin_for(best);
    let mut order = vec![best];
    match router.failover {
        RouterFailover::Ranked => {
            // Clearing its own level, or too close to the winner to call: tried next, by score.
            let close = |s: f32| margin.is_some_and(|m| top - s < m);
            order.extend(
                scores
                    .iter()
                    .skip(1)
                    .filter(|(i, s)| *s >= rule.threshold(*i) || close(*s))
                    .map(|(i, _)| *i),
            );
            order.push(router.catchall);
        }
        RouterFailover::Catchall => order.push(router.catchall),
        RouterFailover::None => {}
    }
    let mut models: Vec<Arc<str>> = Vec::new();
    for i in order {
        let m = &router.instances[i].model;
        if !models.contains(m) {
            models.push(m.clone());
        }
    }
    Decision {
        router: router.model.clone(),
        models,
        winner: Some(router.instances[best].name.clone()),
        scores: named,
        kept: false,
        rule: Some(rule.clone()),
    }
}

/// The catchall alone, with the scores that put it there.
pub fn fallback(
    router: &SemanticRouter,
    scores: Vec<(Arc<str>, f32)>,
    rule: Option<Arc<Rule>>,
) -> Decision {
    Decision {
        router: router.model.clone(),
        models: vec![router.instances[router.catchall].model.clone()],
        winner: None,
        scores,
        kept: false,
        rule,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_str;
    use crate::provider::HttpClients;

    /// Three instances, the catchall (`chat`) with examples of its own.
    const CONFIG: &str = r#"
        [[channels]]
        name = "c"
        provider = "mock"
        models = ["big", "small", "cheap"]
        [[routers]]
        model = "auto"
        ROUTER
        [[routers.instances]]
        name = "hard"
        model = "big"
        examples = ["a", "b"]
        [[routers.instances]]
        name = "easy"
        model = "small"
        examples = ["c", "d"]
        [[routers.instances]]
        name = "chat"
        model = "cheap"
        catchall = true
        examples = ["e"]
    "#;

    fn router(extra: &str) -> crate::config::Snapshot {
        let text = CONFIG.replace("ROUTER", extra);
        load_str(&text, "t.toml", &|_| None, &HttpClients::default()).unwrap()
    }

    fn unit(x: f32, y: f32) -> Vec<f32> {
        let n = (x * x + y * y).sqrt();
        vec![x / n, y / n]
    }

    /// Two tight clusters far apart, and the catchall's example between them.
    fn refs() -> Vec<(usize, Vec<Vec<f32>>)> {
        vec![
            (0, vec![unit(1.0, 0.1), unit(1.0, 0.3)]),
            (1, vec![unit(0.1, 1.0), unit(0.3, 1.0)]),
            (2, vec![unit(1.0, 1.0)]),
        ]
    }

    #[test]
    fn derived_thresholds_sit_below_the_examples_own_similarity_and_follow_it() {
        let snap = router("");
        let r = &snap.routers[0];
        let rule = calibrate(r, &refs());
        let same = dot(&refs()[0].1[0], &refs()[0].1[1]);
        let other = dot(&refs()[0].1[1], &refs()[2].1[0]);
        assert!(rule.derived[0] && rule.margin_derived);
        assert!(
            rule.thresholds[0] < same && rule.thresholds[0] > other * 0.5,
            "{rule:?}"
        );
        assert!((MARGIN_MIN..=MARGIN_MAX).contains(&rule.margin));
        // Written as numbers, they are taken as written.
        let fixed = calibrate(&router("threshold = 0.7\nmargin = 0.2").routers[0], &refs());
        assert_eq!(fixed.thresholds[..], [0.7, 0.7, 0.7]);
        assert!(!fixed.derived[0] && !fixed.margin_derived && fixed.margin == 0.2);
        // An instance without examples never clears a level.
        let none = calibrate(r, &refs()[..2]);
        assert_eq!(none.thresholds[2], f32::INFINITY);
    }

    fn rule(threshold: f32, derived: bool, margin: f32, margin_derived: bool) -> Arc<Rule> {
        Arc::new(Rule {
            thresholds: vec![threshold; 3],
            derived: vec![derived; 3],
            margin,
            margin_derived,
        })
    }

    #[test]
    fn a_clear_lead_wins_below_the_level_and_a_close_call_is_tried_next() {
        let snap = router("");
        let r = &snap.routers[0];
        let auto = rule(0.5, true, 0.05, true);
        // Below 0.5, but 0.1 ahead: hard wins.
        let d = decide(r, &auto, vec![(0, 0.3), (1, 0.2), (2, 0.1)]);
        assert_eq!(d.winner.as_deref(), Some("hard"));
        assert_eq!(d.models, [Arc::from("big"), Arc::from("cheap")]);
        // Below 0.5 and within the margin: too close to call, and below the level: the catchall.
        let d = decide(r, &auto, vec![(0, 0.3), (1, 0.28), (2, 0.1)]);
        assert_eq!((d.winner, &d.models[..]), (None, &[Arc::from("cheap")][..]));
        // Above the level and within the margin of the runner-up: ranked tries both.
        let d = decide(r, &auto, vec![(0, 0.6), (1, 0.57), (2, 0.1)]);
        assert_eq!(
            d.models,
            [Arc::from("big"), Arc::from("small"), Arc::from("cheap")]
        );
        // The catchall's examples let it win by similarity.
        let d = decide(r, &auto, vec![(2, 0.7), (0, 0.2)]);
        assert_eq!(d.winner.as_deref(), Some("chat"));
        assert_eq!(d.models, [Arc::from("cheap")]);
        assert!(d.rule.is_some());
    }

    #[test]
    fn numbers_without_a_margin_keep_apisix_rule_exactly() {
        let snap = router("");
        let r = &snap.routers[0];
        // Fixed thresholds, the margin left "auto": the level alone decides.
        let apisix = rule(0.5, false, 0.05, true);
        let d = decide(r, &apisix, vec![(0, 0.45), (1, 0.1)]);
        assert_eq!(d.winner, None, "a lead does not win under a written level");
        let d = decide(r, &apisix, vec![(0, 0.6), (1, 0.58)]);
        assert_eq!(
            d.models,
            [Arc::from("big"), Arc::from("small"), Arc::from("cheap")]
        );
        let d = decide(r, &apisix, vec![(0, 0.6), (1, 0.4)]);
        assert_eq!(
            d.models,
            [Arc::from("big"), Arc::from("cheap")],
            "below the level: not tried"
        );
        // A written margin applies to written levels too.
        let both = rule(0.5, false, 0.05, false);
        assert_eq!(
            decide(r, &both, vec![(0, 0.45), (1, 0.1)])
                .winner
                .as_deref(),
            Some("hard")
        );
    }
}
