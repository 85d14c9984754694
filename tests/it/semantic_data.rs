//! The labelled prompts semantic routing is measured on, and the router config they are routed
//! through: shared by the channel-embedder tests (`semantic`), the local model's (`local_embedder`)
//! and `switchyard explain` (`cli`).

use serde_json::json;
use switchyard::provider::mock::MockServer;

use crate::support::{Gateway, header, models_channel};

/// Prompts labelled with the semantic-router instance that should serve them.
pub const LABELLED: &[(&str, &str)] = &[
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

/// Channels for models `coder`, `translator`, `general` in front of `m`, and router `auto`
/// (instances `code`, `translate`, catchall `default`) with `embedder`; `extra` channels too.
pub fn labelled_config(m: &[MockServer; 3], threshold: f64, embedder: &str, extra: &str) -> String {
    format!(
        "{}{}{}{extra}\
         [[routers]]\nmodel = \"auto\"\nthreshold = {threshold}\nexpose_scores = true\n\
         embedder = {embedder}\n\
         [[routers.instances]]\nname = \"code\"\nmodel = \"coder\"\n\
         examples = [\"write a function in python\", \"debug this code\", \"fix the compiler error\", \"write a SQL query\", \"explain this exception\"]\n\
         [[routers.instances]]\nname = \"translate\"\nmodel = \"translator\"\n\
         examples = [\"translate this into French\", \"how do you say this in Spanish\", \"what is this word in German\"]\n\
         [[routers.instances]]\nname = \"default\"\nmodel = \"general\"\ncatchall = true\n",
        models_channel("c-coder", &m[0].base_url(), &["coder"], ""),
        models_channel("c-translator", &m[1].base_url(), &["translator"], ""),
        models_channel("c-general", &m[2].base_url(), &["general"], ""),
    )
}

/// Routes every [`LABELLED`] prompt through `auto`; prints and returns the share routed right.
pub async fn labelled_accuracy(gw: &Gateway, embedder: &str) -> f64 {
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
                "misrouted ({embedder}): {prompt:?} -> {got} (want {want}); scores {}",
                header(&resp, "x-switchyard-semantic-scores")
            );
        }
    }
    let accuracy = f64::from(right) / LABELLED.len() as f64;
    eprintln!(
        "semantic routing accuracy ({embedder}): {right}/{} = {accuracy:.2}",
        LABELLED.len()
    );
    accuracy
}
