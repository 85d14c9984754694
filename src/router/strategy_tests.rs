//! Each strategy as a table over synthetic signals: the router is pure, so what it reads is
//! what the test gives it.

use std::collections::HashMap;

use super::*;
use crate::config::load_str;
use crate::provider::HttpClients;

fn snap(text: &str) -> Snapshot {
    load_str(text, "t.toml", &|_| None, &HttpClients::default()).unwrap()
}

/// `(name, weight, extra)` channels serving `m`, all in one tier.
fn channels(list: &[(&str, u32, &str)]) -> Snapshot {
    let text: String = list
        .iter()
        .map(|(name, w, extra)| {
            format!(
                "[[channels]]\nname = \"{name}\"\nprovider = \"mock\"\nmodels = [\"m\"]\nweight = {w}\n{extra}\n"
            )
        })
        .collect();
    snap(&format!(
        "[[keys]]\nname = \"k\"\nkey = \"sk-strategy-0001\"\n{text}"
    ))
}

/// Plans `n` times with `strategy` over `signals` (by channel index); the share of first tries
/// each channel got, and every reason seen.
fn shares(
    s: &Snapshot,
    strategy: Strategy,
    signals: &[Signal],
    standing: &dyn Fn(usize) -> Standing,
    exploration: f64,
    n: u32,
) -> (HashMap<String, f64>, Vec<Why>) {
    let mut rng = fastrand::Rng::with_seed(11);
    let signal = |i: usize| signals.get(i).copied().unwrap_or_default();
    let key = s.key_named("k").unwrap();
    let mut counts: HashMap<String, f64> = HashMap::new();
    let mut whys = Vec::new();
    for _ in 0..n {
        let p = plan(
            s,
            key,
            "m",
            standing,
            Pick::Measured(Measured {
                strategy,
                signal: &signal,
                estimate: Estimate {
                    prompt: 1000,
                    output: 500,
                },
                exploration,
                rng: &mut rng,
            }),
            Prefer::default(),
        )
        .unwrap();
        assert_eq!(
            p.candidates.len(),
            s.channels.len(),
            "the whole tier stays in the plan"
        );
        *counts
            .entry(s.channels[p.candidates[0].channel].name.to_string())
            .or_default() += 1.0;
        if let Some(w) = p.why
            && !whys.contains(&w)
        {
            whys.push(w);
        }
    }
    for c in counts.values_mut() {
        *c /= f64::from(n);
    }
    (counts, whys)
}

fn healthy(_: usize) -> Standing {
    Standing::healthy()
}

fn lat(seconds: f64, in_flight: u32) -> Signal {
    Signal {
        latency: Some(seconds),
        in_flight,
        cached_share: 0.0,
    }
}

fn share(m: &HashMap<String, f64>, name: &str) -> f64 {
    m.get(name).copied().unwrap_or(0.0)
}

#[test]
fn each_strategy_chooses_the_first_try_by_its_signal() {
    let s = channels(&[("a", 1, ""), ("b", 3, ""), ("c", 1, "")]);
    // (strategy, signals of a/b/c, exploration, channel expected first, its share at least,
    // the reason)
    type Case = (Strategy, Vec<Signal>, f64, &'static str, f64, Why);
    let cases: Vec<Case> = vec![
        // The fastest takes all but the exploration share.
        (
            Strategy::Latency,
            vec![lat(0.4, 0), lat(0.6, 0), lat(0.2, 0)],
            0.05,
            "c",
            0.93,
            Why::Fastest,
        ),
        (
            Strategy::Latency,
            vec![lat(0.4, 0), lat(0.6, 0), lat(0.2, 0)],
            0.0,
            "c",
            1.0,
            Why::Fastest,
        ),
        // A channel without a sample is tried first, so it gets one.
        (
            Strategy::Latency,
            vec![lat(0.1, 0), Signal::default(), lat(0.2, 0)],
            0.05,
            "b",
            1.0,
            Why::Untried,
        ),
        (
            Strategy::LeastBusy,
            vec![lat(0.1, 9), lat(0.1, 4), lat(0.1, 2)],
            0.0,
            "c",
            1.0,
            Why::FewestInFlight,
        ),
        // Power of two choices: the busiest and slowest is never taken when compared, and
        // it is always compared when drawn (so never first).
        (
            Strategy::P2c,
            vec![lat(0.1, 0), lat(2.0, 30), lat(0.1, 0)],
            0.0,
            "a",
            0.4,
            Why::TwoChoices,
        ),
    ];
    for (strategy, signals, exploration, first, at_least, why) in cases {
        let (got, whys) = shares(&s, strategy, &signals, &healthy, exploration, 4000);
        assert!(
            share(&got, first) >= at_least,
            "{strategy:?} {signals:?}: {got:?}"
        );
        assert!(whys.contains(&why), "{strategy:?}: {whys:?}");
        if strategy == Strategy::P2c {
            assert_eq!(share(&got, "b"), 0.0, "p2c took the loaded one: {got:?}");
        }
    }
}

#[test]
fn exploration_spreads_its_share_over_the_others_by_weight() {
    let s = channels(&[("a", 1, ""), ("b", 3, ""), ("c", 1, "")]);
    let signals = [lat(0.2, 0), lat(0.6, 0), lat(0.9, 0)];
    let (got, whys) = shares(&s, Strategy::Latency, &signals, &healthy, 0.2, 20_000);
    assert!((share(&got, "a") - 0.8).abs() < 0.02, "{got:?}");
    // The 20 % goes 3:1 to b and c.
    assert!((share(&got, "b") - 0.15).abs() < 0.015, "{got:?}");
    assert!((share(&got, "c") - 0.05).abs() < 0.015, "{got:?}");
    assert!(whys.contains(&Why::Exploring) && whys.contains(&Why::Fastest));
}

#[test]
fn ties_are_drawn_by_weight() {
    let s = channels(&[("a", 1, ""), ("b", 3, "")]);
    let signals = [lat(0.5, 2), lat(0.5, 2)];
    for strategy in [Strategy::LeastBusy, Strategy::Latency] {
        let (got, _) = shares(&s, strategy, &signals, &healthy, 0.0, 20_000);
        assert!(
            (share(&got, "b") - 0.75).abs() < 0.02,
            "{strategy:?}: {got:?}"
        );
    }
}

#[test]
fn cost_takes_the_cheapest_priced_route_counting_its_cache() {
    let cheap = "price = { input = 1.0, output = 2.0, cached_input = 0.1 }";
    let dear = "price = { input = 3.0, output = 15.0, cached_input = 0.3 }";
    let s = channels(&[("dear", 5, dear), ("cheap", 1, cheap), ("unpriced", 9, "")]);
    let none = [Signal::default(); 3];
    let (got, whys) = shares(&s, Strategy::Cost, &none, &healthy, 0.05, 2000);
    assert_eq!(share(&got, "cheap"), 1.0, "{got:?}");
    assert_eq!(whys, [Why::Cheapest]);
    // The same rates but one channel's cache serves 90 % of prompts: it is cheaper.
    let same = "price = { input = 1.0, output = 2.0, cached_input = 0.1 }";
    let s = channels(&[("cold", 1, same), ("warm", 1, same)]);
    let warm = [
        Signal::default(),
        Signal {
            cached_share: 0.9,
            ..Signal::default()
        },
    ];
    let (got, _) = shares(&s, Strategy::Cost, &warm, &healthy, 0.0, 500);
    assert_eq!(share(&got, "warm"), 1.0, "{got:?}");
}

#[test]
fn health_keeps_its_share_under_every_strategy() {
    let s = channels(&[("fast", 1, ""), ("slow", 1, "")]);
    let signals = [lat(0.1, 0), lat(0.5, 5)];
    // The fast one at factor 0.25 (slow start, or a low score): it keeps a quarter of what
    // the strategy would give it; a skipped one is never a candidate.
    let ramping = |i: usize| Standing {
        factor: if i == 0 { 0.25 } else { 1.0 },
        ..Standing::healthy()
    };
    for strategy in [Strategy::Latency, Strategy::LeastBusy] {
        let (got, _) = shares(&s, strategy, &signals, &ramping, 0.0, 20_000);
        assert!(
            (share(&got, "fast") - 0.25).abs() < 0.02,
            "{strategy:?}: {got:?}"
        );
    }
}

#[test]
fn a_bound_session_goes_first_whatever_the_strategy() {
    let s = channels(&[("a", 1, ""), ("b", 1, "affinity = true")]);
    let signals = [lat(0.1, 0), lat(0.9, 9)];
    let signal = |i: usize| signals[i];
    let mut rng = fastrand::Rng::with_seed(3);
    let p = plan(
        &s,
        s.key_named("k").unwrap(),
        "m",
        &healthy,
        Pick::Measured(Measured {
            strategy: Strategy::Latency,
            signal: &signal,
            estimate: Estimate::default(),
            exploration: 0.0,
            rng: &mut rng,
        }),
        Prefer {
            bound: Some("b"),
            ..Prefer::default()
        },
    )
    .unwrap();
    assert_eq!(s.channels[p.candidates[0].channel].name.as_ref(), "b");
    assert_eq!(p.why, Some(Why::Bound));
}

#[test]
fn a_failover_goes_to_the_next_by_the_strategys_own_figure() {
    let s = channels(&[("a", 1, ""), ("b", 5, ""), ("c", 2, ""), ("d", 3, "")]);
    let signals = [lat(0.4, 3), lat(0.9, 0), lat(0.1, 2), lat(0.2, 1)];
    let signal = |i: usize| signals[i];
    let key = s.key_named("k").unwrap();
    // (strategy, the whole tier's order)
    let cases = [
        (Strategy::Latency, ["c", "d", "a", "b"]),
        (Strategy::LeastBusy, ["b", "d", "c", "a"]),
    ];
    let mut rng = fastrand::Rng::with_seed(5);
    for (strategy, want) in cases {
        // The weighted shuffle before the sort gives every starting order in 200 draws.
        for _ in 0..200 {
            let p = plan(
                &s,
                key,
                "m",
                &healthy,
                Pick::Measured(Measured {
                    strategy,
                    signal: &signal,
                    estimate: Estimate::default(),
                    exploration: 0.0,
                    rng: &mut rng,
                }),
                Prefer::default(),
            )
            .unwrap();
            let got: Vec<&str> = p
                .candidates
                .iter()
                .map(|c| s.channels[c.channel].name.as_ref())
                .collect();
            assert_eq!(got, want, "{strategy:?}");
        }
    }
}

#[test]
fn each_reason_is_its_strategy_and_why_as_written() {
    use Strategy as S;
    use Why as W;
    let pairs = [
        (
            S::Weighted,
            [W::Drawn, W::RoundRobin, W::Heaviest, W::Alone].as_slice(),
        ),
        (
            S::Latency,
            &[W::Fastest, W::Untried, W::Exploring, W::Alone],
        ),
        (S::LeastBusy, &[W::FewestInFlight, W::Alone]),
        (S::Cost, &[W::Cheapest, W::Alone]),
        (S::P2c, &[W::TwoChoices, W::Alone]),
    ];
    for (s, whys) in pairs {
        for w in whys {
            assert_eq!(reason(s, *w), format!("{}.{}", s.as_str(), w.as_str()));
        }
        assert_eq!(reason(s, W::Bound), "session.bound");
    }
}
