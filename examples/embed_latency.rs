//! Local embedder latency per short prompt (release build; the model from
//! SWITCHYARD_EMBED_MODEL_DIR, e.g. all-MiniLM-L6-v2):
//!
//!   cargo run --release --example embed_latency
//!
//! Prints p50 / p90 / p99 over 200 embeddings of prompts of 5–20 words, after a warm-up, and
//! the hashed fallback on the same prompts as a same-run baseline.

use std::time::{Duration, Instant};

use switchyard::semantic::hashed;
use switchyard::semantic::local::LocalModel;

const PROMPTS: &[&str] = &[
    "write a python function that checks whether a number is prime",
    "translate this sentence into french",
    "why does my rust code not compile",
    "hello",
    "give me a recipe for banana bread with walnuts and a little cinnamon please",
    "explain this stack trace from my java service in simple words",
];

fn percentiles(mut d: Vec<Duration>) -> (Duration, Duration, Duration) {
    d.sort();
    let at = |p: f64| d[((d.len() as f64 - 1.0) * p) as usize];
    (at(0.5), at(0.9), at(0.99))
}

fn main() {
    let dir = std::env::var("SWITCHYARD_EMBED_MODEL_DIR")
        .expect("set SWITCHYARD_EMBED_MODEL_DIR to a MiniLM directory");
    let t0 = Instant::now();
    let model = LocalModel::load(std::path::Path::new(&dir)).expect("model loads");
    println!("load: {:?}", t0.elapsed());
    for p in PROMPTS {
        model.embed(p).expect("embeds");
    }
    let mut local = Vec::new();
    let mut base = Vec::new();
    for i in 0..200 {
        let p = PROMPTS[i % PROMPTS.len()];
        let t = Instant::now();
        std::hint::black_box(model.embed(p).expect("embeds"));
        local.push(t.elapsed());
        let t = Instant::now();
        std::hint::black_box(hashed(p));
        base.push(t.elapsed());
    }
    let (p50, p90, p99) = percentiles(local);
    let (b50, _, b99) = percentiles(base);
    println!("local MiniLM: p50 {p50:?}  p90 {p90:?}  p99 {p99:?}");
    println!("hashed fallback (same prompts): p50 {b50:?}  p99 {b99:?}");
}
