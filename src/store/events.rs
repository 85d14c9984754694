//! Routing events in the store: the event table `GET /admin/events` reads, the webhook outbox
//! (written with its events in one transaction, so an event a webhook wants is never lost
//! between the two), leases that let one replica deliver each row, each delivery attempt, and
//! retention. Queries are written once for both backends.

use serde_json::Value;
use sqlx::Row;

use super::db::{Db, DbError, on};

/// An event as the store keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    pub id: String,
    pub kind: String,
    pub ts_ms: i64,
    pub folded_into: Option<String>,
    /// `{"type", "timestamp", "data"}`, as delivered.
    pub payload: Value,
}

/// An event to write, and the webhooks that want it.
pub struct NewEvent<'a> {
    pub id: &'a str,
    pub kind: &'a str,
    pub ts_ms: i64,
    pub request_id: Option<&'a str>,
    pub folded_into: Option<&'a str>,
    pub payload: String,
    pub webhooks: Vec<&'a str>,
}

/// An outbox row leased for delivery.
#[derive(Debug, Clone)]
pub struct Leased {
    pub event_id: String,
    pub webhook: String,
    /// Attempts made before this one.
    pub attempts: i64,
    pub created_ms: i64,
    /// The payload's exact text (a redelivery sends the same bytes).
    pub payload: String,
}

/// What became of one delivery attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    Delivered,
    /// Try again at this time.
    Retry(i64),
    /// A 4xx other than 408 and 429: not sent again.
    Failed,
    /// Retried for 24 h without success.
    Expired,
}

impl Fate {
    fn state(self) -> &'static str {
        match self {
            Fate::Delivered => "delivered",
            Fate::Retry(_) => "pending",
            Fate::Failed => "failed",
            Fate::Expired => "expired",
        }
    }
}

/// One delivery attempt, as `GET /admin/webhooks/{name}/deliveries` shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Delivery {
    pub event_id: String,
    pub event_type: String,
    pub attempt: i64,
    pub ts_ms: i64,
    pub status: Option<i64>,
    pub latency_ms: i64,
    pub error: Option<String>,
    pub replica: String,
    /// The outbox row's state now (`pending`, `delivered`, `failed`, `expired`).
    pub state: String,
}

/// One attempt's record.
pub struct Attempt<'a> {
    pub row: &'a Leased,
    pub now_ms: i64,
    pub status: Option<u16>,
    pub latency_ms: i64,
    pub error: Option<&'a str>,
    pub replica: &'a str,
    pub fate: Fate,
}

const INSERT_EVENT: &str = "INSERT INTO events (id, type, ts_ms, request_id, folded_into, payload)
    VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING";
const INSERT_OUTBOX: &str =
    "INSERT INTO outbox (event_id, webhook, state, attempts, next_ms, created_ms)
    VALUES ($1, $2, 'pending', 0, $3, $3) ON CONFLICT (event_id, webhook) DO NOTHING";

/// One webhook's (`$5`) rows due and not leased (or whose lease ran out: its replica died),
/// oldest due first. The outer conditions are checked again on the row as it is when locked,
/// so two replicas never lease one row.
const LEASE_SQLITE: &str = "UPDATE outbox SET lease_until_ms = $1, leased_by = $2
    WHERE state = 'pending' AND webhook = $5 AND next_ms <= $3 AND lease_until_ms < $3
      AND (event_id, webhook) IN (SELECT event_id, webhook FROM outbox
        WHERE state = 'pending' AND webhook = $5 AND next_ms <= $3 AND lease_until_ms < $3
        ORDER BY next_ms LIMIT $4)";
const LEASE_POSTGRES: &str = "UPDATE outbox SET lease_until_ms = $1, leased_by = $2
    WHERE state = 'pending' AND webhook = $5 AND next_ms <= $3 AND lease_until_ms < $3
      AND (event_id, webhook) IN (SELECT event_id, webhook FROM outbox
        WHERE state = 'pending' AND webhook = $5 AND next_ms <= $3 AND lease_until_ms < $3
        ORDER BY next_ms LIMIT $4 FOR UPDATE SKIP LOCKED)";
/// The rows a lease of one webhook just took (its holder and its end name them: a replica's
/// leases of one webhook follow each other, each with a later end), with their payloads.
const LEASED: &str = "SELECT o.event_id, o.webhook, o.attempts, o.created_ms,
        coalesce(e.payload, '') AS payload
    FROM outbox o LEFT JOIN events e ON e.id = o.event_id
    WHERE o.leased_by = $1 AND o.lease_until_ms = $2 AND o.webhook = $3 AND o.state = 'pending'";

const RECORD_ATTEMPT: &str = "INSERT INTO deliveries
    (event_id, webhook, attempt, ts_ms, status, latency_ms, error, replica)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING";
/// Only the replica holding the lease records the row's fate.
const FINISH: &str = "UPDATE outbox SET state = $1, attempts = attempts + 1, next_ms = $2,
    lease_until_ms = 0, last_status = $3 WHERE event_id = $4 AND webhook = $5 AND leased_by = $6";

impl Db {
    /// Writes events and their outbox rows in one transaction.
    pub async fn write_events(&self, events: &[NewEvent<'_>]) -> Result<(), DbError> {
        on!(self, p => {
            let mut tx = p.begin().await?;
            for e in events {
                sqlx::query(INSERT_EVENT)
                    .bind(e.id)
                    .bind(e.kind)
                    .bind(e.ts_ms)
                    .bind(e.request_id)
                    .bind(e.folded_into)
                    .bind(&e.payload)
                    .execute(&mut *tx)
                    .await?;
                for w in &e.webhooks {
                    sqlx::query(INSERT_OUTBOX)
                        .bind(e.id)
                        .bind(*w)
                        .bind(e.ts_ms)
                        .execute(&mut *tx)
                        .await?;
                }
            }
            tx.commit().await?;
        });
        Ok(())
    }

    /// Events newest first: of `kind` (or a `prefix.*`), since `since_ms`, before `before` (an
    /// event id, for the next page).
    pub async fn events(
        &self,
        kind: Option<&str>,
        since_ms: i64,
        before: Option<&str>,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, DbError> {
        let sql = "SELECT id, type, ts_ms, folded_into, payload FROM events
            WHERE ts_ms >= $1 AND (type = $2 OR type LIKE $3) AND id < $4
            ORDER BY id DESC LIMIT $5";
        // `type LIKE ''` takes nothing: an exact type is matched by `type = $2` alone.
        let (exact, like) = match kind {
            None => ("", "%".to_string()),
            Some(k) => match k.strip_suffix('*') {
                Some(prefix) => ("", format!("{prefix}%")),
                None => (k, String::new()),
            },
        };
        let before = before.unwrap_or("~");
        Ok(on!(self, p => {
            let rows = sqlx::query(sql)
                .bind(since_ms)
                .bind(exact)
                .bind(&like)
                .bind(before)
                .bind(limit)
                .fetch_all(p)
                .await?;
            let mut out = Vec::with_capacity(rows.len());
            for r in &rows {
                let payload: String = r.try_get("payload")?;
                out.push(StoredEvent {
                    id: r.try_get("id")?,
                    kind: r.try_get("type")?,
                    ts_ms: r.try_get("ts_ms")?,
                    folded_into: r.try_get("folded_into")?,
                    payload: serde_json::from_str(&payload).unwrap_or(Value::Null),
                });
            }
            out
        }))
    }

    /// Leases up to `n` of `webhook`'s due outbox rows to `replica` until `until_ms`, with
    /// their payloads.
    pub async fn lease(
        &self,
        replica: &str,
        webhook: &str,
        now_ms: i64,
        until_ms: i64,
        n: i64,
    ) -> Result<Vec<Leased>, DbError> {
        let sql = match self {
            Db::Sqlite(_) => LEASE_SQLITE,
            Db::Postgres(_) => LEASE_POSTGRES,
        };
        Ok(on!(self, p => {
            sqlx::query(sql)
                .bind(until_ms)
                .bind(replica)
                .bind(now_ms)
                .bind(n)
                .bind(webhook)
                .execute(p)
                .await?;
            let rows = sqlx::query(LEASED)
                .bind(replica)
                .bind(until_ms)
                .bind(webhook)
                .fetch_all(p)
                .await?;
            let mut out = Vec::with_capacity(rows.len());
            for r in &rows {
                out.push(Leased {
                    event_id: r.try_get("event_id")?,
                    webhook: r.try_get("webhook")?,
                    attempts: r.try_get("attempts")?,
                    created_ms: r.try_get("created_ms")?,
                    payload: r.try_get("payload")?,
                });
            }
            out
        }))
    }

    /// Records a delivery attempt and what became of its row; false (nothing recorded) when
    /// `a.replica` no longer holds the row's lease.
    pub async fn finish_attempt(&self, a: &Attempt<'_>) -> Result<bool, DbError> {
        let status = a.status.map(i64::from);
        let next = match a.fate {
            Fate::Retry(at) => at,
            _ => a.now_ms,
        };
        on!(self, p => {
            let mut tx = p.begin().await?;
            let mine = sqlx::query(FINISH)
                .bind(a.fate.state())
                .bind(next)
                .bind(status)
                .bind(&a.row.event_id)
                .bind(&a.row.webhook)
                .bind(a.replica)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            // The lease ran out and another replica holds the row now: its attempt counts.
            if mine == 0 {
                tx.rollback().await?;
                return Ok(false);
            }
            sqlx::query(RECORD_ATTEMPT)
                .bind(&a.row.event_id)
                .bind(&a.row.webhook)
                .bind(a.row.attempts + 1)
                .bind(a.now_ms)
                .bind(status)
                .bind(a.latency_ms)
                .bind(a.error)
                .bind(a.replica)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
        });
        Ok(true)
    }

    /// A webhook's delivery attempts, newest first.
    pub async fn deliveries(&self, webhook: &str, limit: i64) -> Result<Vec<Delivery>, DbError> {
        let sql = "SELECT d.event_id, coalesce(e.type, '') AS type, d.attempt, d.ts_ms, d.status,
                d.latency_ms, d.error, d.replica, coalesce(o.state, 'pruned') AS state
            FROM deliveries d
            LEFT JOIN events e ON e.id = d.event_id
            LEFT JOIN outbox o ON o.event_id = d.event_id AND o.webhook = d.webhook
            WHERE d.webhook = $1 ORDER BY d.ts_ms DESC, d.attempt DESC LIMIT $2";
        Ok(on!(self, p => {
            let rows = sqlx::query(sql).bind(webhook).bind(limit).fetch_all(p).await?;
            let mut out = Vec::with_capacity(rows.len());
            for r in &rows {
                out.push(Delivery {
                    event_id: r.try_get("event_id")?,
                    event_type: r.try_get("type")?,
                    attempt: r.try_get("attempt")?,
                    ts_ms: r.try_get("ts_ms")?,
                    status: r.try_get("status")?,
                    latency_ms: r.try_get("latency_ms")?,
                    error: r.try_get("error")?,
                    replica: r.try_get("replica")?,
                    state: r.try_get("state")?,
                });
            }
            out
        }))
    }

    /// Outbox rows still to deliver (any webhook).
    pub async fn outbox_pending(&self) -> Result<i64, DbError> {
        let sql = "SELECT count(*) FROM outbox WHERE state = 'pending'";
        Ok(on!(self, p => sqlx::query_scalar(sql).fetch_one(p).await?))
    }

    /// When a webhook began failing without a success since, and whether that disabled it.
    pub async fn webhook_state(&self) -> Result<Vec<(String, Option<i64>, Option<i64>)>, DbError> {
        let sql = "SELECT name, failing_since_ms, disabled_ms FROM webhook_state";
        Ok(on!(self, p => {
            let rows = sqlx::query(sql).fetch_all(p).await?;
            let mut out = Vec::with_capacity(rows.len());
            for r in &rows {
                out.push((
                    r.try_get("name")?,
                    r.try_get("failing_since_ms")?,
                    r.try_get("disabled_ms")?,
                ));
            }
            out
        }))
    }

    /// A failed attempt for `webhook` at `now_ms` (starting its streak if none); returns when
    /// the streak began.
    pub async fn webhook_failed(&self, webhook: &str, now_ms: i64) -> Result<i64, DbError> {
        let sql = "INSERT INTO webhook_state (name, failing_since_ms) VALUES ($1, $2)
            ON CONFLICT (name) DO UPDATE SET failing_since_ms =
                coalesce(webhook_state.failing_since_ms, EXCLUDED.failing_since_ms)
            RETURNING failing_since_ms";
        Ok(on!(self, p => sqlx::query_scalar(sql).bind(webhook).bind(now_ms).fetch_one(p).await?))
    }

    /// Marks `webhook` disabled (its streak reached a day); false if it already was.
    pub async fn webhook_disable(&self, webhook: &str, now_ms: i64) -> Result<bool, DbError> {
        let sql =
            "UPDATE webhook_state SET disabled_ms = $2 WHERE name = $1 AND disabled_ms IS NULL";
        let n = on!(self, p => sqlx::query(sql).bind(webhook).bind(now_ms).execute(p).await?.rows_affected());
        Ok(n > 0)
    }

    /// A success (or an admin's change) ends `webhook`'s streak and re-enables it.
    pub async fn webhook_ok(&self, webhook: &str) -> Result<(), DbError> {
        let sql = "DELETE FROM webhook_state WHERE name = $1";
        self.exec(sql, &[webhook]).await?;
        Ok(())
    }

    /// Expires rows still pending that were made before `expire_before_ms` (those of a
    /// webhook removed, turned off or disabled, which no deliverer leases, and any other past
    /// the day of retries); prunes rows done (and delivery attempts) before `done_before_ms`,
    /// and events before `events_before_ms`. Returns the rows changed.
    pub async fn prune_events(
        &self,
        expire_before_ms: i64,
        done_before_ms: i64,
        events_before_ms: i64,
    ) -> Result<u64, DbError> {
        let steps: [(&str, i64); 4] = [
            (
                "UPDATE outbox SET state = 'expired' WHERE state = 'pending' AND created_ms < $1",
                expire_before_ms,
            ),
            (
                "DELETE FROM outbox WHERE state <> 'pending' AND created_ms < $1",
                done_before_ms,
            ),
            ("DELETE FROM deliveries WHERE ts_ms < $1", done_before_ms),
            (
                "DELETE FROM events WHERE ts_ms < $1 AND id NOT IN
                    (SELECT event_id FROM outbox WHERE state = 'pending')",
                events_before_ms,
            ),
        ];
        let mut n = 0;
        for (sql, before) in steps {
            n += on!(self, p => sqlx::query(sql).bind(before).execute(p).await?.rows_affected());
        }
        Ok(n)
    }
}
