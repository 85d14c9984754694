//! The request log in its own SQLite file: the schema (columns added since the first are
//! migrated on open), the writer thread, and the blocking reads and prunes the log runs on the
//! blocking pool.

use std::path::Path;
use std::sync::mpsc::Receiver;

use rusqlite::{Connection, OpenFlags, params};
use serde_json::{Value, json};

use super::{LogMsg, LogRow, PRUNE_BATCH, StoreError, TICK, drain};

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

/// Columns added after the first schema, for databases created before them.
const MIGRATIONS: [(&str, &str); 5] = [
    (
        "translation",
        "ALTER TABLE requests ADD COLUMN translation TEXT",
    ),
    ("session", "ALTER TABLE requests ADD COLUMN session TEXT"),
    ("affinity", "ALTER TABLE requests ADD COLUMN affinity TEXT"),
    (
        "prompt_tokens",
        "ALTER TABLE requests ADD COLUMN prompt_tokens INTEGER",
    ),
    (
        "trimmed_turns",
        "ALTER TABLE requests ADD COLUMN trimmed_turns INTEGER",
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
    for (column, alter) in MIGRATIONS {
        let present: bool = conn
            .prepare("SELECT 1 FROM pragma_table_info('requests') WHERE name = ?1")
            .and_then(|mut s| s.exists([column]))
            .map_err(&sqlite)?;
        if !present {
            conn.execute_batch(alter).map_err(&sqlite)?;
        }
    }
    Ok(conn)
}

/// Drains the queue every tick, one transaction per tick; exits when every sender is gone.
pub(super) fn writer(mut conn: Connection, rx: Receiver<LogMsg>, path: &Path) {
    let mut batch = Vec::new();
    let mut acks = Vec::new();
    loop {
        std::thread::sleep(TICK);
        let closed = drain(&rx, &mut batch, &mut acks);
        if !batch.is_empty()
            && let Err(e) = write_batch(&mut conn, &batch)
        {
            tracing::error!(path = %path.display(), error = %e, rows = batch.len(), "request log write failed");
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

fn write_batch(conn: &mut Connection, rows: &[LogRow]) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    {
        let mut stmt = tx.prepare_cached(
            "INSERT OR REPLACE INTO requests (id, ts_ms, key_name, endpoint, requested_model, served_model,
                channel, status, outcome, attempts, stream, total_ms, ttfb_ms, input_tokens, output_tokens, tokens_per_s,
                translation, session, affinity, prompt_tokens, trimmed_turns)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19,
                ?20, ?21)",
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
            ])?;
        }
    }
    tx.commit()
}

/// The most recent rows, newest first. Blocking: the caller runs it on the blocking pool.
pub(super) fn recent(path: &Path, limit: u32) -> Result<Vec<Value>, StoreError> {
    let sqlite = sqlite_err(path);
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(&sqlite)?;
    let mut stmt = conn
        .prepare(
            "SELECT id, ts_ms, key_name, endpoint, requested_model, served_model, channel, status,
                    outcome, attempts, stream, total_ms, ttfb_ms, input_tokens, output_tokens, tokens_per_s,
                    translation, session, affinity, prompt_tokens, trimmed_turns
             FROM requests ORDER BY ts_ms DESC, rowid DESC LIMIT ?1",
        )
        .map_err(&sqlite)?;
    let rows = stmt
        .query_map(params![limit], |r| {
            let attempts: String = r.get(9)?;
            Ok(json!({
                "id": r.get::<_, String>(0)?,
                "ts_ms": r.get::<_, i64>(1)?,
                "key_name": r.get::<_, Option<String>>(2)?,
                "endpoint": r.get::<_, String>(3)?,
                "requested_model": r.get::<_, Option<String>>(4)?,
                "served_model": r.get::<_, Option<String>>(5)?,
                "channel": r.get::<_, Option<String>>(6)?,
                "status": r.get::<_, i64>(7)?,
                "outcome": r.get::<_, String>(8)?,
                "attempts": serde_json::from_str::<Value>(&attempts).unwrap_or(Value::Null),
                "stream": r.get::<_, bool>(10)?,
                "total_ms": r.get::<_, i64>(11)?,
                "ttfb_ms": r.get::<_, Option<i64>>(12)?,
                "input_tokens": r.get::<_, Option<i64>>(13)?,
                "output_tokens": r.get::<_, Option<i64>>(14)?,
                "tokens_per_s": r.get::<_, Option<f64>>(15)?,
                "translation": r.get::<_, Option<String>>(16)?,
                "session": r.get::<_, Option<String>>(17)?,
                "affinity": r.get::<_, Option<String>>(18)?,
                "prompt_tokens": r.get::<_, Option<i64>>(19)?,
                "trimmed_turns": r.get::<_, Option<i64>>(20)?,
            }))
        })
        .map_err(&sqlite)?;
    rows.collect::<Result<Vec<_>, _>>().map_err(&sqlite)
}

/// Deletes rows older than `cutoff_ms`, [`PRUNE_BATCH`] a statement (each its own short
/// transaction, so the writer thread never waits long). Blocking.
pub(super) fn prune(path: &Path, cutoff_ms: i64) -> Result<u64, StoreError> {
    let sqlite = sqlite_err(path);
    let conn = Connection::open(path).map_err(&sqlite)?;
    let mut stmt = conn
        .prepare(
            "DELETE FROM requests WHERE rowid IN
                (SELECT rowid FROM requests WHERE ts_ms < ?1 LIMIT ?2)",
        )
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

#[cfg(test)]
mod tests {
    use super::super::RequestLog;
    use super::*;

    #[tokio::test]
    async fn rows_written_off_thread_are_read_back_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        let log = RequestLog::open(&dir.path().join("log.db"), 16).unwrap();
        for i in 0..3 {
            log.record(LogRow {
                id: format!("r{i}"),
                ts_ms: 1000 + i,
                endpoint: "chat",
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
        let log = RequestLog::open(&dir.path().join("log.db"), 1).unwrap();
        for i in 0..10_000 {
            log.record(LogRow {
                id: format!("r{i}"),
                endpoint: "chat",
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
        let log = RequestLog::open(&path, 4).unwrap();
        log.record(LogRow {
            id: "r".into(),
            endpoint: "chat",
            attempts: "[]".into(),
            translation: Some("lossless".into()),
            ..LogRow::default()
        });
        log.flush().await;
        assert_eq!(log.recent(1).await.unwrap()[0]["translation"], "lossless");
    }
}
