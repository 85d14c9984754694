//! The request log behind the store: with a PostgreSQL store its rows go to PostgreSQL (the same
//! rows, in the same shape, as the SQLite log), and `[log] sqlite_path` is ignored with one
//! warning.

use std::time::Duration;

use serde_json::{Value, json};
use switchyard::provider::mock::MockSpec;

use crate::support::*;

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
    let (logs, guard) = capture_logs();
    let (gw, on_pg) = scenario_rows(&format!("[store]\nurl = \"{}\"\n\n", pg.url)).await;
    drop(guard);
    let (_plain, on_sqlite) = scenario_rows("").await;
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
    let dump = dump.join("\n");
    for never in [PROMPT, COMPLETION, SESSION, KEY, UPSTREAM_KEY, "127.0.0.1"] {
        assert!(!dump.contains(never), "{never} in {dump}");
    }

    // `[log] sqlite_path` is ignored, said once.
    let said = logs.text();
    assert_eq!(said.matches("sqlite_path is ignored").count(), 1, "{said}");
}
