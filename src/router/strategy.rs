//! Strategies: how the first try inside a tier is chosen. `weighted` draws by weight × health;
//! the others choose by what the gateway measured of the requests it already served (latency,
//! requests in flight) or by what this request is expected to cost. The figures are inputs (a
//! [`Signal`] per channel), so every strategy is a table test on synthetic signals.
//!
//! Health keeps its meaning under every strategy: a channel at factor h < 1 (a low score, slow
//! start after recovery) that a strategy chooses keeps the first try with probability h, else
//! the strategy chooses again among the others. `weighted` and `p2c` draw by w·h already.

use super::Entry;
pub use crate::config::Strategy;
pub use crate::health::Signal;

/// What the request weighs, for `cost`: its prompt estimate and the reply it may take.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Estimate {
    pub prompt: u64,
    pub output: u64,
}

/// A measured strategy's inputs.
pub struct Measured<'a> {
    pub strategy: Strategy,
    /// Each channel's figures, by index into the snapshot.
    pub signal: &'a dyn Fn(usize) -> Signal,
    pub estimate: Estimate,
    /// The share of first tries `latency` gives to another channel than the fastest.
    pub exploration: f64,
    pub rng: &'a mut fastrand::Rng,
}

/// Why the first try is where it is (`route_reason`: `{strategy}.{why}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Why {
    /// Drawn by weight × health.
    Drawn,
    /// Smooth weighted round robin's turn.
    RoundRobin,
    /// The expected order (`route/explain`): heaviest first.
    Heaviest,
    /// The lowest expected latency.
    Fastest,
    /// No latency sample yet: tried early so it gets one.
    Untried,
    /// One of the `exploration` share of first tries given to another than the fastest.
    Exploring,
    FewestInFlight,
    Cheapest,
    /// Of two drawn by weight, the lower in-flight × latency.
    TwoChoices,
    /// The session's (or continued response's) bound channel.
    Bound,
    /// The only candidate of its tier.
    Alone,
}

impl Why {
    pub fn as_str(self) -> &'static str {
        match self {
            Why::Drawn => "drawn",
            Why::RoundRobin => "round_robin",
            Why::Heaviest => "heaviest",
            Why::Fastest => "fastest",
            Why::Untried => "untried",
            Why::Exploring => "exploring",
            Why::FewestInFlight => "fewest_in_flight",
            Why::Cheapest => "cheapest",
            Why::TwoChoices => "two_choices",
            Why::Bound => "bound",
            Why::Alone => "alone",
        }
    }
}

/// The index in `tier` to try first, and why.
pub(super) fn first(m: &mut Measured<'_>, tier: &[Entry]) -> (usize, Why) {
    if tier.len() == 1 {
        return (0, Why::Alone);
    }
    let signals: Vec<Signal> = tier.iter().map(|e| (m.signal)(e.cand.channel)).collect();
    let mut open = vec![true; tier.len()];
    let rng = &mut *m.rng;
    match m.strategy {
        Strategy::Weighted => (draw(tier, &open, rng), Why::Drawn),
        Strategy::P2c => (two_choices(tier, &signals, rng), Why::TwoChoices),
        strategy => loop {
            let (i, why) = match strategy {
                Strategy::Latency => fastest(tier, &signals, &open, m.exploration, rng),
                Strategy::LeastBusy => (
                    lowest(tier, &open, rng, |k| f64::from(signals[k].in_flight)),
                    Why::FewestInFlight,
                ),
                _ => (
                    lowest(tier, &open, rng, |k| {
                        cost(&tier[k], &signals[k], m.estimate)
                    }),
                    Why::Cheapest,
                ),
            };
            // Health's share: a chosen channel at factor h keeps the first try with
            // probability h, else the strategy chooses among the rest.
            open[i] = false;
            let f = tier[i].factor;
            if f >= 1.0 || !open.iter().any(|o| *o) || rng.f64() < f {
                break (i, why);
            }
        },
    }
}

/// Orders the entries after the first by the strategy's figure, lowest first (a stable sort:
/// ties keep their weighted order); `weighted` and `p2c` keep the weighted order.
pub(super) fn order_rest(m: &Measured<'_>, rest: &mut [Entry]) {
    let score = |e: &Entry| -> f64 {
        let s = (m.signal)(e.cand.channel);
        match m.strategy {
            Strategy::Latency => s.latency.unwrap_or(0.0),
            Strategy::LeastBusy => f64::from(s.in_flight),
            Strategy::Cost => cost(e, &s, m.estimate),
            Strategy::Weighted | Strategy::P2c => 0.0,
        }
    };
    if matches!(m.strategy, Strategy::Weighted | Strategy::P2c) || rest.len() < 2 {
        return;
    }
    let mut keyed: Vec<(f64, usize)> = rest.iter().map(&score).zip(0..).collect();
    keyed.sort_by(|a, b| a.0.total_cmp(&b.0));
    let order: Vec<usize> = keyed.into_iter().map(|(_, i)| i).collect();
    apply_order(rest, &order);
}

/// Puts `items` in the order `order` gives (a permutation of their indexes).
fn apply_order<T>(items: &mut [T], order: &[usize]) {
    let mut at: Vec<usize> = (0..items.len()).collect();
    let mut pos: Vec<usize> = (0..items.len()).collect();
    for (target, &want) in order.iter().enumerate() {
        let from = pos[want];
        items.swap(target, from);
        let displaced = at[target];
        at.swap(target, from);
        pos[displaced] = from;
        pos[want] = target;
    }
}

/// Latency: an untried channel first (so it gets a sample), else the fastest, except for the
/// `exploration` share of first tries, spread by weight over the others so their figures stay
/// fresh.
fn fastest(
    tier: &[Entry],
    signals: &[Signal],
    open: &[bool],
    exploration: f64,
    rng: &mut fastrand::Rng,
) -> (usize, Why) {
    let untried: Vec<bool> = (0..tier.len())
        .map(|k| open[k] && signals[k].latency.is_none())
        .collect();
    if untried.iter().any(|u| *u) {
        return (draw(tier, &untried, rng), Why::Untried);
    }
    let best = lowest(tier, open, rng, |k| signals[k].latency.unwrap_or(0.0));
    let others: Vec<bool> = (0..tier.len()).map(|k| open[k] && k != best).collect();
    if exploration > 0.0 && others.iter().any(|o| *o) && rng.f64() < exploration {
        return (draw(tier, &others, rng), Why::Exploring);
    }
    (best, Why::Fastest)
}

/// Power of two choices: two channels drawn by weight, the one with the lower (in flight + 1) ×
/// expected latency taken (a channel without a sample counts as the tier's fastest).
fn two_choices(tier: &[Entry], signals: &[Signal], rng: &mut fastrand::Rng) -> usize {
    let mut open = vec![true; tier.len()];
    let a = draw(tier, &open, rng);
    open[a] = false;
    let b = draw(tier, &open, rng);
    let floor = signals
        .iter()
        .filter_map(|s| s.latency)
        .fold(f64::INFINITY, f64::min);
    let floor = if floor.is_finite() { floor } else { 1.0 };
    let load = |k: usize| {
        (f64::from(signals[k].in_flight) + 1.0) * signals[k].latency.unwrap_or(floor).max(1e-6)
    };
    if load(b) < load(a) { b } else { a }
}

/// What the request is expected to cost on this entry's route, in micro-dollars: the prompt
/// estimate at the input rate (the channel's recent cached share at the cached rate) and the
/// reply at the output rate. Unpriced routes come last.
fn cost(e: &Entry, s: &Signal, est: Estimate) -> f64 {
    let Some(price) = &e.cand.price else {
        return f64::INFINITY;
    };
    let r = price.rates(est.prompt);
    let prompt = est.prompt as f64;
    let cached = prompt * s.cached_share.clamp(0.0, 1.0);
    ((prompt - cached) * r.input as f64
        + cached * r.cached_input as f64
        + est.output as f64 * r.output as f64)
        / 1e6
}

/// The open entry with the lowest score; ties (within a part in a million) drawn by weight.
fn lowest(
    tier: &[Entry],
    open: &[bool],
    rng: &mut fastrand::Rng,
    score: impl Fn(usize) -> f64,
) -> usize {
    let scores: Vec<f64> = (0..tier.len()).map(&score).collect();
    let min = (0..tier.len())
        .filter(|k| open[*k])
        .map(|k| scores[k])
        .fold(f64::INFINITY, f64::min);
    let tied: Vec<bool> = (0..tier.len())
        .map(|k| open[k] && (scores[k] <= min || (scores[k] - min).abs() <= min.abs() * 1e-6))
        .collect();
    draw(tier, &tied, rng)
}

/// One of the entries `among` allows, drawn by weight; the first allowed one when none has
/// weight.
fn draw(tier: &[Entry], among: &[bool], rng: &mut fastrand::Rng) -> usize {
    let total: f64 = (0..tier.len())
        .filter(|k| among[*k])
        .map(|k| tier[k].weight)
        .sum();
    let first = among.iter().position(|a| *a).unwrap_or(0);
    if total <= 0.0 {
        return first;
    }
    let mut at = rng.f64() * total;
    for k in (0..tier.len()).filter(|k| among[*k]) {
        if at < tier[k].weight {
            return k;
        }
        at -= tier[k].weight;
    }
    (0..tier.len()).rev().find(|k| among[*k]).unwrap_or(first)
}
