//! Budgets and rate limits that hold across replicas: reserve, then settle. Before a request's
//! first attempt its worst case is held against the key's [`Quota`]; before each attempt, the
//! channel's; when the answer ends, each hold is settled to the real cost (the difference
//! released, an overdraw charged). A hold carries a deadline, so a crashed replica's holds
//! expire by themselves.
//!
//! One scope's limits are checked and taken atomically where every replica sees them: by a Lua
//! script on one Redis Cluster slot (`redis.rs`), by a row lock in PostgreSQL (`postgres.rs`),
//! or in this process (`memory.rs`). Every backend runs the same rule ([`memory::Scope`] is
//! the reference).

mod levels;
mod memory;
mod postgres;
mod redis;

pub use levels::{Admission, Levels};

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

pub use memory::Meters as MemoryMeters;
pub use postgres::Meters as PostgresMeters;
pub use redis::Meters as RedisMeters;

use crate::config::quota::Quota;

/// What one request asks of a scope: its worst-case cost and its estimated tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ask {
    pub micros: u64,
    pub tokens: u64,
}

/// Which limit refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Budget,
    Rpm,
    Tpm,
    Concurrency,
}

impl Limit {
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Budget => "budget",
            Limit::Rpm => "rpm",
            Limit::Tpm => "tpm",
            Limit::Concurrency => "max_concurrency",
        }
    }
}

/// Why a scope refused: the limit, its value, what is used of it (spent and held), and when
/// it has room again.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub scope: Arc<str>,
    pub limit: Limit,
    pub cap: u64,
    pub used: u64,
    pub retry_after: Duration,
}

/// A refusal as the rule gives it: the limit, its value, what is used of it, and the ms until
/// it has room.
type Denial = (Limit, u64, u64, i64);

/// A scope's verdict on one ask.
#[derive(Debug)]
pub enum Verdict {
    Held(Hold),
    Refused(Refusal),
    /// The shared counter did not answer and a limit of the scope fails closed.
    Unavailable,
}

/// The budget period a hold's spend belongs to: its id (`m202612`) and when it ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeriodAt {
    pub id: Arc<str>,
    pub ends: i64,
}

impl PeriodAt {
    pub(super) fn of(budget: &crate::config::quota::Budget, now: i64) -> PeriodAt {
        let (id, ends) = budget.period.at(now);
        PeriodAt {
            id: id.into(),
            ends,
        }
    }
}

/// A shared backend's answer to an admission, as its script or function gives it: the refusing
/// limit's code (0: admitted; 1 budget, 2 rpm, 3 tpm, 4 concurrency), the limit's value, what
/// is used of it, and the ms until it has room.
struct Answer {
    refused: i64,
    cap: i64,
    used: i64,
    wait_ms: i64,
}

impl Answer {
    fn verdict(
        self,
        scope: &Arc<str>,
        id: u64,
        period: Option<PeriodAt>,
        ask: Ask,
        now: i64,
    ) -> Verdict {
        let u = |v: i64| v.max(0) as u64;
        let limit = match self.refused {
            0 => {
                return Verdict::Held(Hold {
                    scope: scope.clone(),
                    tag: None,
                    id,
                    used: if period.is_some() { u(self.used) } else { 0 },
                    period,
                    ask,
                    cap: 0,
                    local: false,
                });
            }
            1 => Limit::Budget,
            2 => Limit::Rpm,
            3 => Limit::Tpm,
            _ => Limit::Concurrency,
        };
        // A budget has room again when its period ends.
        let wait = match (limit, &period) {
            (Limit::Budget, Some(p)) => p.ends.saturating_sub(now),
            _ => self.wait_ms,
        };
        Verdict::Refused(Refusal {
            scope: scope.clone(),
            limit,
            cap: u(self.cap),
            used: u(self.used),
            retry_after: Duration::from_millis(wait.max(1) as u64),
        })
    }
}

/// One request's hold on one scope. Settling it (or dropping the [`Holds`] it is in) gives
/// back what was reserved and charges what was spent.
#[derive(Debug, Clone)]
pub struct Hold {
    pub scope: Arc<str>,
    /// The Redis hash tag of its counters when not its own scope's: the organisation's, for
    /// a level of a team's chain.
    pub tag: Option<Arc<str>>,
    /// The admission's: every hold one admission took shares it (and settles together).
    pub id: u64,
    /// The budget period the hold's spend belongs to (`None`: the scope has no budget).
    pub period: Option<PeriodAt>,
    pub ask: Ask,
    /// The scope's budget used (spent and held) with this hold taken; 0 without a budget.
    pub used: u64,
    /// The scope's budget (micro-dollars; 0: none), for its threshold events.
    pub cap: u64,
    /// Taken from this replica's own meters (the shared counter was down, the limit fails
    /// open): settled there, and the spend added to the shared counter when it can be.
    pub local: bool,
}

/// The budget state of a scope, for a channel's soft limit and explain.
#[derive(Debug, Clone, Copy, Default)]
pub struct Standing {
    pub spent: u64,
    pub reserved: u64,
}

/// Where the counters are: shared by every replica, or this process's own.
pub enum Backend {
    Memory(MemoryMeters),
    Redis(RedisMeters),
    Postgres(PostgresMeters),
}

/// The meters, and what this replica last saw of each budget (for soft limits, which rank a
/// channel without a round trip).
pub struct Meter {
    backend: Backend,
    seen: std::sync::Mutex<std::collections::HashMap<Arc<str>, Seen>>,
    /// Where budget events go (none: discarded).
    events: crate::events::Emitter,
    /// The (scope, period) this replica has reported exhausted, so a run of refusals is one
    /// event; cleared when it grows past a bound.
    exhausted: std::sync::Mutex<std::collections::HashSet<(Arc<str>, String)>>,
}

/// The shares of a budget whose crossing is a `budget.threshold` event, in percent.
pub const THRESHOLDS: [u64; 3] = [50, 80, 100];

/// A budget as this replica last saw it: used (spent and held), its limit, and when its period
/// ends (a new period starts from nothing).
#[derive(Debug, Clone, Copy)]
struct Seen {
    used: u64,
    cap: u64,
    ends: i64,
}

impl Meter {
    pub fn new(backend: Backend) -> Meter {
        Meter {
            backend,
            seen: Default::default(),
            events: Default::default(),
            exhausted: Default::default(),
        }
    }

    /// The meter, sending its budget events to `events`.
    pub fn with_events(mut self, events: crate::events::Emitter) -> Meter {
        self.events = events;
        self
    }

    /// A settle that took a budget's spend from `after - cost` to `after` crossed each
    /// threshold in between exactly once, whichever replica settled it: each is an event.
    fn crossed(&self, hold: &Hold, cost: u64, after: Option<u64>) {
        let (Some(after), Some(period)) = (after, &hold.period) else {
            return;
        };
        if hold.cap == 0 || !self.events.is_on() {
            return;
        }
        let before = after.saturating_sub(cost);
        for pct in THRESHOLDS {
            let line = (u128::from(hold.cap) * u128::from(pct)).div_ceil(100);
            if u128::from(before) < line && u128::from(after) >= line {
                self.events.emit(
                    "budget.threshold",
                    json!({"scope": &*hold.scope, "percent": pct, "period": period.id,
                           "spent_micros": after, "budget_micros": hold.cap}),
                );
            }
        }
    }

    /// The first budget refusal of a scope in a period (on this replica) is an event.
    fn refused_event(&self, r: &Refusal, quota: &Quota, now: i64) {
        let (Limit::Budget, Some(b)) = (r.limit, quota.budget) else {
            return;
        };
        if !self.events.is_on() {
            return;
        }
        let period = PeriodAt::of(&b, now).id;
        let mut seen = self.exhausted.lock().unwrap_or_else(|p| p.into_inner());
        if seen.len() > 10_000 {
            seen.clear();
        }
        if seen.insert((r.scope.clone(), period.to_string())) {
            self.events.emit(
                "budget.exhausted",
                json!({"scope": &*r.scope, "period": period, "used_micros": r.used,
                       "budget_micros": r.cap,
                       "retry_after_seconds": r.retry_after.as_secs()}),
            );
        }
    }

    /// Checks `ask` against every limit of `quota` for `scope` and, if all have room, takes it.
    pub async fn admit(&self, scope: &Arc<str>, quota: &Quota, ask: Ask, ttl: Duration) -> Verdict {
        let now = crate::clock::unix_ms();
        // The shared backends' futures are boxed: inline they would make this future (and the
        // memory path's) tens of kilobytes, copied on every admission.
        let v = match &self.backend {
            Backend::Memory(m) => m.admit(scope, quota, ask, ttl, now),
            Backend::Redis(r) => match Box::pin(r.admit(scope, quota, ask, ttl)).await {
                Some(v) => v,
                None => fallback(r.local(), scope, quota, ask, ttl, now),
            },
            Backend::Postgres(p) => match Box::pin(p.admit(scope, quota, ask, ttl, now)).await {
                Some(v) => v,
                None => fallback(p.local(), scope, quota, ask, ttl, now),
            },
        };
        let mut v = v;
        match &mut v {
            Verdict::Held(h) => h.cap = quota.budget.map_or(0, |b| b.micros),
            Verdict::Refused(r) => self.refused_event(r, quota, now),
            Verdict::Unavailable => {}
        }
        // Only a soft budget is read back (to rank its channel): no other pays for the record.
        if let Some(b) = quota.budget.filter(|b| b.soft.is_some()) {
            let used = match &v {
                Verdict::Held(h) => Some(h.used),
                Verdict::Refused(r) if r.limit == Limit::Budget => Some(r.used),
                _ => None,
            };
            if let Some(used) = used {
                let ends = PeriodAt::of(&b, now).ends;
                let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
                seen.insert(
                    scope.clone(),
                    Seen {
                        used,
                        cap: b.micros,
                        ends,
                    },
                );
            }
        }
        v
    }

    /// Whether the budget of `scope` was last seen past `share` of its limit.
    pub fn past(&self, scope: &str, share: f64) -> bool {
        let now = crate::clock::unix_ms();
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.get(scope)
            .is_some_and(|s| now < s.ends && s.used as f64 >= share * s.cap as f64)
    }

    /// A settled hold's reservation became its cost in what this replica saw.
    fn seen_settled(&self, hold: &Hold, cost: u64) {
        if hold.period.is_none() {
            return;
        }
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = seen.get_mut(&hold.scope) {
            s.used = s.used.saturating_sub(hold.ask.micros).saturating_add(cost);
        }
    }

    /// Settles `holds` at once when the counters are this process's (`true`); the shared
    /// backends' settles are [`Meter::settle`]'s, awaited.
    fn settle_here(&self, holds: &[Hold], cost: u64, tokens: u64) -> bool {
        let Backend::Memory(m) = &self.backend else {
            return false;
        };
        for h in holds {
            self.seen_settled(h, cost);
        }
        m.settle_each(holds, cost, tokens, |h, after| self.crossed(h, cost, after));
        true
    }

    /// Releases `hold` and charges `cost` micro-dollars and `tokens` to its scope.
    pub async fn settle(&self, hold: &Hold, cost: u64, tokens: u64) {
        if self.settle_here(std::slice::from_ref(hold), cost, tokens) {
            return;
        }
        self.seen_settled(hold, cost);
        match &self.backend {
            Backend::Memory(_) => {}
            Backend::Redis(r) => {
                if hold.local {
                    r.local().settle(hold, cost, tokens);
                }
                let after = Box::pin(r.settle(hold, cost, tokens)).await;
                self.crossed(hold, cost, after);
            }
            Backend::Postgres(p) => {
                if hold.local {
                    p.local().settle(hold, cost, tokens);
                }
                let after = Box::pin(p.settle(hold, cost, tokens)).await;
                self.crossed(hold, cost, after);
            }
        }
    }

    /// What a scope's budget stands at, without taking anything (`None`: unknown). `tag`: its
    /// counters' hash tag when not its own ([`Hold::tag`]).
    pub async fn standing(
        &self,
        scope: &str,
        tag: Option<&str>,
        quota: &Quota,
    ) -> Option<Standing> {
        let budget = quota.budget?;
        let now = crate::clock::unix_ms();
        let period = PeriodAt::of(&budget, now).id;
        match &self.backend {
            Backend::Memory(m) => Some(m.standing(scope, &period, now)),
            Backend::Redis(r) => Box::pin(r.standing(scope, tag, &period)).await,
            Backend::Postgres(p) => Box::pin(p.standing(scope, &period, now)).await,
        }
    }

    pub fn kind(&self) -> &'static str {
        match &self.backend {
            Backend::Memory(_) => "memory",
            Backend::Redis(_) => "redis",
            Backend::Postgres(_) => "postgres",
        }
    }

    /// Whether the shared counter answers (always, in memory).
    pub fn connected(&self) -> bool {
        match &self.backend {
            Backend::Memory(_) => true,
            Backend::Redis(r) => r.connected(),
            Backend::Postgres(p) => p.connected(),
        }
    }

    /// For `/readyz` and `/admin/health`.
    pub fn describe(&self) -> Value {
        json!({"backend": self.kind(), "connected": self.connected()})
    }
}

/// The shared counter did not answer: a scope with a limit that fails closed refuses; one
/// whose limits all fail open is admitted on this replica's own count.
fn fallback(
    local: &MemoryMeters,
    scope: &Arc<str>,
    quota: &Quota,
    ask: Ask,
    ttl: Duration,
    now: i64,
) -> Verdict {
    if quota.fails_closed() {
        return Verdict::Unavailable;
    }
    match local.admit(scope, quota, ask, ttl, now) {
        Verdict::Held(mut h) => {
            h.local = true;
            Verdict::Held(h)
        }
        other => other,
    }
}

/// The holds one request has, settled together: explicitly with what it cost, or, if the
/// request ends any other way, on drop with nothing spent (so no hold outlives its request).
pub struct Holds {
    meter: Arc<Meter>,
    holds: Vec<Hold>,
}

impl std::fmt::Debug for Holds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(&self.holds).finish()
    }
}

impl Holds {
    pub fn new(meter: Arc<Meter>) -> Holds {
        Holds {
            meter,
            holds: Vec::new(),
        }
    }

    pub fn push(&mut self, h: Hold) {
        self.holds.push(h);
    }

    /// Takes `other`'s holds into these (settled together).
    pub fn absorb(&mut self, mut other: Holds) {
        self.holds.append(&mut other.holds);
    }

    /// Settles every hold to `cost` and `tokens`, off the request path.
    pub fn settle(mut self, cost: u64, tokens: u64) {
        self.spawn(cost, tokens);
    }

    fn spawn(&mut self, cost: u64, tokens: u64) {
        let holds = std::mem::take(&mut self.holds);
        // In process there is nothing to wait for: settled here, no task.
        if holds.is_empty() || self.meter.settle_here(&holds, cost, tokens) {
            return;
        }
        let meter = self.meter.clone();
        let settle = async move {
            // One admission's holds (a team's levels) are settled in one step.
            for group in holds.chunk_by(|a, b| a.id == b.id) {
                match group {
                    [h] => meter.settle(h, cost, tokens).await,
                    many => meter.settle_levels(many, cost, tokens).await,
                }
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(settle);
            }
            Err(_) => tracing::warn!("holds dropped outside a runtime: they expire by deadline"),
        }
    }
}

impl Drop for Holds {
    fn drop(&mut self) {
        self.spawn(0, 0);
    }
}
