//! Strategies: how the first try inside a tier is chosen. `weighted` draws by weight × health;
//! the others choose by what the gateway measured of the requests it already served (latency,
//! requests in flight) or by what this request is expected to cost. The figures are inputs (a
//! [`Signal`] per channel), so every strategy is a table test on synthetic signals.
//!
//! Health keeps its meaning under every strategy: a channel at factor h < 1 (a low score, slow
//! start after recovery) that a strategy chooses keeps the first try with probability h, else
//! the strategy chooses again among the others. `weighted` and `p2c` draw by w·h already.

use smallvec::SmallVec;

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

/// `{strategy}.{why}` as the request log's `route_reason` says it: a static string, so the
/// reason costs a request no allocation.
pub fn reason(strategy: Strategy, why: Why) -> &'static str {
    use Strategy as S;
    use Why as W;
    match (strategy, why) {
        (_, W::Bound) => "session.bound",
        (S::Weighted, W::Drawn) => "weighted.drawn",
        (S::Weighted, W::RoundRobin) => "weighted.round_robin",
        (S::Weighted, W::Heaviest) => "weighted.heaviest",
        (S::Weighted, _) => "weighted.alone",
        (S::Latency, W::Fastest) => "latency.fastest",
        (S::Latency, W::Untried) => "latency.untried",
        (S::Latency, W::Exploring) => "latency.exploring",
        (S::Latency, _) => "latency.alone",
        (S::LeastBusy, W::FewestInFlight) => "least_busy.fewest_in_flight",
        (S::LeastBusy, _) => "least_busy.alone",
        (S::Cost, W::Cheapest) => "cost.cheapest",
        (S::Cost, _) => "cost.alone",
        (S::P2c, W::TwoChoices) => "p2c.two_choices",
        (S::P2c, _) => "p2c.alone",
    }
}

/// A set of a tier's entries, on the stack for tiers of up to 16.
type Mask = SmallVec<[bool; 16]>;

fn mask(n: usize, f: impl Fn(usize) -> bool) -> Mask {
    // Filled in place: collecting from an iterator costs more than the strategy itself.
    let mut m = Mask::from_elem(false, n);
    for (k, slot) in m.iter_mut().enumerate() {
        *slot = f(k);
    }
    m
}

/// The index in `tier` to try first, and why (each entry's signal already read).
pub(super) fn first(m: &mut Measured<'_>, tier: &[Entry]) -> (usize, Why) {
    if tier.len() == 1 {
        return (0, Why::Alone);
    }
    let mut open = mask(tier.len(), |_| true);
    let rng = &mut *m.rng;
    match m.strategy {
        Strategy::Weighted => (draw(tier, &open, rng), Why::Drawn),
        Strategy::P2c => (two_choices(tier, rng), Why::TwoChoices),
        strategy => loop {
            let (i, why) = match strategy {
                Strategy::Latency => fastest(tier, &open, m.exploration, rng),
                Strategy::LeastBusy => (
                    lowest(tier, &open, rng, |e| f64::from(e.signal.in_flight)),
                    Why::FewestInFlight,
                ),
                _ => (
                    lowest(tier, &open, rng, |e| cost(e, m.estimate)),
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
    let est = m.estimate;
    match m.strategy {
        Strategy::Latency => rest.sort_by(|a, b| {
            let f = |e: &Entry| e.signal.latency.unwrap_or(0.0);
            f(a).total_cmp(&f(b))
        }),
        Strategy::LeastBusy => rest.sort_by_key(|e| e.signal.in_flight),
        Strategy::Cost => rest.sort_by(|a, b| cost(a, est).total_cmp(&cost(b, est))),
        Strategy::Weighted | Strategy::P2c => {}
    }
}

/// Latency: an untried channel first (so it gets a sample), else the fastest, except for the
/// `exploration` share of first tries, spread by weight over the others so their figures stay
/// fresh.
fn fastest(
    tier: &[Entry],
    open: &[bool],
    exploration: f64,
    rng: &mut fastrand::Rng,
) -> (usize, Why) {
    let untried = mask(tier.len(), |k| open[k] && tier[k].signal.latency.is_none());
    if untried.iter().any(|u| *u) {
        return (draw(tier, &untried, rng), Why::Untried);
    }
    let best = lowest(tier, open, rng, |e| e.signal.latency.unwrap_or(0.0));
    let others = mask(tier.len(), |k| open[k] && k != best);
    if exploration > 0.0 && others.iter().any(|o| *o) && rng.f64() < exploration {
        return (draw(tier, &others, rng), Why::Exploring);
    }
    (best, Why::Fastest)
}

/// Power of two choices: two channels drawn by weight, the one with the lower (in flight + 1) ×
/// expected latency taken (a channel without a sample counts as the tier's fastest).
fn two_choices(tier: &[Entry], rng: &mut fastrand::Rng) -> usize {
    let mut open = mask(tier.len(), |_| true);
    let a = draw(tier, &open, rng);
    open[a] = false;
    let b = draw(tier, &open, rng);
    let floor = tier
        .iter()
        .filter_map(|e| e.signal.latency)
        .fold(f64::INFINITY, f64::min);
    let floor = if floor.is_finite() { floor } else { 1.0 };
    let load = |k: usize| {
        let s = &tier[k].signal;
        (f64::from(s.in_flight) + 1.0) * s.latency.unwrap_or(floor).max(1e-6)
    };
    if load(b) < load(a) { b } else { a }
}

/// What the request is expected to cost on this entry's route, in micro-dollars: the prompt
/// estimate at the input rate (the channel's recent cached share at the cached rate) and the
/// reply at the output rate. Unpriced routes come last.
fn cost(e: &Entry, est: Estimate) -> f64 {
    let Some(price) = &e.cand.price else {
        return f64::INFINITY;
    };
    let r = price.rates(est.prompt);
    let prompt = est.prompt as f64;
    let cached = prompt * e.signal.cached_share.clamp(0.0, 1.0);
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
    score: impl Fn(&Entry) -> f64,
) -> usize {
    let min = (0..tier.len())
        .filter(|k| open[*k])
        .map(|k| score(&tier[k]))
        .fold(f64::INFINITY, f64::min);
    let tied = mask(tier.len(), |k| {
        let s = score(&tier[k]);
        open[k] && (s <= min || (s - min).abs() <= min.abs() * 1e-6)
    });
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
