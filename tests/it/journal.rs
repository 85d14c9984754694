//! The request log's journal: a `switchyard serve` process killed with SIGKILL right after its
//! last answer loses no row it answered. The rows come back from its journal segment, written
//! by the process that takes its place or by a live replica sharing the directory. Rows the
//! full queue dropped are written from the journal too.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use switchyard::store::{Db, LogRow, RequestLog};

use crate::support::*;

fn config(dir: &Path, upstream: &str, log_extra: &str) -> std::path::PathBuf {
    let path = dir.join("switchyard.toml");
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_token = \"{ADMIN}\"\n\n\
         [log]\nsqlite_path = \"{}\"\n{log_extra}\n\n\
         [[keys]]\nname = \"team-a\"\nkey = \"{KEY}\"\n\n{}",
        dir.join("log.db").display(),
        openai_channel("a", upstream, 1, "")
    );
    std::fs::write(&path, text).expect("config");
    path
}

/// `n` requests to `url`, 8 at a time, every other one streamed; the ids of those answered
/// in full (a stream through `[DONE]`).
async fn answered(url: &str, n: usize) -> Vec<String> {
    let mut set = tokio::task::JoinSet::new();
    let mut ids = Vec::new();
    for i in 0..n {
        if set.len() == 8
            && let Some(id) = set.join_next().await
        {
            ids.extend(id.expect("request task"));
        }
        let rb = client()
            .post(format!("{url}/v1/chat/completions"))
            .bearer_auth(KEY)
            .json(&chat_body(i % 2 == 1));
        set.spawn(async move {
            let resp = rb.send().await.ok()?;
            let id = header(&resp, "x-request-id").to_string();
            let ok = resp.status() == 200;
            let body = resp.text().await.ok()?;
            (ok && (i % 2 == 0 || body.contains("data: [DONE]"))).then_some(id)
        });
    }
    while let Some(id) = set.join_next().await {
        ids.extend(id.expect("request task"));
    }
    assert_eq!(ids.len(), n, "every request answered in full");
    ids
}

/// How many log rows and ledger rows each of `ids` has in the SQLite log at `db`.
fn rows(db: &Path, ids: &[String]) -> HashMap<String, (i64, i64)> {
    let conn = rusqlite::Connection::open(db).expect("log");
    let count =
        |sql: &str, id: &str| -> i64 { conn.query_row(sql, [id], |r| r.get(0)).unwrap_or(0) };
    ids.iter()
        .map(|id| {
            let logged = count("SELECT count(*) FROM requests WHERE id = ?1", id);
            let charged = count("SELECT count(*) FROM ledger WHERE request_id = ?1", id);
            (id.clone(), (logged, charged))
        })
        .collect()
}

/// Waits until every one of `ids` has exactly one log row and one ledger row.
async fn all_logged(db: &Path, ids: &[String], within: Duration) {
    until("every answered request's rows", within, async || {
        let missing: Vec<_> = rows(db, ids)
            .into_iter()
            .filter(|(_, n)| *n != (1, 1))
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{} without their one row: {missing:?}",
                missing.len()
            ))
        }
    })
    .await;
}

/// The journal segments in `dir` (the files a live or dead process appends rows to).
fn segments(dir: &Path) -> Vec<String> {
    let journal = dir.join("log.db.journal");
    let mut names: Vec<String> = std::fs::read_dir(journal)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[tokio::test]
async fn a_gateway_killed_with_sigkill_and_restarted_loses_no_row_it_answered() {
    let up = mock(text_spec("ok")).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = config(dir.path(), &up.base_url(), "");
    let (killed, url) = spawn_serve(&path, dir.path()).await;
    let ids = answered(&url, 64).await;
    // SIGKILL at once: the rows of the last ~50 ms are still queued, not yet in the file.
    drop(killed);
    let dead = segments(dir.path());
    assert_eq!(dead.len(), 1, "the killed process's segment: {dead:?}");

    let (_again, _) = spawn_serve(&path, dir.path()).await;
    all_logged(&dir.path().join("log.db"), &ids, Duration::from_secs(10)).await;
    // Written, the dead process's segment is gone; the new process has its own.
    until(
        "the dead segment deleted",
        Duration::from_secs(5),
        async || {
            let now = segments(dir.path());
            match now.len() == 1 && now != dead {
                true => Ok(()),
                false => Err(format!("{now:?}")),
            }
        },
    )
    .await;
}

#[tokio::test]
async fn a_live_replica_writes_the_rows_of_one_killed_beside_it() {
    let up = mock(text_spec("ok")).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = config(dir.path(), &up.base_url(), "");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    for d in [&a, &b] {
        std::fs::create_dir_all(d).expect("dir");
    }
    let (_survivor, _) = spawn_serve(&path, &a).await;
    let (killed, url) = spawn_serve(&path, &b).await;
    let ids = answered(&url, 64).await;
    drop(killed);
    // Never restarted: the survivor adopts the orphaned segment at its next look (2 s).
    all_logged(&dir.path().join("log.db"), &ids, Duration::from_secs(10)).await;
}

#[tokio::test]
async fn rows_the_full_queue_dropped_are_written_from_the_journal() {
    let up = mock(text_spec("ok")).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = config(dir.path(), &up.base_url(), "queue_capacity = 1");
    let (_gw, url) = spawn_serve(&path, dir.path()).await;
    let ids = answered(&url, 96).await;
    let dropped = until(
        "rows dropped by the queue",
        Duration::from_secs(5),
        async || {
            let text = client()
                .get(format!("{url}/metrics"))
                .bearer_auth(ADMIN)
                .send()
                .await
                .map_err(|e| e.to_string())?
                .text()
                .await
                .map_err(|e| e.to_string())?;
            let n: f64 = text
                .lines()
                .find_map(|l| l.strip_prefix("switchyard_log_dropped_total "))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0.0);
            if n > 0.0 {
                Ok(n)
            } else {
                Err(text.len().to_string())
            }
        },
    )
    .await;
    assert!(dropped > 0.0);
    all_logged(&dir.path().join("log.db"), &ids, Duration::from_secs(15)).await;
}

fn logged(id: &str, model: &str) -> LogRow {
    LogRow {
        id: id.into(),
        ts_ms: 1,
        endpoint: "chat".into(),
        requested_model: Some(model.into()),
        status: 200,
        outcome: "ok".into(),
        attempts: "[]".into(),
        ..LogRow::default()
    }
}

/// The `requested_model` of every row in PostgreSQL's log, by id.
async fn pg_models(pool: &sqlx::PgPool) -> HashMap<String, String> {
    sqlx::query_as::<_, (String, String)>("SELECT id, requested_model FROM requests")
        .fetch_all(pool)
        .await
        .expect("requests")
        .into_iter()
        .collect()
}

#[tokio::test]
async fn a_row_postgresql_refuses_holds_back_no_other_row() {
    let pg = Postgres::fresh("journal_refused").await;
    let Db::Postgres(pool) = Db::open(&pg.url).await.expect("store") else {
        unreachable!("a postgres:// URL opens PostgreSQL")
    };
    // A row PostgreSQL refuses for what it holds (SQLSTATE 23514), as the operator's own
    // constraint could.
    sqlx::query(
        "ALTER TABLE requests ADD CONSTRAINT no_refused CHECK (requested_model <> 'refused')",
    )
    .execute(&pool)
    .await
    .expect("constraint");
    let dir = tempfile::tempdir().expect("temp dir");
    let journal = dir.path().join("journal");
    let log = RequestLog::postgres(pool.clone(), 8192, Some(&journal)).expect("log");
    // One batch: a NUL in a model's name (PostgreSQL's text holds none), a refused row, and
    // rows that are fine.
    for (id, model) in [
        ("a", "m"),
        ("b", "with\0nul"),
        ("c", "refused"),
        ("d", "m"),
        ("e", "m"),
    ] {
        log.record(logged(id, model));
    }
    log.flush().await;
    let models = pg_models(&pool).await;
    let want: HashMap<String, String> =
        [("a", "m"), ("b", "with\u{FFFD}nul"), ("d", "m"), ("e", "m")]
            .into_iter()
            .map(|(id, m)| (id.to_string(), m.to_string()))
            .collect();
    assert_eq!(models, want);
    // Later rows go in, and the refused one is not tried again and again.
    log.record(logged("f", "m"));
    log.flush().await;
    assert_eq!(pg_models(&pool).await.len(), 5);
    assert!(log.alive());
}

#[tokio::test]
async fn a_segment_of_an_unknown_format_is_set_aside_not_deleted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let journal = dir.path().join("journal");
    std::fs::create_dir_all(&journal).expect("journal dir");
    let foreign = journal.join("1-1-0.rows");
    std::fs::write(&foreign, b"SYJRNL99 rows of a later version").expect("segment");
    let log = RequestLog::open(&dir.path().join("log.db"), 8192, Some(&journal)).expect("log");
    let kept = journal.join("1-1-0.unknown");
    until(
        "the segment set aside",
        Duration::from_secs(5),
        async || match (kept.exists(), foreign.exists()) {
            (true, false) => Ok(()),
            seen => Err(format!("{seen:?}")),
        },
    )
    .await;
    // A few ticks later it is still there, as it was, for the operator.
    log.record(logged("a", "m"));
    log.flush().await;
    log.flush().await;
    let bytes = std::fs::read(&kept).expect("the set-aside segment");
    assert_eq!(bytes, b"SYJRNL99 rows of a later version");
}
