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
    let r = |v: Value, det: bool| refusal(&req(v), det, 1000);
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
    let image = |n: usize| {
        with(|v| {
            v["messages"][1]["content"] = json!([{"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{}", "A".repeat(n))}}]);
        })
    };
    assert_eq!(r(image(100), false), None);
    assert_eq!(r(image(2000), false), Some(Bypass::LargeMedia));
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

#[tokio::test]
async fn entries_expire_stay_under_their_bytes_and_count_hits() {
    let cache = Cache::in_memory(64 * 1024);
    let ttl = Duration::from_millis(300);
    let k1 = key("key:a", ["m"], &req(base()));
    assert!(cache.get(&k1).await.is_none());
    cache.count(Outcome::Miss);
    assert!(cache.store(k1, answer("Canberra."), keeping(120, ttl), None));
    let e = cache.get(&k1).await.expect("a fresh entry");
    cache.count(Outcome::Hit);
    assert_eq!(e.cost_micros, 120);
    assert_eq!(e.age(e.stored + Duration::from_secs(5)), 5);
    assert_eq!(
        e.response.choices[0]
            .message
            .content
            .as_ref()
            .unwrap()
            .text(),
        "Canberra."
    );
    // Past its TTL: gone.
    let deadline = Instant::now() + Duration::from_secs(5);
    while cache.get(&k1).await.is_some() {
        assert!(Instant::now() < deadline, "an entry outlived its TTL");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cache.count(Outcome::Miss);
    // Over max_entry_bytes: not kept.
    assert!(!cache.store(k1, answer(&"x".repeat(5000)), keeping(1, ttl), None));
    // Many entries: the total stays under max_bytes.
    for i in 0..400u32 {
        let k = key("key:a", ["m"], &req(with(|v| v["seed"] = json!(i))));
        cache.store(
            k,
            answer(&"y".repeat(1000)),
            keeping(1, Duration::from_secs(60)),
            None,
        );
    }
    let stats = cache.stats().await;
    assert!(stats["bytes"].as_u64().unwrap() <= 64 * 1024, "{stats}");
    assert!(stats["entries"].as_u64().unwrap() < 400, "{stats}");
    assert_eq!(stats["hits"], 1);
    assert_eq!(stats["misses"], 2);
}

fn question(bucket: Key, text: &str, v: &[f32]) -> Question {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    Question {
        bucket,
        text: text.into(),
        vector: v.iter().map(|x| x / n).collect::<Vec<_>>().into(),
    }
}

#[tokio::test]
async fn a_similar_question_is_found_only_in_its_bucket_and_only_if_the_guards_agree() {
    let cache = Cache::in_memory(1 << 20);
    let (b1, b2) = ([1u8; 32], [2u8; 32]);
    let kept = key("key:a", ["m"], &req(base()));
    let q = question(b1, "What is the capital of Australia?", &[1.0, 0.1, 0.0]);
    let keep = keeping(5, Duration::from_secs(60));
    assert!(cache.store(kept, answer("Canberra."), keep, Some(q)));
    // (question, bucket, vector, expected)
    let cases = [
        (
            "what's the capital of australia",
            b1,
            [1.0, 0.12, 0.0],
            true,
        ),
        // Close enough by cosine, but another country: the guards refuse.
        (
            "What is the capital of Austria?",
            b1,
            [1.0, 0.1, 0.01],
            false,
        ),
        // Same words in another bucket (another system prompt, model or scope).
        (
            "what's the capital of australia",
            b2,
            [1.0, 0.12, 0.0],
            false,
        ),
        // Same words, far by cosine (under the threshold).
        (
            "what's the capital of australia",
            b1,
            [0.0, 0.0, 1.0],
            false,
        ),
    ];
    for (text, bucket, v, found) in cases {
        let got = cache.similar(&question(bucket, text, &v), 0.9).await;
        assert_eq!(got.is_some(), found, "{text:?} in {bucket:?}");
        if let Some((k, cos)) = got {
            assert_eq!(k, kept);
            assert!(cos >= 0.9);
        }
    }
}

#[test]
fn only_one_text_question_has_a_semantic_bucket_and_the_question_is_not_in_it() {
    let b = |v: Value, multi: bool| bucket("key:a", ["m"], &req(v), multi);
    let (k1, q1) = b(base(), false).unwrap();
    assert_eq!(q1, "What is the capital of Australia?");
    let other = with(|v| v["messages"][1]["content"] = json!("Capital of Austria?"));
    assert_eq!(
        b(other, false).unwrap().0,
        k1,
        "the question is not in the bucket"
    );
    let sys = with(|v| v["messages"][0]["content"] = json!("Be long."));
    assert_ne!(b(sys, false).unwrap().0, k1, "the system prompt is");
    let multi = with(|v| {
        v["messages"] = json!([{"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "What is the capital of Australia?"}]);
    });
    assert!(b(multi.clone(), false).is_none());
    assert!(b(multi, true).is_some());
    let image = with(|v| {
        v["messages"][1]["content"] = json!([{"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]);
    });
    assert!(b(image, false).is_none());
}
