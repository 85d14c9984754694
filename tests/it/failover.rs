//! Non-streaming routing and failover by outcome class: which upstream answers fail over and
//! which reach the client, retries, caps and deadlines (tables of [`Scenario`] rows), and how a
//! tier shares its traffic.

use std::time::Duration;

use serde_json::{Value, json};
use switchyard::provider::mock::{Fault, MockSpec};

use crate::support::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A 429 with `Retry-After: seconds`, if given.
fn limited(seconds: Option<u64>) -> Fault {
    Fault {
        status: Some(429),
        retry_after_seconds: seconds,
        ..Fault::default()
    }
}

fn hang() -> MockSpec {
    faulty(
        "x",
        Fault {
            hang: true,
            ..Fault::default()
        },
    )
}

/// Row `row`: one request to a tier-1 channel `first` answering `code`, over a healthy tier-2
/// `backup`; `calls` to each.
fn over_backup(
    row: &'static str,
    first: &'static str,
    code: u16,
    want: Expect,
    calls: &'static [u64],
) -> Scenario {
    Scenario {
        name: row,
        channels: vec![
            ch(first, 1, faulty("x", status(code))),
            ch("backup", 2, text_spec("ok")),
        ],
        steps: vec![Step::Send(want)],
        calls: Calls::Each(calls),
        ..Scenario::default()
    }
}

/// Every outcome class of a single upstream answer: the ones that fail over (and how the
/// report says so), and the ones that are the client's answer.
#[tokio::test]
async fn each_outcome_class_fails_over_or_is_the_answer() {
    let the_clients = |code| Expect {
        status: code,
        code: Some("mock_client_error"),
        ..Expect::default()
    };
    scenarios(vec![
        Scenario {
            name: "fails_over_on_500_and_reports_it",
            channels: vec![
                ch("primary", 1, faulty("bad", status(500))),
                ch("backup", 2, text_spec("from backup")),
            ],
            steps: vec![Step::Send(Expect {
                status: 200,
                served: Some("backup"),
                reasons: &["server_error", "ok"],
                headers: &[("x-switchyard-model", "m"), ("x-switchyard-attempts", "2")],
                ..Expect::default()
            })],
            calls: Calls::Each(&[1, 1]),
            check: Some(|r| {
                let v = &r.answers[0].body;
                assert_eq!(v["choices"][0]["message"]["content"], "from backup");
                let rep = &v["switchyard"];
                assert_eq!(rep["requested_model"], "m");
                assert_eq!(rep["served_channel"], "backup");
                assert_eq!(rep["failover"]["occurred"], true);
                let first = &rep["failover"]["attempts"][0];
                assert_eq!(first["channel"], "primary");
                assert_eq!(first["status"], 500);
                assert!(first["latency_ms"].is_u64(), "{first}");
            }),
            ..Scenario::default()
        },
        Scenario {
            name: "single_attempt_has_no_body_extension",
            channels: vec![ch("only", 1, text_spec("abcdef"))],
            steps: vec![Step::Send(Expect {
                status: 200,
                served: Some("only"),
                headers: &[("x-switchyard-attempts", "1")],
                ..Expect::default()
            })],
            calls: Calls::Each(&[1]),
            check: Some(|r| {
                let v = &r.answers[0].body;
                assert!(v.get("switchyard").is_none(), "{v}");
                assert_eq!(v["usage"]["completion_tokens"], 3);
            }),
            ..Scenario::default()
        },
        Scenario {
            name: "fails_over_on_connection_refused",
            channels: vec![refused("dead", 1), ch("good", 2, text_spec("ok"))],
            steps: vec![Step::Send(Expect {
                status: 200,
                served: Some("good"),
                reasons: &["connection_error", "ok"],
                ..Expect::default()
            })],
            calls: Calls::Each(&[0, 1]),
            check: Some(|r| {
                let first = &r.answers[0].attempts()[0];
                assert_eq!(first["status"], Value::Null, "{first}");
            }),
            ..Scenario::default()
        },
        Scenario {
            name: "fails_over_on_attempt_timeout",
            channels: vec![
                ch("slow", 1, hang()).with("timeout_ms = 300"),
                ch("good", 2, text_spec("ok")),
            ],
            steps: vec![Step::Send(Expect {
                status: 200,
                served: Some("good"),
                reasons: &["timeout", "ok"],
                ..Expect::default()
            })],
            // The timed-out call was cancelled: the slow mock sees its connection go away.
            cancelled: &["slow"],
            check: Some(|r| {
                let first = &r.answers[0].attempts()[0];
                assert!(first["latency_ms"].as_u64().unwrap() >= 300, "{first}");
            }),
            ..Scenario::default()
        },
        Scenario {
            name: "misrouted_404_and_refused_credentials_fail_over",
            channels: vec![
                ch("missing", 1, faulty("x", status(404))),
                ch("refused", 2, faulty("x", status(401))),
                ch("good", 3, text_spec("ok")),
            ],
            steps: vec![Step::Send(Expect {
                status: 200,
                served: Some("good"),
                reasons: &["misrouted", "auth_error", "ok"],
                ..Expect::default()
            })],
            calls: Calls::Each(&[1, 1, 1]),
            ..Scenario::default()
        },
        Scenario {
            name: "other_4xx_from_an_upstream_fail_over_instead_of_reaching_the_client",
            channels: vec![
                ch("wrong", 1, faulty("x", status(405))),
                ch("conflict", 2, faulty("x", status(409))),
                ch("good", 3, text_spec("ok")),
            ],
            steps: vec![Step::Send(Expect {
                status: 200,
                served: Some("good"),
                reasons: &["misrouted", "server_error", "ok"],
                ..Expect::default()
            })],
            calls: Calls::Each(&[1, 1, 1]),
            ..Scenario::default()
        },
        Scenario {
            name: "upstream_400_is_returned_as_is_and_never_failed_over",
            channels: vec![
                ch("picky", 1, faulty("x", status(400))).with("max_retries = 2"),
                ch("backup", 2, text_spec("ok")),
            ],
            steps: vec![Step::Send(the_clients(400))],
            calls: Calls::Each(&[1, 0]),
            ..Scenario::default()
        },
        over_backup(
            "upstream_422_is_the_clients",
            "picky",
            422,
            the_clients(422),
            &[1, 0],
        ),
        over_backup(
            "upstream_413_is_the_clients",
            "picky",
            413,
            the_clients(413),
            &[1, 0],
        ),
        over_backup(
            "upstream_403_fails_over",
            "forbidden",
            403,
            Expect {
                status: 200,
                served: Some("backup"),
                reasons: &["auth_error", "ok"],
                ..Expect::default()
            },
            &[1, 1],
        ),
        Scenario {
            name: "embeddings_are_routed_with_failover",
            channels: vec![
                ch("bad", 1, faulty("x", status(502))),
                ch("good", 2, text_spec("x")),
            ],
            steps: vec![Step::Send(Expect {
                request: Some((
                    "/v1/embeddings",
                    json!({"model": "e", "input": ["a", "b"], "dimensions": 8}),
                )),
                status: 200,
                served: Some("good"),
                reasons: &["server_error", "ok"],
                ..Expect::default()
            })],
            calls: Calls::Each(&[1, 1]),
            check: Some(|r| {
                let v = &r.answers[0].body;
                assert_eq!(v["data"].as_array().unwrap().len(), 2);
                assert_eq!(v["data"][0]["embedding"].as_array().unwrap().len(), 8);
                assert_eq!(v["switchyard"]["failover"]["occurred"], true);
                // The unknown `dimensions` parameter reached the upstream.
                let seen = &r.up("good").received()[0];
                assert_eq!(seen.body["dimensions"], 8);
                assert_eq!(seen.path, "/embeddings");
                assert_eq!(seen.uri, "/v1/embeddings");
            }),
            ..Scenario::default()
        },
    ])
    .await;
}

/// What bounds the attempts of one request: retries per channel, the cap per request, the
/// request deadline, and rate limits (moved past at once, or waited out on the last channel).
#[tokio::test]
async fn retries_caps_deadlines_and_rate_limits_bound_the_attempts() {
    let rate_limited = [Some(30), None].map(|retry_after| Scenario {
        name: if retry_after.is_some() {
            "fails_over_on_429_with_retry_after_without_sleeping"
        } else {
            "fails_over_on_429_without_retry_after"
        },
        channels: vec![
            ch("limited", 1, faulty("x", limited(retry_after))).with("max_retries = 3"),
            ch("good", 2, text_spec("ok")),
        ],
        // 429 moves on at once: no retry on the limited channel, no 30 s sleep.
        steps: vec![Step::Send(Expect {
            status: 200,
            served: Some("good"),
            reasons: &["rate_limit", "ok"],
            took: Some(ms(0)..ms(5000)),
            ..Expect::default()
        })],
        calls: Calls::Each(&[1, 1]),
        ..Scenario::default()
    });
    let mut rows = vec![
        Scenario {
            name: "all_rate_limited_is_429_with_retry_after_and_no_sdk_retry",
            channels: vec![
                ch("a", 1, faulty("x", limited(Some(7)))),
                ch("b", 2, faulty("x", limited(Some(3)))),
            ],
            steps: vec![Step::Send(Expect {
                status: 429,
                reasons: &["rate_limit", "rate_limit"],
                code: Some("all_rate_limited"),
                headers: &[("retry-after", "3"), ("x-should-retry", "false")],
                ..Expect::default()
            })],
            calls: Calls::Each(&[1, 1]),
            ..Scenario::default()
        },
        Scenario {
            name: "retries_are_counted_per_channel_before_failing_over",
            channels: vec![
                ch("flaky", 1, faulty("x", status(503)))
                    .with("max_retries = 2\nretry_interval_ms = 10"),
                ch("good", 2, text_spec("ok")),
            ],
            steps: vec![Step::Send(Expect {
                status: 200,
                served: Some("good"),
                reasons: &["server_error", "server_error", "server_error", "ok"],
                headers: &[("x-switchyard-attempts", "4")],
                ..Expect::default()
            })],
            calls: Calls::Each(&[3, 1]),
            ..Scenario::default()
        },
        Scenario {
            name: "a_retry_can_succeed_on_the_same_channel",
            channels: vec![
                ch(
                    "flaky",
                    1,
                    MockSpec {
                        script: vec![status(500)],
                        ..text_spec("second time lucky")
                    },
                )
                .with("max_retries = 1\nretry_interval_ms = 5"),
            ],
            steps: vec![Step::Send(Expect {
                status: 200,
                served: Some("flaky"),
                reasons: &["server_error", "ok"],
                headers: &[("x-switchyard-attempts", "2")],
                ..Expect::default()
            })],
            calls: Calls::Each(&[2]),
            ..Scenario::default()
        },
        Scenario {
            name: "attempts_are_capped_per_request",
            server: "max_attempts = 3",
            channels: ["c0", "c1", "c2", "c3"]
                .map(|name| ch(name, 1, faulty("x", status(500))))
                .into(),
            steps: vec![Step::Send(Expect {
                status: 502,
                reasons: &["server_error", "server_error", "server_error"],
                code: Some("all_attempts_failed"),
                headers: &[("x-should-retry", "false")],
                ..Expect::default()
            })],
            calls: Calls::Total(3),
            ..Scenario::default()
        },
        Scenario {
            name: "the_request_deadline_gives_504",
            server: "request_timeout_ms = 500",
            channels: vec![
                ch("a", 1, hang()).with("timeout_ms = 300"),
                ch("b", 2, hang()).with("timeout_ms = 300"),
            ],
            steps: vec![Step::Send(Expect {
                status: 504,
                reasons: &["timeout", "timeout"],
                code: Some("request_timeout"),
                headers: &[("x-should-retry", "false")],
                took: Some(ms(500)..ms(5000)),
                ..Expect::default()
            })],
            calls: Calls::Each(&[1, 1]),
            ..Scenario::default()
        },
        Scenario {
            name: "the_last_channel_may_wait_out_a_short_retry_after",
            // No api_keys: the wait is the channel's own (a keyed channel's cooldown is the
            // key's, which runs on the gateway's clock, here a manual one that does not move).
            channels: vec![
                ch(
                    "only",
                    1,
                    MockSpec {
                        script: vec![limited(Some(1))],
                        ..text_spec("after the wait")
                    },
                )
                .keys(Keys::Keyless)
                .with("max_retries = 1"),
            ],
            steps: vec![Step::Send(Expect {
                status: 200,
                served: Some("only"),
                reasons: &["rate_limit", "ok"],
                headers: &[("x-switchyard-attempts", "2")],
                took: Some(ms(1000)..Duration::MAX),
                ..Expect::default()
            })],
            calls: Calls::Each(&[2]),
            ..Scenario::default()
        },
        Scenario {
            name: "without_retries_a_short_retry_after_is_the_answer_at_once",
            channels: vec![ch(
                "only",
                1,
                MockSpec {
                    script: vec![limited(Some(1))],
                    ..text_spec("x")
                },
            )],
            steps: vec![Step::Send(Expect {
                status: 429,
                reasons: &["rate_limit"],
                code: Some("all_rate_limited"),
                took: Some(ms(0)..ms(1000)),
                ..Expect::default()
            })],
            calls: Calls::Each(&[1]),
            ..Scenario::default()
        },
    ];
    rows.extend(rate_limited);
    scenarios(rows).await;
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

/// An https upstream that accepts the connection and then never speaks: the TLS handshake
/// hangs. The channel's connect timeout bounds the whole connection, TLS included, so the
/// request fails over in about that time (not at the attempt's 120 s timeout).
#[tokio::test]
async fn a_tls_handshake_that_never_answers_fails_over_within_the_connect_timeout() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = silent.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = silent.accept().await {
            held.push(sock);
        }
    });
    let good = mock(text_spec("served by the backup")).await;
    let channels = format!(
        "{}{}",
        openai_channel(
            "silent",
            &format!("https://{addr}/v1"),
            1,
            "connect_timeout_ms = 200"
        ),
        openai_channel("good", &good.base_url(), 2, "")
    );
    let gw = gateway(&channels).await;
    let started = std::time::Instant::now();
    let resp = tokio::time::timeout(ms(10_000), gw.chat(chat_body(false)))
        .await
        .expect("the hung handshake is bounded by the connect timeout");
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-channel"), "good");
    assert_eq!(header(&resp, "x-switchyard-attempts"), "2");
    assert!(started.elapsed() < ms(5_000), "{:?}", started.elapsed());
}
