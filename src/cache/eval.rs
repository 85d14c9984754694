//! `switchyard cache eval`: what the semantic cache would do with labelled pairs of questions
//! (`{"a", "b", "same"}`, optionally `"kind"`): each pair embedded by `[cache] embedder` and
//! decided by the very rule lookups use (cosine ≥ `similarity`, then the guards). Reports
//! `precision` (of the pairs it would answer from the cache, how many ask the same) and
//! `hit_rate` (of the same-question pairs, how many it answers), what the cosine alone would
//! do, a sweep of thresholds, and the wrong answers it would give. Nothing is applied.

use serde_json::{Value, json};

use super::guard::same_question;
use crate::config::Snapshot;
use crate::semantic::{EmbedError, Semantic, dot};

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("the config has no [cache] embedder: set [cache] mode = \"semantic\" and embedder")]
    NoEmbedder,
    #[error("line {line}: {message}")]
    Line { line: usize, message: String },
    #[error("line {line}: a question could not be embedded: {source}")]
    Embed { line: usize, source: EmbedError },
    #[error("the labelled set has no pairs")]
    Empty,
}

/// One labelled pair, scored.
struct Pair {
    line: usize,
    a: String,
    b: String,
    same: bool,
    kind: String,
    cosine: f32,
    guards: bool,
}

/// Precision and hit rate of answering the pairs `answered` says yes to.
fn score<'a>(pairs: &'a [Pair], answered: impl Fn(&Pair) -> bool + 'a) -> Value {
    let yes: Vec<&Pair> = pairs.iter().filter(|p| answered(p)).collect();
    let right = yes.iter().filter(|p| p.same).count();
    let same = pairs.iter().filter(|p| p.same).count();
    json!({
        "answered": yes.len(),
        "wrong": yes.len() - right,
        "precision": (!yes.is_empty()).then(|| right as f64 / yes.len() as f64),
        "hit_rate": (same > 0).then(|| right as f64 / same as f64),
    })
}

/// Embeds every pair of `labelled` with the config's cache embedder, and reports.
pub async fn run(snap: &Snapshot, labelled: &str) -> Result<Value, EvalError> {
    let settings = snap.cache.as_ref().ok_or(EvalError::NoEmbedder)?;
    let spec = settings.embedder.as_ref().ok_or(EvalError::NoEmbedder)?;
    let health = crate::health::Health::new(std::sync::Arc::new(crate::clock::SystemClock));
    let semantic = Semantic::default();
    let mut pairs = Vec::new();
    for (line, v) in crate::semantic::eval::json_lines(labelled) {
        let bad = |message: String| EvalError::Line { line, message };
        let v = v.map_err(bad)?;
        let (Some(a), Some(b), Some(same)) =
            (v["a"].as_str(), v["b"].as_str(), v["same"].as_bool())
        else {
            return Err(bad(
                "expected {\"a\": ..., \"b\": ..., \"same\": true|false}".into(),
            ));
        };
        let mut vectors = Vec::with_capacity(2);
        for t in [a, b] {
            // Generous: an evaluation waits for a cold model rather than fail.
            let within = settings
                .embed_timeout
                .max(std::time::Duration::from_secs(60));
            let v = semantic
                .embed_one(snap, &health, spec, t, within)
                .await
                .map_err(|source| EvalError::Embed { line, source })?;
            vectors.push(v);
        }
        pairs.push(Pair {
            line,
            a: a.to_string(),
            b: b.to_string(),
            same,
            kind: v["kind"].as_str().unwrap_or("").to_string(),
            cosine: dot(&vectors[0], &vectors[1]),
            guards: same_question(a, b),
        });
    }
    if pairs.is_empty() {
        return Err(EvalError::Empty);
    }
    Ok(report(&pairs, settings.similarity))
}

fn report(pairs: &[Pair], similarity: f32) -> Value {
    let at = score(pairs, move |p| p.cosine >= similarity && p.guards);
    let cosine_only = score(pairs, move |p| p.cosine >= similarity);
    let sweep: Vec<Value> = [0.5f32, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.98]
        .into_iter()
        .map(|t| {
            let mut s = score(pairs, move |p| p.cosine >= t && p.guards);
            s["similarity"] = json!((f64::from(t) * 100.0).round() / 100.0);
            s
        })
        .collect();
    let wrong: Vec<Value> = pairs
        .iter()
        .filter(|p| !p.same && p.cosine >= similarity && p.guards)
        .map(|p| json!({"line": p.line, "a": p.a, "b": p.b, "kind": p.kind, "cosine": p.cosine}))
        .collect();
    let mut kinds: std::collections::BTreeMap<&str, (usize, usize)> = Default::default();
    for p in pairs {
        let k = kinds.entry(p.kind.as_str()).or_default();
        k.0 += 1;
        k.1 += usize::from(p.cosine >= similarity && p.guards);
    }
    json!({
        "pairs": pairs.len(),
        "same_pairs": pairs.iter().filter(|p| p.same).count(),
        "similarity": (f64::from(similarity) * 1000.0).round() / 1000.0,
        "precision": at["precision"],
        "hit_rate": at["hit_rate"],
        "answered": at["answered"],
        "wrong": at["wrong"],
        "cosine_only": cosine_only,
        "sweep": sweep,
        "by_kind": kinds.into_iter().map(|(k, (n, a))| (k.to_string(), json!({"pairs": n, "answered": a}))).collect::<serde_json::Map<_, _>>(),
        "wrong_answers": wrong,
        "missed": pairs.iter().filter(|p| p.same && !(p.cosine >= similarity && p.guards)).map(|p| json!({"line": p.line, "a": p.a, "b": p.b, "cosine": p.cosine, "guards": p.guards})).collect::<Vec<_>>(),
    })
}

/// The report for a terminal.
pub fn text(r: &Value) -> String {
    let pct = |v: &Value| v.as_f64().map_or("-".to_string(), |x| format!("{:.3}", x));
    let mut out = format!(
        "{} pairs ({} the same question), similarity {}\n\
         precision {}  hit_rate {}  ({} answered, {} wrong)\n\
         cosine alone: precision {}  hit_rate {}  ({} wrong)\n\nsweep (with the guards):\n",
        r["pairs"],
        r["same_pairs"],
        r["similarity"],
        pct(&r["precision"]),
        pct(&r["hit_rate"]),
        r["answered"],
        r["wrong"],
        pct(&r["cosine_only"]["precision"]),
        pct(&r["cosine_only"]["hit_rate"]),
        r["cosine_only"]["wrong"],
    );
    for s in r["sweep"].as_array().into_iter().flatten() {
        out += &format!(
            "  {:>5}  precision {}  hit_rate {}\n",
            s["similarity"],
            pct(&s["precision"]),
            pct(&s["hit_rate"])
        );
    }
    for w in r["wrong_answers"].as_array().into_iter().flatten() {
        out += &format!("wrong: line {}: {} / {}\n", w["line"], w["a"], w["b"]);
    }
    out
}
