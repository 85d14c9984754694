//! `switchyard semantic eval`: how a router routes a labelled set of prompts, scored once by
//! its embedder and decided by the very rule requests are decided by (`rule.rs`): accuracy,
//! precision and recall per instance, the confusion table, the scores' spread, and the
//! per-instance thresholds that would maximise accuracy on the set (printed, never applied).
//! [`run`] embeds; everything else only counts.

use serde_json::{Value, json};

use super::rule::Rule;
use super::{EmbedError, Semantic};
use crate::config::{SemanticRouter, Snapshot};

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("no semantic router is named {0:?} in this config")]
    NoRouter(String),
    #[error("line {line}: {message}")]
    Line { line: usize, message: String },
    #[error("line {line}: no instance {name:?} in router {router:?} (its instances: {known})")]
    UnknownInstance {
        line: usize,
        name: String,
        router: String,
        known: String,
    },
    #[error("line {line}: the prompt could not be embedded: {source}")]
    Embed { line: usize, source: EmbedError },
    #[error("the labelled set has no prompts")]
    Empty,
}

/// Scores every line of `labelled` (JSON lines of `{"text", "instance"}`; blank lines
/// skipped) with router `name`'s embedder, and reports. An embedding failure is an error
/// here: an evaluation must not fail open.
pub async fn run(snap: &Snapshot, name: &str, labelled: &str) -> Result<Value, EvalError> {
    let (idx, router) = snap
        .router(name)
        .ok_or_else(|| EvalError::NoRouter(name.to_string()))?;
    let health = crate::health::Health::new(std::sync::Arc::new(crate::clock::SystemClock));
    let semantic = Semantic::default();
    let mut cases = Vec::new();
    let mut rule = None;
    for (line, v) in json_lines(labelled) {
        let bad = |message: String| EvalError::Line { line, message };
        let v = v.map_err(bad)?;
        let (Some(prompt), Some(label)) = (v["text"].as_str(), v["instance"].as_str()) else {
            return Err(bad("expected {\"text\": ..., \"instance\": ...}".into()));
        };
        let label = router
            .instances
            .iter()
            .position(|i| *i.name == *label)
            .ok_or_else(|| EvalError::UnknownInstance {
                line,
                name: label.to_string(),
                router: name.to_string(),
                known: router
                    .instances
                    .iter()
                    .map(|i| &*i.name)
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
        let (scores, refs) = semantic
            .score(snap, &health, idx, prompt)
            .await
            .map_err(|source| EvalError::Embed { line, source })?;
        rule.get_or_insert_with(|| (*refs.rule).clone());
        cases.push(Case {
            line,
            label,
            scores,
        });
    }
    let rule = rule.ok_or(EvalError::Empty)?;
    Ok(report(router, &rule, &cases))
}

/// A labelled set's lines, numbered from 1, each read as JSON (blank lines skipped): what
/// every `eval` reads.
pub fn json_lines(text: &str) -> impl Iterator<Item = (usize, Result<Value, String>)> + '_ {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(n, l)| (n + 1, serde_json::from_str(l).map_err(|e| e.to_string())))
}

/// One labelled prompt: the instance it should go to, and its scores (instance, similarity;
/// highest first).
#[derive(Debug, Clone)]
pub struct Case {
    /// Its line in the labelled file.
    pub line: usize,
    pub label: usize,
    pub scores: Vec<(usize, f32)>,
}

/// The instance a case goes to under `rule`: the winner, or the catchall.
pub fn routed(router: &SemanticRouter, rule: &Rule, scores: &[(usize, f32)]) -> usize {
    rule.winner(scores).unwrap_or(router.catchall)
}

fn accuracy(router: &SemanticRouter, rule: &Rule, cases: &[Case]) -> f64 {
    if cases.is_empty() {
        return 0.0;
    }
    let right = cases
        .iter()
        .filter(|c| routed(router, rule, &c.scores) == c.label)
        .count();
    right as f64 / cases.len() as f64
}

/// Levels that maximise accuracy on `cases`, as they would decide once written in the config
/// (every threshold a number, the margin a number): each instance's threshold searched over
/// the levels the cases' own scores give, then the margin over a few, for a few rounds. The
/// rule returned is exactly what the printed numbers make; its accuracy is the second value.
pub fn suggest(router: &SemanticRouter, rule: &Rule, cases: &[Case]) -> (Rule, f64) {
    let n = router.instances.len();
    let mut best = Rule {
        thresholds: rule.thresholds.clone(),
        derived: vec![false; n],
        margin: rule.margin,
        margin_derived: false,
    };
    let mut best_acc = accuracy(router, &best, cases);
    let try_rule = |trial: Rule, best: &mut Rule, best_acc: &mut f64| {
        let acc = accuracy(router, &trial, cases);
        if acc > *best_acc {
            *best_acc = acc;
            *best = trial;
        }
    };
    for _round in 0..4 {
        let before = best_acc;
        for i in 0..n {
            if !best.thresholds[i].is_finite() {
                continue;
            }
            // Just at a case's score (it clears) and just above (it does not).
            let mut levels: Vec<f32> = cases
                .iter()
                .filter_map(|c| c.scores.iter().find(|(j, _)| *j == i).map(|(_, s)| *s))
                .flat_map(|s| [s, next_up(s)])
                .collect();
            levels.push(1.0);
            for t in levels {
                let mut trial = best.clone();
                trial.thresholds[i] = t;
                try_rule(trial, &mut best, &mut best_acc);
            }
        }
        // 1.0: no lead is that clear (the level alone decides, as APISIX's rule).
        for m in [0.02, 0.03, 0.04, 0.05, 0.07, 0.1, 1.0] {
            let mut trial = best.clone();
            trial.margin = m;
            try_rule(trial, &mut best, &mut best_acc);
        }
        if best_acc <= before {
            break;
        }
    }
    (best, best_acc)
}

/// The smallest f32 above `x` (a level that `x` does not clear).
fn next_up(x: f32) -> f32 {
    if x.is_nan() || x == f32::INFINITY {
        return x;
    }
    let bits = x.to_bits();
    let up = if x == 0.0 {
        1
    } else if x > 0.0 {
        bits + 1
    } else {
        bits - 1
    };
    f32::from_bits(up)
}

fn quantiles(mut v: Vec<f32>) -> Value {
    if v.is_empty() {
        return Value::Null;
    }
    v.sort_by(f32::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    json!({"min": at(0.0), "p25": at(0.25), "median": at(0.5), "p75": at(0.75), "max": at(1.0)})
}

/// The whole report, as `--json` prints it.
pub fn report(router: &SemanticRouter, rule: &Rule, cases: &[Case]) -> Value {
    let n = router.instances.len();
    let mut confusion = vec![vec![0u32; n]; n];
    for c in cases {
        confusion[c.label][routed(router, rule, &c.scores)] += 1;
    }
    let name = |i: usize| router.instances[i].name.to_string();
    let per_instance: Vec<Value> = (0..n)
        .map(|i| {
            let support: u32 = confusion[i].iter().sum();
            let predicted: u32 = confusion.iter().map(|row| row[i]).sum();
            let right = confusion[i][i];
            let own: Vec<f32> = cases
                .iter()
                .filter(|c| c.label == i)
                .filter_map(|c| c.scores.iter().find(|(j, _)| *j == i).map(|(_, s)| *s))
                .collect();
            let rivals: Vec<f32> = cases
                .iter()
                .filter(|c| c.label == i)
                .filter_map(|c| c.scores.iter().find(|(j, _)| *j != i).map(|(_, s)| *s))
                .collect();
            json!({
                "instance": name(i),
                "catchall": i == router.catchall,
                "support": support,
                "predicted": predicted,
                "precision": (predicted > 0).then(|| f64::from(right) / f64::from(predicted)),
                "recall": (support > 0).then(|| f64::from(right) / f64::from(support)),
                "threshold": rule.thresholds[i].is_finite().then_some(rule.thresholds[i]),
                "threshold_derived": rule.derived[i],
                "own_score": quantiles(own),
                "best_other_score": quantiles(rivals),
            })
        })
        .collect();
    let (suggested, suggested_accuracy) = suggest(router, rule, cases);
    let misrouted: Vec<Value> = cases
        .iter()
        .filter_map(|c| {
            let to = routed(router, rule, &c.scores);
            (to != c.label).then(|| {
                json!({
                    "line": c.line,
                    "labelled": name(c.label),
                    "routed": name(to),
                    "scores": c.scores.iter().take(3)
                        .map(|(i, s)| json!({"instance": name(*i), "score": s}))
                        .collect::<Vec<_>>(),
                })
            })
        })
        .collect();
    json!({
        "router": &*router.model,
        "prompts": cases.len(),
        "accuracy": accuracy(router, rule, cases),
        "margin": rule.margin,
        "margin_derived": rule.margin_derived,
        "instances": per_instance,
        "confusion": {
            "labels": (0..n).map(name).collect::<Vec<_>>(),
            "rows_labelled_columns_routed": confusion,
        },
        "misrouted": misrouted,
        "suggested": {
            "accuracy": suggested_accuracy,
            "margin": suggested.margin,
            "thresholds": (0..n)
                .filter(|i| suggested.thresholds[*i].is_finite())
                .map(|i| json!({"instance": name(i), "threshold": suggested.thresholds[i]}))
                .collect::<Vec<_>>(),
        },
    })
}

/// The report as a person reads it.
pub fn text(report: &Value) -> String {
    let mut out = String::new();
    let pct = |v: &Value| {
        v.as_f64()
            .map_or("—".into(), |x| format!("{:.1} %", x * 100.0))
    };
    out += &format!(
        "router {}: {} prompts, accuracy {} (margin {:.4}{})\n\n",
        report["router"].as_str().unwrap_or(""),
        report["prompts"],
        pct(&report["accuracy"]),
        report["margin"].as_f64().unwrap_or(0.0),
        if report["margin_derived"] == true {
            ", auto"
        } else {
            ""
        },
    );
    out += &format!(
        "{:<20} {:>9} {:>9} {:>8} {:>10}  {:>27}  {:>13}\n",
        "instance",
        "precision",
        "recall",
        "prompts",
        "threshold",
        "own score min/median/max",
        "best other med"
    );
    let empty = Vec::new();
    for i in report["instances"].as_array().unwrap_or(&empty) {
        let q = |v: &Value, k: &str| v[k].as_f64().map_or("—".into(), |x| format!("{x:.3}"));
        let own = &i["own_score"];
        out += &format!(
            "{:<20} {:>9} {:>9} {:>8} {:>10}  {:>27}  {:>13}\n",
            format!(
                "{}{}",
                i["instance"].as_str().unwrap_or(""),
                if i["catchall"] == true { "*" } else { "" }
            ),
            pct(&i["precision"]),
            pct(&i["recall"]),
            i["support"].as_u64().unwrap_or(0),
            i["threshold"].as_f64().map_or("—".into(), |t| {
                format!(
                    "{t:.4}{}",
                    if i["threshold_derived"] == true {
                        "a"
                    } else {
                        ""
                    }
                )
            }),
            format!(
                "{} / {} / {}",
                q(own, "min"),
                q(own, "median"),
                q(own, "max")
            ),
            q(&i["best_other_score"], "median"),
        );
    }
    out += "(* the catchall; a: derived from the examples)\n\nconfusion (rows: labelled, columns: routed)\n";
    let labels: Vec<&str> = report["confusion"]["labels"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .filter_map(Value::as_str)
        .collect();
    out += &format!("{:<20}", "");
    for l in &labels {
        out += &format!(" {:>10.10}", l);
    }
    out += "\n";
    let rows = report["confusion"]["rows_labelled_columns_routed"].as_array();
    for (l, row) in labels.iter().zip(rows.unwrap_or(&empty)) {
        out += &format!("{l:<20}");
        for c in row.as_array().unwrap_or(&empty) {
            out += &format!(" {:>10}", c.as_u64().unwrap_or(0));
        }
        out += "\n";
    }
    let s = &report["suggested"];
    out += &format!(
        "\nlevels that would reach {} on this set (not applied; write them all in the router to use them):\n",
        pct(&s["accuracy"])
    );
    for t in s["thresholds"].as_array().unwrap_or(&empty) {
        out += &format!(
            "  instance {:<18} threshold = {}\n",
            t["instance"].as_str().unwrap_or(""),
            t["threshold"]
        );
    }
    out += &format!("  router margin = {}\n", s["margin"]);
    out
}
