//! Credential pools: a channel's keys are rotated, cooled and limited one by one, before the
//! channel itself is failed over.

use serde_json::Value;
use switchyard::provider::mock::{Fault, MockSpec};

use crate::support::*;

fn pool_channel(name: &str, base: &str, prio: u32, creds: &str) -> String {
    format!(
        "[[channels]]\nname = \"{name}\"\nprovider = \"openai\"\nbase_url = \"{base}\"\n\
         models = [\"m\"]\npriority = {prio}\ncredentials = [{creds}]\n\n"
    )
}

fn keys_seen(m: &switchyard::provider::mock::MockServer) -> Vec<String> {
    m.received()
        .iter()
        .map(|r| {
            r.headers["authorization"]
                .to_str()
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

/// A channel `pool` whose upstream refuses key `sk-aaaa-1111` (401), with these credentials.
async fn refusing_key_a(credentials: &str) -> (switchyard::provider::mock::MockServer, Gateway) {
    let pool = mock(with_key_faults(&[(
        "sk-aaaa-1111",
        Fault {
            status: Some(401),
            ..Fault::default()
        },
    )]))
    .await;
    let gw = gateway(&pool_channel("pool", &pool.base_url(), 1, credentials)).await;
    (pool, gw)
}

fn with_key_faults(faults: &[(&str, Fault)]) -> MockSpec {
    MockSpec {
        per_key: faults
            .iter()
            .map(|(k, f)| (k.to_string(), f.clone()))
            .collect(),
        ..text_spec("ok")
    }
}

#[tokio::test]
async fn a_rate_limited_key_is_swapped_inside_the_channel_before_failing_over() {
    let pool = mock(with_key_faults(&[(
        "sk-aaaa-1111",
        Fault {
            status: Some(429),
            retry_after_seconds: Some(30),
            ..Fault::default()
        },
    )]))
    .await;
    let backup = mock(text_spec("backup")).await;
    let gw = gateway(&format!(
        "{}{}",
        pool_channel(
            "pool",
            &pool.base_url(),
            1,
            r#"{ key = "sk-aaaa-1111", label = "a" }, { key = "sk-bbbb-2222", label = "b" }"#
        ),
        openai_channel("backup", &backup.base_url(), 2, "")
    ))
    .await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(header(&resp, "x-switchyard-channel"), "pool");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(
        reasons(&v["switchyard"]["failover"]["attempts"]),
        ["rate_limit", "ok"]
    );
    assert_eq!(
        keys_seen(&pool),
        ["Bearer sk-aaaa-1111", "Bearer sk-bbbb-2222"]
    );
    assert_eq!(backup.requests(), 0);
    // The cooled key is not tried again while it cools; the other one serves.
    for _ in 0..3 {
        assert_eq!(
            header(&gw.chat(chat_body(false)).await, "x-switchyard-channel"),
            "pool"
        );
    }
    assert!(
        keys_seen(&pool)[2..]
            .iter()
            .all(|k| k == "Bearer sk-bbbb-2222")
    );
    // The health view shows the key by label, never the key.
    let health = serde_json::to_string(&gw.admin_health().await).unwrap();
    assert!(
        health.contains("\"label\":\"a\"") && !health.contains("sk-aaaa"),
        "{health}"
    );
}

#[tokio::test]
async fn a_refused_key_is_disabled_and_the_others_carry_on() {
    let (pool, gw) = refusing_key_a(r#"{ key = "sk-aaaa-1111" }, { key = "sk-bbbb-2222" }"#).await;
    for _ in 0..4 {
        assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    }
    let seen = keys_seen(&pool);
    assert_eq!(
        seen.iter().filter(|k| k.contains("aaaa")).count(),
        1,
        "{seen:?}"
    );
    assert_eq!(seen.len(), 5);
    // A config change is a fresh start: the refused key is tried again.
    assert_eq!(gw.reload().await.status(), 200);
    for _ in 0..2 {
        gw.chat(chat_body(false)).await;
    }
    let seen = keys_seen(&pool);
    let refused = seen.iter().filter(|k| k.contains("aaaa")).count();
    assert_eq!(refused, 2, "{seen:?}");
}

#[tokio::test]
async fn max_concurrency_is_never_exceeded_and_overflow_goes_elsewhere() {
    let slow = mock(MockSpec {
        ttft_ms: 300,
        ..text_spec("pool")
    })
    .await;
    let backup = mock(text_spec("backup")).await;
    let gw = gateway(&format!(
        "{}{}",
        pool_channel(
            "pool",
            &slow.base_url(),
            1,
            r#"{ key = "sk-aaaa-1111", max_concurrency = 2 }"#
        ),
        openai_channel("backup", &backup.base_url(), 2, "")
    ))
    .await;
    let calls: Vec<_> = (0..6).map(|_| gw.chat(chat_body(false))).collect();
    let responses = futures_util::future::join_all(calls).await;
    assert!(responses.iter().all(|r| r.status() == 200));
    assert_eq!(slow.max_in_flight(), 2, "the key's two slots, never more");
    assert_eq!(slow.requests(), 2);
    assert_eq!(
        backup.requests(),
        4,
        "the overflow was served by the next tier"
    );
}

#[tokio::test]
async fn no_key_with_headroom_anywhere_is_429_with_the_time_to_the_earliest() {
    let pool = mock(with_key_faults(&[(
        "sk-aaaa-1111",
        Fault {
            status: Some(429),
            retry_after_seconds: Some(40),
            ..Fault::default()
        },
    )]))
    .await;
    let gw = gateway(&pool_channel(
        "pool",
        &pool.base_url(),
        1,
        r#"{ key = "sk-aaaa-1111", rpm = 60 }"#,
    ))
    .await;
    assert_eq!(gw.chat(chat_body(false)).await.status(), 429);
    gw.clock.advance(std::time::Duration::from_secs(10));
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(header(&resp, "retry-after"), "30");
    let e = error_envelope(resp, 429).await;
    assert_eq!(e["code"], "all_rate_limited");
    assert_eq!(reasons(&e["attempts"]), ["no_credential_headroom"]);
    assert_eq!(pool.requests(), 1);
}

#[tokio::test]
async fn a_stream_holds_its_key_slot_until_it_ends() {
    let slow = mock(MockSpec {
        chunks: 5,
        chunk_ms: 100,
        ..text_spec("streaming slowly")
    })
    .await;
    let backup = mock(text_spec("backup")).await;
    let gw = gateway(&format!(
        "{}{}",
        pool_channel(
            "pool",
            &slow.base_url(),
            1,
            r#"{ key = "sk-aaaa-1111", max_concurrency = 1 }"#
        ),
        openai_channel("backup", &backup.base_url(), 2, "")
    ))
    .await;
    let mut first = gw.chat(chat_body(true)).await;
    assert_eq!(header(&first, "x-switchyard-channel"), "pool");
    assert!(
        first.chunk().await.unwrap().is_some(),
        "committed and flowing"
    );
    // The first stream still holds the key's only slot: the next request goes elsewhere.
    let second = gw.chat(chat_body(true)).await;
    assert_eq!(header(&second, "x-switchyard-channel"), "backup");
    drop(second);
    while first.chunk().await.unwrap().is_some() {}
    drop(first);
    // The stream is over: the slot is free again.
    let third = gw.chat(chat_body(false)).await;
    assert_eq!(header(&third, "x-switchyard-channel"), "pool");
}

#[tokio::test]
async fn a_tpm_budget_is_settled_by_real_usage_and_refills() {
    let up = mock(text_spec("abc")).await;
    let gw = gateway(&pool_channel(
        "pool",
        &up.base_url(),
        1,
        r#"{ key = "sk-aaaa-1111", tpm = 200 }"#,
    ))
    .await;
    // ~100 prompt tokens each (400 characters); the mock reports 103 + 3 = 106 used.
    let body = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "x".repeat(400)}]});
    for stream in [false, true] {
        let mut b = body.clone();
        b["stream"] = stream.into();
        let resp = gw.chat(b).await;
        assert_eq!(resp.status(), 200);
        resp.text().await.unwrap();
    }
    // 200 - 2 x 106 = -12: overdrawn until 13 tokens have refilled (3.9 s at 200/min).
    let resp = gw.chat(body.clone()).await;
    assert_eq!(header(&resp, "retry-after"), "4");
    let e = error_envelope(resp, 429).await;
    assert_eq!(reasons(&e["attempts"]), ["no_credential_headroom"]);
    gw.clock.advance(std::time::Duration::from_secs(4));
    assert_eq!(gw.chat(body).await.status(), 200);
    assert_eq!(up.requests(), 3);
}

#[tokio::test]
async fn a_probe_with_a_refused_key_re_enables_it_when_it_works_again() {
    let (pool, gw) = refusing_key_a(r#"{ key = "sk-aaaa-1111" }, { key = "sk-bbbb-2222" }"#).await;
    assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    assert_eq!(disabled_keys(&gw).await, 1, "key a is disabled");
    // The upstream accepts key a again; the next probe interval tests it.
    pool.set_spec(text_spec("ok"));
    let seen_before = pool.received().len();
    gw.clock.advance(std::time::Duration::from_secs(300));
    eventually(&pool, "a credential probe", |m| m.requests() >= 1).await;
    let probe = &pool.received()[seen_before];
    assert_eq!(probe.headers["authorization"], "Bearer sk-aaaa-1111");
    assert_eq!(probe.body["max_tokens"], 1);
    // The probe's answer re-enables the key (the health view says so)...
    until(
        "the probed key re-enabled",
        std::time::Duration::from_secs(10),
        async || disabled_keys(&gw).await == 0,
    )
    .await;
    // ...and key a takes its turns again.
    let mut used_a = false;
    for _ in 0..20 {
        gw.chat(chat_body(false)).await;
        let last = pool
            .received()
            .last()
            .map(|r| r.headers["authorization"].clone());
        if last.is_some_and(|k| k == "Bearer sk-aaaa-1111") {
            used_a = true;
            break;
        }
    }
    assert!(used_a, "the re-enabled key is used again");
}

/// How many of channel `pool`'s credentials `/admin/health` shows disabled.
async fn disabled_keys(gw: &Gateway) -> usize {
    let health = gw.admin_health().await;
    let row = health.iter().find(|r| r["channel"] == "pool").unwrap();
    row["credentials"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["disabled"] == true)
        .count()
}

#[tokio::test]
async fn a_channel_whose_keys_were_all_refused_is_unavailable_not_rate_limited() {
    let (pool, gw) = refusing_key_a(r#"{ key = "sk-aaaa-1111" }"#).await;
    let e = error_envelope(gw.chat(chat_body(false)).await, 502).await;
    assert_eq!(reasons(&e["attempts"]), ["auth_error"]);
    // Waiting will not help, so it is not a rate limit: 503, and why.
    let resp = gw.chat(chat_body(false)).await;
    assert!(header(&resp, "retry-after").is_empty());
    let e = error_envelope(resp, 503).await;
    assert_eq!(reasons(&e["attempts"]), ["credentials_refused"]);
    assert_eq!(pool.requests(), 1);
}

#[tokio::test]
async fn admin_health_lists_every_configured_key_by_label_only() {
    let up = mock(text_spec("ok")).await;
    let gw = gateway(&pool_channel(
        "pool",
        &up.base_url(),
        1,
        r#"{ key = "sk-aaaa-1111", label = "primary" }, { key = "sk-bbbb-2222" }"#,
    ))
    .await;
    // Before any request: both keys listed, idle; the unlabelled one by its fingerprint.
    let health = gw.admin_health().await;
    let row = health.iter().find(|r| r["channel"] == "pool").unwrap();
    let labels: Vec<&str> = row["credentials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels.len(), 2, "{labels:?}");
    assert!(labels.contains(&"primary"));
    assert!(
        labels
            .iter()
            .any(|l| l.starts_with("key-") && l.len() == 10),
        "{labels:?}"
    );
    let text = serde_json::to_string(&health).unwrap();
    assert!(!text.contains("sk-aaaa") && !text.contains("sk-bbbb"));
}
