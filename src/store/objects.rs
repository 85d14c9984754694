//! The objects managed through the admin API, one JSON document each (in the fields of its
//! config entry, secrets already sealed), and the audit chain beside them. Every write is one
//! transaction: the object, its audit row (carrying the hash of the row before it) and the
//! config version all change together or not at all, and writers are serialised (an advisory
//! lock on PostgreSQL, an immediate transaction on SQLite) so the chain has one order.

use serde_json::Value;
use sqlx::Row;

use super::db::{Db, DbError, on};

/// An object as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    pub kind: String,
    pub name: String,
    pub body: Value,
    pub created_ms: i64,
    pub updated_ms: i64,
}

/// One admin change, as the audit keeps it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AuditRow {
    pub id: i64,
    pub ts_ms: i64,
    pub admin: String,
    pub action: String,
    pub kind: String,
    pub name: String,
    /// What changed, secrets masked by the caller.
    pub diff: Value,
    pub prev_hash: String,
    pub hash: String,
}

/// A write refused by what the store already holds.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("{kind} {name:?} already exists")]
    Exists { kind: String, name: String },
    #[error("no {kind} is named {name:?}")]
    Missing { kind: String, name: String },
    /// The Idempotency-Key was used by a write that landed first.
    #[error("this Idempotency-Key has been used")]
    Replayed,
    /// The store moved on since the change was checked: check it again.
    #[error("the store changed meanwhile")]
    Stale,
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<sqlx::Error> for WriteError {
    fn from(e: sqlx::Error) -> Self {
        WriteError::Db(DbError::Query(e))
    }
}

/// What a write does to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Create,
    Update,
    Delete,
    /// A master-key rotation: an audit row only (no object, no config version).
    Rotate,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::Update => "update",
            Action::Delete => "delete",
            Action::Rotate => "rotate",
        }
    }
}

/// A write: the object's kind and name, its new body (none for a delete), who made it and the
/// audit's diff.
pub struct Write<'a> {
    pub action: Action,
    pub kind: &'a str,
    pub name: &'a str,
    pub body: Option<&'a Value>,
    pub admin: &'a str,
    pub diff: &'a Value,
    pub now_ms: i64,
    /// A POST's Idempotency-Key and the answer to keep for it.
    pub idem: Option<Idem<'a>>,
    /// The config version the change was checked against: written only if it still is.
    pub expect_version: Option<i64>,
}

/// What a retry with the same Idempotency-Key is answered.
pub struct Idem<'a> {
    pub key: &'a str,
    /// Of the request (method, path, body): the key reused for another is refused.
    pub fingerprint: &'a str,
    pub status: u16,
    pub body: &'a str,
}

/// An answer kept for an Idempotency-Key.
#[derive(Debug, Clone)]
pub struct Kept {
    pub fingerprint: String,
    pub status: u16,
    pub body: String,
}

/// The audit row's hash: SHA-256 over the row before's hash and this row's fields, each
/// length-prefixed, hex.
pub fn audit_hash(prev: &str, w: &Write<'_>) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    let diff = w.diff.to_string();
    let ts = w.now_ms.to_string();
    for p in [
        prev,
        ts.as_str(),
        w.admin,
        w.action.as_str(),
        w.kind,
        w.name,
        &diff,
    ] {
        ctx.update(&(p.len() as u64).to_le_bytes());
        ctx.update(p.as_bytes());
    }
    crate::secret::hex(ctx.finish().as_ref())
}

fn object(row: &impl ObjectRow) -> Result<Object, sqlx::Error> {
    row.object()
}

/// Reading an object row the same way from either backend.
trait ObjectRow {
    fn object(&self) -> Result<Object, sqlx::Error>;
}

macro_rules! object_row {
    ($row:ty) => {
        impl ObjectRow for $row {
            fn object(&self) -> Result<Object, sqlx::Error> {
                let body: String = self.try_get("body")?;
                Ok(Object {
                    kind: self.try_get("kind")?,
                    name: self.try_get("name")?,
                    body: serde_json::from_str(&body)
                        .map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
                    created_ms: self.try_get("created_ms")?,
                    updated_ms: self.try_get("updated_ms")?,
                })
            }
        }
    };
}
object_row!(sqlx::sqlite::SqliteRow);
object_row!(sqlx::postgres::PgRow);

impl Db {
    /// Every object of a kind, by name.
    pub async fn objects(&self, kind: &str) -> Result<Vec<Object>, DbError> {
        let sql = "SELECT kind, name, body, created_ms, updated_ms FROM objects WHERE kind = $1 ORDER BY name";
        Ok(on!(self, p => {
            let rows = sqlx::query(sql).bind(kind).fetch_all(p).await?;
            rows.iter().map(object).collect::<Result<Vec<_>, _>>()?
        }))
    }

    pub async fn object(&self, kind: &str, name: &str) -> Result<Option<Object>, DbError> {
        let sql = "SELECT kind, name, body, created_ms, updated_ms FROM objects WHERE kind = $1 AND name = $2";
        Ok(on!(self, p => {
            let row = sqlx::query(sql).bind(kind).bind(name).fetch_optional(p).await?;
            row.as_ref().map(object).transpose()?
        }))
    }

    /// The config version: every write moves it on, and replicas reload when it moves.
    pub async fn version(&self) -> Result<i64, DbError> {
        let v = self.meta("version").await?;
        Ok(v.and_then(|v| v.parse().ok()).unwrap_or(0))
    }

    /// Applies one write with its audit row and the version's bump, all or nothing; returns
    /// the new config version.
    pub async fn write(&self, w: &Write<'_>) -> Result<i64, WriteError> {
        let body = w.body.map(Value::to_string).unwrap_or_default();
        let (change, args) = match w.action {
            Action::Create => (
                "INSERT INTO objects (kind, name, body, created_ms, updated_ms) VALUES ($1, $2, $3, $4, $4) ON CONFLICT (kind, name) DO NOTHING",
                true,
            ),
            Action::Update => (
                "UPDATE objects SET body = $3, updated_ms = $4 WHERE kind = $1 AND name = $2",
                true,
            ),
            Action::Delete => ("DELETE FROM objects WHERE kind = $1 AND name = $2", false),
            Action::Rotate => ("", false),
        };
        let audit = "INSERT INTO audit (ts_ms, admin, action, kind, name, diff, prev_hash, hash) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";
        let bump = "INSERT INTO meta (k, v) VALUES ('version', '1') ON CONFLICT (k) DO UPDATE SET v = CAST(CAST(meta.v AS BIGINT) + 1 AS TEXT)";
        on!(self, p => {
            let mut tx = match self {
                // Serialises writers: the audit chain has one order.
                Db::Postgres(_) => {
                    let mut tx = p.begin().await?;
                    sqlx::query("SELECT pg_advisory_xact_lock(7314)").execute(&mut *tx).await?;
                    tx
                }
                Db::Sqlite(_) => p.begin_with("BEGIN IMMEDIATE").await?,
            };
            if let Some(expected) = w.expect_version {
                let now: Option<String> = sqlx::query_scalar("SELECT v FROM meta WHERE k = 'version'")
                    .fetch_optional(&mut *tx).await?;
                if now.and_then(|v| v.parse::<i64>().ok()).unwrap_or(0) != expected {
                    return Err(WriteError::Stale);
                }
            }
            // The key first: a retry racing the first request finds it taken, not the name.
            if let Some(i) = &w.idem {
                let keep = "INSERT INTO idempotency (admin, idem_key, fingerprint, status, body, created_ms) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (admin, idem_key) DO NOTHING";
                let q = sqlx::query(keep).bind(w.admin).bind(i.key).bind(i.fingerprint).bind(i32::from(i.status)).bind(i.body).bind(w.now_ms);
                if q.execute(&mut *tx).await?.rows_affected() == 0 {
                    return Err(WriteError::Replayed);
                }
            }
            let q = sqlx::query(change).bind(w.kind).bind(w.name);
            let q = if args { q.bind(&body).bind(w.now_ms) } else { q };
            if w.action != Action::Rotate && q.execute(&mut *tx).await?.rows_affected() == 0 {
                let (kind, name) = (w.kind.to_string(), w.name.to_string());
                return Err(match w.action {
                    Action::Create => WriteError::Exists { kind, name },
                    _ => WriteError::Missing { kind, name },
                });
            }
            let prev: Option<String> =
                sqlx::query_scalar("SELECT hash FROM audit ORDER BY id DESC LIMIT 1")
                    .fetch_optional(&mut *tx)
                    .await?;
            let prev = prev.unwrap_or_default();
            let hash = audit_hash(&prev, w);
            sqlx::query(audit)
                .bind(w.now_ms).bind(w.admin).bind(w.action.as_str()).bind(w.kind).bind(w.name)
                .bind(w.diff.to_string()).bind(&prev).bind(&hash)
                .execute(&mut *tx).await?;
            if w.action != Action::Rotate {
                sqlx::query(bump).execute(&mut *tx).await?;
                if let Db::Postgres(_) = self {
                    // Delivered at commit: replicas listening reload at once (polling stays).
                    sqlx::query("SELECT pg_notify('switchyard_config', '')").execute(&mut *tx).await?;
                }
            }
            let version: Option<String> = sqlx::query_scalar("SELECT v FROM meta WHERE k = 'version'")
                .fetch_optional(&mut *tx).await?;
            tx.commit().await?;
            Ok(version.and_then(|v| v.parse().ok()).unwrap_or(0))
        })
    }

    /// The answer kept for an admin's Idempotency-Key.
    pub async fn replay(&self, admin: &str, key: &str) -> Result<Option<Kept>, DbError> {
        let sql =
            "SELECT fingerprint, status, body FROM idempotency WHERE admin = $1 AND idem_key = $2";
        let row: Option<(String, i32, String)> =
            on!(self, p => sqlx::query_as(sql).bind(admin).bind(key).fetch_optional(p).await?);
        Ok(row.map(|(fingerprint, s, body)| Kept {
            fingerprint,
            status: u16::try_from(s).unwrap_or(200),
            body,
        }))
    }

    /// Forgets kept answers older than `cutoff_ms`; returns how many.
    pub async fn prune_answers(&self, cutoff_ms: i64) -> Result<u64, DbError> {
        let sql = "DELETE FROM idempotency WHERE created_ms < $1";
        Ok(on!(self, p => sqlx::query(sql).bind(cutoff_ms).execute(p).await?.rows_affected()))
    }

    /// Admin changes, newest first, `before` an id.
    pub async fn audit(&self, limit: i64, before: Option<i64>) -> Result<Vec<AuditRow>, DbError> {
        let sql = "SELECT id, ts_ms, admin, action, kind, name, diff, prev_hash, hash FROM audit WHERE id < $1 ORDER BY id DESC LIMIT $2";
        let before = before.unwrap_or(i64::MAX);
        Ok(on!(self, p => {
            let rows = sqlx::query(sql).bind(before).bind(limit).fetch_all(p).await?;
            let mut out = Vec::with_capacity(rows.len());
            for r in &rows {
                let diff: String = r.try_get("diff")?;
                out.push(AuditRow {
                    id: r.try_get("id")?,
                    ts_ms: r.try_get("ts_ms")?,
                    admin: r.try_get("admin")?,
                    action: r.try_get("action")?,
                    kind: r.try_get("kind")?,
                    name: r.try_get("name")?,
                    diff: serde_json::from_str(&diff).unwrap_or(Value::Null),
                    prev_hash: r.try_get("prev_hash")?,
                    hash: r.try_get("hash")?,
                });
            }
            out
        }))
    }
}

/// Checks the chain, oldest row first: each row's `prev_hash` is the row before's `hash`, and
/// each `hash` is what its fields hash to. `Err` names the first row that breaks it.
pub fn verify(rows: &[AuditRow]) -> Result<(), i64> {
    let mut prev = String::new();
    for r in rows {
        let action = match r.action.as_str() {
            "create" => Action::Create,
            "update" => Action::Update,
            "delete" => Action::Delete,
            "rotate" => Action::Rotate,
            _ => return Err(r.id),
        };
        let w = Write {
            action,
            kind: &r.kind,
            name: &r.name,
            body: None,
            admin: &r.admin,
            diff: &r.diff,
            now_ms: r.ts_ms,
            idem: None,
            expect_version: None,
        };
        if r.prev_hash != prev || audit_hash(&prev, &w) != r.hash {
            return Err(r.id);
        }
        prev.clone_from(&r.hash);
    }
    Ok(())
}
