//! Meters in this process: the rule every backend follows, on one mutex. Used alone (one
//! replica), and by the shared backends as the fallback for limits that fail open.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Ask, Denial, Hold, Levels, Limit, PeriodAt, Refusal, Standing, Verdict};
use crate::config::quota::Quota;

/// The rpm and tpm window.
const WINDOW_MS: i64 = 60_000;

/// One scope's counters.
#[derive(Debug, Default)]
pub struct Scope {
    /// The current budget period and what was spent in it.
    period: Arc<str>,
    /// The last period worked out, its kind, and when: valid from then until it ends, so a
    /// request in the same period reuses it rather than formatting its id again.
    at: Option<(crate::config::quota::Period, i64, PeriodAt)>,
    spent: u64,
    /// Micro-dollars held by requests in flight, and each hold: id → (micros, expires).
    reserved: u64,
    holds: HashMap<u64, (u64, i64)>,
    expiry: BTreeSet<(i64, u64)>,
    /// Admissions of the last minute, oldest first: (ts, id, tokens). With `rpm` alone, only
    /// the last `rpm` are kept: whether the rpm-th last is inside the window is the whole rule.
    window: VecDeque<(i64, u64, u64)>,
    window_tokens: u64,
    /// The scope has a `tpm`: settles correct their admission's tokens.
    counts_tokens: bool,
}

impl Scope {
    /// Holds past their deadline and admissions older than the window leave.
    fn sweep(&mut self, now: i64) {
        while let Some(&(at, id)) = self.expiry.first() {
            if at >= now {
                break;
            }
            self.expiry.pop_first();
            if let Some((micros, _)) = self.holds.remove(&id) {
                self.reserved = self.reserved.saturating_sub(micros);
            }
        }
        while let Some(&(ts, _, t)) = self.window.front() {
            if ts > now - WINDOW_MS {
                break;
            }
            self.window.pop_front();
            self.window_tokens = self.window_tokens.saturating_sub(t);
        }
    }

    fn roll(&mut self, period: &Arc<str>) {
        if self.period != *period {
            self.period = period.clone();
            self.spent = 0;
        }
    }

    /// The budget's period at `now`, from the last one worked out when still current.
    fn period_at(&mut self, b: &crate::config::quota::Budget, now: i64) -> PeriodAt {
        if let Some((kind, from, p)) = &self.at
            && *kind == b.period
            && *from <= now
            && now < p.ends
        {
            return p.clone();
        }
        let p = PeriodAt::of(b, now);
        self.at = Some((b.period, now, p.clone()));
        p
    }

    /// The rule: every limit has room for `ask`, or the first that does not refuses; then
    /// all of it is taken.
    fn admit(
        &mut self,
        q: &Quota,
        ask: Ask,
        id: u64,
        expires: i64,
        now: i64,
    ) -> Result<(Option<PeriodAt>, u64), Denial> {
        let period = self.check(q, ask, now)?;
        Ok(self.take(q, ask, (id, expires, now), period))
    }

    /// Whether every limit has room for `ask` (nothing taken): the budget period, or the
    /// first limit that refuses.
    fn check(&mut self, q: &Quota, ask: Ask, now: i64) -> Result<Option<PeriodAt>, Denial> {
        self.sweep(now);
        let mut period = None;
        if let Some(b) = q.budget {
            let p = self.period_at(&b, now);
            self.roll(&p.id);
            let used = self.spent.saturating_add(self.reserved);
            if !b.admits(used, ask.micros) {
                return Err((Limit::Budget, b.micros, used, p.ends - now));
            }
            period = Some(p);
        }
        if let Some(max) = q.max_concurrency
            && self.holds.len() as u64 >= u64::from(max)
        {
            return Err((
                Limit::Concurrency,
                u64::from(max),
                self.holds.len() as u64,
                1000,
            ));
        }
        let next_slot = || {
            self.window
                .front()
                .map_or(1000, |(ts, ..)| ts + WINDOW_MS - now)
        };
        if let Some(rpm) = q.rpm
            && self.window.len() as u64 >= u64::from(rpm)
        {
            return Err((
                Limit::Rpm,
                u64::from(rpm),
                self.window.len() as u64,
                next_slot(),
            ));
        }
        if let Some(tpm) = q.tpm
            && self.window_tokens.saturating_add(ask.tokens) > tpm
            && !self.window.is_empty()
        {
            return Err((Limit::Tpm, tpm, self.window_tokens, next_slot()));
        }
        Ok(period)
    }

    /// Takes `ask` (checked): the hold, its window entry; the budget used after it.
    fn take(
        &mut self,
        q: &Quota,
        ask: Ask,
        (id, expires, now): (u64, i64, i64),
        period: Option<PeriodAt>,
    ) -> (Option<PeriodAt>, u64) {
        self.reserved = self.reserved.saturating_add(ask.micros);
        self.holds.insert(id, (ask.micros, expires));
        self.expiry.insert((expires, id));
        self.counts_tokens = q.tpm.is_some();
        if q.rpm.is_some() || q.tpm.is_some() {
            self.window.push_back((now, id, ask.tokens));
            self.window_tokens = self.window_tokens.saturating_add(ask.tokens);
            if let (Some(rpm), None) = (q.rpm, q.tpm)
                && self.window.len() > rpm as usize
                && let Some((.., t)) = self.window.pop_front()
            {
                self.window_tokens = self.window_tokens.saturating_sub(t);
            }
        }
        let used = period
            .as_ref()
            .map_or(0, |_| self.spent.saturating_add(self.reserved));
        (period, used)
    }

    /// Returns the period's spend after a charge (none when nothing was charged).
    fn settle(&mut self, h: &Hold, cost: u64, tokens: u64) -> Option<u64> {
        let mut spent = None;
        if let Some((micros, expires)) = self.holds.remove(&h.id) {
            self.reserved = self.reserved.saturating_sub(micros);
            self.expiry.remove(&(expires, h.id));
        }
        if let Some(p) = &h.period
            && p.id == self.period
        {
            self.spent = self.spent.saturating_add(cost);
            spent = (cost > 0).then_some(self.spent);
        }
        // A settling request was admitted recently: it is near the back.
        if self.counts_tokens
            && let Some(entry) = self.window.iter_mut().rev().find(|e| e.1 == h.id)
        {
            self.window_tokens = self
                .window_tokens
                .saturating_sub(entry.2)
                .saturating_add(tokens);
            entry.2 = tokens;
        }
        spent
    }
}

/// Every scope's counters, and the end users each team counts, on one mutex (never held
/// across an await).
#[derive(Default)]
pub struct Meters {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Hashed by foldhash: a request hashes a scope name per level twice, and these names
    /// are the config's and the end users' ids, counted (bounded) per team.
    scopes: HashMap<Arc<str>, Scope, foldhash::fast::RandomState>,
    users: HashMap<Arc<str>, Tracked>,
}

/// The end users a team counts: each one's last admission, and the same in order of it.
#[derive(Default)]
struct Tracked {
    last: HashMap<Arc<str>, i64>,
    order: BTreeSet<(i64, Arc<str>)>,
}

impl Tracked {
    /// `user` admitted at `now`; returns the longest idle past `max`, to be forgotten.
    fn see(&mut self, user: &Arc<str>, now: i64, max: u64) -> Vec<Arc<str>> {
        if let Some(at) = self.last.insert(user.clone(), now) {
            self.order.remove(&(at, user.clone()));
        }
        self.order.insert((now, user.clone()));
        let over = (self.last.len() as u64).saturating_sub(max.max(1)) as usize;
        // The longest idle, never the user just seen (one admitted in the same ms sorts by name).
        let gone: Vec<(i64, Arc<str>)> = self
            .order
            .iter()
            .filter(|(_, u)| u != user)
            .take(over)
            .cloned()
            .collect();
        for entry in &gone {
            self.order.remove(entry);
            self.last.remove(&entry.1);
        }
        gone.into_iter().map(|(_, u)| u).collect()
    }
}

impl Meters {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn admit(&self, scope: &Arc<str>, q: &Quota, ask: Ask, ttl: Duration, now: i64) -> Verdict {
        let id = fastrand::u64(..);
        let expires = now + ttl.as_millis() as i64;
        let mut inner = self.lock();
        let s = inner.scopes.entry(scope.clone()).or_default();
        match s.admit(q, ask, id, expires, now) {
            Ok((period, used)) => Verdict::Held(Hold {
                scope: scope.clone(),
                tag: None,
                id,
                period,
                ask,
                used,
                cap: 0,
                local: false,
            }),
            Err(d) => Verdict::Refused(refusal(scope, d)),
        }
    }

    /// `ask` against every level at once (an end user, a key, its team, the organisation):
    /// held at all of them, or at none, with the first level that refuses. One lock, so no
    /// other request takes room between the checks and the holds.
    pub fn admit_levels(
        &self,
        l: &Levels<'_>,
        ask: Ask,
        ttl: Duration,
        now: i64,
    ) -> Result<Vec<Hold>, Refusal> {
        let id = fastrand::u64(..);
        let expires = now + ttl.as_millis() as i64;
        let mut inner = self.lock();
        let mut periods = Vec::with_capacity(l.levels.len());
        for (scope, q) in &l.levels {
            let s = inner.scopes.entry(scope.clone()).or_default();
            periods.push(s.check(q, ask, now).map_err(|d| refusal(scope, d))?);
        }
        let mut holds = Vec::with_capacity(l.levels.len());
        for ((scope, q), period) in l.levels.iter().zip(periods) {
            // Every level's scope was made by the check above.
            let Some(s) = inner.scopes.get_mut(scope) else {
                continue;
            };
            let (period, used) = s.take(q, ask, (id, expires, now), period);
            holds.push(Hold {
                scope: scope.clone(),
                tag: Some(l.tag.clone()),
                id,
                period,
                ask,
                used,
                cap: q.budget.map_or(0, |b| b.micros),
                local: false,
            });
        }
        if let (Some((team, max)), Some((user, _))) = (l.user, l.levels.first()) {
            let gone = inner
                .users
                .entry(team.clone())
                .or_default()
                .see(user, now, max);
            for u in gone {
                inner.scopes.remove(&u);
            }
        }
        Ok(holds)
    }

    /// How many end users `team` counts now.
    pub fn tracked(&self, team: &str) -> usize {
        self.lock().users.get(team).map_or(0, |t| t.last.len())
    }

    /// Settles each of `holds` under one lock, handing each its period's spend after it.
    pub fn settle_each(
        &self,
        holds: &[Hold],
        cost: u64,
        tokens: u64,
        mut after: impl FnMut(&Hold, Option<u64>),
    ) {
        let mut inner = self.lock();
        for h in holds {
            let spent = inner
                .scopes
                .get_mut(&h.scope)
                .and_then(|s| s.settle(h, cost, tokens));
            after(h, spent);
        }
    }

    /// Settles `h`; the period's spend after it, when it charged anything.
    pub fn settle(&self, h: &Hold, cost: u64, tokens: u64) -> Option<u64> {
        self.lock()
            .scopes
            .get_mut(&h.scope)?
            .settle(h, cost, tokens)
    }

    pub fn standing(&self, scope: &str, period: &str, now: i64) -> Standing {
        let mut inner = self.lock();
        match inner.scopes.get_mut(scope) {
            Some(s) => {
                s.sweep(now);
                let spent = if &*s.period == period { s.spent } else { 0 };
                Standing {
                    spent,
                    reserved: s.reserved,
                }
            }
            None => Standing::default(),
        }
    }
}

fn refusal(scope: &Arc<str>, (limit, cap, used, wait): Denial) -> Refusal {
    Refusal {
        scope: scope.clone(),
        limit,
        cap,
        used,
        retry_after: Duration::from_millis(wait.max(1) as u64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::quota::{Budget, Fail, Period};

    fn held(v: Verdict) -> Hold {
        match v {
            Verdict::Held(h) => h,
            other => panic!("refused: {other:?}"),
        }
    }

    fn refused(v: Verdict) -> Refusal {
        match v {
            Verdict::Refused(r) => r,
            other => panic!("admitted: {other:?}"),
        }
    }

    fn budget(micros: u64) -> Quota {
        Quota {
            budget: Some(Budget {
                micros,
                period: Period::Total,
                soft: None,
                fail: Fail::Closed,
            }),
            ..Quota::default()
        }
    }

    const TTL: Duration = Duration::from_secs(10);

    #[test]
    fn holds_in_flight_refuse_like_spend_and_settling_releases_the_difference() {
        let m = Meters::default();
        let s: Arc<str> = "key:a".into();
        let q = budget(100);
        let ask = Ask {
            micros: 60,
            tokens: 0,
        };
        let h1 = held(m.admit(&s, &q, ask, TTL, 0));
        // 60 held: another 60 does not fit, though nothing is spent yet.
        let r = refused(m.admit(&s, &q, ask, TTL, 1));
        assert_eq!((r.limit, r.cap, r.used), (Limit::Budget, 100, 60));
        m.settle(&h1, 10, 0);
        let h2 = held(m.admit(&s, &q, ask, TTL, 2));
        // An overdraw is charged: 10 + 95 spent, nothing is left, even for a free request.
        m.settle(&h2, 95, 0);
        let r = refused(m.admit(&s, &q, Ask::default(), TTL, 3));
        assert_eq!(r.used, 105);
        assert_eq!(m.standing(&s, "total", 3).spent, 105);
    }

    #[test]
    fn an_unsettled_hold_expires_by_its_deadline() {
        let m = Meters::default();
        let s: Arc<str> = "key:a".into();
        let q = Quota {
            max_concurrency: Some(1),
            ..budget(100)
        };
        let ask = Ask {
            micros: 100,
            tokens: 0,
        };
        let _lost = held(m.admit(&s, &q, ask, TTL, 0));
        assert_eq!(
            refused(m.admit(&s, &q, ask, TTL, 9_999)).limit,
            Limit::Budget
        );
        held(m.admit(&s, &q, ask, TTL, 10_001));
    }

    #[test]
    fn rpm_counts_admissions_in_any_minute_and_tpm_their_settled_tokens() {
        let m = Meters::default();
        let s: Arc<str> = "key:a".into();
        let q = Quota {
            rpm: Some(2),
            tpm: Some(1000),
            ..Quota::default()
        };
        let ask = Ask {
            micros: 0,
            tokens: 400,
        };
        let a = held(m.admit(&s, &q, ask, TTL, 0));
        held(m.admit(&s, &q, ask, TTL, 30_000));
        let r = refused(m.admit(&s, &q, ask, TTL, 59_000));
        assert_eq!(r.limit, Limit::Rpm);
        assert_eq!(r.retry_after, Duration::from_secs(1));
        // The first left the window at 60 s.
        let c = held(m.admit(&s, &q, ask, TTL, 60_000));
        m.settle(&a, 0, 0);
        // Tokens count as settled: 400 estimated became 900 real.
        let t: Arc<str> = "key:t".into();
        let q = Quota {
            tpm: Some(1000),
            ..Quota::default()
        };
        let d = held(m.admit(&t, &q, ask, TTL, 0));
        m.settle(&d, 0, 900);
        let r = refused(m.admit(&t, &q, ask, TTL, 1_000));
        assert_eq!((r.limit, r.used), (Limit::Tpm, 900));
        held(m.admit(&t, &q, ask, TTL, 60_001));
        m.settle(&c, 0, 0);
    }

    #[test]
    fn concurrency_counts_holds_until_they_settle() {
        let m = Meters::default();
        let s: Arc<str> = "channel:c".into();
        let q = Quota {
            max_concurrency: Some(2),
            ..Quota::default()
        };
        let a = held(m.admit(&s, &q, Ask::default(), TTL, 0));
        held(m.admit(&s, &q, Ask::default(), TTL, 0));
        assert_eq!(
            refused(m.admit(&s, &q, Ask::default(), TTL, 0)).limit,
            Limit::Concurrency
        );
        m.settle(&a, 0, 0);
        held(m.admit(&s, &q, Ask::default(), TTL, 0));
    }

    #[test]
    fn a_new_period_starts_from_nothing() {
        let m = Meters::default();
        let s: Arc<str> = "key:a".into();
        let mut q = budget(100);
        if let Some(b) = q.budget.as_mut() {
            b.period = Period::Day;
        }
        let ask = Ask {
            micros: 100,
            tokens: 0,
        };
        let h = held(m.admit(&s, &q, ask, TTL, 0));
        m.settle(&h, 100, 0);
        refused(m.admit(&s, &q, ask, TTL, 1_000));
        held(m.admit(&s, &q, ask, TTL, 86_400_000));
    }

    #[test]
    fn every_level_holds_or_none_does_and_the_refusal_names_its_level() {
        let m = Meters::default();
        let (key, team, org): (Arc<str>, Arc<str>, Arc<str>) =
            ("key:k".into(), "team:t".into(), "team:o".into());
        let rpm2 = Quota {
            rpm: Some(2),
            ..Quota::default()
        };
        let (loose, tight) = (Quota::default(), budget(100));
        let ask = Ask {
            micros: 60,
            tokens: 0,
        };
        let levels = Levels {
            tag: org.clone(),
            levels: vec![(key, &rpm2), (team, &loose), (org, &tight)],
            user: None,
        };
        let holds = m.admit_levels(&levels, ask, TTL, 0).unwrap();
        assert_eq!(holds.len(), 3);
        assert_eq!(holds[2].cap, 100);
        // The organisation's budget has 40 left: refused there, and nothing taken at the key
        // (its rpm window still has room for one more).
        let r = m.admit_levels(&levels, ask, TTL, 1).unwrap_err();
        assert_eq!((&*r.scope, r.limit), ("team:o", Limit::Budget));
        let small = Ask {
            micros: 30,
            tokens: 0,
        };
        assert_eq!(m.admit_levels(&levels, small, TTL, 2).unwrap().len(), 3);
        // Now the key's rpm is full: refused at the key, the organisation's 10 left untouched.
        let r = m.admit_levels(&levels, small, TTL, 3).unwrap_err();
        assert_eq!((&*r.scope, r.limit), ("key:k", Limit::Rpm));
        assert_eq!(m.standing("team:o", "total", 3).reserved, 90);
        // Settling gives back at every level.
        for h in &holds {
            m.settle(h, 0, 0);
        }
        assert_eq!(m.standing("team:o", "total", 4).reserved, 30);
    }

    #[test]
    fn a_team_counts_at_most_its_tracked_users_forgetting_the_longest_idle() {
        let m = Meters::default();
        let team: Arc<str> = "team:t".into();
        let q = budget(1_000);
        let ask = Ask {
            micros: 10,
            tokens: 0,
        };
        let admit = |user: &str, now: i64| {
            let l = Levels {
                tag: team.clone(),
                levels: vec![(Arc::from(format!("user:t/{user}")), &q)],
                user: Some((&team, 2)),
            };
            let holds = m.admit_levels(&l, ask, TTL, now).unwrap();
            m.settle(&holds[0], 10, 0);
        };
        admit("a", 0);
        admit("b", 1);
        admit("a", 2);
        assert_eq!(m.standing("user:t/b", "total", 3).spent, 10);
        // A third user: b, idle longest, is forgotten with its spend; a is kept.
        admit("c", 3);
        assert_eq!(m.tracked("team:t"), 2);
        assert_eq!(m.standing("user:t/b", "total", 4).spent, 0);
        assert_eq!(m.standing("user:t/a", "total", 4).spent, 20);
    }
}
