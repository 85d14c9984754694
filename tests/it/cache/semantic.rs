//! The semantic cache with the local MiniLM embedder: a paraphrase is answered from the cache
//! (`semantic-hit`, with the similarity), a near-miss that scores as high is not, nor is the
//! same question under another system prompt; and `switchyard cache eval` on the labelled
//! pairs (`tests/fixtures/cache/`) reports the precision and hit rate the defaults are set by.
//! Needs SWITCHYARD_EMBED_MODEL_DIR (fails under CI without it).

use serde_json::{Value, json};

use super::*;
use crate::support::*;

/// `[cache]` in semantic mode on the local model in `dir`, at the default similarity.
fn semantic(dir: &str) -> String {
    format!(
        "[cache]\nenabled = true\nmode = \"semantic\"\nembed_timeout_ms = 30000\n\
         embedder = {{ kind = \"local\", model_dir = \"{dir}\" }}\n"
    )
}

fn asking(text: &str) -> Value {
    question(json!({"messages": [
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": text}]}))
}

#[tokio::test]
async fn a_paraphrase_is_answered_from_the_cache_and_a_near_miss_is_not() {
    let Some(dir) = minilm_dir() else { return };
    let up = mock(text_spec("Canberra")).await;
    let gw = gateway(&format!(
        "{}\n{}",
        semantic(&dir),
        models_channel("a", &up.base_url(), &["m"], "")
    ))
    .await;
    assert_eq!(
        said(&gw, KEY, asking("What is the capital of Australia?")).await,
        "miss"
    );
    // (question, what the cache says)
    let cases = [
        ("what's the capital of Australia, please?", "semantic-hit"),
        ("WHAT IS THE CAPITAL OF AUSTRALIA??", "semantic-hit"),
        ("What is the capital of Austria?", "miss"),
        ("What is the capital of Australia's neighbour?", "miss"),
    ];
    for (text, want) in cases {
        let r = gw
            .post_as("/v1/chat/completions", KEY, &[], asking(text))
            .await;
        assert_eq!(header(&r, "x-switchyard-cache"), want, "{text:?}");
        let sim = header(&r, "x-switchyard-cache-similarity").parse::<f64>();
        match want {
            "semantic-hit" => assert!(sim.is_ok_and(|s| s >= 0.9), "{text:?}"),
            _ => assert!(sim.is_err(), "{text:?}"),
        }
    }
    // Two near-misses reached the upstream; the paraphrases did not.
    assert_eq!(up.requests(), 3);
    // The same words under another system prompt are another question.
    let other = question(json!({"messages": [
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "what's the capital of Australia?"}]}));
    assert_eq!(said(&gw, KEY, other).await, "miss");
    // Streamed, a semantic hit is the kept answer as a stream.
    let mut streamed = asking("What's the capital of Australia?");
    streamed["stream"] = json!(true);
    let r = gw.post_as("/v1/chat/completions", KEY, &[], streamed).await;
    assert_eq!(header(&r, "x-switchyard-cache"), "semantic-hit");
    assert!(sse_text(&r.text().await.unwrap()).contains("Canberra"));
    let metrics = metrics_text(&gw.url).await;
    assert!(
        metrics.contains("switchyard_cache_requests_total{result=\"semantic-hit\"} 3"),
        "{metrics}"
    );
    assert!(metrics.contains("switchyard_cache_lookup_seconds_count"));
    let rows = gw.admin_requests().await;
    assert!(
        rows.iter().any(|r| r["cache"] == "semantic-hit"),
        "{rows:?}"
    );
}

/// `switchyard cache eval --json` of the semantic config on `labelled`.
fn eval(dir: &str, labelled: &str) -> Value {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("switchyard.toml");
    std::fs::write(
        &config,
        format!(
            "{}\n[[channels]]\nname = \"a\"\nprovider = \"mock\"\nmodels = [\"m\"]\n",
            semantic(dir)
        ),
    )
    .unwrap();
    let config = config.to_string_lossy();
    let ran = run_bin(
        &[
            "--log-level",
            "error",
            "cache",
            "eval",
            "--config",
            &config,
            "--labelled",
            labelled,
            "--json",
        ],
        &[],
    );
    assert!(ran.ok, "{}", ran.err);
    serde_json::from_str(&ran.out).expect("the report is JSON")
}

#[tokio::test]
async fn cache_eval_reports_the_precision_and_hit_rate_the_defaults_give() {
    let Some(dir) = minilm_dir() else { return };
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/cache");
    for (set, min_pairs) in [("pairs.jsonl", 200), ("heldout.jsonl", 200)] {
        let r = eval(&dir, &format!("{fixtures}/{set}"));
        assert!(r["pairs"].as_u64().unwrap() >= min_pairs, "{set}: {r}");
        let (precision, hit_rate) = (
            r["precision"].as_f64().unwrap(),
            r["hit_rate"].as_f64().unwrap(),
        );
        assert!(
            precision >= 0.98,
            "{set}: precision {precision}: {}",
            r["wrong_answers"]
        );
        assert!(hit_rate >= 0.3, "{set}: hit rate {hit_rate}");
        // Without the guards the cosine answers near-misses: why they are there.
        assert!(
            r["cosine_only"]["precision"].as_f64().unwrap() < 0.9,
            "{set}: {r}"
        );
    }
}
