//! Channel health over real HTTP: the circuit breaker, half-open trials, probes, rate-limit
//! cooldowns. Time is the gateway's injected clock, moved by the test.

use std::time::Duration;

use serde_json::Value;
use switchyard::provider::mock::{Fault, MockSpec};

use crate::support::*;

/// Channel settings for a breaker tested by live requests instead of probes.
const LIVE_TRIALS: &str = "[channels.circuit_breaker]\nprobe = { enabled = false }";

async fn ask(gw: &Gateway) -> (u16, String, Value) {
    let resp = gw.chat(chat_body(false)).await;
    let status = resp.status().as_u16();
    let channel = header(&resp, "x-switchyard-channel").to_string();
    let v: Value = resp.json().await.unwrap_or(Value::Null);
    (status, channel, v)
}

#[tokio::test]
async fn an_open_circuit_takes_the_channel_out_until_a_trial_succeeds() {
    let (dead, backup, gw) = two_tiers(
        ("dead", faulty("x", status(500)), LIVE_TRIALS),
        ("backup", text_spec("ok")),
    )
    .await;
    // Three failures inside the window open the circuit (each request still fails over).
    for _ in 0..3 {
        assert_eq!(ask(&gw).await.1, "backup");
    }
    assert_eq!(dead.requests(), 3);
    // Later requests make no attempt on it, and say why.
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(header(&resp, "x-switchyard-attempts"), "1");
    assert_eq!(dead.requests(), 3);
    let rows = gw.admin_requests().await;
    assert_eq!(rows[0]["attempts"][0]["reason"], "circuit_open");
    let health = gw.admin_health().await;
    let row = health.iter().find(|r| r["channel"] == "dead").unwrap();
    assert_eq!(row["circuit"], "open");
    assert!(row["circuit_seconds_left"].as_f64().unwrap() > 59.0);

    // After the cooldown one request is the trial; it fails, the cooldown doubles.
    gw.clock.advance(Duration::from_secs(60));
    assert_eq!(ask(&gw).await.1, "backup");
    assert_eq!(dead.requests(), 4);
    gw.clock.advance(Duration::from_secs(119));
    ask(&gw).await;
    assert_eq!(
        dead.requests(),
        4,
        "still open: the cooldown doubled to 120 s"
    );
    // The upstream recovers; the next trial succeeds and closes the circuit.
    dead.set_spec(text_spec("alive again"));
    gw.clock.advance(Duration::from_secs(1));
    assert_eq!(ask(&gw).await.1, "dead");
    for _ in 0..3 {
        assert_eq!(ask(&gw).await.1, "dead");
    }
    assert_eq!(backup.requests(), 6);
}

#[tokio::test]
async fn half_open_lets_exactly_one_trial_through() {
    let (dead, _backup, gw) = two_tiers(
        ("dead", faulty("x", status(503)), LIVE_TRIALS),
        ("backup", text_spec("ok")),
    )
    .await;
    for _ in 0..3 {
        ask(&gw).await;
    }
    // The recovered upstream answers slowly, so the trial is still running when others arrive.
    dead.set_spec(MockSpec {
        ttft_ms: 400,
        ..text_spec("slow but alive")
    });
    gw.clock.advance(Duration::from_secs(60));
    let (a, b, c) = tokio::join!(ask(&gw), ask(&gw), ask(&gw));
    let served: Vec<&str> = [&a.1, &b.1, &c.1].iter().map(|s| s.as_str()).collect();
    assert_eq!(
        served.iter().filter(|s| **s == "dead").count(),
        1,
        "{served:?}"
    );
    assert_eq!(dead.requests(), 1);
    // The two others skipped it because the trial was taken, and said so.
    let rows = gw.admin_requests().await;
    let half_open_skips = rows[..3]
        .iter()
        .filter(|r| {
            reasons(&r["attempts"]).first().map(String::as_str) == Some("circuit_half_open")
        })
        .count();
    assert_eq!(half_open_skips, 2, "{rows:#?}");
}

#[tokio::test]
async fn a_429_with_retry_after_cools_the_channel_exactly_that_long() {
    let (limited, _backup, gw) = two_tiers(
        (
            "limited",
            faulty(
                "x",
                Fault {
                    status: Some(429),
                    retry_after_seconds: Some(2),
                    ..Fault::default()
                },
            ),
            "",
        ),
        ("backup", text_spec("ok")),
    )
    .await;
    assert_eq!(ask(&gw).await.1, "backup");
    assert_eq!(limited.requests(), 1);
    gw.clock.advance(Duration::from_millis(1999));
    assert_eq!(ask(&gw).await.1, "backup");
    assert_eq!(limited.requests(), 1, "still cooling");
    let rows = gw.admin_requests().await;
    // The channel's only key is cooling: no credential has headroom.
    assert_eq!(rows[0]["attempts"][0]["reason"], "no_credential_headroom");
    gw.clock.advance(Duration::from_millis(1));
    ask(&gw).await;
    assert_eq!(limited.requests(), 2, "the cooldown is over");
}

#[tokio::test]
async fn when_every_channel_is_open_the_answer_is_503_at_once() {
    let (a, b, gw) = two_tiers(
        ("a", faulty("x", status(500)), ""),
        ("b", faulty("x", status(502))),
    )
    .await;
    for _ in 0..3 {
        assert_eq!(ask(&gw).await.0, 502);
    }
    let started = std::time::Instant::now();
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(header(&resp, "x-should-retry"), "false");
    let e = error_envelope(resp, 503).await;
    assert!(started.elapsed() < Duration::from_millis(500));
    assert_eq!(e["code"], "no_available_channel");
    assert_eq!(reasons(&e["attempts"]), ["circuit_open", "circuit_open"]);
    assert_eq!((a.requests(), b.requests()), (3, 3));
}

#[tokio::test]
async fn every_channel_cooling_from_429_is_all_rate_limited_with_the_time_left() {
    let limited = Fault {
        status: Some(429),
        retry_after_seconds: Some(20),
        ..Fault::default()
    };
    let (a, _b, gw) = two_tiers(
        ("a", faulty("x", limited.clone()), ""),
        ("b", faulty("x", limited)),
    )
    .await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 429);
    gw.clock.advance(Duration::from_secs(5));
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(header(&resp, "retry-after"), "15");
    let e = error_envelope(resp, 429).await;
    assert_eq!(e["code"], "all_rate_limited");
    assert_eq!(a.requests(), 1);
}

#[tokio::test]
async fn a_disabled_breaker_ignores_health() {
    let (dead, _backup, gw) = two_tiers(
        (
            "dead",
            faulty("x", status(500)),
            "[channels.circuit_breaker]\nenabled = false",
        ),
        ("backup", text_spec("ok")),
    )
    .await;
    for _ in 0..6 {
        assert_eq!(ask(&gw).await.1, "backup");
    }
    assert_eq!(dead.requests(), 6, "never skipped");
}

#[tokio::test]
async fn client_errors_never_open_the_circuit() {
    let up = mock(faulty("x", status(400))).await;
    let gw = gateway(&openai_channel("up", &up.base_url(), 1, "")).await;
    for _ in 0..5 {
        assert_eq!(gw.chat(chat_body(false)).await.status(), 400);
    }
    assert_eq!(up.requests(), 5);
    let health = gw.admin_health().await;
    assert_eq!(health[0]["circuit"], "closed");
    assert_eq!(health[0]["score"], 100.0);
}

#[tokio::test]
async fn a_recovered_channel_ramps_up_its_share() {
    let a = mock(faulty("x", status(500))).await;
    let b = mock(text_spec("b")).await;
    let gw = gateway(&format!(
        "{}{}",
        openai_channel("a", &a.base_url(), 1, LIVE_TRIALS),
        openai_channel("b", &b.base_url(), 1, "")
    ))
    .await;
    // Same tier: requests reach `a` until three failures open its circuit.
    for _ in 0..200 {
        if a.requests() >= 3 {
            break;
        }
        assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    }
    assert_eq!(a.requests(), 3);
    // Recovered upstream; after the cooldown, some request becomes the trial and closes it.
    a.set_spec(text_spec("a"));
    gw.clock.advance(Duration::from_secs(60));
    for _ in 0..500 {
        if a.requests() >= 1 {
            break;
        }
        gw.chat(chat_body(false)).await;
    }
    assert_eq!(a.requests(), 1, "the trial");
    let share = |n: u64, before: u64| (a.requests() - before) as f64 / n as f64;
    // Right after recovery `a` gets only a trickle...
    let before = a.requests();
    for _ in 0..200 {
        gw.chat(chat_body(false)).await;
    }
    let early = share(200, before);
    // ...and its full share once slow start (30 s) is over.
    gw.clock.advance(Duration::from_secs(30));
    let before = a.requests();
    for _ in 0..200 {
        gw.chat(chat_body(false)).await;
    }
    let late = share(200, before);
    assert!(early < 0.15, "early share {early}");
    assert!(late > 0.3, "late share {late}");
}

#[tokio::test]
async fn probes_close_a_circuit_without_risking_a_client_request() {
    let (dead, _backup, gw) = two_tiers(
        ("dead", faulty("x", status(500)), ""),
        ("backup", text_spec("ok")),
    )
    .await;
    for _ in 0..3 {
        ask(&gw).await;
    }
    assert_eq!(dead.requests(), 3);
    dead.set_spec(text_spec("alive"));
    let seen_before = dead.received().len();
    // Cooldown over: client requests still skip the channel; a probe tests it instead.
    gw.clock.advance(Duration::from_secs(60));
    eventually(&dead, "a probe", |m| m.requests() >= 1).await;
    let probe = &dead.received()[seen_before].body;
    assert_eq!(probe["max_tokens"], 1);
    assert_eq!(probe["messages"][0]["content"], "ping");
    // Once the probe has closed the circuit, client requests are served by it again.
    wait_circuit(&gw.url, "dead", "closed", Duration::from_secs(10)).await;
    assert_eq!(ask(&gw).await.1, "dead");
    let health = gw.admin_health().await;
    let row = health.iter().find(|r| r["channel"] == "dead").unwrap();
    assert_eq!(row["circuit"], "closed");
    assert_eq!(row["last_probe"]["ok"], true);
    // Until the circuit closed, what the recovered upstream saw were probes, never clients.
    let after: Vec<_> = dead.received()[seen_before..]
        .iter()
        .map(|r| r.body["max_tokens"].clone())
        .collect();
    let first_client = after.iter().position(|m| m.is_null()).unwrap();
    assert!(
        first_client >= 1 && after[..first_client].iter().all(|m| *m == 1),
        "{after:?}"
    );
}

#[tokio::test]
async fn models_probes_ask_get_models() {
    let (dead, _backup, gw) = two_tiers(
        (
            "dead",
            faulty("x", status(500)),
            "[channels.circuit_breaker]\nprobe = { kind = \"models\" }",
        ),
        ("backup", text_spec("ok")),
    )
    .await;
    for _ in 0..3 {
        ask(&gw).await;
    }
    dead.set_spec(text_spec("alive"));
    let seen_before = dead.received().len();
    gw.clock.advance(Duration::from_secs(60));
    eventually(&dead, "a probe", |m| m.requests() >= 1).await;
    let probe = &dead.received()[seen_before];
    assert_eq!(probe.uri, "/v1/models");
    assert_eq!(
        probe.headers["authorization"].to_str().unwrap(),
        format!("Bearer {UPSTREAM_KEY}")
    );
}

#[tokio::test]
async fn per_model_breakers_isolate_one_model() {
    let up = mock(MockSpec {
        per_model: [("broken".to_string(), status(500))].into_iter().collect(),
        ..text_spec("ok")
    })
    .await;
    let backup = mock(text_spec("backup")).await;
    let gw = gateway(&format!(
        "[[channels]]\nname = \"up\"\nprovider = \"openai\"\nbase_url = \"{}\"\n\
         models = [\"broken\", \"fine\"]\npriority = 1\n\
         [channels.circuit_breaker]\nper_model = true\n\n\
         [[channels]]\nname = \"backup\"\nprovider = \"openai\"\nbase_url = \"{}\"\n\
         models = [\"broken\", \"fine\"]\npriority = 2\n",
        up.base_url(),
        backup.base_url()
    ))
    .await;
    let body = |model: &str| serde_json::json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
    for _ in 0..3 {
        assert_eq!(
            header(&gw.chat(body("broken")).await, "x-switchyard-channel"),
            "backup"
        );
    }
    // `broken` is open on `up`; `fine` is not affected.
    let before = up.requests();
    assert_eq!(
        header(&gw.chat(body("broken")).await, "x-switchyard-channel"),
        "backup"
    );
    assert_eq!(up.requests(), before, "no attempt on the open (up, broken)");
    assert_eq!(
        header(&gw.chat(body("fine")).await, "x-switchyard-channel"),
        "up"
    );
    let health = gw.admin_health().await;
    let row = health
        .iter()
        .find(|r| r["channel"] == "up" && r["model"] == "broken")
        .unwrap();
    assert_eq!(row["circuit"], "open");
}

#[tokio::test]
async fn turning_probes_on_while_half_open_does_not_strand_the_channel() {
    let a = mock(faulty("x", status(500))).await;
    let b = mock(text_spec("b")).await;
    let channels = |extra: &str| {
        format!(
            "{}{}",
            openai_channel("a", &a.base_url(), 1, extra),
            openai_channel("b", &b.base_url(), 1, "")
        )
    };
    let gw = gateway(&channels(LIVE_TRIALS)).await;
    for _ in 0..200 {
        if a.requests() >= 3 {
            break;
        }
        gw.chat(chat_body(false)).await;
    }
    // Past the cooldown, requests that draw `b` first leave `a` half-open without a trial.
    gw.clock.advance(Duration::from_secs(60));
    a.set_spec(text_spec("a"));
    gw.chat(chat_body(false)).await;
    // Now probes are switched on; whatever state `a` is in, a probe must bring it back.
    gw.rewrite(&channels(""));
    assert_eq!(gw.reload().await.status(), 200);
    wait_circuit(&gw.url, "a", "closed", Duration::from_secs(10)).await;
    // Closed, `a` takes its share again (one of two equal channels, its health still low).
    let mut served_by_a = false;
    for _ in 0..200 {
        if header(&gw.chat(chat_body(false)).await, "x-switchyard-channel") == "a" {
            served_by_a = true;
            break;
        }
    }
    assert!(served_by_a, "a recovered through a probe");
}

#[tokio::test]
async fn streams_that_break_after_commit_count_against_the_channel() {
    let (cut, _backup, gw) = two_tiers(
        ("cut", after_chunks(1, true), ""),
        ("backup", text_spec("ok")),
    )
    .await;
    let mut body = chat_body(true);
    for _ in 0..3 {
        let resp = gw.chat(body.clone()).await;
        assert_eq!(header(&resp, "x-switchyard-channel"), "cut");
        assert!(resp.text().await.unwrap().contains("stream_interrupted"));
    }
    // Three broken streams opened the circuit: the next request goes to the backup.
    body["stream"] = false.into();
    let resp = gw.chat(body).await;
    assert_eq!(header(&resp, "x-switchyard-channel"), "backup");
    assert_eq!(cut.requests(), 3);
}
