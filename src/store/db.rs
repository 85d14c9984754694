//! The store's database: SQLite (one file, embedded) or PostgreSQL (shared by many replicas),
//! opened from `[store] url` and migrated at start-up by sqlx's migrator: versioned files under
//! `migrations/<backend>/`, embedded in the binary, applied in order (on PostgreSQL under an
//! advisory lock, so replicas may start together). A database a newer binary has migrated is
//! refused with a clear error. Queries are written at run time (sqlx's compile-time macros
//! cannot serve two backends in one build), and one conformance suite runs on both.

use std::str::FromStr;

use sqlx::migrate::{MigrateError, Migrator};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};

static SQLITE: Migrator = sqlx::migrate!("migrations/sqlite");
static POSTGRES: Migrator = sqlx::migrate!("migrations/postgres");

/// Runs `$body` with `$p` bound to the backend's pool (each arm is type-checked for its own
/// backend: queries are written once, for both).
macro_rules! on {
    ($db:expr, $p:ident => $body:expr) => {
        match $db {
            Db::Sqlite($p) => $body,
            Db::Postgres($p) => $body,
        }
    };
}
pub(crate) use on;

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("store.url: expected sqlite://<file> or postgres://user:pass@host/db")]
    Url,
    #[error("the store cannot be opened: {0}")]
    Connect(String),
    #[error(
        "the store was migrated by a newer Switchyard (its migration {0} is unknown to this binary, and changed what this binary reads): run the newer binary, or restore the backup taken before the upgrade (docs/upgrading.md)"
    )]
    Newer(i64),
    #[error("migrating the store failed: {0}")]
    Migrate(String),
    #[error("the store failed: {0}")]
    Query(#[from] sqlx::Error),
}

/// An open, migrated store.
#[derive(Debug, Clone)]
pub enum Db {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// One migration as the store knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationState {
    pub version: i64,
    pub description: String,
    pub applied: bool,
    /// Applied by a newer binary: this one does not have it.
    pub unknown: bool,
}

impl Db {
    /// Opens (creating an SQLite file if there is none) and migrates the store at `url`.
    pub async fn open(url: &str) -> Result<Db, DbError> {
        let db = Db::connect(url).await?;
        if db.newer_but_readable().await? {
            return Ok(db);
        }
        let migrated = match &db {
            Db::Sqlite(p) => SQLITE.run(p).await,
            Db::Postgres(p) => POSTGRES.run(p).await,
        };
        migrated.map_err(|e| match e {
            MigrateError::VersionMissing(v) => DbError::Newer(v),
            other => DbError::Migrate(other.to_string()),
        })?;
        Ok(db)
    }

    /// A store a newer binary migrated: readable by this one when every migration it lacks
    /// only added (a contract migration raises `meta.readable_by` to its own version), so a
    /// one-step rollback serves; refused otherwise. `false`: not newer, migrate as usual.
    async fn newer_but_readable(&self) -> Result<bool, DbError> {
        let all = self.migrations().await?;
        let Some(newest) = all.iter().filter(|m| m.unknown).map(|m| m.version).max() else {
            return Ok(false);
        };
        let known = all
            .iter()
            .filter(|m| !m.unknown)
            .map(|m| m.version)
            .max()
            .unwrap_or(0);
        let floor = self
            .meta("readable_by")
            .await?
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(0);
        if floor > known || all.iter().any(|m| !m.unknown && !m.applied) {
            return Err(DbError::Newer(newest));
        }
        tracing::warn!(
            newest,
            "the store was migrated by a newer Switchyard; its changes only added, so this binary serves it as is (upgrade again soon)"
        );
        Ok(true)
    }

    /// Connects without migrating (what `switchyard migrate status` reads).
    pub async fn connect(url: &str) -> Result<Db, DbError> {
        let connect = |e: sqlx::Error| DbError::Connect(redacted(&e.to_string(), url));
        if url.starts_with("sqlite:") {
            let opts = SqliteConnectOptions::from_str(url)
                .map_err(|_| DbError::Url)?
                .create_if_missing(true)
                // Readers never wait on the writer; a write waits its turn, briefly.
                .journal_mode(SqliteJournalMode::Wal)
                .busy_timeout(std::time::Duration::from_secs(5));
            let pool = SqlitePoolOptions::new()
                .max_connections(4)
                .connect_with(opts)
                .await
                .map_err(connect)?;
            return Ok(Db::Sqlite(pool));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let opts = PgConnectOptions::from_str(url).map_err(|_| DbError::Url)?;
            let pool = PgPoolOptions::new()
                .max_connections(8)
                .acquire_timeout(std::time::Duration::from_secs(5))
                .connect_with(opts)
                .await
                .map_err(connect)?;
            return Ok(Db::Postgres(pool));
        }
        Err(DbError::Url)
    }

    /// Every migration this binary knows, and which the store has applied.
    pub async fn migrations(&self) -> Result<Vec<MigrationState>, DbError> {
        let sql = "SELECT version FROM _sqlx_migrations WHERE success ORDER BY version";
        // A store never migrated has no table yet: nothing is applied.
        let applied: Vec<i64> =
            on!(self, p => sqlx::query_scalar(sql).fetch_all(p).await.unwrap_or_default());
        let known = match self {
            Db::Sqlite(_) => &SQLITE,
            Db::Postgres(_) => &POSTGRES,
        };
        let mut out: Vec<MigrationState> = known
            .iter()
            .map(|m| MigrationState {
                version: m.version,
                description: m.description.to_string(),
                applied: applied.contains(&m.version),
                unknown: false,
            })
            .collect();
        // Applied by a newer binary: listed, so `migrate status` says so.
        for v in applied
            .iter()
            .filter(|v| !known.iter().any(|m| m.version == **v))
        {
            out.push(MigrationState {
                version: *v,
                description: "(unknown to this binary: a newer Switchyard applied it)".into(),
                applied: true,
                unknown: true,
            });
        }
        Ok(out)
    }

    /// A setting of the store itself (`meta`), if set.
    pub async fn meta(&self, k: &str) -> Result<Option<String>, DbError> {
        let sql = "SELECT v FROM meta WHERE k = $1";
        Ok(on!(self, p => sqlx::query_scalar(sql).bind(k).fetch_optional(p).await?))
    }

    /// Runs a statement with text parameters; returns the rows it changed.
    pub(crate) async fn exec(&self, sql: &'static str, args: &[&str]) -> Result<u64, DbError> {
        Ok(on!(self, p => {
            let mut q = sqlx::query(sql);
            for a in args {
                q = q.bind(*a);
            }
            q.execute(p).await?.rows_affected()
        }))
    }

    /// The backend's name, for `describe` and the logs.
    pub fn backend(&self) -> &'static str {
        match self {
            Db::Sqlite(_) => "sqlite",
            Db::Postgres(_) => "postgres",
        }
    }
}

/// An error message with the URL's password taken out, wherever the driver quoted it.
fn redacted(message: &str, url: &str) -> String {
    match reqwest::Url::parse(url)
        .ok()
        .and_then(|u| u.password().map(str::to_string))
    {
        Some(pw) if !pw.is_empty() => message.replace(&pw, "***"),
        _ => message.to_string(),
    }
}
