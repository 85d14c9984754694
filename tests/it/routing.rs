//! Routing strategies over real HTTP: the first try follows what the gateway measured (latency,
//! requests in flight) or what the request costs, says why in the log, the header and
//! `route/explain`, and counts in flight across replicas through Redis.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use switchyard::provider::mock::{MockServer, MockSpec};

use crate::support::*;

/// A mock answering after `ttft_ms` (streams: the first token; the rest follows at once).
fn after(ms: u64) -> MockSpec {
    MockSpec {
        ttft_ms: ms,
        ..text_spec("ok")
    }
}

/// `[[models]]` giving `m` a strategy, then the channels.
fn with_strategy(strategy: &str, channels: &str) -> String {
    format!("[[models]]\nname = \"m\"\nstrategy = \"{strategy}\"\n\n{channels}")
}

/// Sends `n` requests, `workers` at a time; returns how many each channel served (read from
/// `x-switchyard-channel`) and each `x-switchyard-route` seen.
async fn run(
    gw: &Gateway,
    n: usize,
    workers: usize,
    stream: bool,
) -> (HashMap<String, usize>, Vec<String>) {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let (next, http, url) = (next.clone(), client(), gw.chat_url());
        tasks.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < n {
                let r = http
                    .post(&url)
                    .bearer_auth(KEY)
                    .json(&chat_body(stream))
                    .send()
                    .await
                    .expect("gateway reachable");
                assert_eq!(r.status(), 200);
                let channel = header(&r, "x-switchyard-channel").to_string();
                let route = header(&r, "x-switchyard-route").to_string();
                r.bytes().await.expect("whole answer");
                seen.push((channel, route));
            }
            seen
        }));
    }
    let mut served: HashMap<String, usize> = HashMap::new();
    let mut routes = Vec::new();
    for t in tasks {
        for (c, r) in t.await.expect("worker") {
            *served.entry(c).or_default() += 1;
            routes.push(r);
        }
    }
    (served, routes)
}

fn share(served: &HashMap<String, usize>, channel: &str) -> f64 {
    let total: usize = served.values().sum();
    served.get(channel).copied().unwrap_or(0) as f64 / total.max(1) as f64
}

#[tokio::test]
#[ignore = "timing: run apart (.ci/run's timing stage)"]
async fn latency_sends_first_tries_to_the_faster_channel_and_follows_a_change() {
    let fast = mock(after(5)).await;
    let slow = mock(after(205)).await;
    let channels = format!(
        "{}{}",
        models_channel("fast", &fast.base_url(), &["m"], ""),
        models_channel("slow", &slow.base_url(), &["m"], "")
    );
    let gw = gateway_full(
        "",
        "expose_route = true",
        &with_strategy("latency", &channels),
    )
    .await;
    // Both are tried once (no sample yet), then the faster one leads.
    let (_, routes) = run(&gw, 50, 4, true).await;
    assert!(routes.iter().any(|r| r == "latency.untried"), "{routes:?}");
    let (served, routes) = run(&gw, 200, 4, true).await;
    eprintln!(
        "latency, 200 streams after 50: fast {:.3}, slow {:.3}",
        share(&served, "fast"),
        share(&served, "slow")
    );
    assert!(share(&served, "fast") >= 0.90, "after 50: {served:?}");
    assert!(
        share(&served, "slow") < 0.10,
        "exploration over 10 %: {served:?}"
    );
    assert!(share(&served, "slow") > 0.0, "never explored: {served:?}");
    assert!(routes.iter().any(|r| r == "latency.fastest"), "{routes:?}");
    assert!(
        routes.iter().any(|r| r == "latency.exploring"),
        "{routes:?}"
    );
    // The fast one turns 400 ms slower than the slow one: the majority moves within 100.
    fast.set_spec(after(605));
    let (within, _) = run(&gw, 100, 8, true).await;
    let (after, _) = run(&gw, 100, 8, true).await;
    eprintln!(
        "latency, the fast one 400 ms slower: slow's share {:.3} of the next 100, {:.3} of the 100 after",
        share(&within, "slow"),
        share(&after, "slow")
    );
    assert!(share(&within, "slow") > 0.5, "within 100: {within:?}");
    assert!(share(&after, "slow") >= 0.90, "after the move: {after:?}");
}

/// What `in_flight_during` saw: each mock's average requests in flight near full concurrency,
/// and the average ratio of the slow channel's latency figure to the fast one's.
struct Load {
    in_flight: [f64; 2],
    ratio: f64,
}

/// Samples the two mocks' requests in flight every 5 ms while `load` runs (the gateway's clock
/// following real time, so latency figures decay as they would in production), and every
/// 100 ms the gateway's latency figures for them.
async fn in_flight_during(
    gw: &Gateway,
    mocks: [&MockServer; 2],
    load: impl Future<Output = ()>,
) -> Load {
    let mut sums = [0.0; 2];
    let (mut n, mut ratios) = (0.0, Vec::new());
    tokio::pin!(load);
    let mut tick = tokio::time::interval(Duration::from_millis(5));
    let mut last = std::time::Instant::now();
    for i in 0u64.. {
        tokio::select! {
            () = &mut load => break,
            _ = tick.tick() => {
                gw.clock.advance(last.elapsed());
                last = std::time::Instant::now();
                let now = mocks.map(|m| m.in_flight() as f64);
                // Only while the load is near its full concurrency (not its ramp or tail).
                if now[0] + now[1] >= 48.0 {
                    sums[0] += now[0];
                    sums[1] += now[1];
                    n += 1.0;
                    if i % 20 == 0 {
                        let fig = figures(gw).await;
                        if fig["fast"] > 0.0 && fig["slow"] > 0.0 {
                            ratios.push(fig["slow"] / fig["fast"]);
                        }
                    }
                }
            }
        }
    }
    assert!(
        n >= 20.0,
        "too few samples at full load: {n} (sums {sums:?})"
    );
    Load {
        in_flight: sums.map(|s| s / n),
        ratio: ratios.iter().sum::<f64>() / ratios.len().max(1) as f64,
    }
}

#[tokio::test]
#[ignore = "timing: run apart (.ci/run's timing stage)"]
async fn least_busy_and_p2c_balance_what_is_in_flight() {
    for strategy in ["least_busy", "p2c"] {
        let fast = mock(after(100)).await;
        let slow = mock(after(1000)).await;
        let channels = format!(
            "{}{}",
            models_channel("fast", &fast.base_url(), &["m"], ""),
            models_channel("slow", &slow.base_url(), &["m"], "")
        );
        let gw = gateway(&with_strategy(strategy, &channels)).await;
        // Each channel answers first, so latency is known (p2c would count an unmeasured one
        // as the fastest until its first answer, a second into the load).
        run(&gw, 4, 1, false).await;
        if strategy == "p2c" {
            until(
                "both channels measured",
                Duration::from_secs(20),
                async || {
                    let fig = figures(&gw).await;
                    if fig.values().all(|ms| *ms > 0.0) {
                        return Ok(());
                    }
                    run(&gw, 1, 1, false).await;
                    Err(format!("{fig:?}"))
                },
            )
            .await;
        }
        let load = in_flight_during(&gw, [&fast, &slow], async {
            run(&gw, 1600, 64, false).await;
        })
        .await;
        let [f, sl] = load.in_flight;
        let total = f + sl;
        // The ideal: least_busy evens the count; p2c evens (in flight + 1) × latency, by the
        // figures the gateway measured during the load (r = slow / fast, about 10):
        // f + 1 = r (s + 1) and f + s = total.
        let r = load.ratio;
        let ideal_slow = if strategy == "least_busy" {
            total / 2.0
        } else {
            (total + 1.0 - r) / (1.0 + r)
        };
        let ideal_fast = total - ideal_slow;
        eprintln!(
            "{strategy}: in flight at the mocks, fast {f:.1} slow {sl:.1}; ideal fast {ideal_fast:.1} slow {ideal_slow:.1} (latency ratio {r:.1})"
        );
        for (got, ideal, name) in [(f, ideal_fast, "fast"), (sl, ideal_slow, "slow")] {
            assert!(
                (got - ideal).abs() <= 0.2 * ideal,
                "{strategy}: {name} holds {got:.1} in flight, ideal {ideal:.1} (latency ratio {r:.1})"
            );
        }
    }
}

#[tokio::test]
async fn cost_takes_the_cheapest_then_the_next_when_its_circuit_opens() {
    let (cheap, mid, dear) = (
        mock(text_spec("cheap")).await,
        mock(text_spec("mid")).await,
        mock(text_spec("dear")).await,
    );
    let breaker = "[channels.circuit_breaker]\nfailure_threshold = 2\ncooldown_seconds = 600";
    let channels = format!(
        "{}{}{}",
        models_channel(
            "dear",
            &dear.base_url(),
            &["m"],
            "weight = 10\nprice = { input = 3.0, output = 15.0 }"
        ),
        models_channel(
            "cheap",
            &cheap.base_url(),
            &["m"],
            &format!("price = {{ input = 0.5, output = 1.0 }}\n{breaker}")
        ),
        models_channel(
            "mid",
            &mid.base_url(),
            &["m"],
            "price = { input = 1.0, output = 4.0 }"
        ),
    );
    let gw = gateway_full("", "expose_route = true", &with_strategy("cost", &channels)).await;
    let (served, routes) = run(&gw, 20, 2, false).await;
    assert_eq!(served.get("cheap"), Some(&20), "{served:?}");
    assert!(routes.iter().all(|r| r == "cost.cheapest"), "{routes:?}");
    // The cheapest fails until its circuit opens; then every first try is the next cheapest.
    cheap.set_spec(faulty("x", status(500)));
    let (served, _) = run(&gw, 4, 1, false).await;
    assert_eq!(
        served.get("mid"),
        Some(&4),
        "failed over to the next cheapest: {served:?}"
    );
    wait_circuit(&gw.url, "cheap", "open", Duration::from_secs(10)).await;
    let (served, _) = run(&gw, 20, 2, false).await;
    assert_eq!(served.get("mid"), Some(&20), "{served:?}");
}

#[tokio::test]
async fn the_reason_reaches_the_log_the_header_and_explain() {
    let (a, b) = (mock(after(1)).await, mock(after(1)).await);
    let channels = format!(
        "{}{}",
        models_channel("a", &a.base_url(), &["m"], ""),
        models_channel("b", &b.base_url(), &["m"], "")
    );
    // The test key exposes its route; another key does not.
    let gw = gateway_full(
        "",
        "expose_route = true\n[[keys]]\nname = \"quiet\"\nkey = \"sk-quiet-key-0001\"",
        &with_strategy("least_busy", &channels),
    )
    .await;
    let r = gw.chat(chat_body(false)).await;
    assert_eq!(
        header(&r, "x-switchyard-route"),
        "least_busy.fewest_in_flight"
    );
    let r = gw
        .post_as(
            "/v1/chat/completions",
            "sk-quiet-key-0001",
            &[],
            chat_body(false),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        header(&r, "x-switchyard-route"),
        "",
        "a key without expose_route"
    );
    let rows = gw.admin_requests().await;
    assert_eq!(rows.len(), 2);
    for row in &rows {
        assert_eq!(row["route_reason"], "least_busy.fewest_in_flight", "{row}");
    }
    // Explain: the strategy, its choice now, and what it reads of each candidate.
    let plan = explain(&gw).await;
    let step = &plan["chain"][0];
    assert_eq!(step["strategy"], "least_busy", "{plan}");
    assert_eq!(step["first_try"]["reason"], "least_busy.fewest_in_flight");
    let first = step["first_try"]["channel"].as_str().unwrap();
    assert_eq!(
        step["candidates"][0]["channel"], first,
        "its choice listed first"
    );
    for c in step["candidates"].as_array().unwrap() {
        assert_eq!(c["in_flight"], 0, "{c}");
        // least_busy reads no latency, so none is measured for it.
        assert!(c.get("latency_ms").is_none(), "{c}");
    }
    // Under `weighted` nothing is measured, and explain shows no figures.
    let gw = gateway(&channels).await;
    let plan = explain(&gw).await;
    assert_eq!(plan["chain"][0]["strategy"], "weighted");
    assert!(plan["chain"][0]["first_try"].is_null());
    assert!(plan["chain"][0]["candidates"][0].get("in_flight").is_none());
}

/// `POST /v1/route/explain` for a plain chat request to `m`.
async fn explain(gw: &Gateway) -> Value {
    gw.post_as("/v1/route/explain", KEY, &[], chat_body(false))
        .await
        .json()
        .await
        .unwrap()
}

/// `route/explain`'s latency figure for each candidate of `m`.
async fn figures(gw: &Gateway) -> HashMap<String, f64> {
    let plan = explain(gw).await;
    plan["chain"][0]["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let ms = c["latency_ms"].as_f64().unwrap_or(-1.0);
            (c["channel"].as_str().unwrap().to_string(), ms)
        })
        .collect()
}

#[tokio::test]
async fn a_latency_figure_rises_at_once_and_falls_with_the_half_life() {
    let a = mock(after(300)).await;
    let channels = format!(
        "[routing]\nlatency_half_life_seconds = 10\n\n{}",
        models_channel("a", &a.base_url(), &["m"], "")
    );
    let gw = gateway(&with_strategy("latency", &channels)).await;
    run(&gw, 1, 1, false).await;
    let first = figures(&gw).await["a"];
    assert!((300.0..400.0).contains(&first), "{first}");
    // Faster now, sampled at once (the gateway's clock has not moved): the figure stays.
    a.set_spec(after(1));
    run(&gw, 1, 1, false).await;
    assert_eq!(figures(&gw).await["a"], first);
    // One half-life later one fast sample takes half the way down.
    gw.clock.advance(Duration::from_secs(10));
    run(&gw, 1, 1, false).await;
    let halved = figures(&gw).await["a"];
    assert!((halved - first / 2.0).abs() < 15.0, "{first} -> {halved}");
    // A slower sample replaces the figure at once.
    a.set_spec(after(500));
    run(&gw, 1, 1, false).await;
    let peak = figures(&gw).await["a"];
    assert!((500.0..600.0).contains(&peak), "{peak}");
}

#[tokio::test]
async fn requests_in_flight_are_counted_across_replicas_through_redis() {
    // Streams that last: three held open through replica A.
    let up = mock(paced("abcdefghij", 10, 2000)).await;
    let prefix = redis_prefix("busy");
    let config = format!(
        "[state]\nurl = \"{REDIS_URL}\"\nprefix = \"{prefix}\"\n\n{}",
        with_strategy(
            "least_busy",
            &models_channel("x", &up.base_url(), &["m"], "")
        )
    );
    let a = gateway(&config).await;
    let b = gateway(&config).await;
    wait_connected(&a, true).await;
    wait_connected(&b, true).await;
    let mut open = Vec::new();
    for _ in 0..3 {
        let r = a.chat(chat_body(true)).await;
        assert_eq!(r.status(), 200);
        open.push(r);
    }
    let in_flight = async |gw: &Gateway| -> Result<(), Value> {
        let plan = explain(gw).await;
        let n = plan["chain"][0]["candidates"][0]["in_flight"].clone();
        if n == 3 { Ok(()) } else { Err(n) }
    };
    // A counts its own; B reads A's within a few publishing rounds.
    until("3 in flight at A", Duration::from_secs(5), async || {
        in_flight(&a).await
    })
    .await;
    until("A's 3 seen at B", Duration::from_secs(5), async || {
        in_flight(&b).await
    })
    .await;
    let at = async |gw: &Gateway| -> Value {
        let plan = explain(gw).await;
        plan["chain"][0]["candidates"][0]["in_flight"].clone()
    };
    // The streams end (their clients leave): B's sum falls back to 0.
    drop(open);
    until("0 in flight at B", Duration::from_secs(5), async || {
        let n = at(&b).await;
        if n == 0 { Ok(()) } else { Err(n) }
    })
    .await;
    // A replica that stops with streams open drops out of the others' sums within a second
    // or two (its published counts expire).
    let mut open = Vec::new();
    for _ in 0..2 {
        open.push(a.chat(chat_body(true)).await);
    }
    until("A's 2 seen at B", Duration::from_secs(5), async || {
        let n = at(&b).await;
        if n == 2 { Ok(()) } else { Err(n) }
    })
    .await;
    drop(a);
    until(
        "a stopped replica's count gone at B",
        Duration::from_secs(5),
        async || {
            let n = at(&b).await;
            if n == 0 { Ok(()) } else { Err(n) }
        },
    )
    .await;
    drop(open);
}
