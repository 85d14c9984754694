//! Failing over costs almost nothing: a request whose primary answers 500 at once is served by
//! the backup with < 50 ms added over the backup's own latency. Timing-sensitive, so it is
//! `#[ignore]`d in the main run and run on its own by `.ci/run`
//! (`cargo test --test it -- --ignored --test-threads=1`).

use std::time::{Duration, Instant};

use switchyard::provider::mock::MockSpec;

use crate::support::*;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::test]
#[ignore = "timing: run apart from the other tests (see .ci/run)"]
async fn failover_on_an_instant_500_adds_under_50_ms() {
    // The backup takes a realistic 30 ms to answer, so the comparison is against real work.
    let backup_spec = MockSpec {
        ttft_ms: 30,
        ..text_spec("ok")
    };
    let (_dead, _backup, failing_over) = two_tiers(
        (
            "dead",
            faulty("x", status(500)),
            "[channels.circuit_breaker]\nenabled = false",
        ),
        ("backup", backup_spec.clone()),
    )
    .await;
    let direct_backup = mock(backup_spec).await;
    let direct = gateway(&openai_channel("backup", &direct_backup.base_url(), 1, "")).await;
    // Warm both paths (connections, allocator).
    for _ in 0..5 {
        failing_over.chat(chat_body(false)).await;
        direct.chat(chat_body(false)).await;
    }
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for _ in 0..25 {
        let t = Instant::now();
        let resp = failing_over.chat(chat_body(false)).await;
        assert_eq!(header(&resp, "x-switchyard-attempts"), "2");
        with.push(t.elapsed());
        let t = Instant::now();
        assert_eq!(direct.chat(chat_body(false)).await.status(), 200);
        without.push(t.elapsed());
    }
    let (w, wo) = (median(with), median(without));
    let added = w.saturating_sub(wo);
    println!("median with failover {w:?}, backup alone {wo:?}, added {added:?}");
    assert!(
        added < Duration::from_millis(50),
        "failover added {added:?}"
    );
}
