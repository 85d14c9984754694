//! Candidate selection: pure functions over the snapshot. No I/O, no clock, no global RNG: the
//! caller passes the random source, so tests seed it and `route/explain` can show a plan without
//! calling anyone.

use std::sync::Arc;
use std::time::Duration;

use crate::config::{GatewayKey, Snapshot};
use crate::health::{Skip, Standing};
use crate::protocol::chain::{ChainEntry, ChainSpec, OnSet};
use crate::semantic::Decision;

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
    let mut eligible: Vec<(Tier, f64, Candidate)> = Vec::with_capacity(routes.len());
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
        eligible.push((
            (rank, c.priority),
            f64::from(c.weight) * st.factor,
            Candidate {
                channel: r.channel,
                upstream_model: r.upstream_model.clone(),
                half_open: st.half_open,
                price: r.price.clone(),
            },
        ));
    }
    if visible == 0 {
        return Err(RouteError::ModelNotFound(model.to_string()));
    }
    if enabled == 0 {
        return Err(RouteError::NoAvailableChannel(model.to_string()));
    }
    // Stable sort keeps config order inside a tier before the weighted shuffle.
    eligible.sort_by_key(|(tier, _, _)| *tier);
    let mut pick = pick;
    let mut start = 0;
    while start < eligible.len() {
        let t = eligible[start].0;
        let end = eligible[start..]
            .iter()
            .position(|(x, _, _)| *x != t)
            .map_or(eligible.len(), |k| start + k);
        let tier = &mut eligible[start..end];
        match &mut pick {
            Pick::Random(rng) => weighted_order(tier, rng),
            Pick::RoundRobin(first) => {
                let items: Vec<(usize, f64)> =
                    tier.iter().map(|(_, w, c)| (c.channel, *w)).collect();
                let i = first(t, &items).min(tier.len() - 1);
                tier.swap(0, i);
                // The rest in a deterministic order too: heaviest first.
                tier[1..].sort_by(|a, b| b.1.total_cmp(&a.1));
            }
            Pick::Heaviest => tier.sort_by(|a, b| b.1.total_cmp(&a.1)),
        }
        start = end;
    }
    Ok(Plan {
        candidates: eligible.into_iter().map(|(_, _, c)| c).collect(),
        skipped,
        excluded,
    })
}

/// Puts a session's bound channel first, bypassing the normal order, if it is a candidate
/// (not when its health says skip: the plan goes on without it).
fn bind_first(plan: &mut Plan, bound: usize) {
    if let Some(i) = plan.candidates.iter().position(|c| c.channel == bound) {
        let c = plan.candidates.remove(i);
        plan.candidates.insert(0, c);
    }
}

/// One model of a resolved chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The model routed (after any redirect).
    pub model: Arc<str>,
    /// The name as the caller (or the key's defaults) wrote it.
    pub written: String,
    /// The redirect rule that rewrote it (`keys[0].redirects[1]`).
    pub redirect: Option<Arc<str>>,
    /// The caller's (or key's) attempt timeouts for this model; a channel's own may be tighter.
    pub timeout: Option<Duration>,
    pub first_token_timeout: Option<Duration>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainSource {
    /// `models` or `fallback_models`.
    Request,
    /// The key's `failover_defaults`, from the named model's position.
    KeyDefaults,
    /// One model.
    Single,
}

impl ChainSource {
    pub fn as_str(self) -> &'static str {
        match self {
            ChainSource::Request => "request",
            ChainSource::KeyDefaults => "key_defaults",
            ChainSource::Single => "single",
        }
    }
}

/// The models a request may be served by, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    /// The first model as the client sent it.
    pub requested_model: String,
    pub steps: Vec<Step>,
    /// The failure classes that move the chain on.
    pub on: OnSet,
    pub source: ChainSource,
}

/// Resolves what the caller wrote into a chain: the caller's `models` / `fallback_models`, else
/// (with `defaults`: chat, not embeddings, whose vectors must come from the model asked for)
/// the key's `failover_defaults` from `model`'s position, else `model` alone. Caller-written
/// names go through redirects (key rules first, first match wins); every model must be one the
/// key can reach. Duplicates after redirects collapse.
pub fn chain(
    snap: &Snapshot,
    key: &GatewayKey,
    spec: &ChainSpec,
    model: &str,
    defaults: bool,
    decisions: &[Decision],
) -> Result<Chain, RouteError> {
    let redirect = |name: &str| match snap.redirect(key, name) {
        Some((to, rule)) => (to, Some(rule.rule.clone())),
        None => (name.to_string(), None),
    };
    let defaults = key.defaults.as_ref().filter(|_| defaults);
    let mut written: Vec<(ChainEntry, bool)> = Vec::new();
    let source = if !spec.entries.is_empty() {
        written.extend(spec.entries.iter().cloned().map(|e| (e, true)));
        ChainSource::Request
    } else {
        let (first, _) = redirect(model);
        let at = defaults.and_then(|d| {
            d.models
                .iter()
                .position(|m| **m == *first)
                .or_else(|| d.models.iter().position(|m| **m == *model))
        });
        match (defaults, at) {
            (Some(d), Some(p)) if d.models.len() - p > 1 => {
                written.push((
                    ChainEntry {
                        model: model.to_string(),
                        ..ChainEntry::default()
                    },
                    true,
                ));
                written.extend(d.models[p + 1..].iter().map(|m| {
                    (
                        ChainEntry {
                            model: m.to_string(),
                            ..ChainEntry::default()
                        },
                        false,
                    )
                }));
                ChainSource::KeyDefaults
            }
            _ => {
                written.push((
                    ChainEntry {
                        model: model.to_string(),
                        ..ChainEntry::default()
                    },
                    true,
                ));
                ChainSource::Single
            }
        }
    };
    let ms = |v: Option<u64>| v.map(Duration::from_millis);
    let mut steps: Vec<Step> = Vec::with_capacity(written.len());
    for (e, by_caller) in written {
        let (routed, rule) = if by_caller {
            redirect(&e.model)
        } else {
            (e.model.clone(), None)
        };
        let timeout = ms(e
            .timeout_ms
            .or(spec.timeout_ms)
            .or(defaults.and_then(|d| d.timeout_ms)));
        let first_token_timeout = ms(e
            .first_token_timeout_ms
            .or(spec.first_token_timeout_ms)
            .or(defaults.and_then(|d| d.first_token_timeout_ms)));
        // A semantic router stands for its decision: the models it ranked, in order.
        if let Some(d) = decisions.iter().find(|d| *d.router == *routed) {
            let before = steps.len();
            for m in d.models.iter().filter(|m| snap.serves(key, m, false)) {
                if !steps.iter().any(|s| s.model == *m) {
                    steps.push(Step {
                        model: m.clone(),
                        written: e.model.clone(),
                        redirect: rule.clone(),
                        timeout,
                        first_token_timeout,
                    });
                }
            }
            if steps.len() == before && !steps.iter().any(|s| d.models.contains(&s.model)) {
                return Err(RouteError::ModelNotFound(routed));
            }
            continue;
        }
        if !snap.serves(key, &routed, false) {
            return Err(RouteError::ModelNotFound(routed));
        }
        if steps.iter().any(|s| *s.model == *routed) {
            continue;
        }
        steps.push(Step {
            model: routed.into(),
            written: e.model,
            redirect: rule,
            timeout,
            first_token_timeout,
        });
    }
    Ok(Chain {
        requested_model: steps
            .first()
            .map(|s| s.written.clone())
            .unwrap_or_else(|| model.to_string()),
        steps,
        on: spec
            .on
            .or(defaults.and_then(|d| d.on))
            .unwrap_or(OnSet::ALL),
        source,
    })
}

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
    /// The chance this channel is tried first in its tier (w·h / Σ w·h).
    pub first_try_share: f64,
}

/// A channel left out of the plan, and why.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ExcludedView {
    pub channel: Arc<str>,
    pub reason: &'static str,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ModelView {
    pub candidates: Vec<CandidateView>,
    pub excluded: Vec<ExcludedView>,
}

/// The plan for one model as the attempt loop would read it, in its expected order (heaviest
/// first inside a tier), with health scores, circuit states and the reason for every exclusion.
pub fn explain(
    snap: &Snapshot,
    key: &GatewayKey,
    model: &str,
    standing: &dyn Fn(usize) -> Standing,
) -> Result<ModelView, RouteError> {
    let plan = plan(
        snap,
        key,
        model,
        standing,
        Pick::Heaviest,
        Prefer::default(),
    )?;
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
        candidates,
        excluded,
    })
}

/// Reorders a tier in place: each position is drawn from the remaining entries by weight.
fn weighted_order<K, T>(tier: &mut [(K, f64, T)], rng: &mut fastrand::Rng) {
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

    /// A key with no groups: it sees every channel.
    fn open_key() -> GatewayKey {
        GatewayKey {
            name: "k".into(),
            key: Some(crate::config::Secret::new("sk-test-key")),
            expires_at: None,
            groups: Vec::new(),
            redirects: Vec::new(),
            defaults: None,
            trim: false,
            quota: Default::default(),
            scope: "key:k".into(),
        }
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
}
