//! Meters in a PostgreSQL store (migration 0005): a scope's admission is one transaction that
//! first locks the scope's row (an upsert), then reads what is held, admitted and spent with a
//! fresh snapshot, then takes the hold. Replicas admitting to one scope queue on its row; a
//! settle is one statement (the hold gone and the spend added together). Time is the replica's.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sqlx::Row;
use sqlx::postgres::PgPool;

use super::memory::WINDOW_MS;
use super::{Ask, Denial, Hold, Limit, MemoryMeters, Refusal, Standing, Verdict};
use crate::config::quota::Quota;

/// The longest an admission waits on PostgreSQL before the scope's `fail` decides.
const OP_TIMEOUT: Duration = Duration::from_secs(2);

const LOCK: &str = "INSERT INTO meter_scopes (scope) VALUES ($1)
    ON CONFLICT (scope) DO UPDATE SET scope = EXCLUDED.scope";

/// Expired holds and aged admissions are deleted as they are passed over; the reads filter on
/// their own (a statement does not see its own CTE's deletes).
const READ: &str = "
WITH a AS (DELETE FROM meter_holds WHERE scope = $1 AND expires_ms < $2),
     b AS (DELETE FROM meter_window WHERE scope = $1 AND ts_ms <= $2 - 60000)
SELECT
  (SELECT coalesce(sum(micros), 0)::bigint FROM meter_holds
     WHERE scope = $1 AND expires_ms >= $2) AS reserved,
  (SELECT count(*) FROM meter_holds WHERE scope = $1 AND expires_ms >= $2) AS holds,
  (SELECT count(*) FROM meter_window WHERE scope = $1 AND ts_ms > $2 - 60000) AS admitted,
  (SELECT coalesce(sum(tokens), 0)::bigint FROM meter_window
     WHERE scope = $1 AND ts_ms > $2 - 60000) AS wtok,
  (SELECT min(ts_ms) FROM meter_window WHERE scope = $1 AND ts_ms > $2 - 60000) AS oldest,
  (SELECT coalesce(max(spent), 0) FROM meter_spend WHERE scope = $1 AND period = $3) AS spent";

const TAKE: &str = "
WITH h AS (INSERT INTO meter_holds (scope, id, micros, expires_ms) VALUES ($1, $2, $3, $4))
INSERT INTO meter_window (scope, id, ts_ms, tokens) SELECT $1, $2, $5, $6 WHERE $7";

const SETTLE: &str = "
WITH h AS (DELETE FROM meter_holds WHERE scope = $1 AND id = $2),
     w AS (UPDATE meter_window SET tokens = $5 WHERE scope = $1 AND id = $2)
INSERT INTO meter_spend (scope, period, spent) SELECT $1, $3, $4 WHERE $4 > 0 AND $3 <> ''
ON CONFLICT (scope, period) DO UPDATE SET spent = meter_spend.spent + EXCLUDED.spent";

const STANDING: &str = "
SELECT
  (SELECT coalesce(max(spent), 0) FROM meter_spend WHERE scope = $1 AND period = $2) AS spent,
  (SELECT coalesce(sum(micros), 0)::bigint FROM meter_holds
     WHERE scope = $1 AND expires_ms >= $3) AS reserved";

pub struct Meters {
    pool: PgPool,
    up: AtomicBool,
    local: MemoryMeters,
}

/// What one scope stands at, read under its lock.
struct Read {
    reserved: i64,
    holds: i64,
    admitted: i64,
    wtok: i64,
    oldest: Option<i64>,
    spent: i64,
}

impl Meters {
    pub fn new(pool: PgPool) -> Meters {
        Meters {
            pool,
            up: AtomicBool::new(true),
            local: MemoryMeters::default(),
        }
    }

    pub fn local(&self) -> &MemoryMeters {
        &self.local
    }

    pub fn connected(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// The result, or `None` with PostgreSQL marked down (and up again on the next success).
    async fn run<T>(&self, op: impl Future<Output = Result<T, sqlx::Error>>) -> Option<T> {
        let r = tokio::time::timeout(OP_TIMEOUT, op).await;
        match r {
            Ok(Ok(v)) => {
                if !self.up.swap(true, Ordering::Relaxed) {
                    tracing::info!("budget counters in PostgreSQL answer again");
                }
                Some(v)
            }
            Ok(Err(e)) => {
                self.down(&e.to_string());
                None
            }
            Err(_) => {
                self.down("timed out");
                None
            }
        }
    }

    fn down(&self, why: &str) {
        if self.up.swap(false, Ordering::Relaxed) {
            tracing::error!(error = why, "budget counters in PostgreSQL unavailable");
        }
    }

    /// `None`: PostgreSQL did not answer.
    pub async fn admit(
        &self,
        scope: &Arc<str>,
        q: &Quota,
        ask: Ask,
        ttl: Duration,
        now: i64,
    ) -> Option<Verdict> {
        let id = fastrand::u64(..);
        let period = q.budget.map(|b| b.period.at(now));
        let verdict = self.run(async {
            let mut tx = self.pool.begin().await?;
            sqlx::query(LOCK).bind(&**scope).execute(&mut *tx).await?;
            let row = sqlx::query(READ)
                .bind(&**scope)
                .bind(now)
                .bind(period.as_ref().map_or("", |p| p.0.as_str()))
                .fetch_one(&mut *tx)
                .await?;
            let read = Read {
                reserved: row.try_get("reserved")?,
                holds: row.try_get("holds")?,
                admitted: row.try_get("admitted")?,
                wtok: row.try_get("wtok")?,
                oldest: row.try_get("oldest")?,
                spent: row.try_get("spent")?,
            };
            let refused = judge(q, ask, &read, now, period.as_ref().map(|p| p.1));
            let used = (read.spent.max(0) + read.reserved.max(0)) as u64 + ask.micros;
            if refused.is_none() {
                let rates = q.rpm.is_some() || q.tpm.is_some();
                sqlx::query(TAKE)
                    .bind(&**scope)
                    .bind(id as i64)
                    .bind(ask.micros as i64)
                    .bind(now + ttl.as_millis() as i64)
                    .bind(now)
                    .bind(ask.tokens as i64)
                    .bind(rates)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok((refused, used))
        });
        Some(match verdict.await? {
            (None, used) => Verdict::Held(Hold {
                scope: scope.clone(),
                id,
                period: period.map(|p| p.0),
                ask,
                used: if q.budget.is_some() { used } else { 0 },
                local: false,
            }),
            (Some((limit, cap, used, wait)), _) => Verdict::Refused(Refusal {
                scope: scope.clone(),
                limit,
                cap,
                used,
                retry_after: Duration::from_millis(wait.max(1) as u64),
            }),
        })
    }

    pub async fn settle(&self, h: &Hold, cost: u64, tokens: u64, _now: i64) {
        let done = self.run(
            sqlx::query(SETTLE)
                .bind(&*h.scope)
                .bind(h.id as i64)
                .bind(h.period.as_deref().unwrap_or(""))
                .bind(cost as i64)
                .bind(tokens as i64)
                .execute(&self.pool),
        );
        if done.await.is_none() {
            tracing::error!(
                scope = &*h.scope,
                cost,
                "could not settle a hold in PostgreSQL: its reservation expires by its deadline, its spend is not counted there"
            );
        }
    }

    pub async fn standing(&self, scope: &str, period: &str, now: i64) -> Option<Standing> {
        let row = self
            .run(
                sqlx::query(STANDING)
                    .bind(scope)
                    .bind(period)
                    .bind(now)
                    .fetch_one(&self.pool),
            )
            .await?;
        let n = |c: &str| row.try_get::<i64, _>(c).ok().map(|v| v.max(0) as u64);
        Some(Standing {
            spent: n("spent")?,
            reserved: n("reserved")?,
        })
    }
}

/// The rule of `memory::Scope::admit`, over what was read under the scope's lock.
fn judge(q: &Quota, ask: Ask, r: &Read, now: i64, period_end: Option<i64>) -> Option<Denial> {
    let u = |v: i64| v.max(0) as u64;
    if let Some(b) = q.budget {
        let used = u(r.spent).saturating_add(u(r.reserved));
        if used.saturating_add(ask.micros.max(1)) > b.micros {
            return Some((
                Limit::Budget,
                b.micros,
                used,
                period_end.unwrap_or(now) - now,
            ));
        }
    }
    if let Some(max) = q.max_concurrency
        && u(r.holds) >= u64::from(max)
    {
        return Some((Limit::Concurrency, u64::from(max), u(r.holds), 1000));
    }
    let next = r.oldest.map_or(1000, |ts| ts + WINDOW_MS - now);
    if let Some(rpm) = q.rpm
        && u(r.admitted) >= u64::from(rpm)
    {
        return Some((Limit::Rpm, u64::from(rpm), u(r.admitted), next));
    }
    if let Some(tpm) = q.tpm
        && r.admitted > 0
        && u(r.wtok).saturating_add(ask.tokens) > tpm
    {
        return Some((Limit::Tpm, tpm, u(r.wtok), next));
    }
    None
}
