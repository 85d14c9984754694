//! The request log behind the store: with a PostgreSQL store its rows go to PostgreSQL (the same
//! rows, in the same shape, as the SQLite log), `[log] sqlite_path` is ignored with one warning,
//! and rows past `[store] retention_days` are pruned on whichever backend holds the log.

use std::time::Duration;

use serde_json::{Value, json};
use switchyard::provider::mock::{MockServer, MockSpec};
use switchyard::server::Running;
use switchyard::store::{Db, LogRow, RequestLog};

use crate::support::*;

const DAY_MS: i64 = 86_400_000;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Text that must never reach the log: the prompt, the completion, a header's value.
const PROMPT: &str = "prompt-text-never-logged";
const COMPLETION: &str = "completion-text-never-logged";
const SESSION: &str = "session-header-never-logged";

/// The rows of one scenario (a failover, a stream, an unknown model), newest first, without
/// the fields that differ from run to run.
async fn scenario_rows(store: &str) -> (Gateway, Vec<Value>) {
    let bad = mock(text_spec("x")).await;
    bad.set_spec(faulty("x", status(500)));
    let good = mock(MockSpec {
        chunk_ms: 5,
        ..text_spec(COMPLETION)
    })
    .await;
    let gw = gateway(&format!(
        "{store}{}{}",
        openai_channel("bad", &bad.base_url(), 1, ""),
        openai_channel("good", &good.base_url(), 2, "")
    ))
    .await;
    let prompt = json!({"model": "m", "messages": [{"role": "user", "content": PROMPT}]});
    let resp = gw
        .post_as(
            "/v1/chat/completions",
            KEY,
            &[("x-session-id", SESSION)],
            prompt,
        )
        .await;
    assert_eq!(resp.status(), 200);
    assert!(resp.text().await.unwrap().contains(COMPLETION));
    let body = gw.chat(chat_body(true)).await.text().await.unwrap();
    assert!(body.ends_with("[DONE]\n\n"));
    gw.chat(json!({"model": "nope", "messages": [{"role": "user", "content": "x"}]}))
        .await;
    let rows = until(
        "three rows in the log",
        Duration::from_secs(10),
        async || {
            let rows = gw.admin_requests().await;
            if rows.len() == 3 {
                Ok(rows)
            } else {
                Err(json!(rows))
            }
        },
    )
    .await;
    let stable = rows
        .iter()
        .map(|r| {
            let mut r = r.clone();
            for volatile in ["id", "ts_ms", "total_ms", "ttfb_ms", "tokens_per_s"] {
                let v = r.get_mut(volatile).unwrap();
                // Still there, of the same type on both backends.
                *v = json!(if v.is_null() {
                    "null"
                } else if v.is_f64() {
                    "f64"
                } else if v.is_i64() {
                    "i64"
                } else {
                    "other"
                });
            }
            r.get_mut("attempts")
                .and_then(Value::as_array_mut)
                .unwrap()
                .iter_mut()
                .for_each(|a| a["latency_ms"] = json!(0));
            r
        })
        .collect();
    (gw, stable)
}

#[tokio::test]
async fn with_a_postgres_store_the_log_goes_to_postgres_in_the_same_shape() {
    let pg = Postgres::fresh("logpg").await;
    let (gw, on_pg) = scenario_rows(&format!("[store]\nurl = \"{}\"\n\n", pg.url)).await;
    let (plain, on_sqlite) = scenario_rows("").await;
    let ready = get_json(&format!("{}/readyz", plain.url), None).await;
    assert_eq!(ready["request_log"]["backend"], "sqlite", "{ready}");
    // The same rows, field for field, as the SQLite log gives for the same requests.
    assert_eq!(on_pg, on_sqlite);
    assert_eq!(on_pg[2]["channel"], "good");
    assert_eq!(on_pg[2]["affinity"], "new");
    assert_eq!(on_pg[1]["stream"], true);
    assert_eq!(on_pg[0]["outcome"], "model_not_found");

    // They are in PostgreSQL's `requests` table, and no SQLite file was made.
    let pool = sqlx::PgPool::connect(&pg.url).await.unwrap();
    let ids: Vec<String> = sqlx::query_scalar("SELECT id FROM requests ORDER BY seq")
        .fetch_all(&pool)
        .await
        .unwrap();
    let listed = gw.admin_requests().await;
    let mut listed: Vec<String> = listed
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect();
    listed.reverse();
    assert_eq!(ids, listed);
    let dir = gw.config_path.parent().unwrap();
    assert!(!dir.join("log.db").exists());
    let ready = get_json(&format!("{}/readyz", gw.url), None).await;
    assert_eq!(ready["request_log"]["backend"], "postgres", "{ready}");
    assert_eq!(ready["request_log"]["writer_alive"], true, "{ready}");

    // Nothing of the prompt, the completion, a header's value or the client's address.
    let dump: Vec<String> = sqlx::query_scalar("SELECT row_to_json(r)::text FROM requests r")
        .fetch_all(&pool)
        .await
        .unwrap();
    // (And nothing of them in the SQLite log's rows either.)
    let dump = format!("{}\n{}", dump.join("\n"), json!(on_sqlite));
    for never in [PROMPT, COMPLETION, SESSION, KEY, UPSTREAM_KEY, "127.0.0.1"] {
        assert!(!dump.contains(never), "{never} in {dump}");
    }

    // (That `[log] sqlite_path` is then ignored, said once, is read from the binary's own log in
    // control_ops: a thread-local capture misses a line another test's thread hit first.)

    // A graceful shutdown writes the rows still queued.
    let unknown = json!({"model": "nope", "messages": [{"role": "user", "content": "x"}]});
    assert_eq!(gw.chat(unknown).await.status(), 404);
    assert!(gw.running.shutdown(Duration::from_secs(5)).await);
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM requests")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(n, 4);
}

/// A log on each backend, with rows recorded through it: an SQLite file, a PostgreSQL store.
async fn logs_on_both(test: &str) -> (tempfile::TempDir, Postgres, [RequestLog; 2]) {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = RequestLog::open(&dir.path().join("log.db"), 8192, None).unwrap();
    let pg = Postgres::fresh(test).await;
    let Db::Postgres(pool) = Db::open(&pg.url).await.unwrap() else {
        unreachable!("a postgres:// URL opens PostgreSQL")
    };
    let postgres = RequestLog::postgres(pool, 8192, None).unwrap();
    (dir, pg, [sqlite, postgres])
}

fn row(id: &str, ts_ms: i64) -> LogRow {
    LogRow {
        id: id.into(),
        ts_ms,
        endpoint: "chat".into(),
        status: 200,
        outcome: "ok".into(),
        attempts: "[]".into(),
        ..LogRow::default()
    }
}

async fn ids(log: &RequestLog) -> Vec<String> {
    let rows = log.recent(1000).await.unwrap();
    rows.iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn pruning_deletes_rows_past_the_cutoff_in_batches_and_keeps_the_rest() {
    let (_dir, _pg, logs) = logs_on_both("prune").await;
    let now = now_ms();
    for log in &logs {
        // More than one batch of old rows.
        for i in 0..2500 {
            log.record(row(&format!("old{i}"), now - 40 * DAY_MS + i));
        }
        for i in 0..3 {
            log.record(row(&format!("new{i}"), now - DAY_MS + i));
        }
        log.flush().await;
        assert_eq!(log.dropped(), 0);
        assert_eq!(
            log.prune(now - 30 * DAY_MS, now - 400 * DAY_MS)
                .await
                .unwrap(),
            2500,
            "{}",
            log.backend()
        );
        assert_eq!(
            ids(log).await,
            ["new2", "new1", "new0"],
            "{}",
            log.backend()
        );
        assert_eq!(
            log.prune(now - 30 * DAY_MS, now - 400 * DAY_MS)
                .await
                .unwrap(),
            0
        );
    }
}

/// Starts a gateway from `text` (a whole config), written to a file in `dir` (a gateway with a
/// store reloads from its file).
async fn start(dir: &std::path::Path, text: &str) -> Running {
    switchyard::provider::install_crypto_provider();
    let path = dir.join("switchyard.toml");
    std::fs::write(&path, text).unwrap();
    let clients = switchyard::provider::HttpClients::default();
    let snap = switchyard::config::load_file(&path, &clients).unwrap();
    switchyard::app::start(snap, clients, None).await.unwrap()
}

/// A log holding a row from 40 days ago and one from yesterday, recorded before the gateway
/// starts; then the gateway, with `store` (a `[store]` section or nothing), on that log.
/// (The mock upstream lives as long as the gateway's test needs it.)
async fn gateway_on_an_old_log(
    log: RequestLog,
    sqlite_path: &str,
    store: &str,
) -> (Running, MockServer) {
    let now = now_ms();
    log.record(row("forty-days", now - 40 * DAY_MS));
    log.record(row("yesterday", now - DAY_MS));
    log.flush().await;
    drop(log);
    let up = mock(text_spec("ok")).await;
    let dir = std::path::Path::new(sqlite_path).parent().unwrap();
    let gw = start(
        dir,
        &format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[log]\nsqlite_path = \"{sqlite_path}\"\n{store}\n\
         [[keys]]\nname = \"team-a\"\nkey = \"{KEY}\"\n\n{}",
            openai_channel("a", &up.base_url(), 1, "")
        ),
    )
    .await;
    (gw, up)
}

async fn wait_pruned(gw: &Running) {
    until("the old row pruned", Duration::from_secs(10), async || {
        let ids = ids(&gw.state.log).await;
        if ids == ["yesterday"] {
            Ok(())
        } else {
            Err(json!(ids))
        }
    })
    .await;
}

#[tokio::test]
async fn a_gateway_with_a_store_prunes_its_log_at_start_on_either_backend() {
    // SQLite store: the log stays in its own file, and is pruned there.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.db");
    let store = format!(
        "[store]\nurl = \"sqlite://{}\"\nretention_days = 30\n",
        dir.path().join("store.db").display()
    );
    let log = RequestLog::open(&path, 16, None).unwrap();
    let (gw, _up) = gateway_on_an_old_log(log, &path.display().to_string(), &store).await;
    assert_eq!(gw.state.log.backend(), "sqlite");
    wait_pruned(&gw).await;

    // PostgreSQL store: the log is there; the default retention is 30 days.
    let pg = Postgres::fresh("prunestart").await;
    let Db::Postgres(pool) = Db::open(&pg.url).await.unwrap() else {
        unreachable!("a postgres:// URL opens PostgreSQL")
    };
    let log = RequestLog::postgres(pool, 16, None).unwrap();
    let other = tempfile::tempdir().unwrap();
    let unused = other.path().join("unused.db");
    let store = format!("[store]\nurl = \"{}\"\n", pg.url);
    let (gw, _up) = gateway_on_an_old_log(log, &unused.display().to_string(), &store).await;
    assert_eq!(gw.state.log.backend(), "postgres");
    wait_pruned(&gw).await;
    assert!(!unused.exists());
}

#[tokio::test]
async fn without_a_store_the_log_is_never_pruned() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.db");
    let log = RequestLog::open(&path, 16, None).unwrap();
    let (gw, _up) = gateway_on_an_old_log(log, &path.display().to_string(), "").await;
    let c = client();
    let resp = c
        .post(format!("http://{}/v1/chat/completions", gw.addr))
        .bearer_auth(KEY)
        .json(&chat_body(false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    gw.state.log.flush().await;
    let ids = ids(&gw.state.log).await;
    assert_eq!(ids.len(), 3, "{ids:?}");
    assert!(ids.contains(&"forty-days".to_string()), "{ids:?}");
}

#[tokio::test]
async fn the_retention_task_prunes_at_start_and_then_every_interval() {
    assert_eq!(switchyard::store::PRUNE_EVERY, Duration::from_secs(300));
    let (_dir, _pg, logs) = logs_on_both("prunetask").await;
    let now = now_ms();
    for log in logs {
        let log = std::sync::Arc::new(log);
        log.record(row("before-start", now - 40 * DAY_MS));
        log.flush().await;
        let task = log.keep_for(
            Duration::from_secs(30 * 86_400),
            Duration::from_secs(400 * 86_400),
            Duration::from_millis(20),
        );
        until(
            "the row from before the start pruned",
            Duration::from_secs(10),
            async || ids(&log).await.is_empty(),
        )
        .await;
        // A row past retention that arrives later goes at a later round.
        log.record(row("later", now - 31 * DAY_MS));
        log.record(row("recent", now - DAY_MS));
        log.flush().await;
        until(
            "the later row pruned",
            Duration::from_secs(10),
            async || {
                let ids = ids(&log).await;
                if ids == ["recent"] {
                    Ok(())
                } else {
                    Err(json!(ids))
                }
            },
        )
        .await;
        task.abort();
    }
}

/// A row with one charge per `(channel, cost)`, the last one serving.
fn charged(id: &str, key: &str, ts_ms: i64, calls: &[(&str, u64)]) -> LogRow {
    let price = std::sync::Arc::new(switchyard::pricing::Price::new(
        switchyard::pricing::Rates {
            input: 1_000_000,
            output: 2_000_000,
            ..Default::default()
        },
        Vec::new(),
    ));
    let charges = calls
        .iter()
        .enumerate()
        .map(|(i, (channel, cost))| switchyard::store::Charge {
            attempt: i as u32 + 1,
            channel: (*channel).into(),
            credential: Some("k1".into()),
            model: "m".into(),
            upstream_model: "m-up".into(),
            tokens: switchyard::pricing::Tokens {
                input: *cost,
                ..Default::default()
            },
            cost_micros: *cost,
            price: Some(price.clone()),
            outcome: if i + 1 == calls.len() {
                "ok"
            } else {
                "server_error"
            }
            .into(),
            estimated: false,
            first_choice_micros: None,
            cache_saved_micros: 0,
        })
        .collect();
    LogRow {
        key_name: Some(key.into()),
        cost_micros: Some(calls.iter().map(|c| c.1).sum()),
        charges,
        ..row(id, ts_ms)
    }
}

#[tokio::test]
async fn the_ledger_sums_explains_and_prunes_alike_on_both_backends() {
    use switchyard::store::{GroupBy, Window};
    let (_dir, _pg, logs) = logs_on_both("ledger").await;
    let now = now_ms();
    let mut answers = Vec::new();
    for log in &logs {
        log.record(charged(
            "r1",
            "alice",
            now - DAY_MS,
            &[("a", 0), ("b", 300)],
        ));
        log.record(charged("r2", "alice", now, &[("a", 40)]));
        log.record(charged("r3", "bob", now, &[("b", 5)]));
        log.record(charged("old", "bob", now - 500 * DAY_MS, &[("a", 7)]));
        log.flush().await;
        let w = Window {
            from_ms: now - 2 * DAY_MS,
            to_ms: now + 1,
        };
        let mut by_key = log.usage(GroupBy::Key, w).await.unwrap();
        by_key.sort_by(|a, b| a.key.cmp(&b.key));
        let alice = &by_key[0];
        assert_eq!(
            (alice.requests, alice.attempts, alice.cost_micros),
            (2, 3, 340),
            "{}",
            log.backend()
        );
        let days = log.usage(GroupBy::Day, w).await.unwrap();
        let mut day_names: Vec<String> = days.iter().filter_map(|s| s.group.clone()).collect();
        day_names.sort();
        day_names.dedup();
        let explained = log.charges("r1").await.unwrap();
        assert_eq!(explained.len(), 2, "{}", log.backend());
        assert_eq!(explained[1]["price"]["output"], 2.0, "{}", log.backend());
        let row = &log.recent(10).await.unwrap();
        let r1 = row.iter().find(|r| r["id"] == "r1").unwrap();
        assert_eq!(r1["cost_micros"], 300, "{}", log.backend());
        answers.push((
            by_key
                .iter()
                .map(|s| (s.key.clone(), s.cost_micros))
                .collect::<Vec<_>>(),
            day_names,
            explained,
        ));
        // The ledger keeps its own retention: the request rows stay, its old row goes.
        assert_eq!(
            log.prune(now - 1000 * DAY_MS, now - 400 * DAY_MS)
                .await
                .unwrap(),
            1,
            "{}",
            log.backend()
        );
        assert!(log.charges("old").await.unwrap().is_empty());
        assert!(ids(log).await.contains(&"old".to_string()));
    }
    assert_eq!(answers[0], answers[1], "SQLite and PostgreSQL disagree");
}
