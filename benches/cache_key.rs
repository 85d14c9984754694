//! What an exact cache miss adds to a request: the entry's key (`cache::key`: the canonical
//! request printed into one buffer, SHA-256 once) and the lookup that finds nothing, on an
//! OpenAI Chat request the size the load benchmarks send, a 20 KiB one and a coding agent's
//! 200 KiB turn.
//!
//!   taskset -c 1 cargo bench --bench cache_key

use futures_util::FutureExt;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use switchyard::cache::{Cache, key};
use switchyard::protocol::openai::request_from_value;

// The gateway's allocator: the key's buffer is what a miss allocates.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// An OpenAI Chat request of about `size` bytes, with a system prompt and one tool.
fn request(size: usize) -> switchyard::protocol::ChatRequest {
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(size / 45 + 1);
    let v = serde_json::json!({
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": &text[..size.saturating_sub(300)]}
        ],
        "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}],
        "temperature": 0,
        "max_tokens": 256
    });
    request_from_value(v).expect("a valid request")
}

fn miss(c: &mut Criterion) {
    let cache = Cache::in_memory(256 << 20);
    let mut g = c.benchmark_group("cache_miss");
    for (name, size) in [("300B", 300), ("20KiB", 20 << 10), ("200KiB", 200 << 10)] {
        let req = request(size);
        g.bench_function(format!("key_{name}"), |t| {
            t.iter(|| black_box(key("key:bench", ["gpt-4o-mini"], black_box(&req))))
        });
        g.bench_function(format!("key_and_lookup_{name}"), |t| {
            t.iter(|| {
                let k = key("key:bench", ["gpt-4o-mini"], black_box(&req));
                // The memory backend's lookup is ready at once.
                black_box(cache.get(&k).now_or_never().flatten().is_none())
            })
        });
    }
    g.finish();
}

criterion_group!(benches, miss);
criterion_main!(benches);
