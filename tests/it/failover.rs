//! Non-streaming routing and failover by outcome class.

use serde_json::Value;
use switchyard::provider::mock::{Fault, MockSpec};

use crate::support::*;

#[tokio::test]
async fn fails_over_on_500_and_reports_it() {
    let (bad, good, gw) = two_tiers(
        ("primary", faulty("bad", status(500)), ""),
        ("backup", text_spec("from backup")),
    )
    .await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-channel"), "backup");
    assert_eq!(header(&resp, "x-switchyard-model"), "m");
    assert_eq!(header(&resp, "x-switchyard-attempts"), "2");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "from backup");
    let rep = &v["switchyard"];
    assert_eq!(rep["requested_model"], "m");
    assert_eq!(rep["served_channel"], "backup");
    assert_eq!(rep["failover"]["occurred"], true);
    let attempts = rep["failover"]["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0]["channel"], "primary");
    assert_eq!(attempts[0]["status"], 500);
    assert_eq!(attempts[0]["reason"], "server_error");
    assert_eq!(attempts[1]["reason"], "ok");
    assert!(attempts[0]["latency_ms"].is_u64());
    assert_eq!((bad.requests(), good.requests()), (1, 1));
}

#[tokio::test]
async fn single_attempt_has_no_body_extension() {
    let good = mock(text_spec("abcdef")).await;
    let gw = gateway(&openai_channel("only", &good.base_url(), 1, "")).await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(header(&resp, "x-switchyard-attempts"), "1");
    let v: Value = resp.json().await.unwrap();
    assert!(v.get("switchyard").is_none(), "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 3);
}

#[tokio::test]
async fn fails_over_on_429_with_and_without_retry_after_without_sleeping() {
    for retry_after in [Some(30), None] {
        let limited = mock(faulty(
            "x",
            Fault {
                status: Some(429),
                retry_after_seconds: retry_after,
                ..Fault::default()
            },
        ))
        .await;
        let good = mock(text_spec("ok")).await;
        let gw = gateway(&format!(
            "{}{}",
            openai_channel("limited", &limited.base_url(), 1, "max_retries = 3"),
            openai_channel("good", &good.base_url(), 2, "")
        ))
        .await;
        let started = std::time::Instant::now();
        let resp = gw.chat(chat_body(false)).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(header(&resp, "x-switchyard-channel"), "good");
        // 429 moves on at once: no retry on the limited channel, no 30 s sleep.
        assert_eq!(limited.requests(), 1);
        assert!(started.elapsed().as_secs() < 5);
        let v: Value = resp.json().await.unwrap();
        assert_eq!(
            v["switchyard"]["failover"]["attempts"][0]["reason"],
            "rate_limit"
        );
    }
}

#[tokio::test]
async fn all_rate_limited_is_429_with_retry_after_and_no_sdk_retry() {
    let (_a, _b, gw) = two_tiers(
        (
            "a",
            faulty(
                "x",
                Fault {
                    status: Some(429),
                    retry_after_seconds: Some(7),
                    ..Fault::default()
                },
            ),
            "",
        ),
        (
            "b",
            faulty(
                "x",
                Fault {
                    status: Some(429),
                    retry_after_seconds: Some(3),
                    ..Fault::default()
                },
            ),
        ),
    )
    .await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(header(&resp, "retry-after"), "3");
    assert_eq!(header(&resp, "x-should-retry"), "false");
    let e = error_envelope(resp, 429).await;
    assert_eq!(e["code"], "all_rate_limited");
    assert_eq!(e["attempts"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn fails_over_on_connection_refused() {
    let good = mock(text_spec("ok")).await;
    let gw = gateway(&format!(
        "{}{}",
        openai_channel("dead", &refused_url().await, 1, ""),
        openai_channel("good", &good.base_url(), 2, "")
    ))
    .await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(
        v["switchyard"]["failover"]["attempts"][0]["reason"],
        "connection_error"
    );
    assert_eq!(
        v["switchyard"]["failover"]["attempts"][0]["status"],
        Value::Null
    );
}

#[tokio::test]
async fn fails_over_on_attempt_timeout() {
    let (slow, _good, gw) = two_tiers(
        (
            "slow",
            faulty(
                "x",
                Fault {
                    hang: true,
                    ..Fault::default()
                },
            ),
            "timeout_ms = 300",
        ),
        ("good", text_spec("ok")),
    )
    .await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    let first = &v["switchyard"]["failover"]["attempts"][0];
    assert_eq!(first["reason"], "timeout");
    assert!(first["latency_ms"].as_u64().unwrap() >= 300);
    // The timed-out call was cancelled: the slow mock sees its connection go away.
    eventually(&slow, "aborted >= 1", |m| m.aborted() >= 1).await;
}

#[tokio::test]
async fn misrouted_404_and_refused_credentials_fail_over() {
    let missing = mock(faulty("x", status(404))).await;
    let refused = mock(faulty("x", status(401))).await;
    let good = mock(text_spec("ok")).await;
    let gw = gateway(&format!(
        "{}{}{}",
        openai_channel("missing", &missing.base_url(), 1, ""),
        openai_channel("refused", &refused.base_url(), 2, ""),
        openai_channel("good", &good.base_url(), 3, "")
    ))
    .await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    let reasons = reasons(&v["switchyard"]["failover"]["attempts"]);
    assert_eq!(reasons, ["misrouted", "auth_error", "ok"]);
}

#[tokio::test]
async fn upstream_400_is_returned_as_is_and_never_failed_over() {
    let (picky, backup, gw) = two_tiers(
        ("picky", faulty("x", status(400)), "max_retries = 2"),
        ("backup", text_spec("ok")),
    )
    .await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["code"], "mock_client_error");
    assert_eq!(picky.requests(), 1);
    assert_eq!(backup.requests(), 0);
}

#[tokio::test]
async fn a_tier_serves_everything_while_healthy() {
    let a = mock(text_spec("a")).await;
    let b = mock(text_spec("b")).await;
    let low = mock(text_spec("low")).await;
    let gw = gateway(&format!(
        "{}{}{}",
        openai_channel("a", &a.base_url(), 1, ""),
        openai_channel("low", &low.base_url(), 2, ""),
        openai_channel("b", &b.base_url(), 1, "")
    ))
    .await;
    for _ in 0..40 {
        assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    }
    assert_eq!(low.requests(), 0);
    assert_eq!(a.requests() + b.requests(), 40);
    assert!(a.requests() > 0 && b.requests() > 0);
}

#[tokio::test]
async fn weights_split_first_tries_within_tolerance() {
    let light = mock(text_spec("light")).await;
    let heavy = mock(text_spec("heavy")).await;
    let gw = gateway(&format!(
        "{}{}",
        openai_channel("light", &light.base_url(), 1, "weight = 1"),
        openai_channel("heavy", &heavy.base_url(), 1, "weight = 3")
    ))
    .await;
    let n = 400;
    for _ in 0..n {
        assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    }
    // Expected 100 / 300; ±45 is over 5 standard deviations (σ ≈ 8.7).
    let l = light.requests() as i64;
    assert_eq!(l + heavy.requests() as i64, n);
    assert!((l - 100).abs() <= 45, "light got {l} of {n}");
}

#[tokio::test]
async fn retries_are_counted_per_channel_before_failing_over() {
    let flaky = mock(faulty("x", status(503))).await;
    let good = mock(text_spec("ok")).await;
    let gw = gateway(&format!(
        "{}{}",
        openai_channel(
            "flaky",
            &flaky.base_url(),
            1,
            "max_retries = 2\nretry_interval_ms = 10"
        ),
        openai_channel("good", &good.base_url(), 2, "")
    ))
    .await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-attempts"), "4");
    assert_eq!(flaky.requests(), 3);
    assert_eq!(good.requests(), 1);
}

#[tokio::test]
async fn a_retry_can_succeed_on_the_same_channel() {
    let flaky = mock(MockSpec {
        script: vec![status(500)],
        ..text_spec("second time lucky")
    })
    .await;
    let gw = gateway(&openai_channel(
        "flaky",
        &flaky.base_url(),
        1,
        "max_retries = 1\nretry_interval_ms = 5",
    ))
    .await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-channel"), "flaky");
    assert_eq!(header(&resp, "x-switchyard-attempts"), "2");
}

#[tokio::test]
async fn attempts_are_capped_per_request() {
    let mut channels = String::new();
    let mut mocks = Vec::new();
    for i in 0..4 {
        let m = mock(faulty("x", status(500))).await;
        channels.push_str(&openai_channel(&format!("c{i}"), &m.base_url(), 1, ""));
        mocks.push(m);
    }
    let gw = gateway_with("max_attempts = 3", &channels).await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(header(&resp, "x-should-retry"), "false");
    let e = error_envelope(resp, 502).await;
    assert_eq!(e["code"], "all_attempts_failed");
    assert_eq!(e["attempts"].as_array().unwrap().len(), 3);
    assert_eq!(mocks.iter().map(|m| m.requests()).sum::<u64>(), 3);
}

#[tokio::test]
async fn the_request_deadline_gives_504() {
    let hang = Fault {
        hang: true,
        ..Fault::default()
    };
    let a = mock(faulty("x", hang.clone())).await;
    let b = mock(faulty("x", hang)).await;
    let gw = gateway_with(
        "request_timeout_ms = 500",
        &format!(
            "{}{}",
            openai_channel("a", &a.base_url(), 1, "timeout_ms = 300"),
            openai_channel("b", &b.base_url(), 2, "timeout_ms = 300")
        ),
    )
    .await;
    let started = std::time::Instant::now();
    let resp = gw.chat(chat_body(false)).await;
    let took = started.elapsed().as_millis();
    assert!((500..5000).contains(&took), "{took} ms");
    assert_eq!(header(&resp, "x-should-retry"), "false");
    let e = error_envelope(resp, 504).await;
    assert_eq!(e["code"], "request_timeout");
    let reasons = reasons(&e["attempts"]);
    assert_eq!(reasons, ["timeout", "timeout"]);
}

#[tokio::test]
async fn embeddings_are_routed_with_failover() {
    let (_bad, good, gw) = two_tiers(
        ("bad", faulty("x", status(502)), ""),
        ("good", text_spec("x")),
    )
    .await;
    let resp = client()
        .post(format!("{}/v1/embeddings", gw.url))
        .bearer_auth(KEY)
        .json(&serde_json::json!({"model": "e", "input": ["a", "b"], "dimensions": 8}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-channel"), "good");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["data"].as_array().unwrap().len(), 2);
    assert_eq!(v["data"][0]["embedding"].as_array().unwrap().len(), 8);
    assert_eq!(v["switchyard"]["failover"]["occurred"], true);
    // The unknown `dimensions` parameter reached the upstream.
    assert_eq!(good.received()[0].body["dimensions"], 8);
    assert_eq!(good.received()[0].path, "/embeddings");
    assert_eq!(good.received()[0].uri, "/v1/embeddings");
}

#[tokio::test]
async fn other_4xx_from_an_upstream_fail_over_instead_of_reaching_the_client() {
    let wrong = mock(faulty("x", status(405))).await;
    let conflict = mock(faulty("x", status(409))).await;
    let good = mock(text_spec("ok")).await;
    let gw = gateway(&format!(
        "{}{}{}",
        openai_channel("wrong", &wrong.base_url(), 1, ""),
        openai_channel("conflict", &conflict.base_url(), 2, ""),
        openai_channel("good", &good.base_url(), 3, "")
    ))
    .await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    let reasons = reasons(&v["switchyard"]["failover"]["attempts"]);
    assert_eq!(reasons, ["misrouted", "server_error", "ok"]);
}

#[tokio::test]
async fn the_last_channel_may_wait_out_a_short_retry_after() {
    let limited = mock(MockSpec {
        script: vec![Fault {
            status: Some(429),
            retry_after_seconds: Some(1),
            ..Fault::default()
        }],
        ..text_spec("after the wait")
    })
    .await;
    // No api_keys: the wait is the channel's own (a keyed channel's cooldown is the key's,
    // which runs on the gateway's clock, here a manual one that does not move).
    let gw = gateway(&format!(
        "[[channels]]\nname = \"only\"\nprovider = \"openai\"\nbase_url = \"{}\"\n\
         models = [\"m\"]\nmax_retries = 1\n",
        limited.base_url()
    ))
    .await;
    let started = std::time::Instant::now();
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 200);
    assert!(started.elapsed() >= std::time::Duration::from_millis(1000));
    assert_eq!(header(&resp, "x-switchyard-attempts"), "2");
    // Without retries allowed, the same 429 is the answer at once.
    limited.set_spec(MockSpec {
        script: vec![Fault {
            status: Some(429),
            retry_after_seconds: Some(1),
            ..Fault::default()
        }],
        ..text_spec("x")
    });
    let gw = gateway(&openai_channel("only", &limited.base_url(), 1, "")).await;
    let started = std::time::Instant::now();
    let resp = gw.chat(chat_body(false)).await;
    error_envelope(resp, 429).await;
    assert_eq!(limited.requests(), 1);
    assert!(started.elapsed() < std::time::Duration::from_millis(1000));
}

#[tokio::test]
async fn upstream_422_and_413_are_the_clients_and_403_fails_over() {
    for code in [422, 413] {
        let picky = mock(faulty("x", status(code))).await;
        let backup = mock(text_spec("ok")).await;
        let gw = gateway(&format!(
            "{}{}",
            openai_channel("picky", &picky.base_url(), 1, ""),
            openai_channel("backup", &backup.base_url(), 2, "")
        ))
        .await;
        assert_eq!(gw.chat(chat_body(false)).await.status().as_u16(), code);
        assert_eq!(backup.requests(), 0);
    }
    let (_forbidden, _backup, gw) = two_tiers(
        ("forbidden", faulty("x", status(403)), ""),
        ("backup", text_spec("ok")),
    )
    .await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(
        reasons(&v["switchyard"]["failover"]["attempts"]),
        ["auth_error", "ok"]
    );
}

#[tokio::test]
async fn round_robin_balance_gives_exact_weighted_shares() {
    let (a, b, c) = (
        mock(text_spec("a")).await,
        mock(text_spec("b")).await,
        mock(text_spec("c")).await,
    );
    let gw = gateway(&format!(
        "[health]\nbalance = \"round_robin\"\n\n{}{}{}",
        openai_channel("a", &a.base_url(), 1, "weight = 1"),
        openai_channel("b", &b.base_url(), 1, "weight = 2"),
        openai_channel("c", &c.base_url(), 1, "weight = 3")
    ))
    .await;
    let mut order = String::new();
    for _ in 0..60 {
        let resp = gw.chat(chat_body(false)).await;
        order.push_str(header(&resp, "x-switchyard-channel"));
    }
    assert_eq!((a.requests(), b.requests(), c.requests()), (10, 20, 30));
    // Smooth: the heaviest channel never serves three times in a row.
    assert!(!order.contains("ccc"), "{order}");
}
