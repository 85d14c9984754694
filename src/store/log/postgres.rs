//! The request log in a PostgreSQL store: the `requests` table (migration 0003), written by a
//! tokio task that drains the queue every tick into one multi-row insert (`UNNEST` over one
//! array per column: one statement and one round trip per tick, whatever the batch's size).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::mpsc::Receiver;

use serde_json::Value;
use sqlx::Row;
use sqlx::postgres::{PgPool, PgRow};

use super::journal::Journal;
use super::ledger::{COLUMNS, ChargeRow, charge_json, rates_json};
use super::query::{Cursor, Dialect, LogQuery, Param, Row as LogRead, Sample, samples_sql};
use super::{GroupBy, LogMsg, LogRow, PRUNE_BATCH, StoreError, Sum, TICK, Window, drain};

/// Drains the queue every tick and writes the tick's rows in one statement; exits when every
/// sender is gone. The journal's file work (reading orphans, up to 16 MiB a tick) runs on the
/// blocking pool, off the runtime's threads.
pub(super) async fn writer(pool: PgPool, rx: Receiver<LogMsg>, journal: Option<Arc<Journal>>) {
    let mut every = tokio::time::interval(TICK);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut batch = Vec::new();
    let mut acks = Vec::new();
    loop {
        every.tick().await;
        let (tick, mut recovered) = match journal.clone() {
            Some(j) => tokio::task::spawn_blocking(move || j.begin())
                .await
                .ok()
                .unzip(),
            None => (None, None),
        };
        let drained = drain(&rx, &mut batch, &mut acks);
        let recovered = write(&pool, recovered.as_deref_mut().unwrap_or_default()).await;
        let live = write(&pool, &mut batch).await;
        let last = drained.last();
        if let (Some(j), Some(t)) = (journal.clone(), tick) {
            let end = move || j.end(t, live, recovered, last);
            let _ = tokio::task::spawn_blocking(end).await;
        }
        batch.clear();
        for ack in acks.drain(..) {
            let _ = ack.send(());
        }
        if drained.closed {
            return;
        }
    }
}

/// Writes `rows`; false when PostgreSQL did not take them (they are written again later, from
/// the journal).
async fn write(pool: &PgPool, rows: &mut [LogRow]) -> bool {
    if rows.is_empty() {
        return true;
    }
    strip_nul(rows);
    write_apart(pool, rows)
        .await
        .inspect_err(|e| {
            tracing::error!(error = %e, rows = rows.len(), "request log write to PostgreSQL failed");
        })
        .is_ok()
}

/// Writes `rows` in one transaction. When PostgreSQL refuses them for what they hold
/// ([`refused`]), writes the halves apart, down to the rows it refuses alone, which are set
/// aside (logged with their id, not written) so they hold back no other row. Any other error
/// (the database down, a timeout) fails the write, to be tried again.
async fn write_apart(pool: &PgPool, rows: &[LogRow]) -> Result<(), sqlx::Error> {
    match write_batch(pool, rows).await {
        Err(e) if refused(&e) => {
            if let [row] = rows {
                tracing::error!(id = %row.id, error = %e,
                    "PostgreSQL refused a request log row; it is set aside");
                return Ok(());
            }
            let (a, b) = rows.split_at(rows.len() / 2);
            Box::pin(write_apart(pool, a)).await?;
            Box::pin(write_apart(pool, b)).await
        }
        done => done,
    }
}

/// An error about the rows' data, which writing them again would meet again: SQLSTATE
/// classes 22 (data exception), 23 (integrity constraint) and 54 (program limit).
fn refused(e: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = e else {
        return false;
    };
    db.code()
        .is_some_and(|c| ["22", "23", "54"].iter().any(|class| c.starts_with(class)))
}

/// PostgreSQL's text holds no NUL, which a client may put in a model's name: each becomes
/// U+FFFD, so such a row is written like any other.
fn strip_nul(rows: &mut [LogRow]) {
    fn text(v: &mut String) {
        if v.contains('\0') {
            *v = v.replace('\0', "\u{FFFD}");
        }
    }
    fn shared(v: &mut Arc<str>) {
        if v.contains('\0') {
            *v = v.replace('\0', "\u{FFFD}").into();
        }
    }
    for r in rows {
        for v in [&mut r.id, &mut r.outcome, &mut r.attempts] {
            text(v);
        }
        let optional = [
            &mut r.key_name,
            &mut r.requested_model,
            &mut r.served_model,
            &mut r.channel,
            &mut r.translation,
            &mut r.session,
        ];
        optional.into_iter().flatten().for_each(text);
        for c in &mut r.charges {
            [&mut c.channel, &mut c.model, &mut c.upstream_model]
                .into_iter()
                .chain(c.credential.as_mut())
                .for_each(shared);
        }
    }
}

const INSERT: &str = "
INSERT INTO requests (id, ts_ms, key_name, endpoint, requested_model, served_model, channel,
    status, outcome, attempts, stream, total_ms, ttfb_ms, input_tokens, output_tokens,
    tokens_per_s, translation, session, affinity, prompt_tokens, trimmed_turns, cost_micros,
    attempt_count, test, route_reason, cache, request_bytes, response_bytes, bodies)
SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[],
    $7::text[], $8::int[], $9::text[], $10::text[], $11::bool[], $12::bigint[], $13::bigint[],
    $14::bigint[], $15::bigint[], $16::float8[], $17::text[], $18::text[], $19::text[],
    $20::bigint[], $21::bigint[], $22::bigint[], $23::int[], $24::bool[], $25::text[],
    $26::text[], $27::bigint[], $28::bigint[], $29::text[])
ON CONFLICT (id) DO UPDATE SET ts_ms = EXCLUDED.ts_ms, key_name = EXCLUDED.key_name,
    endpoint = EXCLUDED.endpoint, requested_model = EXCLUDED.requested_model,
    served_model = EXCLUDED.served_model, channel = EXCLUDED.channel, status = EXCLUDED.status,
    outcome = EXCLUDED.outcome, attempts = EXCLUDED.attempts, stream = EXCLUDED.stream,
    total_ms = EXCLUDED.total_ms, ttfb_ms = EXCLUDED.ttfb_ms,
    input_tokens = EXCLUDED.input_tokens, output_tokens = EXCLUDED.output_tokens,
    tokens_per_s = EXCLUDED.tokens_per_s, translation = EXCLUDED.translation,
    session = EXCLUDED.session, affinity = EXCLUDED.affinity,
    prompt_tokens = EXCLUDED.prompt_tokens, trimmed_turns = EXCLUDED.trimmed_turns,
    cost_micros = EXCLUDED.cost_micros, attempt_count = EXCLUDED.attempt_count,
    test = EXCLUDED.test, route_reason = EXCLUDED.route_reason, cache = EXCLUDED.cache,
    request_bytes = EXCLUDED.request_bytes, response_bytes = EXCLUDED.response_bytes,
    bodies = EXCLUDED.bodies";

const INSERT_CHARGES: &str = "
INSERT INTO ledger (request_id, attempt, ts_ms, key_name, channel, credential, model,
    upstream_model, input_tokens, cached_input_tokens, cache_write_tokens, output_tokens,
    reasoning_tokens, cost_micros, price_version, outcome, estimated, first_choice_micros,
        cache_saved_micros, team, end_user)
SELECT * FROM UNNEST($1::text[], $2::int[], $3::bigint[], $4::text[], $5::text[], $6::text[],
    $7::text[], $8::text[], $9::bigint[], $10::bigint[], $11::bigint[], $12::bigint[],
    $13::bigint[], $14::bigint[], $15::text[], $16::text[], $17::bool[], $18::bigint[],
    $19::bigint[], $20::text[], $21::text[])
ON CONFLICT DO NOTHING";

const INSERT_PRICES: &str = "
INSERT INTO prices (version, rates, first_seen_ms)
SELECT * FROM UNNEST($1::text[], $2::text[], $3::bigint[])
ON CONFLICT DO NOTHING";

fn int(v: Option<u64>) -> Option<i64> {
    v.map(|v| v as i64)
}

/// One transaction for the whole batch: the requests, their ledger rows, new price versions.
async fn write_batch(pool: &PgPool, rows: &[LogRow]) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    write_requests(&mut tx, rows).await?;
    if rows.iter().any(|r| !r.charges.is_empty()) {
        write_charges(&mut tx, rows).await?;
    }
    tx.commit().await
}

type Tx = sqlx::Transaction<'static, sqlx::Postgres>;

/// The batch's ledger rows in one statement, and the price versions they name in another.
async fn write_charges(tx: &mut Tx, rows: &[LogRow]) -> Result<(), sqlx::Error> {
    let all: Vec<(&LogRow, &super::Charge)> = rows
        .iter()
        .flat_map(|r| r.charges.iter().map(move |c| (r, c)))
        .collect();
    let big =
        |f: fn(&super::Charge) -> u64| all.iter().map(|(_, c)| f(c) as i64).collect::<Vec<_>>();
    sqlx::query(INSERT_CHARGES)
        .bind(all.iter().map(|(r, _)| r.id.as_str()).collect::<Vec<_>>())
        .bind(
            all.iter()
                .map(|(_, c)| c.attempt as i32)
                .collect::<Vec<_>>(),
        )
        .bind(all.iter().map(|(r, _)| r.ts_ms).collect::<Vec<_>>())
        .bind(
            all.iter()
                .map(|(r, _)| r.key_name.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind(all.iter().map(|(_, c)| &*c.channel).collect::<Vec<_>>())
        .bind(
            all.iter()
                .map(|(_, c)| c.credential.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind(all.iter().map(|(_, c)| &*c.model).collect::<Vec<_>>())
        .bind(
            all.iter()
                .map(|(_, c)| &*c.upstream_model)
                .collect::<Vec<_>>(),
        )
        .bind(big(|c| c.tokens.input))
        .bind(big(|c| c.tokens.cached_input))
        .bind(big(|c| c.tokens.cache_write))
        .bind(big(|c| c.tokens.output))
        .bind(big(|c| c.tokens.reasoning))
        .bind(big(|c| c.cost_micros))
        .bind(
            all.iter()
                .map(|(_, c)| c.price.as_ref().map(|p| p.version.as_str()))
                .collect::<Vec<_>>(),
        )
        .bind(all.iter().map(|(_, c)| &*c.outcome).collect::<Vec<_>>())
        .bind(all.iter().map(|(_, c)| c.estimated).collect::<Vec<_>>())
        .bind(
            all.iter()
                .map(|(_, c)| c.first_choice_micros.map(|v| v as i64))
                .collect::<Vec<_>>(),
        )
        .bind(
            all.iter()
                .map(|(_, c)| c.cache_saved_micros)
                .collect::<Vec<_>>(),
        )
        .bind(
            all.iter()
                .map(|(r, _)| r.team.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind(
            all.iter()
                .map(|(r, _)| r.end_user.as_deref())
                .collect::<Vec<_>>(),
        )
        .execute(&mut **tx)
        .await?;
    let mut seen = HashSet::new();
    let prices: Vec<(&str, String, i64)> = all
        .iter()
        .filter_map(|(r, c)| Some((r, c.price.as_ref()?)))
        .filter(|(_, p)| seen.insert(p.version.as_str()))
        .map(|(r, p)| (p.version.as_str(), rates_json(p).to_string(), r.ts_ms))
        .collect();
    if !prices.is_empty() {
        sqlx::query(INSERT_PRICES)
            .bind(prices.iter().map(|p| p.0).collect::<Vec<_>>())
            .bind(prices.iter().map(|p| p.1.as_str()).collect::<Vec<_>>())
            .bind(prices.iter().map(|p| p.2).collect::<Vec<_>>())
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}

/// One statement for the whole batch. A row id seen twice keeps its last row (as SQLite's
/// `INSERT OR REPLACE` does; one statement cannot update a row twice).
async fn write_requests(tx: &mut Tx, rows: &[LogRow]) -> Result<(), sqlx::Error> {
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
        .bind(last.iter().map(|r| &*r.endpoint).collect::<Vec<_>>())
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
        .bind(col(|r| r.affinity.as_deref().map(str::to_string)))
        .bind(num(|r| int(r.prompt_tokens)))
        .bind(num(|r| int(r.trimmed_turns)))
        .bind(num(|r| int(r.cost_micros)))
        .bind(
            last.iter()
                .map(|r| r.attempt_count as i32)
                .collect::<Vec<_>>(),
        )
        .bind(last.iter().map(|r| r.test).collect::<Vec<_>>())
        .bind(col(|r| r.route_reason.as_deref().map(str::to_string)))
        .bind(col(|r| r.cache.as_deref().map(str::to_string)))
        .bind(num(|r| int(r.request_bytes)))
        .bind(num(|r| int(r.response_bytes)))
        .bind(col(|r| r.bodies.clone()))
        .execute(&mut **tx)
        .await
        .map(|_| ())
}

/// A page of the log, newest first (`seq`, the insertion order, breaks ties as SQLite's rowid
/// does), in the JSON shape the SQLite log gives, and the cursor after its last row.
pub(super) async fn page(
    pool: &PgPool,
    q: &LogQuery,
) -> Result<(Vec<Value>, Option<Cursor>), StoreError> {
    let (sql, params) = q.sql(Dialect::Postgres);
    let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
    for p in params {
        query = match p {
            Param::Int(i) => query.bind(i),
            Param::Text(t) => query.bind(t),
        };
    }
    let rows = query.fetch_all(pool).await?;
    let rows = rows
        .iter()
        .map(|r| Ok((read_row(r)?, r.try_get::<i64, _>("seq")?)))
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
    Ok(super::query::finish(q, rows))
}

/// The newest `limit` samples since `since_ms`.
pub(super) async fn samples(
    pool: &PgPool,
    since_ms: i64,
    limit: u32,
) -> Result<Vec<Sample>, StoreError> {
    let rows = sqlx::query(sqlx::AssertSqlSafe(samples_sql(Dialect::Postgres)))
        .bind(since_ms)
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?;
    let read = |r: &PgRow| -> Result<Sample, sqlx::Error> {
        Ok(Sample {
            ts_ms: r.try_get("ts_ms")?,
            channel: r.try_get("channel")?,
            model: r.try_get("served_model")?,
            ttfb_ms: r.try_get("ttfb_ms")?,
            tokens_per_s: r.try_get("tokens_per_s")?,
            attempts: r.try_get("attempts")?,
        })
    };
    Ok(rows.iter().map(read).collect::<Result<Vec<_>, _>>()?)
}

fn read_row(r: &PgRow) -> Result<LogRead, sqlx::Error> {
    Ok(LogRead {
        id: r.try_get("id")?,
        ts_ms: r.try_get("ts_ms")?,
        key_name: r.try_get("key_name")?,
        endpoint: r.try_get("endpoint")?,
        requested_model: r.try_get("requested_model")?,
        served_model: r.try_get("served_model")?,
        channel: r.try_get("channel")?,
        status: i64::from(r.try_get::<i32, _>("status")?),
        outcome: r.try_get("outcome")?,
        attempts: r.try_get("attempts")?,
        stream: r.try_get("stream")?,
        total_ms: r.try_get("total_ms")?,
        ttfb_ms: r.try_get("ttfb_ms")?,
        input_tokens: r.try_get("input_tokens")?,
        output_tokens: r.try_get("output_tokens")?,
        tokens_per_s: r.try_get("tokens_per_s")?,
        translation: r.try_get("translation")?,
        session: r.try_get("session")?,
        affinity: r.try_get("affinity")?,
        prompt_tokens: r.try_get("prompt_tokens")?,
        trimmed_turns: r.try_get("trimmed_turns")?,
        cost_micros: r.try_get("cost_micros")?,
        attempt_count: i64::from(r.try_get::<i32, _>("attempt_count")?),
        test: r.try_get("test")?,
        route_reason: r.try_get("route_reason")?,
        cache: r.try_get("cache")?,
        request_bytes: r.try_get("request_bytes")?,
        response_bytes: r.try_get("response_bytes")?,
        bodies: r.try_get("bodies")?,
    })
}

/// The ledger's sums by `(key, group)` over `w`.
pub(super) async fn usage(pool: &PgPool, by: GroupBy, w: Window) -> Result<Vec<Sum>, StoreError> {
    let group = match by {
        GroupBy::Key => "key_name",
        GroupBy::Model => "model",
        GroupBy::Channel => "channel",
        GroupBy::Team => "team",
        GroupBy::User => "end_user",
        GroupBy::Day => "to_char(to_timestamp(ts_ms / 1000) AT TIME ZONE 'UTC', 'YYYY-MM-DD')",
    };
    let sql = format!(
        "SELECT key_name, team, {group} AS grp, count(*) FILTER (WHERE attempt = 1) AS requests,
                count(*) AS attempts, sum(input_tokens)::bigint AS input,
                sum(cached_input_tokens)::bigint AS cached, sum(output_tokens)::bigint AS output,
                sum(reasoning_tokens)::bigint AS reasoning, sum(cost_micros)::bigint AS cost,
                sum(cache_write_tokens)::bigint AS written,
                sum(cache_saved_micros)::bigint AS saved
                  FROM ledger WHERE ts_ms >= $1 AND ts_ms < $2 GROUP BY 1, 2, 3"
    );
    // Built only from the constant columns above: no input reaches the text.
    let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(w.from_ms)
        .bind(w.to_ms)
        .fetch_all(pool)
        .await?;
    let sum = |r: &PgRow| -> Result<Sum, sqlx::Error> {
        Ok(Sum {
            key: r.try_get("key_name")?,
            team: r.try_get("team")?,
            group: r.try_get("grp")?,
            requests: r.try_get("requests")?,
            attempts: r.try_get("attempts")?,
            input_tokens: r.try_get("input")?,
            cached_input_tokens: r.try_get("cached")?,
            output_tokens: r.try_get("output")?,
            reasoning_tokens: r.try_get("reasoning")?,
            cost_micros: r.try_get("cost")?,
            cache_write_tokens: r.try_get("written")?,
            cache_saved_micros: r.try_get("saved")?,
        })
    };
    Ok(rows.iter().map(sum).collect::<Result<Vec<_>, _>>()?)
}

/// One request's ledger rows by attempt, with the rates that priced each.
pub(super) async fn charges(pool: &PgPool, request_id: &str) -> Result<Vec<Value>, StoreError> {
    let sql = format!(
        "SELECT {COLUMNS}, p.rates FROM ledger l LEFT JOIN prices p ON p.version = l.price_version
         WHERE l.request_id = $1 ORDER BY l.attempt"
    );
    let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(request_id)
        .fetch_all(pool)
        .await?;
    let one = |r: &PgRow| -> Result<Value, sqlx::Error> {
        let rates: Option<String> = r.try_get("rates")?;
        let n = |c: &str| r.try_get::<i64, _>(c);
        Ok(charge_json(ChargeRow {
            attempt: i64::from(r.try_get::<i32, _>("attempt")?),
            ts_ms: n("ts_ms")?,
            key_name: r.try_get("key_name")?,
            channel: r.try_get("channel")?,
            credential: r.try_get("credential")?,
            model: r.try_get("model")?,
            upstream_model: r.try_get("upstream_model")?,
            tokens: [
                n("input_tokens")?,
                n("cached_input_tokens")?,
                n("cache_write_tokens")?,
                n("output_tokens")?,
                n("reasoning_tokens")?,
            ],
            cost_micros: n("cost_micros")?,
            price_version: r.try_get("price_version")?,
            outcome: r.try_get("outcome")?,
            estimated: r.try_get("estimated")?,
            first_choice_micros: r.try_get("first_choice_micros")?,
            rates: rates.and_then(|t| serde_json::from_str(&t).ok()),
        }))
    };
    Ok(rows.iter().map(one).collect::<Result<Vec<_>, _>>()?)
}

/// Deletes rows of `table` (`requests` or `ledger`, each keyed by its own columns) older than
/// `cutoff_ms`, [`PRUNE_BATCH`] a statement. Replicas pruning at once skip the rows another is
/// deleting rather than wait for it.
pub(super) async fn prune(
    pool: &PgPool,
    table: &'static str,
    cutoff_ms: i64,
) -> Result<u64, StoreError> {
    let (key, cols) = if table == "ledger" {
        ("(request_id, attempt)", "request_id, attempt")
    } else {
        ("id", "id")
    };
    let mut total = 0u64;
    loop {
        let n = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM {table} WHERE {key} IN
                (SELECT {cols} FROM {table} WHERE ts_ms < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)"
        )))
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
