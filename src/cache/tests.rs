use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::*;
use crate::protocol::openai::request_from_value;

fn req(v: Value) -> crate::protocol::ChatRequest {
    request_from_value(v).unwrap()
}

fn base() -> Value {
    json!({"model": "m", "temperature": 0, "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is the capital of Australia?"}]})
}

fn with(change: impl Fn(&mut Value)) -> Value {
    let mut v = base();
    change(&mut v);
    v
}

#[test]
fn what_cannot_change_the_answer_is_left_out_of_the_key_and_everything_else_is_in() {
    let k = |v: Value| key("key:a", ["m"], &req(v));
    let same = k(base());
    // (what changed, whether the key must stay)
    let cases: Vec<(&str, Value, bool)> = vec![
        ("stream", with(|v| v["stream"] = json!(true)), true),
        (
            "stream_options",
            with(|v| v["stream_options"] = json!({"include_usage": true})),
            true,
        ),
        ("user", with(|v| v["user"] = json!("u-1")), true),
        (
            "metadata",
            with(|v| v["metadata"] = json!({"trace": "x"})),
            true,
        ),
        (
            "temperature",
            with(|v| v["temperature"] = json!(0.7)),
            false,
        ),
        (
            "system prompt",
            with(|v| v["messages"][0]["content"] = json!("Be long.")),
            false,
        ),
        (
            "question",
            with(|v| v["messages"][1]["content"] = json!("What is the capital of Austria?")),
            false,
        ),
        (
            "tools",
            with(|v| v["tools"] = json!([{"type": "function", "function": {"name": "f"}}])),
            false,
        ),
        ("seed", with(|v| v["seed"] = json!(7)), false),
        ("max_tokens", with(|v| v["max_tokens"] = json!(10)), false),
    ];
    for (what, v, stays) in cases {
        assert_eq!(k(v) == same, stays, "{what}");
    }
    // The scope and the chain are in it: another key or another model never shares an entry.
    assert_ne!(key("key:b", ["m"], &req(base())), same);
    assert_ne!(key("key:a", ["m2"], &req(base())), same);
    assert_ne!(key("key:a", ["m", "m2"], &req(base())), same);
}

#[test]
fn some_requests_are_never_cached_and_say_why() {
    let r = |v: Value, det: bool| refusal(&req(v), det);
    assert_eq!(r(base(), true), None);
    assert_eq!(r(with(|v| v["n"] = json!(2)), false), Some(Bypass::Choices));
    let warm = with(|v| v["temperature"] = json!(0.8));
    assert_eq!(r(warm.clone(), false), None);
    assert_eq!(r(warm, true), Some(Bypass::Sampled));
    let seeded = with(|v| {
        v["temperature"] = json!(0.8);
        v["seed"] = json!(1);
    });
    assert_eq!(r(seeded, true), None);
}

fn answer(text: &str) -> crate::protocol::ChatResponse {
    crate::protocol::openai::response_from_value(json!({"id": "c1", "object": "chat.completion",
        "model": "m", "choices": [{"index": 0, "finish_reason": "stop",
        "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}}))
    .unwrap()
}

fn keeping(cost_micros: u64, ttl: Duration) -> Keeping {
    Keeping {
        cost_micros,
        ttl,
        max_entry_bytes: 4096,
        origin: Origin {
            key: "a".into(),
            models: vec!["m".into()],
        },
    }
}

#[test]
fn entries_expire_stay_under_their_bytes_and_count_hits() {
    let cache = Cache::new(64 * 1024);
    let now = Instant::now();
    let ttl = Duration::from_secs(60);
    let k1 = key("key:a", ["m"], &req(base()));
    assert!(matches!(cache.lookup(&k1, now), Found::Miss));
    assert!(cache.store(k1, answer("Canberra."), keeping(120, ttl), now));
    match cache.lookup(&k1, now + Duration::from_secs(5)) {
        Found::Hit(e) => {
            assert_eq!(e.cost_micros, 120);
            assert_eq!(e.age(now + Duration::from_secs(5)), 5);
            assert_eq!(
                e.response.choices[0]
                    .message
                    .content
                    .as_ref()
                    .unwrap()
                    .text(),
                "Canberra."
            );
        }
        Found::Miss => panic!("a fresh entry missed"),
    }
    // Past its TTL: gone.
    assert!(matches!(cache.lookup(&k1, now + ttl), Found::Miss));
    // Over max_entry_bytes: not kept.
    assert!(!cache.store(k1, answer(&"x".repeat(5000)), keeping(1, ttl), now));
    // Many entries: the total stays under max_bytes.
    for i in 0..400u32 {
        let k = key("key:a", ["m"], &req(with(|v| v["seed"] = json!(i))));
        cache.store(k, answer(&"y".repeat(1000)), keeping(1, ttl), now);
    }
    let stats = cache.stats();
    assert!(stats["bytes"].as_u64().unwrap() <= 64 * 1024, "{stats}");
    assert!(stats["entries"].as_u64().unwrap() < 400, "{stats}");
    assert_eq!(stats["hits"], 1);
    assert_eq!(stats["misses"], 2);
}
