//! Credential pools: a channel's keys are rotated, cooled and limited one by one, before the
//! channel itself is failed over.

use std::time::Duration;

use serde_json::json;
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
    let pool = mock(key_a_refused()).await;
    let gw = gateway(&pool_channel("pool", &pool.base_url(), 1, credentials)).await;
    (pool, gw)
}

/// A 401 for key `sk-aaaa-1111`, and answers for the others.
fn key_a_refused() -> MockSpec {
    with_key_faults(&[(
        "sk-aaaa-1111",
        Fault {
            status: Some(401),
            ..Fault::default()
        },
    )])
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

/// A 429 for key `sk-aaaa-1111` with `Retry-After: seconds`, and answers for the others.
fn key_a_limited(seconds: u64) -> MockSpec {
    with_key_faults(&[(
        "sk-aaaa-1111",
        Fault {
            status: Some(429),
            retry_after_seconds: Some(seconds),
            ..Fault::default()
        },
    )])
}

/// What a pool's keys do to requests before its channel fails over: a limited key is swapped for
/// another inside the channel, a pool out of headroom is a 429 that says for how long, refused
/// keys make the channel unavailable, and a token budget is settled by the usage reported.
#[tokio::test]
async fn a_pools_keys_are_swapped_cooled_and_limited_before_the_channel_fails_over() {
    // ~100 prompt tokens each (400 characters); the mock reports 103 + 3 = 106 used.
    let big = |stream: Option<bool>| {
        let mut b =
            json!({"model": "m", "messages": [{"role": "user", "content": "x".repeat(400)}]});
        if let Some(stream) = stream {
            b["stream"] = stream.into();
        }
        Some(("/v1/chat/completions", b))
    };
    let served_by_pool = || {
        Step::Send(Expect {
            status: 200,
            served: Some("pool"),
            ..Expect::default()
        })
    };
    scenarios(vec![
        Scenario {
            name: "a_rate_limited_key_is_swapped_inside_the_channel_before_failing_over",
            channels: vec![
                ch("pool", 1, key_a_limited(30)).keys(Keys::Pool(
                    r#"{ key = "sk-aaaa-1111", label = "a" }, { key = "sk-bbbb-2222", label = "b" }"#,
                )),
                ch("backup", 2, text_spec("backup")),
            ],
            steps: vec![
                Step::Send(Expect {
                    status: 200,
                    served: Some("pool"),
                    reasons: &["rate_limit", "ok"],
                    ..Expect::default()
                }),
                // The cooled key is not tried again while it cools; the other one serves.
                served_by_pool(),
                served_by_pool(),
                served_by_pool(),
            ],
            calls: Calls::Each(&[5, 0]),
            check: Some(|r| {
                let b = "Bearer sk-bbbb-2222";
                assert_eq!(
                    keys_seen(r.up("pool")),
                    ["Bearer sk-aaaa-1111", b, b, b, b]
                );
                // The health view shows the key by label, never the key.
                let health = serde_json::to_string(&r.health).unwrap();
                assert!(
                    health.contains("\"label\":\"a\"") && !health.contains("sk-aaaa"),
                    "{health}"
                );
            }),
            ..Scenario::default()
        },
        Scenario {
            name: "no_key_with_headroom_anywhere_is_429_with_the_time_to_the_earliest",
            channels: vec![
                ch("pool", 1, key_a_limited(40))
                    .keys(Keys::Pool(r#"{ key = "sk-aaaa-1111", rpm = 60 }"#)),
            ],
            steps: vec![
                Step::Send(Expect {
                    status: 429,
                    reasons: &["rate_limit"],
                    code: Some("all_rate_limited"),
                    ..Expect::default()
                }),
                Step::Advance(Duration::from_secs(10)),
                Step::Send(Expect {
                    status: 429,
                    reasons: &["no_credential_headroom"],
                    code: Some("all_rate_limited"),
                    headers: &[("retry-after", "30")],
                    ..Expect::default()
                }),
            ],
            calls: Calls::Each(&[1]),
            ..Scenario::default()
        },
        Scenario {
            name: "a_channel_whose_keys_were_all_refused_is_unavailable_not_rate_limited",
            channels: vec![
                ch("pool", 1, key_a_refused()).keys(Keys::Pool(r#"{ key = "sk-aaaa-1111" }"#)),
            ],
            steps: vec![
                Step::Send(Expect {
                    status: 502,
                    reasons: &["auth_error"],
                    ..Expect::default()
                }),
                // Waiting will not help, so it is not a rate limit: 503, and why.
                Step::Send(Expect {
                    status: 503,
                    reasons: &["credentials_refused"],
                    headers: &[("retry-after", "")],
                    ..Expect::default()
                }),
            ],
            calls: Calls::Each(&[1]),
            ..Scenario::default()
        },
        Scenario {
            name: "a_tpm_budget_is_settled_by_real_usage_and_refills",
            channels: vec![
                ch("pool", 1, text_spec("abc"))
                    .keys(Keys::Pool(r#"{ key = "sk-aaaa-1111", tpm = 200 }"#)),
            ],
            steps: vec![
                Step::Send(Expect {
                    request: big(Some(false)),
                    status: 200,
                    ..Expect::default()
                }),
                Step::Send(Expect {
                    request: big(Some(true)),
                    status: 200,
                    ..Expect::default()
                }),
                // 200 - 2 x 106 = -12: overdrawn until 13 tokens have refilled (3.9 s at 200/min).
                Step::Send(Expect {
                    request: big(None),
                    status: 429,
                    reasons: &["no_credential_headroom"],
                    headers: &[("retry-after", "4")],
                    ..Expect::default()
                }),
                Step::Advance(Duration::from_secs(4)),
                Step::Send(Expect {
                    request: big(None),
                    status: 200,
                    ..Expect::default()
                }),
            ],
            calls: Calls::Each(&[3]),
            ..Scenario::default()
        },
    ])
    .await;
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
async fn a_stream_holds_its_key_slot_until_it_ends() {
    let slow = mock(paced("streaming slowly", 5, 100)).await;
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
