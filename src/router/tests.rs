use super::*;
use crate::config::load_str;
use crate::protocol::chain::{ChainEntry, ChainSpec};
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

/// A key with no groups: it sees every channel.
fn open_key() -> GatewayKey {
    let mut k = crate::config::bare_key("k");
    k.key = Some(crate::config::Secret::new("sk-test-key"));
    k
}

const KEYS: &str = r#"
    [[redirects]]
    from = "gpt-4*"
    to = "m"
    [[redirects]]
    from = "old-(.*)"
    to = "$1"
    kind = "regex"
    [[keys]]
    name = "team"
    key = "sk-team-0001"
    groups = ["premium", "default"]
    redirects = [{ from = "gpt-4-turbo", to = "n" }]
    failover_defaults = { models = ["x", "m", "n"], timeout_ms = 999999, on = ["timeout"] }
    [[keys]]
    name = "cheap"
    key = "sk-cheap-0001"
    groups = ["default"]
    [[channels]]
    name = "std"
    provider = "mock"
    models = ["m", "n", "x"]
    [[channels]]
    name = "prem"
    provider = "mock"
    models = ["m", "p"]
    groups = ["premium"]
    priority = 5
"#;

fn chain_of(
    s: &Snapshot,
    key: &str,
    spec: &ChainSpec,
    model: &str,
) -> Result<Vec<String>, RouteError> {
    let k = s.key_named(key).unwrap();
    chain(s, k, spec, model, true, &[])
        .map(|c| c.steps.iter().map(|st| st.model.to_string()).collect())
}

fn spec(models: &[&str]) -> ChainSpec {
    ChainSpec {
        entries: models
            .iter()
            .map(|m| ChainEntry {
                model: m.to_string(),
                ..ChainEntry::default()
            })
            .collect(),
        ..ChainSpec::default()
    }
}

#[test]
fn prefer_puts_the_bound_channel_first_and_keeps_only_the_one_allowed() {
    let s = snap(KEYS);
    let mut rng = fastrand::Rng::with_seed(1);
    let team = s.key_named("team").unwrap();
    let bound = Prefer {
        bound: Some("std"),
        ..Prefer::default()
    };
    let p = plan(&s, team, "m", &healthy, Pick::Random(&mut rng), bound).unwrap();
    assert_eq!(names(&s, &p), ["std", "prem"]);
    let only = Prefer {
        only: Some("std"),
        ..Prefer::default()
    };
    let p = plan(&s, team, "m", &healthy, Pick::Random(&mut rng), only).unwrap();
    assert_eq!(names(&s, &p), ["std"]);
    // A bound channel its health skips stays out: the plan goes on without it.
    let open = |i: usize| {
        if s.channels[i].name.as_ref() == "std" {
            Standing {
                skip: Some(Skip::CircuitOpen),
                ..Standing::healthy()
            }
        } else {
            Standing::healthy()
        }
    };
    let p = plan(&s, team, "m", &open, Pick::Random(&mut rng), bound).unwrap();
    assert_eq!(names(&s, &p), ["prem"]);
}

#[test]
fn groups_filter_and_order_before_priority() {
    let s = snap(KEYS);
    let mut rng = fastrand::Rng::with_seed(1);
    // `team` prefers premium: its priority-5 channel comes before the priority-1 default one.
    let team = s.key_named("team").unwrap();
    let p = plan(
        &s,
        team,
        "m",
        &healthy,
        Pick::Random(&mut rng),
        Prefer::default(),
    )
    .unwrap();
    assert_eq!(names(&s, &p), ["prem", "std"]);
    // `cheap` sees only the default group.
    let cheap = s.key_named("cheap").unwrap();
    let p = plan(
        &s,
        cheap,
        "m",
        &healthy,
        Pick::Random(&mut rng),
        Prefer::default(),
    )
    .unwrap();
    assert_eq!(names(&s, &p), ["std"]);
    assert_eq!(p.excluded, [(1, Excluded::NotInKeyGroups)]);
    assert_eq!(
        plan(
            &s,
            cheap,
            "p",
            &healthy,
            Pick::Random(&mut rng),
            Prefer::default()
        ),
        Err(RouteError::ModelNotFound("p".into()))
    );
}

#[test]
fn chains_from_the_request_the_key_defaults_or_one_model() {
    let s = snap(KEYS);
    let none = ChainSpec::default();
    // Defaults from the named model's position; a model not in them stands alone.
    assert_eq!(chain_of(&s, "team", &none, "m").unwrap(), ["m", "n"]);
    assert_eq!(chain_of(&s, "team", &none, "x").unwrap(), ["x", "m", "n"]);
    assert_eq!(chain_of(&s, "team", &none, "n").unwrap(), ["n"]);
    assert_eq!(chain_of(&s, "cheap", &none, "m").unwrap(), ["m"]);
    // Without defaults (embeddings): the one model.
    let team = s.key_named("team").unwrap();
    assert_eq!(
        chain(&s, team, &none, "x", false, &[]).unwrap().steps.len(),
        1
    );
    // The caller's chain wins over the defaults.
    assert_eq!(
        chain_of(&s, "team", &spec(&["n", "x"]), "n").unwrap(),
        ["n", "x"]
    );
    // Defaults' timeouts are clamped at load; their `on` applies.
    let c = chain(&s, s.key_named("team").unwrap(), &none, "x", true, &[]).unwrap();
    assert_eq!(c.steps[0].timeout, Some(Duration::from_millis(300_000)));
    assert_eq!(c.on.names(), ["timeout"]);
    assert_eq!(c.source, ChainSource::KeyDefaults);
    // A model the key cannot reach is not found, wherever it stands in the chain.
    assert_eq!(
        chain_of(&s, "cheap", &spec(&["m", "p"]), "m"),
        Err(RouteError::ModelNotFound("p".into()))
    );
}

#[test]
fn redirects_key_rules_first_then_global_first_match_wins() {
    let s = snap(KEYS);
    let none = ChainSpec::default();
    // The key's exact rule beats the global glob.
    let c = chain(
        &s,
        s.key_named("team").unwrap(),
        &none,
        "gpt-4-turbo",
        true,
        &[],
    )
    .unwrap();
    assert_eq!(&*c.steps[0].model, "n");
    assert_eq!(c.requested_model, "gpt-4-turbo");
    assert_eq!(c.steps[0].redirect.as_deref(), Some("keys[0].redirects[0]"));
    // Another key gets the global rule; a regex rewrites with its capture.
    assert_eq!(chain_of(&s, "cheap", &none, "gpt-4-turbo").unwrap(), ["m"]);
    assert_eq!(chain_of(&s, "cheap", &none, "old-n").unwrap(), ["n"]);
    // Rewritten duplicates collapse.
    assert_eq!(
        chain_of(&s, "cheap", &spec(&["gpt-4o", "m", "n"]), "gpt-4o").unwrap(),
        ["m", "n"]
    );
}

#[test]
fn bad_groups_redirects_and_defaults_are_refused_at_load() {
    let load = |t: &str| {
        load_str(t, "t.toml", &|_| None, &HttpClients::default()).map_err(|e| e.to_string())
    };
    let cases = [
        (
            KEYS.replace("groups = [\"premium\", \"default\"]", "groups = [\"gold\"]"),
            "keys[0].groups[0]",
        ),
        (
            KEYS.replace("to = \"m\"", "to = \"nowhere\""),
            "redirects[0].to",
        ),
        (
            KEYS.replace("from = \"old-(.*)\"", "from = \"old-(\""),
            "redirects[1].from",
        ),
        (
            KEYS.replace("models = [\"x\", \"m\", \"n\"]", "models = [\"x\", \"p\"]")
                .replace(
                    "groups = [\"premium\", \"default\"]",
                    "groups = [\"default\"]",
                ),
            "keys[0].failover_defaults.models[1]",
        ),
    ];
    for (text, field) in cases {
        let err = load(&text).unwrap_err();
        assert!(err.contains(field), "{field}: {err}");
    }
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
            &plan(
                &s,
                &open_key(),
                "m",
                &healthy,
                Pick::Random(&mut rng),
                Prefer::default(),
            )
            .unwrap(),
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
        let p = plan(
            &s,
            &open_key(),
            "m",
            &healthy,
            Pick::Random(&mut rng),
            Prefer::default(),
        )
        .unwrap();
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
            &plan(
                &s,
                &open_key(),
                "m",
                &healthy,
                Pick::Random(&mut rng),
                Prefer::default(),
            )
            .unwrap(),
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
        plan(
            &s,
            &open_key(),
            "nope",
            &healthy,
            Pick::Random(&mut rng),
            Prefer::default()
        ),
        Err(RouteError::ModelNotFound("nope".into()))
    );
    assert_eq!(
        plan(
            &s,
            &open_key(),
            "m",
            &healthy,
            Pick::Random(&mut rng),
            Prefer::default()
        ),
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
        let p = plan(
            &s,
            &open_key(),
            "m",
            &view,
            Pick::Random(&mut rng),
            Prefer::default(),
        )
        .unwrap();
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
