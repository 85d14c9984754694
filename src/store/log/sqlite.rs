//! The request log in its own SQLite file: the schema (columns added since the first are
//! migrated on open), the writer thread, and the blocking reads and prunes the log runs on the
//! blocking pool.

use std::collections::HashSet;
use std::path::Path;
use std::sync::mpsc::Receiver;

use rusqlite::{Connection, OpenFlags, params};
use serde_json::Value;

use super::journal::Journal;
use super::query::{Cursor, Dialect, LogQuery, Param, Row, Sample, samples_sql};
use super::{GroupBy, LogMsg, LogRow, PRUNE_BATCH, StoreError, Sum, TICK, Window, drain};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS requests (
    id TEXT PRIMARY KEY,
    ts_ms INTEGER NOT NULL,
    key_name TEXT,
    endpoint TEXT NOT NULL,
    requested_model TEXT,
    served_model TEXT,
    channel TEXT,
    status INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    attempts TEXT NOT NULL,
    stream INTEGER NOT NULL,
    total_ms INTEGER NOT NULL,
    ttfb_ms INTEGER,
    input_tokens INTEGER,
    output_tokens INTEGER,
    tokens_per_s REAL
);
CREATE INDEX IF NOT EXISTS requests_ts ON requests (ts_ms);
";

/// The filters a log reader uses most, each entered at the page's cursor (`query.rs`).
const INDEXES: &str = "
CREATE INDEX IF NOT EXISTS requests_key_ts ON requests (key_name, ts_ms);
CREATE INDEX IF NOT EXISTS requests_channel_ts ON requests (channel, ts_ms);
CREATE INDEX IF NOT EXISTS requests_model_ts ON requests (requested_model, ts_ms);
";

/// The ledger (one row per upstream attempt) and the price versions its rows name. Keyed by
/// request id (time-ordered, so rows append at the B-tree's end) without a rowid: two B-trees
/// per row written, not three.
const LEDGER: &str = "
CREATE TABLE IF NOT EXISTS ledger (
    request_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    ts_ms INTEGER NOT NULL,
    key_name TEXT,
    channel TEXT NOT NULL,
    credential TEXT,
    model TEXT NOT NULL,
    upstream_model TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    cached_input_tokens INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    reasoning_tokens INTEGER NOT NULL,
    cost_micros INTEGER NOT NULL,
    price_version TEXT,
    outcome TEXT NOT NULL,
    estimated INTEGER NOT NULL,
    first_choice_micros INTEGER,
    PRIMARY KEY (request_id, attempt)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS ledger_ts ON ledger (ts_ms);
CREATE TABLE IF NOT EXISTS prices (
    version TEXT PRIMARY KEY,
    rates TEXT NOT NULL,
    first_seen_ms INTEGER NOT NULL
);
";

/// Columns added after the first schema, for databases created before them: (table, column,
/// the statement that adds it).
const MIGRATIONS: [(&str, &str, &str); 16] = [
    (
        "requests",
        "translation",
        "ALTER TABLE requests ADD COLUMN translation TEXT",
    ),
    (
        "requests",
        "session",
        "ALTER TABLE requests ADD COLUMN session TEXT",
    ),
    (
        "requests",
        "affinity",
        "ALTER TABLE requests ADD COLUMN affinity TEXT",
    ),
    (
        "requests",
        "prompt_tokens",
        "ALTER TABLE requests ADD COLUMN prompt_tokens INTEGER",
    ),
    (
        "requests",
        "trimmed_turns",
        "ALTER TABLE requests ADD COLUMN trimmed_turns INTEGER",
    ),
    (
        "requests",
        "cost_micros",
        "ALTER TABLE requests ADD COLUMN cost_micros INTEGER",
    ),
    (
        "requests",
        "attempt_count",
        "ALTER TABLE requests ADD COLUMN attempt_count INTEGER NOT NULL DEFAULT 1",
    ),
    (
        "requests",
        "test",
        "ALTER TABLE requests ADD COLUMN test INTEGER NOT NULL DEFAULT 0",
    ),
    (
        "requests",
        "route_reason",
        "ALTER TABLE requests ADD COLUMN route_reason TEXT",
    ),
    (
        "requests",
        "cache",
        "ALTER TABLE requests ADD COLUMN cache TEXT",
    ),
    (
        "requests",
        "request_bytes",
        "ALTER TABLE requests ADD COLUMN request_bytes INTEGER",
    ),
    (
        "requests",
        "response_bytes",
        "ALTER TABLE requests ADD COLUMN response_bytes INTEGER",
    ),
    (
        "requests",
        "bodies",
        "ALTER TABLE requests ADD COLUMN bodies TEXT",
    ),
    (
        "ledger",
        "cache_saved_micros",
        "ALTER TABLE ledger ADD COLUMN cache_saved_micros INTEGER NOT NULL DEFAULT 0",
    ),
    ("ledger", "team", "ALTER TABLE ledger ADD COLUMN team TEXT"),
    (
        "ledger",
        "end_user",
        "ALTER TABLE ledger ADD COLUMN end_user TEXT",
    ),
];

fn sqlite_err(path: &Path) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
    move |source| StoreError::Sqlite {
        path: path.to_path_buf(),
        source,
    }
}

/// Opens (creating if needed) the log at `path`, with its schema up to date.
pub(super) fn open(path: &Path) -> Result<Connection, StoreError> {
    let sqlite = sqlite_err(path);
    let conn = Connection::open(path).map_err(&sqlite)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(&sqlite)?;
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(&sqlite)?;
    conn.execute_batch(SCHEMA).map_err(&sqlite)?;
    conn.execute_batch(LEDGER).map_err(&sqlite)?;
    for (table, column, alter) in MIGRATIONS {
        let present: bool = conn
            .prepare("SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2")
            .and_then(|mut s| s.exists([table, column]))
            .map_err(&sqlite)?;
        if !present {
            conn.execute_batch(alter).map_err(&sqlite)?;
        }
    }
    conn.execute_batch(INDEXES).map_err(&sqlite)?;
    Ok(conn)
}

/// Drains the queue every tick, one transaction per tick; exits when every sender is gone.
pub(super) fn writer(
    mut conn: Connection,
    rx: Receiver<LogMsg>,
    journal: Option<&Journal>,
    path: &Path,
) {
    let mut batch = Vec::new();
    let mut acks = Vec::new();
    // Price versions already in the file (written once each).
    let mut prices = HashSet::new();
    loop {
        std::thread::sleep(TICK);
        let (tick, recovered) = journal.map(Journal::begin).unzip();
        let drained = drain(&rx, &mut batch, &mut acks);
        let mut write = |rows: &[LogRow]| {
            rows.is_empty()
                || write_batch(&mut conn, rows, &mut prices)
                    .inspect_err(|e| {
                        tracing::error!(path = %path.display(), error = %e, rows = rows.len(), "request log write failed");
                    })
                    .is_ok()
        };
        let recovered = write(recovered.as_deref().unwrap_or_default());
        let live = write(&batch);
        if let (Some(j), Some(t)) = (journal, tick) {
            j.end(t, live, recovered, drained.last());
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

fn write_batch(
    conn: &mut Connection,
    rows: &[LogRow],
    prices: &mut HashSet<String>,
) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    {
        let mut stmt = tx.prepare_cached(
            "INSERT OR REPLACE INTO requests (id, ts_ms, key_name, endpoint, requested_model, served_model,
                channel, status, outcome, attempts, stream, total_ms, ttfb_ms, input_tokens, output_tokens, tokens_per_s,
                translation, session, affinity, prompt_tokens, trimmed_turns, cost_micros, attempt_count, test,
                route_reason, cache, request_bytes, response_bytes, bodies)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19,
                ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29)",
        )?;
        for r in rows {
            stmt.execute(params![
                r.id,
                r.ts_ms,
                r.key_name,
                r.endpoint,
                r.requested_model,
                r.served_model,
                r.channel,
                r.status,
                r.outcome,
                r.attempts,
                r.stream,
                r.total_ms as i64,
                r.ttfb_ms.map(|v| v as i64),
                r.input_tokens.map(|v| v as i64),
                r.output_tokens.map(|v| v as i64),
                r.tokens_per_s,
                r.translation,
                r.session,
                r.affinity,
                r.prompt_tokens.map(|v| v as i64),
                r.trimmed_turns.map(|v| v as i64),
                r.cost_micros.map(|v| v as i64),
                r.attempt_count,
                r.test,
                r.route_reason,
                r.cache,
                r.request_bytes.map(|v| v as i64),
                r.response_bytes.map(|v| v as i64),
                r.bodies,
            ])?;
        }
        write_charges(&tx, rows, prices)?;
    }
    tx.commit()
}

/// The batch's ledger rows, and each price version the first time this writer sees it.
fn write_charges(
    tx: &rusqlite::Transaction,
    rows: &[LogRow],
    prices: &mut HashSet<String>,
) -> rusqlite::Result<()> {
    let mut charge = tx.prepare_cached(
        "INSERT OR IGNORE INTO ledger (request_id, attempt, ts_ms, key_name, channel, credential,
            model, upstream_model, input_tokens, cached_input_tokens, cache_write_tokens,
            output_tokens, reasoning_tokens, cost_micros, price_version, outcome, estimated,
                        first_choice_micros, cache_saved_micros, team, end_user)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18,
            ?19, ?20, ?21)",
    )?;
    let mut price = tx.prepare_cached(
        "INSERT OR IGNORE INTO prices (version, rates, first_seen_ms) VALUES (?1, ?2, ?3)",
    )?;
    for r in rows {
        for c in &r.charges {
            let t = &c.tokens;
            charge.execute(params![
                r.id,
                c.attempt,
                r.ts_ms,
                r.key_name,
                &*c.channel,
                c.credential.as_deref(),
                &*c.model,
                &*c.upstream_model,
                t.input as i64,
                t.cached_input as i64,
                t.cache_write as i64,
                t.output as i64,
                t.reasoning as i64,
                c.cost_micros as i64,
                c.price.as_ref().map(|p| p.version.as_str()),
                &*c.outcome,
                c.estimated,
                c.first_choice_micros.map(|v| v as i64),
                c.cache_saved_micros,
                r.team.as_deref(),
                r.end_user.as_deref(),
            ])?;
            if let Some(p) = &c.price
                && !prices.contains(&p.version)
            {
                let rates = super::ledger::rates_json(p).to_string();
                price.execute(params![p.version, rates, r.ts_ms])?;
                prices.insert(p.version.clone());
            }
        }
    }
    Ok(())
}

/// A query's parameters as rusqlite binds them.
fn bind(params: &[Param]) -> Vec<&dyn rusqlite::ToSql> {
    params
        .iter()
        .map(|p| match p {
            Param::Int(i) => i as &dyn rusqlite::ToSql,
            Param::Text(t) => t as &dyn rusqlite::ToSql,
        })
        .collect()
}

/// A page of the log, newest first, and the cursor after its last row. Blocking: the caller
/// runs it on the blocking pool.
pub(super) fn page(path: &Path, q: &LogQuery) -> Result<(Vec<Value>, Option<Cursor>), StoreError> {
    let sqlite = sqlite_err(path);
    let conn = read_only(path)?;
    let (sql, params) = q.sql(Dialect::Sqlite);
    let mut stmt = conn.prepare(&sql).map_err(&sqlite)?;
    let rows = stmt
        .query_map(bind(&params).as_slice(), |r| {
            let row = Row {
                id: r.get(0)?,
                ts_ms: r.get(1)?,
                key_name: r.get(2)?,
                endpoint: r.get(3)?,
                requested_model: r.get(4)?,
                served_model: r.get(5)?,
                channel: r.get(6)?,
                status: r.get(7)?,
                outcome: r.get(8)?,
                attempts: r.get(9)?,
                stream: r.get(10)?,
                total_ms: r.get(11)?,
                ttfb_ms: r.get(12)?,
                input_tokens: r.get(13)?,
                output_tokens: r.get(14)?,
                tokens_per_s: r.get(15)?,
                translation: r.get(16)?,
                session: r.get(17)?,
                affinity: r.get(18)?,
                prompt_tokens: r.get(19)?,
                trimmed_turns: r.get(20)?,
                cost_micros: r.get(21)?,
                attempt_count: r.get(22)?,
                test: r.get(23)?,
                route_reason: r.get(24)?,
                cache: r.get(25)?,
                request_bytes: r.get(26)?,
                response_bytes: r.get(27)?,
                bodies: r.get(28)?,
            };
            Ok((row, r.get::<_, i64>(29)?))
        })
        .map_err(&sqlite)?;
    let rows = rows.collect::<Result<Vec<_>, _>>().map_err(&sqlite)?;
    Ok(super::query::finish(q, rows))
}

/// The newest `limit` samples since `since_ms`. Blocking.
pub(super) fn samples(path: &Path, since_ms: i64, limit: u32) -> Result<Vec<Sample>, StoreError> {
    let sqlite = sqlite_err(path);
    let conn = read_only(path)?;
    let mut stmt = conn
        .prepare(&samples_sql(Dialect::Sqlite))
        .map_err(&sqlite)?;
    let rows = stmt
        .query_map(params![since_ms, limit], |r| {
            Ok(Sample {
                ts_ms: r.get(0)?,
                channel: r.get(1)?,
                model: r.get(2)?,
                ttfb_ms: r.get(3)?,
                tokens_per_s: r.get(4)?,
                attempts: r.get(5)?,
            })
        })
        .map_err(&sqlite)?;
    rows.collect::<Result<Vec<_>, _>>().map_err(&sqlite)
}

/// Deletes rows of `table` (`requests` or `ledger`) older than `cutoff_ms`, [`PRUNE_BATCH`] a
/// statement (each its own short transaction, so the writer thread never waits long). Blocking.
pub(super) fn prune(path: &Path, table: &'static str, cutoff_ms: i64) -> Result<u64, StoreError> {
    let sqlite = sqlite_err(path);
    let conn = Connection::open(path).map_err(&sqlite)?;
    // The ledger has no rowid: its key is (request_id, attempt).
    let (key, cols) = if table == "ledger" {
        ("(request_id, attempt)", "request_id, attempt")
    } else {
        ("rowid", "rowid")
    };
    let mut stmt = conn
        .prepare(&format!(
            "DELETE FROM {table} WHERE {key} IN
                (SELECT {cols} FROM {table} WHERE ts_ms < ?1 LIMIT ?2)"
        ))
        .map_err(&sqlite)?;
    let mut total = 0u64;
    loop {
        let n = stmt
            .execute(params![cutoff_ms, PRUNE_BATCH])
            .map_err(&sqlite)?;
        total += n as u64;
        if (n as i64) < PRUNE_BATCH {
            return Ok(total);
        }
    }
}

/// A connection for reads beside the writer thread's (WAL lets both run).
fn read_only(path: &Path) -> Result<Connection, StoreError> {
    Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(sqlite_err(path))
}

/// The ledger's sums by `(key, group)` over `w`. Blocking.
pub(super) fn usage(path: &Path, by: GroupBy, w: Window) -> Result<Vec<Sum>, StoreError> {
    let sqlite = sqlite_err(path);
    let conn = read_only(path)?;
    let group = match by {
        GroupBy::Key => "key_name",
        GroupBy::Model => "model",
        GroupBy::Channel => "channel",
        GroupBy::Team => "team",
        GroupBy::User => "end_user",
        GroupBy::Day => "date(ts_ms / 1000, 'unixepoch')",
    };
    let sql = format!(
                "SELECT key_name, team, {group}, sum(attempt = 1), count(*), sum(input_tokens),
                sum(cached_input_tokens), sum(output_tokens), sum(reasoning_tokens), sum(cost_micros),
                sum(cache_write_tokens), sum(cache_saved_micros)
                  FROM ledger WHERE ts_ms >= ?1 AND ts_ms < ?2 GROUP BY 1, 2, 3"
    );
    let mut stmt = conn.prepare(&sql).map_err(&sqlite)?;
    let rows = stmt
        .query_map(params![w.from_ms, w.to_ms], |r| {
            Ok(Sum {
                key: r.get(0)?,
                team: r.get(1)?,
                group: r.get(2)?,
                requests: r.get(3)?,
                attempts: r.get(4)?,
                input_tokens: r.get(5)?,
                cached_input_tokens: r.get(6)?,
                output_tokens: r.get(7)?,
                reasoning_tokens: r.get(8)?,
                cost_micros: r.get(9)?,
                cache_write_tokens: r.get(10)?,
                cache_saved_micros: r.get(11)?,
            })
        })
        .map_err(&sqlite)?;
    rows.collect::<Result<Vec<_>, _>>().map_err(&sqlite)
}

/// One request's ledger rows by attempt, with the rates that priced each. Blocking.
pub(super) fn charges(path: &Path, request_id: &str) -> Result<Vec<Value>, StoreError> {
    let sqlite = sqlite_err(path);
    let conn = read_only(path)?;
    let mut stmt = conn
        .prepare(&format!(
            "SELECT {}, p.rates FROM ledger l LEFT JOIN prices p ON p.version = l.price_version
             WHERE l.request_id = ?1 ORDER BY l.attempt",
            super::ledger::COLUMNS
        ))
        .map_err(&sqlite)?;
    let rows = stmt
        .query_map(params![request_id], |r| {
            let rates: Option<String> = r.get(17)?;
            Ok(super::ledger::charge_json(super::ledger::ChargeRow {
                attempt: r.get(0)?,
                ts_ms: r.get(1)?,
                key_name: r.get(2)?,
                channel: r.get(3)?,
                credential: r.get(4)?,
                model: r.get(5)?,
                upstream_model: r.get(6)?,
                tokens: [r.get(7)?, r.get(8)?, r.get(9)?, r.get(10)?, r.get(11)?],
                cost_micros: r.get(12)?,
                price_version: r.get(13)?,
                outcome: r.get(14)?,
                estimated: r.get(15)?,
                first_choice_micros: r.get(16)?,
                rates: rates.and_then(|t| serde_json::from_str(&t).ok()),
            }))
        })
        .map_err(&sqlite)?;
    rows.collect::<Result<Vec<_>, _>>().map_err(&sqlite)
}

#[cfg(test)]
mod tests {
    use super::super::RequestLog;
    use super::*;

    #[tokio::test]
    async fn rows_written_off_thread_are_read_back_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        let log = RequestLog::open(&dir.path().join("log.db"), 16, None).unwrap();
        for i in 0..3 {
            log.record(LogRow {
                id: format!("r{i}"),
                ts_ms: 1000 + i,
                endpoint: "chat".into(),
                status: 200,
                outcome: "ok".into(),
                attempts: "[]".into(),
                output_tokens: Some(5),
                ..LogRow::default()
            });
        }
        log.flush().await;
        let rows = log.recent(10).await.unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0]["id"], "r2");
        assert_eq!(rows[0]["output_tokens"], 5);
        assert!(log.alive());
        assert_eq!(log.dropped(), 0);
    }

    #[test]
    fn a_full_queue_drops_and_counts_instead_of_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let log = RequestLog::open(&dir.path().join("log.db"), 1, None).unwrap();
        for i in 0..10_000 {
            log.record(LogRow {
                id: format!("r{i}"),
                endpoint: "chat".into(),
                attempts: "[]".into(),
                ..LogRow::default()
            });
        }
        // A one-slot queue cannot keep up with 10k rows sent without pause.
        assert!(log.dropped() > 0);
    }

    #[tokio::test]
    async fn a_log_from_before_a_new_column_is_migrated_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        {
            // The first schema (SCHEMA itself: later columns come by MIGRATIONS).
            let c = Connection::open(&path).unwrap();
            c.execute_batch(SCHEMA).unwrap();
            assert!(
                !c.prepare(
                    "SELECT 1 FROM pragma_table_info('requests') WHERE name = 'translation'"
                )
                .unwrap()
                .exists([])
                .unwrap()
            );
        }
        let log = RequestLog::open(&path, 4, None).unwrap();
        log.record(LogRow {
            id: "r".into(),
            endpoint: "chat".into(),
            attempts: "[]".into(),
            translation: Some("lossless".into()),
            ..LogRow::default()
        });
        log.flush().await;
        assert_eq!(log.recent(1).await.unwrap()[0]["translation"], "lossless");
    }

    /// A deep page and each indexed filter start at the cursor in an index: no page scans the
    /// table from the newest row (what keeps a page at a million rows as fast as the first).
    #[test]
    fn every_page_enters_an_index_at_its_cursor() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir.path().join("log.db")).unwrap();
        let before = Some(Cursor { ts_ms: 5, seq: 3 });
        let text = |s: &str| Some(s.to_string());
        let base = LogQuery {
            limit: 50,
            before,
            ..LogQuery::default()
        };
        let cases = [
            ("requests_ts", base.clone()),
            (
                "requests_key_ts",
                LogQuery {
                    key: text("k"),
                    ..base.clone()
                },
            ),
            (
                "requests_channel_ts",
                LogQuery {
                    channel: text("c"),
                    ..base.clone()
                },
            ),
            (
                "requests_model_ts",
                LogQuery {
                    model: text("m"),
                    ..base.clone()
                },
            ),
            (
                "requests_ts",
                LogQuery {
                    hide_test: true,
                    failed_over: true,
                    ..base.clone()
                },
            ),
        ];
        for (index, q) in cases {
            let (sql, params) = q.sql(Dialect::Sqlite);
            let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
            let plan: Vec<String> = stmt
                .query_map(bind(&params).as_slice(), |r| r.get::<_, String>(3))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let search = format!("SEARCH requests USING INDEX {index} (");
            assert!(
                plan.iter().any(|p| p.starts_with(&search)),
                "{q:?}: {plan:?}"
            );
            assert!(
                !plan.iter().any(|p| p.contains("TEMP B-TREE")),
                "{q:?}: no sort: {plan:?}"
            );
        }
    }
}
