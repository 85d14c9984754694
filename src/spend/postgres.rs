//! Meters in a PostgreSQL store (migration 0005): a scope's admission is one call of
//! `switchyard_admit`, which locks the scope's row (an upsert), reads what is held, admitted
//! and spent with fresh snapshots, and takes the hold, in one statement and one round trip.
//! Replicas admitting to one scope queue on its row for that long; a settle is one statement
//! (the hold gone and the spend added together). Time is the replica's.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sqlx::Row;
use sqlx::postgres::PgPool;

use super::{Answer, Ask, Hold, Levels, MemoryMeters, PeriodAt, Refusal, Standing, Verdict};
use crate::config::quota::Quota;

/// The longest an admission waits on PostgreSQL before the scope's `fail` decides.
const OP_TIMEOUT: Duration = Duration::from_secs(2);

/// How often a PostgreSQL marked down is asked whether it answers again.
const PROBE_EVERY: Duration = Duration::from_secs(1);

/// One round trip: the function (migration 0005) locks the scope's row, reads it with fresh
/// snapshots and takes the hold, all before the statement commits.
const ADMIT: &str = "SELECT refused, cap, used, wait_ms
    FROM switchyard_admit($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";

/// The settle and the period's spend after it, in one transaction (the scope's row stays
/// locked until it commits, so the spend read is this settle's own).
const SETTLE: &str = "SELECT switchyard_settle_spent($1, $2, $3, $4, $5) AS spent";

/// Every level of a team's chain in one round trip (migration 0010).
const ADMIT_ALL: &str = "SELECT level, refused, cap, used, wait_ms
    FROM switchyard_admit_all($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)";

const SETTLE_ALL: &str = "SELECT level, spent FROM switchyard_settle_all($1, $2, $3, $4, $5)";

const STANDING: &str = "

SELECT
  (SELECT coalesce(max(spent), 0) FROM meter_spend WHERE scope = $1 AND period = $2) AS spent,
  (SELECT coalesce(sum(micros), 0)::bigint FROM meter_holds
     WHERE scope = $1 AND expires_ms >= $3) AS reserved";

pub struct Meters {
    pool: PgPool,
    up: Arc<AtomicBool>,
    local: MemoryMeters,
}

impl Meters {
    pub fn new(pool: PgPool) -> Meters {
        Meters {
            pool,
            up: Arc::new(AtomicBool::new(true)),
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
            self.probe();
        }
    }

    /// Asks PostgreSQL every second until it answers, then marks it up: `/readyz` says so
    /// without waiting for a request to try.
    fn probe(&self) {
        let (pool, up) = (self.pool.clone(), self.up.clone());
        tokio::spawn(async move {
            while !up.load(Ordering::Relaxed) {
                tokio::time::sleep(PROBE_EVERY).await;
                let ping = sqlx::query("SELECT 1").execute(&pool);
                if let Ok(Ok(_)) = tokio::time::timeout(OP_TIMEOUT, ping).await
                    && !up.swap(true, Ordering::Relaxed)
                {
                    tracing::info!("budget counters in PostgreSQL answer again");
                }
            }
        });
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
        let period = q.budget.map(|b| PeriodAt::of(&b, now));
        let limit = |v: Option<u64>| v.map_or(-1, |v| v.min(i64::MAX as u64) as i64);
        let row = self
            .run(
                sqlx::query(ADMIT)
                    .bind(&**scope)
                    .bind(id as i64)
                    .bind(now)
                    .bind(period.as_ref().map_or("", |p| &*p.id))
                    .bind(ask.micros.min(i64::MAX as u64) as i64)
                    .bind(ask.tokens.min(i64::MAX as u64) as i64)
                    .bind(now + ttl.as_millis() as i64)
                    .bind(limit(q.budget.map(|b| b.micros)))
                    .bind(limit(q.max_concurrency.map(u64::from)))
                    .bind(limit(q.rpm.map(u64::from)))
                    .bind(limit(q.tpm))
                    .fetch_one(&self.pool),
            )
            .await?;
        let n = |c: &str| row.try_get::<i64, _>(c).ok();
        let answer = Answer {
            refused: i64::from(row.try_get::<i32, _>("refused").ok()?),
            cap: n("cap")?,
            used: n("used")?,
            wait_ms: n("wait_ms")?,
        };
        Some(answer.verdict(scope, id, period, ask, now))
    }

    /// Every level in one call. `None`: PostgreSQL did not answer.
    pub async fn admit_levels(
        &self,
        l: &Levels<'_>,
        ask: Ask,
        ttl: Duration,
        now: i64,
    ) -> Option<Result<Vec<Hold>, Refusal>> {
        let id = fastrand::u64(..);
        let periods: Vec<Option<PeriodAt>> = l
            .levels
            .iter()
            .map(|(_, q)| q.budget.map(|b| PeriodAt::of(&b, now)))
            .collect();
        let limit = |v: Option<u64>| v.map_or(-1, |v| v.min(i64::MAX as u64) as i64);
        let each = |f: &dyn Fn(&Quota) -> Option<u64>| -> Vec<i64> {
            l.levels.iter().map(|(_, q)| limit(f(q))).collect()
        };
        let (team, max) = l.user.map_or(("", 0), |(t, m)| (&**t, m));
        let rows = self
            .run(
                sqlx::query(ADMIT_ALL)
                    .bind(l.levels.iter().map(|(s, _)| &**s).collect::<Vec<_>>())
                    .bind(id as i64)
                    .bind(now)
                    .bind(
                        periods
                            .iter()
                            .map(|p| p.as_ref().map_or("", |p| &*p.id))
                            .collect::<Vec<_>>(),
                    )
                    .bind(ask.micros.min(i64::MAX as u64) as i64)
                    .bind(ask.tokens.min(i64::MAX as u64) as i64)
                    .bind(now + ttl.as_millis() as i64)
                    .bind(each(&|q| q.budget.map(|b| b.micros)))
                    .bind(each(&|q| q.max_concurrency.map(u64::from)))
                    .bind(each(&|q| q.rpm.map(u64::from)))
                    .bind(each(&|q| q.tpm))
                    .bind(team)
                    .bind(max.min(i64::MAX as u64) as i64)
                    .fetch_all(&self.pool),
            )
            .await?;
        let mut holds = Vec::with_capacity(rows.len());
        for row in rows {
            let n = |c: &str| row.try_get::<i64, _>(c).ok();
            let i = usize::try_from(row.try_get::<i32, _>("level").ok()?)
                .ok()?
                .checked_sub(1)?;
            let (scope, _) = l.levels.get(i)?;
            let answer = Answer {
                refused: i64::from(row.try_get::<i32, _>("refused").ok()?),
                cap: n("cap")?,
                used: n("used")?,
                wait_ms: n("wait_ms")?,
            };
            match answer.verdict(scope, id, periods[i].clone(), ask, now) {
                Verdict::Held(mut h) => {
                    h.tag = Some(l.tag.clone());
                    holds.push(h);
                }
                Verdict::Refused(r) => return Some(Err(r)),
                Verdict::Unavailable => return None,
            }
        }
        (holds.len() == l.levels.len()).then_some(Ok(holds))
    }

    /// Settles one admission's holds in one call; each level's period spend after it, when it
    /// charged anything.
    pub async fn settle_levels(&self, holds: &[Hold], cost: u64, tokens: u64) -> Vec<Option<u64>> {
        let costs: Vec<i64> = holds
            .iter()
            .map(|h| if h.period.is_some() { cost as i64 } else { 0 })
            .collect();
        let rows = self.run(
            sqlx::query(SETTLE_ALL)
                .bind(holds.iter().map(|h| &*h.scope).collect::<Vec<_>>())
                .bind(holds.first().map_or(0, |h| h.id as i64))
                .bind(
                    holds
                        .iter()
                        .map(|h| h.period.as_ref().map_or("", |p| &*p.id))
                        .collect::<Vec<_>>(),
                )
                .bind(costs)
                .bind(tokens as i64)
                .fetch_all(&self.pool),
        );
        let mut after = vec![None; holds.len()];
        match rows.await {
            Some(rows) if cost > 0 => {
                for row in rows {
                    let i = row
                        .try_get::<i32, _>("level")
                        .ok()
                        .and_then(|i| usize::try_from(i - 1).ok());
                    let spent = row.try_get::<Option<i64>, _>("spent").ok().flatten();
                    if let (Some(slot), Some(s)) = (i.and_then(|i| after.get_mut(i)), spent) {
                        *slot = u64::try_from(s).ok();
                    }
                }
            }
            Some(_) => {}
            None => tracing::error!(
                scope = holds.first().map(|h| &*h.scope),
                cost,
                "could not settle a hold in PostgreSQL: its reservation expires by its deadline, its spend is not counted there"
            ),
        }
        after
    }

    /// Settles `h`; the period's spend after it, when it charged anything.
    pub async fn settle(&self, h: &Hold, cost: u64, tokens: u64) -> Option<u64> {
        let done = self.run(
            sqlx::query_scalar::<_, Option<i64>>(SETTLE)
                .bind(&*h.scope)
                .bind(h.id as i64)
                .bind(h.period.as_ref().map_or("", |p| &*p.id))
                .bind(cost as i64)
                .bind(tokens as i64)
                .fetch_one(&self.pool),
        );
        match done.await {
            Some(spent) => spent
                .filter(|_| cost > 0)
                .and_then(|s| u64::try_from(s).ok()),
            None => {
                tracing::error!(
                    scope = &*h.scope,
                    cost,
                    "could not settle a hold in PostgreSQL: its reservation expires by its deadline, its spend is not counted there"
                );
                None
            }
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
