//! Budgets and limits that hold across replicas: two gateways sharing Redis (and again sharing
//! only a PostgreSQL store) admit exactly what a key's budget, `rpm` and `max_concurrency`
//! allow; a killed replica's holds expire by their deadline; a refusal is in the client's
//! envelope and never fails over; a channel over its own budget is skipped.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard::provider::mock::MockSpec;

use crate::support::*;

/// $1 per 1M tokens each way: a token costs one micro-dollar.
const PRICED: &str = "price = { input = 1, output = 1 }";
/// A key without limits, to learn what a request costs without spending the test key's budget.
const CALIB: &str = "sk-calibration-key-0001";

/// Two replicas of one gateway: the test key with `limits`, the calibration key, `channels`.
async fn replicas(shared: &Shared, server: &str, limits: &str, channels: &str) -> [Gateway; 2] {
    let keys = format!(
        "{limits}\n\n[[keys]]\nname = \"calib\"\nkey = \"{CALIB}\"\n{}",
        shared.section()
    );
    let a = gateway_full(server, &keys, channels).await;
    let b = gateway_full(server, &keys, channels).await;
    if let Shared::Redis(_) = shared {
        wait_connected(&a, true).await;
        wait_connected(&b, true).await;
    }
    [a, b]
}

fn body(max_tokens: u64) -> Value {
    json!({"model": "m", "max_tokens": max_tokens,
           "messages": [{"role": "user", "content": "Say something short."}]})
}

/// What one request of `body(_)` counts: (prompt tokens, completion tokens).
async fn calibrate(gw: &Gateway) -> (u64, u64) {
    let resp = gw
        .post_as("/v1/chat/completions", CALIB, &[], body(1000))
        .await;
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    let n = |p: &str| v.pointer(p).and_then(Value::as_u64).unwrap();
    (n("/usage/prompt_tokens"), n("/usage/completion_tokens"))
}

async fn send(gw: &Gateway, body: &Value) -> Sent {
    let started = Instant::now();
    Sent::of(KEY, started, gw.chat(body.clone()).await).await
}

/// `workers` clients through both replicas in turn, each stopping `after` requests past its
/// first refusal (and at 200 requests at most).
async fn race(gws: &[Gateway; 2], body: &Value, workers: usize, after: usize) -> Vec<Sent> {
    let r = Race {
        workers,
        keys: &[KEY],
        after,
        most: 200,
    };
    r.run(gws, body).await
}

async fn ledger_total(gws: &[Gateway; 2], one_log: bool) -> u64 {
    ledger_cost(gws, one_log, "key", "team-a").await
}

#[tokio::test]
async fn a_keys_budget_holds_exactly_across_two_replicas() {
    for shared in Shared::each("budget_race").await {
        let up = mock(text_spec("a few words back")).await;
        let budget = 300;
        let gws = replicas(
            &shared,
            "",
            "budget = { usd = 0.0003, period = \"day\" }",
            &openai_channel("a", &up.base_url(), 1, PRICED),
        )
        .await;
        let (prompt, completion) = calibrate(&gws[0]).await;
        // The reply's reservation is what the reply costs: a request's hold is its cost.
        let sent = race(&gws, &body(completion), 8, 3).await;
        let which = shared.name();
        let served: Vec<&Sent> = sent.iter().filter(|s| s.status == 200).collect();
        let refused: Vec<&Sent> = sent.iter().filter(|s| s.status != 200).collect();
        for r in &refused {
            assert_eq!(
                (r.status, r.code.as_str()),
                (429, "budget_exceeded"),
                "{which}"
            );
        }
        let spent: u64 = served.iter().map(|s| s.cost).sum();
        let ask = prompt + completion;
        let overdraw = served
            .iter()
            .map(|s| s.cost.saturating_sub(ask))
            .max()
            .unwrap_or(0);
        assert!(
            !served.is_empty() && !refused.is_empty(),
            "{which}: {sent:?}"
        );
        assert!(
            spent <= budget + overdraw,
            "{which}: spent {spent} of {budget} (largest overdraw {overdraw})"
        );
        // Every request has room until the budget is spent: it is spent to the last request.
        assert!(
            spent + ask > budget,
            "{which}: only {spent} of {budget} spent"
        );
        assert_eq!(ledger_total(&gws, shared.one_log()).await, spent, "{which}");
        // Once refused, refused: every request sent after the first refusal is refused.
        let exhausted = refused.iter().map(|r| r.ended).min().unwrap();
        let after: Vec<&&Sent> = served.iter().filter(|s| s.started > exhausted).collect();
        assert!(
            after.is_empty(),
            "{which}: served after exhaustion: {after:?}"
        );
        assert_eq!(
            sent.iter().filter(|s| s.started > exhausted).count(),
            refused.iter().filter(|s| s.started > exhausted).count(),
            "{which}"
        );
        // The upstream saw exactly the requests served (and the calibration).
        assert_eq!(up.requests(), served.len() as u64 + 1, "{which}");
    }
}

#[tokio::test]
async fn rpm_and_max_concurrency_hold_across_two_replicas() {
    for shared in Shared::each("rate_race").await {
        let which = shared.name();
        let up = mock(text_spec("ok")).await;
        let gws = replicas(
            &shared,
            "",
            "rpm = 5",
            &openai_channel("a", &up.base_url(), 1, ""),
        )
        .await;
        let mut statuses = Vec::new();
        for i in 0..12 {
            let resp = gws[i % 2].chat(chat_body(false)).await;
            let status = resp.status().as_u16();
            if status == 429 {
                let secs: u64 = header(&resp, "retry-after").parse().unwrap();
                assert!((1..=60).contains(&secs), "{which}: {secs}");
                assert_eq!(header(&resp, "x-ratelimit-limit-requests"), "5");
                assert_eq!(header(&resp, "x-ratelimit-remaining-requests"), "0");
                let v: Value = resp.json().await.unwrap();
                assert_eq!(v["error"]["code"], "rate_limit_exceeded", "{which}");
            }
            statuses.push(status);
        }
        let served = statuses.iter().filter(|s| **s == 200).count();
        assert_eq!(served, 5, "{which}: {statuses:?}");
        assert!(
            statuses[5..].iter().all(|s| *s == 429),
            "{which}: {statuses:?}"
        );

        // At most two in flight, whichever replica they reach: two held by a slow upstream
        // (long enough that a loaded machine cannot let one finish early), then four refused.
        let slow = mock(MockSpec {
            ttft_ms: 4000,
            ..text_spec("slow")
        })
        .await;
        let gws = replicas(
            &shared,
            "",
            "max_concurrency = 2",
            &openai_channel("a", &slow.base_url(), 1, ""),
        )
        .await;
        let send = |url: String| async move {
            let resp = client()
                .post(url)
                .bearer_auth(KEY)
                .json(&chat_body(false))
                .send()
                .await
                .unwrap();
            (
                resp.status().as_u16(),
                header(&resp, "x-ratelimit-limit-concurrency").to_string(),
            )
        };
        let held: Vec<_> = (0..2)
            .map(|i| tokio::spawn(send(gws[i % 2].chat_url())))
            .collect();
        until(
            "both slots are taken",
            Duration::from_secs(10),
            async || slow.requests() == 2,
        )
        .await;
        for i in 0..4 {
            let (status, limit) = send(gws[i % 2].chat_url()).await;
            assert_eq!(
                (status, limit.as_str()),
                (429, "2"),
                "{which}: overflow {i}"
            );
        }
        for t in held {
            assert_eq!(t.await.unwrap().0, 200, "{which}");
        }
        assert_eq!(
            slow.requests(),
            2,
            "{which}: the refused never reached the upstream"
        );
        // Settled: the slots are free again.
        assert_eq!(gws[1].chat(chat_body(false)).await.status(), 200, "{which}");
    }
}

#[tokio::test]
async fn a_killed_replicas_holds_expire_by_their_deadline() {
    for shared in Shared::each("budget_kill").await {
        let which = shared.name();
        let dir = tempfile::tempdir().unwrap();
        let hung = mock(MockSpec {
            ttft_ms: 60_000,
            ..text_spec("never")
        })
        .await;
        let fast = mock(text_spec("served")).await;
        // One hold of a 100-token reply fills the budget.
        let server = "hold_ttl_ms = 2000";
        let limits = "budget = { usd = 0.00015 }";
        let keys = format!(
            "{limits}\n\n[[keys]]\nname = \"calib\"\nkey = \"{CALIB}\"\n{}",
            shared.section()
        );
        let path = dir.path().join("a.toml");
        std::fs::write(
            &path,
            format!(
                "[server]\n{server}\n[log]\nsqlite_path = \"{}\"\n[[keys]]\nname = \"team-a\"\nkey = \"{KEY}\"\n{keys}\n{}",
                dir.path().join("a.db").display(),
                openai_channel("a", &hung.base_url(), 1, PRICED)
            ),
        )
        .unwrap();
        let (proc, url_a) = spawn_serve(&path, dir.path()).await;
        let b = gateway_full(
            server,
            &keys,
            &openai_channel("b", &fast.base_url(), 1, PRICED),
        )
        .await;
        if let Shared::Redis(_) = &shared {
            wait_connected(&b, true).await;
        }
        // A request on replica A holds the budget and never ends.
        let held = tokio::spawn(async move {
            let _ = client()
                .post(format!("{url_a}/v1/chat/completions"))
                .bearer_auth(KEY)
                .json(&body(100))
                .timeout(Duration::from_secs(30))
                .send()
                .await;
        });
        eventually(&hung, "the held request reached the upstream", |m| {
            m.requests() >= 1
        })
        .await;
        let refused = send(&b, &body(100)).await;
        assert_eq!(
            (refused.status, refused.code.as_str()),
            (429, "budget_exceeded"),
            "{which}"
        );
        drop(proc);
        held.abort();
        let killed = Instant::now();
        let ok = until(
            "the dead replica's hold expired",
            Duration::from_secs(15),
            async || {
                let s = send(&b, &body(100)).await;
                if s.status == 200 {
                    Ok(s)
                } else {
                    Err(format!("{s:?}"))
                }
            },
        )
        .await;
        assert!(ok.cost > 0, "{which}");
        // Not before the deadline (2 s from when the hold was taken, before the kill).
        assert!(
            killed.elapsed() <= Duration::from_secs(6),
            "{which}: {:?}",
            killed.elapsed()
        );
    }
}

#[tokio::test]
async fn a_keys_refusal_is_final_in_the_clients_envelope_and_never_fails_over() {
    let (first, second) = (mock(text_spec("a")).await, mock(text_spec("b")).await);
    let gw = gateway_full(
        "",
        "budget = { usd = 0 }",
        &format!(
            "{}{}",
            openai_channel("first", &first.base_url(), 1, PRICED),
            openai_channel("second", &second.base_url(), 2, PRICED)
        ),
    )
    .await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 429);
    assert_eq!(header(&resp, "x-should-retry"), "false");
    assert!(resp.headers().get("retry-after").is_none());
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["type"], "insufficient_quota");
    assert_eq!(v["error"]["code"], "budget_exceeded");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("key team-a"),
        "{v}"
    );
    let resp = gw
        .post_as(
            "/v1/messages",
            KEY,
            &[],
            json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(resp.status(), 429);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["type"], "error", "Anthropic's envelope: {v}");
    assert_eq!((first.requests(), second.requests()), (0, 0));
    let rows = gw.admin_requests().await;
    assert!(
        rows.iter().all(|r| r["outcome"] == "budget_exceeded"),
        "{rows:?}"
    );
}

/// Two tiers, `first` with `budget` of its own, and the channel that served each of `n`
/// requests: the first served by `first`, then, once it moved, every one by `second`.
async fn tiers_with_budget(budget: &str, n: usize) -> (Gateway, Vec<String>) {
    let (first, second) = (mock(text_spec("a")).await, mock(text_spec("b")).await);
    let gw = gateway(&format!(
        "{}{}",
        openai_channel(
            "first",
            &first.base_url(),
            1,
            &format!("{PRICED}\nbudget = {budget}")
        ),
        openai_channel("second", &second.base_url(), 2, PRICED)
    ))
    .await;
    let mut served = Vec::new();
    for _ in 0..n {
        let resp = gw.chat(body(5)).await;
        assert_eq!(resp.status(), 200);
        served.push(header(&resp, "x-switchyard-channel").to_string());
    }
    let moved = served.iter().position(|c| c == "second").expect("moved");
    assert!(
        moved >= 1 && served[moved..].iter().all(|c| c == "second"),
        "{served:?}"
    );
    (gw, served)
}

#[tokio::test]
async fn a_channel_over_its_budget_is_skipped_for_the_next_tier() {
    let (gw, _) = tiers_with_budget("{ usd = 0.00003, period = \"total\" }", 6).await;
    // The last request skipped the spent channel, saying why.
    let rows = gw.admin_requests().await;
    assert_eq!(
        reasons(&rows[0]["attempts"]),
        ["channel_budget_exhausted", "ok"]
    );
}

#[tokio::test]
async fn without_the_shared_counter_money_fails_closed_and_rates_fail_open() {
    let up = mock(text_spec("ok")).await;
    let keys = "budget = { usd = 1 }\n\n\
        [[keys]]\nname = \"rated\"\nkey = \"sk-rated-key-000001\"\nrpm = 100\n\n\
        [[keys]]\nname = \"open\"\nkey = \"sk-open-budget-0001\"\nbudget = { usd = 1, fail = \"open\" }\n\n\
                [[keys]]\nname = \"strict\"\nkey = \"sk-strict-rate-0001\"\nrpm = 100\nlimits_fail = \"closed\"\n\n\
        [[keys]]\nname = \"in-loose\"\nkey = \"sk-in-loose-team-01\"\nteam = \"loose\"\n\n\
        [[keys]]\nname = \"in-money\"\nkey = \"sk-in-money-team-01\"\nteam = \"money\"\n\n\
        [[teams]]\nname = \"loose\"\nrpm = 100\n\n\
        [[teams]]\nname = \"money\"\nbudget = { usd = 1 }\n\n\
        [state]\nurl = \"redis://127.0.0.1:1\"\n";
    let gw = gateway_full("", keys, &openai_channel("a", &up.base_url(), 1, PRICED)).await;
    let ready = get_json(&format!("{}/readyz", gw.url), None).await;
    assert_eq!(
        ready["budgets"],
        json!({"backend": "redis", "connected": false})
    );
    let cases = [
        (KEY, 503, "budget_unavailable"),
        ("sk-rated-key-000001", 200, ""),
        ("sk-open-budget-0001", 200, ""),
        ("sk-strict-rate-0001", 503, "budget_unavailable"),
        // A team's levels decide the same way: a rate alone fails open, money closed.
        ("sk-in-loose-team-01", 200, ""),
        ("sk-in-money-team-01", 503, "budget_unavailable"),
    ];
    for (key, status, code) in cases {
        let resp = gw.post_as("/v1/chat/completions", key, &[], body(5)).await;
        assert_eq!(resp.status(), status, "{key}");
        let v: Value = resp.json().await.unwrap();
        assert_eq!(
            v["error"]["code"].as_str().unwrap_or(""),
            code,
            "{key}: {v}"
        );
    }
    let health = get_json(&format!("{}/admin/health", gw.url), Some(ADMIN)).await;
    assert_eq!(health["budgets"]["connected"], false);
}

#[tokio::test]
async fn a_channel_past_its_soft_share_ranks_after_its_peers_before_its_hard_stop() {
    let budget = "{ usd = 0.001, period = \"total\", soft = 0.05 }";
    let (gw, _) = tiers_with_budget(budget, 8).await;
    // Moved on by its soft share, with most of its budget left: no refusal skipped it.
    let health = get_json(&format!("{}/admin/health", gw.url), Some(ADMIN)).await;
    let row = health["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["channel"] == "first")
        .unwrap()
        .clone();
    let spent = row["budget"]["spent_micros"].as_u64().unwrap();
    assert!(spent > 0 && spent < 500, "{row}");
    let rows = gw.admin_requests().await;
    assert_eq!(
        reasons(&rows[0]["attempts"]),
        ["ok"],
        "demoted, not skipped"
    );
}

#[tokio::test]
async fn route_explain_shows_each_candidates_cost_and_whether_each_budget_admits_it() {
    let (first, second) = (mock(text_spec("a")).await, mock(text_spec("b")).await);
    let gw = gateway_full(
        "",
        "budget = { usd = 0.00005 }",
        &format!(
            "{}{}",
            openai_channel(
                "cheap",
                &first.base_url(),
                1,
                &format!("{PRICED}\nbudget = {{ usd = 0.00001 }}")
            ),
            openai_channel(
                "dear",
                &second.base_url(),
                2,
                "price = { input = 2, output = 2 }"
            )
        ),
    )
    .await;
    let explain = async || {
        let resp = gw.post_as("/v1/route/explain", KEY, &[], body(5)).await;
        assert_eq!(resp.status(), 200);
        resp.json::<Value>().await.unwrap()
    };
    let v = explain().await;
    let prompt = v["spend"]["prompt_tokens_estimate"].as_u64().unwrap();
    let cands = &v["chain"][0]["candidates"];
    let cost = |i: usize| cands[i]["estimated_cost_micros"].as_u64().unwrap();
    assert_eq!(cost(0), prompt + 5);
    assert_eq!(cost(1), 2 * (prompt + 5));
    // The key's hold is the dearest candidate's worst case.
    assert_eq!(v["spend"]["worst_case_micros"].as_u64(), Some(cost(1)));
    assert_eq!(v["spend"]["key_budget"]["would_admit"], true, "{v}");
    // The cheap channel's $0.00001 cannot take a request of more than 10 tokens.
    assert_eq!(
        cands[0]["channel_budget"]["would_admit"],
        prompt + 5 <= 10,
        "{v}"
    );
    assert!(cands[1]["channel_budget"].is_null());
    // A preview spends nothing: the same answer again, and the upstreams never called.
    let again = explain().await;
    assert_eq!(again["spend"]["key_budget"], v["spend"]["key_budget"]);
    assert_eq!(again["spend"]["key_budget"]["spent_micros"], 0);
    assert_eq!((first.requests(), second.requests()), (0, 0));
}

/// A one-node Redis Cluster owning every slot: it refuses any script whose keys are in more
/// than one slot (CROSSSLOT), as a real cluster does.
struct ClusterNode {
    child: std::process::Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for ClusterNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn cluster_node() -> ClusterNode {
    let dir = tempfile::tempdir().unwrap();
    // Its cluster bus listens 10000 ports up: both must be free, and the bus under 65536.
    let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
    let port = (0..1000)
        .map(|_| fastrand::u16(20_000..50_000))
        .find(|p| free(*p) && free(p + 10_000))
        .expect("a free port pair")
        .to_string();
    let child = std::process::Command::new("redis-server")
        .args(["--port", &port, "--cluster-enabled", "yes", "--save", ""])
        .args(["--appendonly", "no", "--bind", "127.0.0.1"])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("redis-server runs");
    let cli = |args: &[&str]| {
        std::process::Command::new("redis-cli")
            .args(["-p", &port])
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
            .unwrap_or_default()
    };
    until(
        "the cluster node answers",
        Duration::from_secs(10),
        async || cli(&["ping"]).contains("PONG"),
    )
    .await;
    cli(&["cluster", "addslotsrange", "0", "16383"]);
    until("the cluster is ok", Duration::from_secs(10), async || {
        cli(&["cluster", "info"]).contains("cluster_state:ok")
    })
    .await;
    let bad = cli(&[
        "eval",
        "return redis.call('GET', KEYS[2])",
        "2",
        "{a}x",
        "{b}y",
    ]);
    assert!(
        bad.contains("CROSSSLOT"),
        "a cluster refuses keys of two slots: {bad}"
    );
    ClusterNode {
        child,
        url: format!("redis://127.0.0.1:{port}"),
        _dir: dir,
    }
}

#[tokio::test]
async fn each_scopes_script_touches_one_redis_cluster_slot() {
    // (the key's extra lines: a lone key; a key of a team of an organisation, whose end users
    // are counted, one at most, so each new one forgets the last)
    let team = "team = \"t\"\n\n[[teams]]\nname = \"org\"\nbudget = { usd = 1 }\n\n\
                [[teams]]\nname = \"t\"\nparent = \"org\"\nrpm = 100\n\
                user_limits = { rpm = 100, max_tracked_users = 1 }\n";
    for (i, extra) in ["", team].into_iter().enumerate() {
        let node = cluster_node().await;
        let up = mock(text_spec("ok")).await;
        let gw = gateway_full(
            "",
            &format!(
                "budget = {{ usd = 0.00005 }}\nrpm = 100\ntpm = 100000\nmax_concurrency = 4\n\
                 {extra}\n[state]\nurl = \"{}\"\nprefix = \"sy\"\n",
                node.url
            ),
            &openai_channel(
                "a",
                &up.base_url(),
                1,
                &format!("{PRICED}\nbudget = {{ usd = 1 }}\nrpm = 100\nmax_concurrency = 4"),
            ),
        )
        .await;
        until(
            "the gateway reached the cluster node",
            Duration::from_secs(10),
            async || {
                let v = get_json(&format!("{}/readyz", gw.url), None).await;
                v["budgets"]["connected"] == true
            },
        )
        .await;
        // Served until the key's budget is spent, then refused by it: every script ran (a
        // CROSSSLOT error would have been a lost Redis and a 503 budget_unavailable).
        let mut codes = Vec::new();
        for n in 0..8 {
            let mut b = body(5);
            b["user"] = json!(format!("user-{n}"));
            let resp = gw.chat(b).await;
            let status = resp.status().as_u16();
            let v: Value = resp.json().await.unwrap();
            codes.push((
                status,
                v["error"]["code"].as_str().unwrap_or("").to_string(),
            ));
        }
        assert_eq!(codes[0].0, 200, "case {i}: {codes:?}");
        assert!(
            codes.iter().all(|c| c.0 == 200 || c.1 == "budget_exceeded"),
            "case {i}: {codes:?}"
        );
        assert!(
            codes.iter().any(|c| c.1 == "budget_exceeded"),
            "case {i}: {codes:?}"
        );
        let v = get_json(&format!("{}/readyz", gw.url), None).await;
        assert_eq!(v["budgets"]["connected"], true, "case {i}: {v}");
    }
}

#[tokio::test]
async fn limits_set_through_the_admin_api_hold_on_every_replica() {
    let pg = Postgres::fresh("budget_admin").await;
    let m = master_key(3);
    let up = mock(text_spec("ok")).await;
    let file = openai_channel("a", &up.base_url(), 1, PRICED);
    let one = on_store(&pg.url, Some(&m), &file).await;
    let two = on_store(&pg.url, Some(&m), &file).await;
    let (s, made) = as_admin(
        &one,
        "POST",
        "/admin/keys",
        Some(json!({"name": "svc", "rpm": 3, "budget": {"usd": 1, "period": "day"}})),
    )
    .await;
    assert_eq!(s, 201, "{made}");
    assert_eq!(made["rpm"], 3);
    let key = made["key"].as_str().unwrap().to_string();
    until(
        "the second replica takes the key",
        Duration::from_secs(10),
        async || {
            two.post_as("/v1/chat/completions", &key, &[], body(5))
                .await
                .status()
                != 401
        },
    )
    .await;
    // One request already went to the second replica; the rest alternate.
    let mut statuses = vec![200];
    for i in 0..4 {
        let gw = if i % 2 == 0 { &one } else { &two };
        let resp = gw.post_as("/v1/chat/completions", &key, &[], body(5)).await;
        statuses.push(resp.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
    // A bad value is refused by name, as the file's would be.
    let (s, bad) = as_admin(
        &one,
        "POST",
        "/admin/keys",
        Some(json!({"name": "bad", "budget": {"usd": -1}})),
    )
    .await;
    assert_eq!(s, 400, "{bad}");
    assert!(
        bad["error"]["message"]
            .as_str()
            .unwrap()
            .contains("budget.usd"),
        "{bad}"
    );
}

#[tokio::test]
async fn the_keys_hold_is_released_when_no_channel_admits_the_request() {
    let up = mock(text_spec("a")).await;
    let gw = gateway_full(
        "",
        "budget = { usd = 1 }",
        &openai_channel(
            "only",
            &up.base_url(),
            1,
            &format!("{PRICED}\nbudget = {{ usd = 0 }}"),
        ),
    )
    .await;
    let resp = gw.chat(body(5)).await;
    assert_eq!(resp.status(), 503);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["code"], "no_available_channel", "{v}");
    assert_eq!(
        reasons(&v["error"]["attempts"]),
        ["channel_budget_exhausted"]
    );
    assert_eq!(up.requests(), 0);
    // Nothing is left held against the key (settled with no cost).
    let explained = gw.post_as("/v1/route/explain", KEY, &[], body(5)).await;
    let e: Value = explained.json().await.unwrap();
    assert_eq!(e["spend"]["key_budget"]["reserved_micros"], 0, "{e}");
    assert_eq!(e["spend"]["key_budget"]["spent_micros"], 0, "{e}");
}

/// `rpm` and `tpm` under 32 concurrent clients across two replicas, on Redis and on PostgreSQL:
/// exactly the window's worth is admitted, whichever replica each client reaches. The upstream
/// is slow, so no admitted request settles (and frees tokens) during the race.
#[tokio::test]
async fn concurrent_rpm_and_tpm_hold_across_two_replicas() {
    for shared in Shared::each("rate_concurrent").await {
        let which = shared.name();
        let slow = mock(MockSpec {
            ttft_ms: 1500,
            ..text_spec("ok")
        })
        .await;
        // (the key's limit, the request's max_tokens, how many fit, the next request's status
        // once they are answered)
        let rows = [
            // The minute's ten are spent: the next is refused.
            ("rpm = 10", 16, 10, 429),
            // Each asks its prompt (tens of tokens) and 1,000 of reply: three fit in 3,300.
            // Answered, each is settled to its real tokens (a few): there is room again.
            ("tpm = 3300", 1000, 3, 200),
        ];
        for (limit, max_tokens, fit, next) in rows {
            let gws = replicas(
                &shared,
                "",
                limit,
                &openai_channel("a", &slow.base_url(), 1, ""),
            )
            .await;
            let before = slow.requests();
            let r = Race {
                workers: 32,
                keys: &[KEY],
                after: 0,
                most: 1,
            };
            let sent = r.run(&gws, &body(max_tokens)).await;
            let served = sent.iter().filter(|s| s.status == 200).count();
            assert_eq!(served, fit, "{which} {limit}: {sent:?}");
            assert!(
                sent.iter()
                    .filter(|s| s.status != 200)
                    .all(|s| (s.status, s.code.as_str()) == (429, "rate_limit_exceeded")),
                "{which} {limit}"
            );
            assert_eq!(slow.requests() - before, fit as u64, "{which} {limit}");
            let resp = gws[0].chat(body(max_tokens)).await;
            assert_eq!(resp.status(), next, "{which} {limit}");
        }
    }
}
