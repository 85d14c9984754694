//! The response cache in Redis, shared by replicas: one replica's answer is another's hit, the
//! admin API sees and clears every replica's entries, and a Redis that stops answering makes
//! lookups misses within the state store's 250 ms, never a refusal. Keys' and models' policies
//! over `[cache]`, and hits charged to budgets when `charge_hits` says so.

use std::time::{Duration, Instant};

use serde_json::json;

use super::*;
use crate::support::*;

/// `[state]` on `url` under `prefix`, and a Redis-backed cache.
fn shared(url: &str, prefix: &str) -> String {
    format!(
        "[state]\nurl = \"{url}\"\nprefix = \"{prefix}\"\n\n[cache]\nenabled = true\nbackend = \"redis\"\n"
    )
}

/// A replica in front of `up`, connected to Redis.
async fn replica(url: &str, prefix: &str, up: &str) -> Gateway {
    let gw = gateway(&format!(
        "{}\n{}",
        shared(url, prefix),
        models_channel("a", up, &["m"], "")
    ))
    .await;
    wait_connected(&gw, true).await;
    gw
}

/// Waits until `gw` says `want` for the question (the answer is kept in the background).
async fn until_said(gw: &Gateway, want: &str) {
    until(
        &format!("the cache to say {want}"),
        Duration::from_secs(5),
        async || match said(gw, KEY, question(json!({}))).await {
            s if s == want => Ok(()),
            s => Err(s),
        },
    )
    .await;
}

/// Waits until the admin API on `gw` counts `n` entries. Asking the gateway instead would make
/// misses of its own whose keeping lands at any time later, even after a clear.
async fn until_kept(gw: &Gateway, n: u64) {
    until(
        &format!("{n} cache entries"),
        Duration::from_secs(5),
        async || match as_admin(gw, "GET", "/admin/cache", None).await {
            (200, v) if v["entries"].as_u64() == Some(n) => Ok(()),
            (_, v) => Err(v),
        },
    )
    .await;
}

#[tokio::test]
async fn replicas_on_redis_share_entries_and_the_admin_api_sees_and_clears_them() {
    let up = mock(text_spec("Canberra")).await;
    let prefix = redis_prefix("cache");
    let a = replica(REDIS_URL, &prefix, &up.base_url()).await;
    let b = replica(REDIS_URL, &prefix, &up.base_url()).await;
    let (st, cache, _, first) = chat_as(&a, KEY, &[], question(json!({}))).await;
    assert_eq!((st, cache.as_str()), (200, "miss"));
    // The other replica answers from what the first kept, without the upstream.
    until_kept(&b, 1).await;
    assert_eq!(said(&b, KEY, question(json!({}))).await, "hit");
    let (_, cache, age, again) = chat_as(&b, KEY, &[], question(json!({"stream": false}))).await;
    assert_eq!(cache, "hit");
    assert!(age.parse::<u64>().is_ok());
    assert_eq!(text_of(&again), text_of(&first));
    assert_eq!(up.requests(), 1);
    // Every replica's counts and entries, from either.
    let (st, stats) = as_admin(&a, "GET", "/admin/cache", None).await;
    assert_eq!(st, 200);
    assert_eq!(stats["backend"], "redis", "{stats}");
    assert_eq!(stats["entries"], 1, "{stats}");
    assert!(stats["bytes"].as_u64().unwrap() > 0, "{stats}");
    assert!(stats["hits"].as_u64().unwrap() >= 2, "{stats}");
    // Cleared through one replica: gone for both.
    let (st, v) = as_admin(&b, "DELETE", "/admin/cache?key=team-a", None).await;
    assert_eq!((st, v["removed"].as_u64()), (200, Some(1)), "{v}");
    assert_eq!(said(&a, KEY, question(json!({}))).await, "miss");
    assert_eq!(up.requests(), 2);
    until_kept(&b, 1).await;
    assert_eq!(said(&b, KEY, question(json!({}))).await, "hit");
    let (_, v) = as_admin(&a, "DELETE", "/admin/cache", None).await;
    assert_eq!(v["removed"], 1, "{v}");
    assert_eq!(said(&b, KEY, question(json!({}))).await, "miss");
}

#[tokio::test]
async fn a_redis_that_stops_answering_makes_lookups_misses_within_the_bound() {
    let own = OwnRedis::start(free_port());
    own.wait_ready().await;
    let up = mock(text_spec("Canberra")).await;
    let gw = replica(&own.url(), &redis_prefix("stall"), &up.base_url()).await;
    assert_eq!(said(&gw, KEY, question(json!({}))).await, "miss");
    until_said(&gw, "hit").await;
    // Redis frozen: connected, silent.
    let pid = own.child.id().to_string();
    let signal = |s: &str| {
        let ok = std::process::Command::new("kill")
            .args([s, &pid])
            .status()
            .is_ok_and(|st| st.success());
        assert!(ok, "kill {s} {pid}");
    };
    signal("-STOP");
    for _ in 0..3 {
        let t0 = Instant::now();
        let (st, cache, _, body) = chat_as(&gw, KEY, &[], question(json!({}))).await;
        let took = t0.elapsed();
        assert_eq!((st, cache.as_str()), (200, "miss"), "{body}");
        // The lookup waits 250 ms at most; the answer is kept in the background.
        assert!(took < Duration::from_millis(1000), "took {took:?}");
    }
    signal("-CONT");
}

#[tokio::test]
async fn keys_and_models_set_their_own_cache_policy() {
    let up = mock(text_spec("Canberra")).await;
    let channels = models_channel("a", &up.base_url(), &["m", "fresh", "never"], "");
    let gw = gateway_full(
        "",
        "\n[[keys]]\nname = \"nocache\"\nkey = \"sk-nocache-0001\"\ncache = { mode = \"off\" }",
        &format!(
            "{CACHE}\n[[models]]\nname = \"never\"\ncache = {{ mode = \"off\" }}\n\n\
             [[models]]\nname = \"fresh\"\ncache = {{ ttl_seconds = 1 }}\n\n{channels}"
        ),
    )
    .await;
    let ask = |model: &str| question(json!({"model": model}));
    // A key whose policy is off: never looked up nor kept, and said.
    for _ in 0..2 {
        let r = gw
            .post_as("/v1/chat/completions", "sk-nocache-0001", &[], ask("m"))
            .await;
        assert_eq!(header(&r, "x-switchyard-cache"), "bypass");
        assert_eq!(header(&r, "x-switchyard-cache-bypass"), "cache_off");
    }
    // A model whose policy is off, the same.
    assert_eq!(said(&gw, KEY, ask("never")).await, "bypass");
    assert_eq!(said(&gw, KEY, ask("never")).await, "bypass");
    // A model with its own TTL: a hit, then a miss once its second has passed.
    assert_eq!(said(&gw, KEY, ask("fresh")).await, "miss");
    assert_eq!(said(&gw, KEY, ask("fresh")).await, "hit");
    until(
        "the model's 1 s TTL to pass",
        Duration::from_secs(5),
        async || match said(&gw, KEY, ask("fresh")).await {
            s if s == "miss" => Ok(()),
            s => Err(s),
        },
    )
    .await;
    // The rest keep `[cache]`'s.
    assert_eq!(said(&gw, KEY, ask("m")).await, "miss");
    assert_eq!(said(&gw, KEY, ask("m")).await, "hit");
}

#[tokio::test]
async fn with_charge_hits_a_hit_is_charged_as_the_answer_it_replays() {
    let (up, gw) = priced_gateway("0.5", "charge_hits = true\n").await;
    let q = question(json!({"max_tokens": 5}));
    let first = gw
        .post_as("/v1/chat/completions", KEY, &[], q.clone())
        .await;
    assert_eq!(header(&first, "x-switchyard-cache"), "miss");
    let cost: u64 = header(&first, "x-switchyard-cost-micros").parse().unwrap();
    assert!(cost > 0);
    // Hits are charged the answer's cost until the budget is spent, then refused like calls.
    let mut hits = 0;
    loop {
        let r = gw
            .post_as("/v1/chat/completions", KEY, &[], q.clone())
            .await;
        if r.status() == 429 {
            let body = r.text().await.unwrap();
            assert!(body.contains("budget_exceeded"), "{body}");
            break;
        }
        assert_eq!(header(&r, "x-switchyard-cache"), "hit");
        assert_eq!(header(&r, "x-switchyard-cost-micros"), cost.to_string());
        hits += 1;
        assert!(hits < 100, "hits were never refused");
    }
    assert!(hits >= 2, "{hits} hits before the budget ran out");
    assert_eq!(up.requests(), 1, "a hit reached the upstream");
    let row = usage_row(&gw, "cache").await;
    assert_eq!(row["cost_micros"].as_u64(), Some(hits * cost), "{row}");
}
