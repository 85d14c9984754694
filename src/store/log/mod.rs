//! The request log: one row per request, written off the hot path. `record` puts the row in a
//! bounded queue and never waits (a full queue drops the row and counts it); one writer drains
//! the queue every tick and writes the tick's rows as one batch, to whichever backend holds the
//! log: its own SQLite file (`sqlite.rs`, a writer thread) or, with a PostgreSQL store, the
//! store's database (`postgres.rs`, a tokio task). Rows older than the store's retention are
//! pruned in batches by a background task ([`RequestLog::keep_for`]).

mod journal;
pub mod ledger;
mod postgres;
pub mod query;
mod sqlite;

pub use journal::JournalError;
pub use ledger::{Charge, GroupBy, Sum, Window};
pub use query::{Cursor, LogQuery, Sample};

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError, sync_channel};
use std::time::Duration;

use journal::Journal;
use serde_json::Value;
use sqlx::postgres::PgPool;
use tokio::sync::oneshot;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("request log {path}: {source}")]
    Sqlite {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("request log (postgres): {0}")]
    Postgres(#[from] sqlx::Error),
    #[error("request log writer could not start: {0}")]
    Spawn(std::io::Error),
    #[error("the request log's PostgreSQL writer needs a tokio runtime")]
    NoRuntime,
    #[error("a request log task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    #[error(transparent)]
    Journal(#[from] JournalError),
}

/// One request, as the log keeps it. Nothing in it is prompt or completion text, a header
/// value or a client address: names from the config, counts, times, classes and a session hash.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct LogRow {
    pub id: String,
    pub ts_ms: i64,
    pub key_name: Option<String>,
    pub endpoint: Cow<'static, str>,
    pub requested_model: Option<String>,
    pub served_model: Option<String>,
    pub channel: Option<String>,
    pub status: u16,
    /// `ok`, an outcome class, or the gateway's own error code.
    pub outcome: String,
    /// JSON array of attempts (channel, model, status, reason, latency_ms).
    pub attempts: String,
    pub stream: bool,
    pub total_ms: u64,
    pub ttfb_ms: Option<u64>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    /// Output tokens per second after the first byte (the rate the user saw).
    pub tokens_per_s: Option<f64>,
    /// `lossless`, or `lossy (<what>)` when the request crossed protocols.
    pub translation: Option<String>,
    /// A short hash of the request's session id (never the id).
    pub session: Option<String>,
    /// What the request did to its session's binding: `new`, `kept`, `moved`.
    pub affinity: Option<Cow<'static, str>>,
    /// Prompt tokens as sent, when the request was counted (trimming or context fallbacks).
    pub prompt_tokens: Option<u64>,
    /// Whole groups of history trimming removed.
    pub trimmed_turns: Option<u64>,
    /// What the request cost, every attempt's charge summed (`None`: no upstream call).
    pub cost_micros: Option<u64>,
    /// Upstream calls made (more than one: the request failed over).
    pub attempt_count: u32,
    /// Sent with `x-switchyard-test`: test traffic, which log readers may hide.
    pub test: bool,
    /// How the first try was chosen: `{strategy}.{why}` (`latency.fastest`, `session.bound`).
    pub route_reason: Option<Cow<'static, str>>,
    /// What the response cache did: `hit`, `miss`, `bypass`.
    pub cache: Option<Cow<'static, str>>,
    /// Bytes of what the client sent and was answered (an MCP tool call's arguments and result).
    pub request_bytes: Option<u64>,
    pub response_bytes: Option<u64>,
    /// With `[log] mcp_bodies`: an MCP tool call's arguments and result, as JSON.
    pub bodies: Option<String>,
    /// The key's team, and the end user the request named: each ledger row carries them.
    pub team: Option<std::sync::Arc<str>>,
    pub end_user: Option<std::sync::Arc<str>>,
    /// The ledger's rows for this request, one per upstream attempt.
    pub charges: Vec<Charge>,
}

enum LogMsg {
    Row(Box<LogRow>),
    /// A graceful stop: like `Flush`, and the journal is closed after the write.
    Close(oneshot::Sender<()>),
    /// Answered once every row queued before it is written.
    Flush(oneshot::Sender<()>),
}

/// Where the rows go.
enum Backend {
    Sqlite(PathBuf),
    Postgres(PgPool),
}

pub struct RequestLog {
    tx: SyncSender<LogMsg>,
    journal: Option<Arc<Journal>>,
    backend: Backend,
    dropped: AtomicU64,
    alive: Arc<AtomicBool>,
}

/// How often the writer wakes to drain the queue. Waking per row would cost a context switch
/// and a transaction per request on the gateway's cores; a tick batches them.
const TICK: Duration = Duration::from_millis(50);

/// Rows deleted per statement when pruning: short transactions, so writers never wait long.
const PRUNE_BATCH: i64 = 1000;

/// How often the retention task prunes (and once when it starts).
pub const PRUNE_EVERY: Duration = Duration::from_secs(300);

impl RequestLog {
    /// Opens (creating if needed) the SQLite log at `path` and starts its writer thread;
    /// with `journal`, each row is journaled there first ([`journal`]).
    pub fn open(
        path: &Path,
        capacity: usize,
        journal: Option<&Path>,
    ) -> Result<RequestLog, StoreError> {
        let conn = sqlite::open(path)?;
        let journal = open_journal(journal)?;
        let (tx, rx) = sync_channel(capacity);
        let alive = Arc::new(AtomicBool::new(true));
        let flag = alive.clone();
        let shown = path.to_path_buf();
        let writer_journal = journal.clone();
        std::thread::Builder::new()
            .name("switchyard-log".into())
            .spawn(move || {
                let _alive = AliveGuard(flag);
                sqlite::writer(conn, rx, writer_journal.as_deref(), &shown);
            })
            .map_err(StoreError::Spawn)?;
        Ok(RequestLog::with(
            tx,
            journal,
            Backend::Sqlite(path.to_path_buf()),
            alive,
        ))
    }

    /// The log in a PostgreSQL store (its `requests` table, made by the store's migrations),
    /// written by a task on the current tokio runtime.
    pub fn postgres(
        pool: PgPool,
        capacity: usize,
        journal: Option<&Path>,
    ) -> Result<RequestLog, StoreError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| StoreError::NoRuntime)?;
        let journal = open_journal(journal)?;
        let (tx, rx) = sync_channel(capacity);
        let alive = Arc::new(AtomicBool::new(true));
        let flag = alive.clone();
        let writer_pool = pool.clone();
        let writer_journal = journal.clone();
        runtime.spawn(async move {
            let _alive = AliveGuard(flag);
            postgres::writer(writer_pool, rx, writer_journal).await;
        });
        Ok(RequestLog::with(
            tx,
            journal,
            Backend::Postgres(pool),
            alive,
        ))
    }

    fn with(
        tx: SyncSender<LogMsg>,
        journal: Option<Arc<Journal>>,
        backend: Backend,
        alive: Arc<AtomicBool>,
    ) -> RequestLog {
        RequestLog {
            tx,
            journal,
            backend,
            dropped: AtomicU64::new(0),
            alive,
        }
    }

    /// Journals the row (when the log has a journal) and queues it; never blocks. A full
    /// queue drops the row and counts it (a journaled row is written later from the file).
    pub fn record(&self, row: LogRow) {
        match &self.journal {
            Some(j) => j.append(row, |row| self.queue(row)),
            None => {
                self.queue(row);
            }
        }
    }

    /// False when the row was dropped.
    fn queue(&self, row: LogRow) -> bool {
        match self.tx.try_send(LogMsg::Row(Box::new(row))) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_power_of_two() {
                    tracing::warn!(
                        dropped = n,
                        "request log queue full or writer gone; rows dropped"
                    );
                }
                false
            }
        }
    }

    /// Waits until every row queued so far is written (tests, shutdown). Waits for queue room.
    pub async fn flush(&self) {
        self.send_and_wait(LogMsg::Flush).await;
    }

    /// A graceful stop's flush: every queued row written, then the journal's segment deleted
    /// (when the store took every row), so the next start has nothing to write again.
    pub async fn close(&self) {
        self.send_and_wait(LogMsg::Close).await;
    }

    async fn send_and_wait(&self, msg: fn(oneshot::Sender<()>) -> LogMsg) {
        let (ack, done) = oneshot::channel();
        let tx = self.tx.clone();
        let sent = tokio::task::spawn_blocking(move || tx.send(msg(ack)).is_ok()).await;
        if matches!(sent, Ok(true)) {
            let _ = done.await;
        }
    }

    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    pub fn alive(&self) -> bool {
        self.alive.load(Ordering::Relaxed)
    }

    /// Which backend holds the rows: `sqlite` or `postgres`.
    pub fn backend(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }

    /// The most recent rows, newest first, in the same JSON shape on both backends.
    pub async fn recent(&self, limit: u32) -> Result<Vec<Value>, StoreError> {
        let q = LogQuery {
            limit,
            ..LogQuery::default()
        };
        Ok(self.page(q).await?.0)
    }

    /// A page of rows matching `q`, newest first, and the cursor of the next page when this
    /// one is full.
    pub async fn page(&self, q: LogQuery) -> Result<(Vec<Value>, Option<Cursor>), StoreError> {
        match &self.backend {
            Backend::Sqlite(path) => {
                let path = path.clone();
                tokio::task::spawn_blocking(move || sqlite::page(&path, &q)).await?
            }
            Backend::Postgres(pool) => postgres::page(pool, &q).await,
        }
    }

    /// The newest `limit` requests since `since_ms` (test traffic left out), for the
    /// performance figures.
    pub async fn samples(&self, since_ms: i64, limit: u32) -> Result<Vec<Sample>, StoreError> {
        match &self.backend {
            Backend::Sqlite(path) => {
                let path = path.clone();
                tokio::task::spawn_blocking(move || sqlite::samples(&path, since_ms, limit)).await?
            }
            Backend::Postgres(pool) => postgres::samples(pool, since_ms, limit).await,
        }
    }

    /// The ledger's sums by `(key, group)` over `w`.
    pub async fn usage(&self, by: GroupBy, w: Window) -> Result<Vec<Sum>, StoreError> {
        match &self.backend {
            Backend::Sqlite(path) => {
                let path = path.clone();
                tokio::task::spawn_blocking(move || sqlite::usage(&path, by, w)).await?
            }
            Backend::Postgres(pool) => postgres::usage(pool, by, w).await,
        }
    }

    /// One request's ledger rows, by attempt, each with the rates that priced it.
    pub async fn charges(&self, request_id: &str) -> Result<Vec<Value>, StoreError> {
        match &self.backend {
            Backend::Sqlite(path) => {
                let (path, id) = (path.clone(), request_id.to_string());
                tokio::task::spawn_blocking(move || sqlite::charges(&path, &id)).await?
            }
            Backend::Postgres(pool) => postgres::charges(pool, request_id).await,
        }
    }

    /// Deletes every request row older than `cutoff_ms` (ms since the epoch), and every
    /// ledger row older than `ledger_cutoff_ms`, [`PRUNE_BATCH`] rows a statement; returns how
    /// many went.
    pub async fn prune(&self, cutoff_ms: i64, ledger_cutoff_ms: i64) -> Result<u64, StoreError> {
        match &self.backend {
            Backend::Sqlite(path) => {
                let path = path.clone();
                tokio::task::spawn_blocking(move || {
                    Ok(sqlite::prune(&path, "requests", cutoff_ms)?
                        + sqlite::prune(&path, "ledger", ledger_cutoff_ms)?)
                })
                .await?
            }
            Backend::Postgres(pool) => Ok(postgres::prune(pool, "requests", cutoff_ms).await?
                + postgres::prune(pool, "ledger", ledger_cutoff_ms).await?),
        }
    }

    /// Prunes rows older than `retention` now and then `every` ([`PRUNE_EVERY`] in the
    /// gateway), for as long as the returned task runs.
    pub fn keep_for(
        self: &Arc<Self>,
        retention: Duration,
        ledger_retention: Duration,
        every: Duration,
    ) -> tokio::task::JoinHandle<()> {
        let log = self.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(every);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let now = crate::clock::unix_ms();
                let cutoff = |d: Duration| now.saturating_sub(d.as_millis() as i64);
                match log.prune(cutoff(retention), cutoff(ledger_retention)).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(rows = n, "request log rows past retention pruned"),
                    Err(e) => tracing::error!(error = %e, "pruning the request log failed"),
                }
            }
        })
    }
}

struct AliveGuard(Arc<AtomicBool>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

fn open_journal(dir: Option<&Path>) -> Result<Option<Arc<Journal>>, StoreError> {
    Ok(dir.map(Journal::open).transpose()?.map(Arc::new))
}

/// What a writer drained from its queue in one tick.
struct Drained {
    /// Every sender is gone: the writer's last tick.
    closed: bool,
    /// A graceful stop asked for the last write ([`RequestLog::close`]).
    closing: bool,
}

impl Drained {
    /// The tick after which the journal is closed.
    fn last(&self) -> bool {
        self.closed || self.closing
    }
}

/// Takes everything queued into `batch` and `acks`.
fn drain(
    rx: &Receiver<LogMsg>,
    batch: &mut Vec<LogRow>,
    acks: &mut Vec<oneshot::Sender<()>>,
) -> Drained {
    let mut closing = false;
    loop {
        match rx.try_recv() {
            Ok(LogMsg::Row(r)) => batch.push(*r),
            Ok(LogMsg::Flush(ack)) => acks.push(ack),
            Ok(LogMsg::Close(ack)) => {
                acks.push(ack);
                closing = true;
            }
            Err(TryRecvError::Empty) => {
                return Drained {
                    closed: false,
                    closing,
                };
            }
            Err(TryRecvError::Disconnected) => {
                return Drained {
                    closed: true,
                    closing,
                };
            }
        }
    }
}
