//! The request log in a PostgreSQL store: the `requests` table (migration 0003), written by a
//! tokio task that drains the queue every tick into one multi-row insert (`UNNEST` over one
//! array per column: one statement and one round trip per tick, whatever the batch's size).

use std::collections::HashSet;
use std::sync::mpsc::Receiver;

use serde_json::{Value, json};
use sqlx::Row;
use sqlx::postgres::{PgPool, PgRow};

use super::{LogMsg, LogRow, PRUNE_BATCH, StoreError, TICK, drain};

/// Drains the queue every tick and writes the tick's rows in one statement; exits when every
/// sender is gone.
pub(super) async fn writer(pool: PgPool, rx: Receiver<LogMsg>) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut batch = Vec::new();
    let mut acks = Vec::new();
    loop {
        tick.tick().await;
        let closed = drain(&rx, &mut batch, &mut acks);
        if !batch.is_empty()
            && let Err(e) = write_batch(&pool, &batch).await
        {
            tracing::error!(error = %e, rows = batch.len(), "request log write to PostgreSQL failed");
        }
        batch.clear();
        for ack in acks.drain(..) {
            let _ = ack.send(());
        }
        if closed {
            return;
        }
    }
}

const INSERT: &str = "
INSERT INTO requests (id, ts_ms, key_name, endpoint, requested_model, served_model, channel,
    status, outcome, attempts, stream, total_ms, ttfb_ms, input_tokens, output_tokens,
    tokens_per_s, translation, session, affinity, prompt_tokens, trimmed_turns)
SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[],
    $7::text[], $8::int[], $9::text[], $10::text[], $11::bool[], $12::bigint[], $13::bigint[],
    $14::bigint[], $15::bigint[], $16::float8[], $17::text[], $18::text[], $19::text[],
    $20::bigint[], $21::bigint[])
ON CONFLICT (id) DO UPDATE SET ts_ms = EXCLUDED.ts_ms, key_name = EXCLUDED.key_name,
    endpoint = EXCLUDED.endpoint, requested_model = EXCLUDED.requested_model,
    served_model = EXCLUDED.served_model, channel = EXCLUDED.channel, status = EXCLUDED.status,
    outcome = EXCLUDED.outcome, attempts = EXCLUDED.attempts, stream = EXCLUDED.stream,
    total_ms = EXCLUDED.total_ms, ttfb_ms = EXCLUDED.ttfb_ms,
    input_tokens = EXCLUDED.input_tokens, output_tokens = EXCLUDED.output_tokens,
    tokens_per_s = EXCLUDED.tokens_per_s, translation = EXCLUDED.translation,
    session = EXCLUDED.session, affinity = EXCLUDED.affinity,
    prompt_tokens = EXCLUDED.prompt_tokens, trimmed_turns = EXCLUDED.trimmed_turns";

fn int(v: Option<u64>) -> Option<i64> {
    v.map(|v| v as i64)
}

/// One statement for the whole batch. A row id seen twice keeps its last row (as SQLite's
/// `INSERT OR REPLACE` does; one statement cannot update a row twice).
async fn write_batch(pool: &PgPool, rows: &[LogRow]) -> Result<(), sqlx::Error> {
    let mut seen = HashSet::new();
    let mut last: Vec<&LogRow> = rows
        .iter()
        .rev()
        .filter(|r| seen.insert(r.id.as_str()))
        .collect();
    last.reverse();
    let col = |f: fn(&LogRow) -> Option<String>| last.iter().map(|r| f(r)).collect::<Vec<_>>();
    let num = |f: fn(&LogRow) -> Option<i64>| last.iter().map(|r| f(r)).collect::<Vec<_>>();
    sqlx::query(INSERT)
        .bind(last.iter().map(|r| r.id.clone()).collect::<Vec<_>>())
        .bind(last.iter().map(|r| r.ts_ms).collect::<Vec<_>>())
        .bind(col(|r| r.key_name.clone()))
        .bind(last.iter().map(|r| r.endpoint).collect::<Vec<_>>())
        .bind(col(|r| r.requested_model.clone()))
        .bind(col(|r| r.served_model.clone()))
        .bind(col(|r| r.channel.clone()))
        .bind(last.iter().map(|r| i32::from(r.status)).collect::<Vec<_>>())
        .bind(last.iter().map(|r| r.outcome.as_str()).collect::<Vec<_>>())
        .bind(last.iter().map(|r| r.attempts.as_str()).collect::<Vec<_>>())
        .bind(last.iter().map(|r| r.stream).collect::<Vec<_>>())
        .bind(last.iter().map(|r| r.total_ms as i64).collect::<Vec<_>>())
        .bind(num(|r| int(r.ttfb_ms)))
        .bind(num(|r| int(r.input_tokens)))
        .bind(num(|r| int(r.output_tokens)))
        .bind(last.iter().map(|r| r.tokens_per_s).collect::<Vec<_>>())
        .bind(col(|r| r.translation.clone()))
        .bind(col(|r| r.session.clone()))
        .bind(col(|r| r.affinity.map(str::to_string)))
        .bind(num(|r| int(r.prompt_tokens)))
        .bind(num(|r| int(r.trimmed_turns)))
        .execute(pool)
        .await
        .map(|_| ())
}

/// The most recent rows, newest first (`seq`, the insertion order, breaks ties as SQLite's
/// rowid does), in the JSON shape the SQLite log gives.
pub(super) async fn recent(pool: &PgPool, limit: u32) -> Result<Vec<Value>, StoreError> {
    let rows = sqlx::query(
        "SELECT id, ts_ms, key_name, endpoint, requested_model, served_model, channel, status,
                outcome, attempts, stream, total_ms, ttfb_ms, input_tokens, output_tokens,
                tokens_per_s, translation, session, affinity, prompt_tokens, trimmed_turns
         FROM requests ORDER BY ts_ms DESC, seq DESC LIMIT $1",
    )
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    Ok(rows.iter().map(row_json).collect::<Result<Vec<_>, _>>()?)
}

fn row_json(r: &PgRow) -> Result<Value, sqlx::Error> {
    let attempts: String = r.try_get("attempts")?;
    Ok(json!({
        "id": r.try_get::<String, _>("id")?,
        "ts_ms": r.try_get::<i64, _>("ts_ms")?,
        "key_name": r.try_get::<Option<String>, _>("key_name")?,
        "endpoint": r.try_get::<String, _>("endpoint")?,
        "requested_model": r.try_get::<Option<String>, _>("requested_model")?,
        "served_model": r.try_get::<Option<String>, _>("served_model")?,
        "channel": r.try_get::<Option<String>, _>("channel")?,
        "status": i64::from(r.try_get::<i32, _>("status")?),
        "outcome": r.try_get::<String, _>("outcome")?,
        "attempts": serde_json::from_str::<Value>(&attempts).unwrap_or(Value::Null),
        "stream": r.try_get::<bool, _>("stream")?,
        "total_ms": r.try_get::<i64, _>("total_ms")?,
        "ttfb_ms": r.try_get::<Option<i64>, _>("ttfb_ms")?,
        "input_tokens": r.try_get::<Option<i64>, _>("input_tokens")?,
        "output_tokens": r.try_get::<Option<i64>, _>("output_tokens")?,
        "tokens_per_s": r.try_get::<Option<f64>, _>("tokens_per_s")?,
        "translation": r.try_get::<Option<String>, _>("translation")?,
        "session": r.try_get::<Option<String>, _>("session")?,
        "affinity": r.try_get::<Option<String>, _>("affinity")?,
        "prompt_tokens": r.try_get::<Option<i64>, _>("prompt_tokens")?,
        "trimmed_turns": r.try_get::<Option<i64>, _>("trimmed_turns")?,
    }))
}

/// Deletes rows older than `cutoff_ms`, [`PRUNE_BATCH`] a statement. Replicas pruning at
/// once skip the rows another is deleting rather than wait for it.
pub(super) async fn prune(pool: &PgPool, cutoff_ms: i64) -> Result<u64, StoreError> {
    let mut total = 0u64;
    loop {
        let n = sqlx::query(
            "DELETE FROM requests WHERE id IN
                (SELECT id FROM requests WHERE ts_ms < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)",
        )
        .bind(cutoff_ms)
        .bind(PRUNE_BATCH)
        .execute(pool)
        .await?
        .rows_affected();
        total += n;
        if (n as i64) < PRUNE_BATCH {
            return Ok(total);
        }
    }
}
