//! Limits when the counter store is in trouble. Two replicas, 32 concurrent clients and keys
//! with `rpm`, `tpm`, `max_concurrency` and a budget, counted in a Redis of the test's own that
//! keeps its data on disk, then in a PostgreSQL store on a server of the test's own. While the
//! counter answers, each key's count is exact; killed (Redis by SIGKILL, PostgreSQL stopped for a
//! restart), a key whose limits fail closed is refused 503 `budget_unavailable` and one whose
//! limits fail open is served on each replica's own count, at most its limit per replica
//! (docs/spend.md); started again, counting resumes where it stood, each request counted once.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

const CLOSED: &str = "sk-outage-closed-01";
const OPEN: &str = "sk-outage-open-0001";
const RPM: usize = 20;

fn keys(counter: &str) -> String {
    let limits = format!("rpm = {RPM}\ntpm = 1000000\nmax_concurrency = 64");
    format!(
        "\n\n[[keys]]\nname = \"closed\"\nkey = \"{CLOSED}\"\n{limits}\n\
         budget = {{ usd = 10 }}\nlimits_fail = \"closed\"\n\n\
         [[keys]]\nname = \"open\"\nkey = \"{OPEN}\"\n{limits}\n\
         budget = {{ usd = 10, fail = \"open\" }}\nlimits_fail = \"open\"\n\n{counter}"
    )
}

/// Where the counts are kept: a Redis that keeps its data in a directory, or a PostgreSQL
/// store; both of the test's own, to kill and start again.
enum Counter {
    Redis(Option<OwnRedis>, u16, tempfile::TempDir),
    Postgres(OwnPostgres),
}

impl Counter {
    async fn redis() -> Counter {
        let (port, dir) = (free_port(), tempfile::tempdir().unwrap());
        let r = OwnRedis::start_kept(port, dir.path());
        r.wait_ready().await;
        Counter::Redis(Some(r), port, dir)
    }

    fn name(&self) -> &'static str {
        match self {
            Counter::Redis(..) => "redis",
            Counter::Postgres(_) => "postgres",
        }
    }

    /// The config table that keeps the counts there.
    fn section(&self) -> String {
        match self {
            Counter::Redis(_, port, _) => format!(
                "[state]\nurl = \"redis://127.0.0.1:{port}\"\nprefix = \"{}\"\n",
                redis_prefix("outage")
            ),
            Counter::Postgres(pg) => store_section(&pg.url(), Some(&master_key(5))),
        }
    }

    /// SIGKILL for Redis; a restart's stop for PostgreSQL (sessions cut at once). A crash of
    /// PostgreSQL may lose the last fraction of a second of counts, which are committed
    /// asynchronously (docs/spend.md): not "where it stood".
    fn kill(&mut self) {
        match self {
            Counter::Redis(r, ..) => drop(r.take()),
            Counter::Postgres(pg) => pg.stop(),
        }
    }

    async fn restart(&mut self) {
        match self {
            Counter::Redis(r, port, dir) => {
                let again = OwnRedis::start_kept(*port, dir.path());
                again.wait_ready().await;
                *r = Some(again);
            }
            Counter::Postgres(pg) => pg.up().await,
        }
    }
}

/// Waits until `gw`'s `/readyz` says its counter answers (or not).
async fn counter_connected(gw: &Gateway, connected: bool) {
    let url = format!("{}/readyz", gw.url);
    until(
        "the counter's connection",
        Duration::from_secs(20),
        async || {
            let v = get_json(&url, None).await;
            (v["budgets"]["connected"] == connected)
                .then_some(())
                .ok_or(v)
        },
    )
    .await;
}

/// Both keys' clients, 16 each, alternating replicas, each until its first refusal.
async fn burst(gws: &[Gateway; 2]) -> HashMap<&'static str, Vec<Sent>> {
    let r = Race {
        workers: 32,
        keys: &[CLOSED, OPEN],
        after: 0,
        most: 2 * RPM,
    };
    let body = json!({"model": "m", "max_tokens": 5,
        "messages": [{"role": "user", "content": "Say something short."}]});
    let mut by: HashMap<&str, Vec<Sent>> = HashMap::new();
    for s in r.run(gws, &body).await {
        let k = if s.key == CLOSED { CLOSED } else { OPEN };
        by.entry(k).or_default().push(s);
    }
    by
}

fn served(sent: &[Sent]) -> (usize, u64) {
    let ok: Vec<&Sent> = sent.iter().filter(|s| s.status == 200).collect();
    (ok.len(), ok.iter().map(|s| s.cost).sum())
}

fn refusals(sent: &[Sent]) -> Vec<(u16, String)> {
    let mut r: Vec<(u16, String)> = sent
        .iter()
        .filter(|s| s.status != 200)
        .map(|s| (s.status, s.code.clone()))
        .collect();
    r.dedup();
    r
}

/// Each key's (spent, reserved) in the shared counter, as `/admin/budgets` reads it.
async fn standing(gw: &Gateway) -> HashMap<String, (u64, u64)> {
    let v = get_json(&format!("{}/admin/budgets", gw.url), Some(ADMIN)).await;
    v["data"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .filter(|r| r["scope"] == "key")
        .map(|r| {
            let n = |f: &str| r[f].as_u64().unwrap_or(u64::MAX);
            (
                r["name"].as_str().unwrap_or("").to_string(),
                (n("spent_micros"), n("reserved_micros")),
            )
        })
        .collect()
}

#[tokio::test]
async fn with_the_counter_killed_closed_limits_refuse_open_ones_stay_bounded_and_counts_resume() {
    for mut counter in [
        Counter::redis().await,
        Counter::Postgres(OwnPostgres::start().await),
    ] {
        outage(&mut counter).await;
    }
}

async fn outage(counter: &mut Counter) {
    let which = counter.name();
    let up = mock(text_spec("ok")).await;
    let channels = openai_channel("a", &up.base_url(), 1, "price = { input = 1, output = 1 }");
    let cfg = keys(&counter.section());
    let gws = [
        gateway_full("", &cfg, &channels).await,
        gateway_full("", &cfg, &channels).await,
    ];
    for gw in &gws {
        counter_connected(gw, true).await;
    }

    // Up: exactly the minute's worth per key across both replicas, the rest 429.
    let up_burst = burst(&gws).await;
    let mut spent_up = HashMap::new();
    for key in [CLOSED, OPEN] {
        let (n, cost) = served(&up_burst[key]);
        assert_eq!(n, RPM, "{which} {key}: {:?}", up_burst[key]);
        assert_eq!(
            refusals(&up_burst[key]),
            [(429, "rate_limit_exceeded".to_string())],
            "{which}"
        );
        spent_up.insert(key, cost);
    }
    let before = standing(&gws[0]).await;
    assert_eq!(
        before["closed"],
        (spent_up[CLOSED], 0),
        "{which}: {before:?}"
    );
    assert_eq!(before["open"], (spent_up[OPEN], 0), "{which}: {before:?}");

    // Killed: the closed key is refused 503, the open one served on each replica's own count.
    counter.kill();
    let down = burst(&gws).await;
    assert_eq!(served(&down[CLOSED]).0, 0, "{which}");
    assert_eq!(
        refusals(&down[CLOSED]),
        [(503, "budget_unavailable".to_string())],
        "{which}: {:?}",
        down[CLOSED]
    );
    // The documented bound: each replica admits at most the limit on its own count.
    let (n_open, _) = served(&down[OPEN]);
    assert!(
        (RPM..=2 * RPM).contains(&n_open),
        "{which}: served {n_open} with the counter down: {:?}",
        down[OPEN]
    );
    assert_eq!(
        refusals(&down[OPEN]),
        [(429, "rate_limit_exceeded".to_string())],
        "{which}"
    );

    // Started again on its data: each key's window and spend are where they stood, each
    // request counted once (what was served on a replica's own count settled while the
    // counter was down, and stays out of the shared count).
    counter.restart().await;
    for gw in &gws {
        counter_connected(gw, true).await;
    }
    let after = standing(&gws[0]).await;
    assert_eq!(
        after, before,
        "{which}: the shared counts moved across the outage"
    );
    for key in [CLOSED, OPEN] {
        let resp = gws[1]
            .post_as(
                "/v1/chat/completions",
                key,
                &[],
                json!({"model": "m", "messages": [{"role": "user", "content": "again"}]}),
            )
            .await;
        assert_eq!(
            resp.status(),
            429,
            "{which} {key}: the minute's count was kept"
        );
        assert_eq!(header(&resp, "x-ratelimit-remaining-requests"), "0");
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["error"]["code"], "rate_limit_exceeded", "{which}: {v}");
    }
}
