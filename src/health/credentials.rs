//! Credential pools: the runtime state of each channel's upstream keys. An attempt reserves a
//! credential first (healthy, not cooling, within its limits, most headroom); the reservation
//! is released when the attempt ends, cancelled or not. Keyed by channel name and credential
//! label, so state survives config reloads; never holds or shows the key itself.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::clock::Clock;
use crate::config::Limits;

#[derive(Debug, Default)]
struct CredState {
    in_flight: u32,
    /// rpm bucket: tokens left and when it was last refilled.
    tokens: f64,
    /// tpm bucket (refilled with the rpm bucket).
    budget: f64,
    refilled: Option<Instant>,
    cooling_until: Option<Instant>,
    /// 401: refused until the config changes or a probe with it succeeds.
    disabled: bool,
    /// When the last probe of a disabled credential started.
    probed_at: Option<Instant>,
    /// 403: cooled for one model only.
    model_cooling: HashMap<Arc<str>, Instant>,
}

/// Why no credential of a channel can take an attempt now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NoHeadroom {
    /// When the earliest credential frees up, if that is known.
    pub retry_in: Option<Duration>,
    /// Every key left was refused (401): waiting will not help until a reload or a probe.
    pub refused: bool,
}

type CredKey = (Arc<str>, Arc<str>);

/// Hashed by foldhash: every attempt reserves here (SipHash was 0.2 % of a request's
/// instructions, `bench/instructions.sh`).
#[derive(Default)]
struct PoolState {
    creds: HashMap<CredKey, CredState, foldhash::fast::RandomState>,
    /// Per channel: where the next reservation starts looking, so equals take turns.
    rotation: HashMap<Arc<str>, usize, foldhash::fast::RandomState>,
}

pub struct Pools {
    clock: Arc<dyn Clock>,
    state: Arc<Mutex<PoolState>>,
}

impl Reservation {
    /// The channel and the credential's label.
    pub fn key(&self) -> (&Arc<str>, &Arc<str>) {
        (&self.key.0, &self.key.1)
    }
}

/// A reserved credential: its index in the channel's list. Dropping it releases the slot and
/// settles the tpm charge against the real usage, when one was reported.
pub struct Reservation {
    pub index: usize,
    key: CredKey,
    state: Arc<Mutex<PoolState>>,
    /// Tokens charged up front (0 when the key has no tpm limit).
    charged: f64,
    used: Option<u64>,
}

impl Reservation {
    /// The attempt's real token count (prompt + completion), from the upstream's usage.
    pub fn used(&mut self, tokens: u64) {
        self.used = Some(tokens);
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = st.creds.get_mut(&self.key) {
            c.in_flight = c.in_flight.saturating_sub(1);
            // Settle to the real usage; without one (a failed or refused attempt) the
            // estimate is given back.
            if self.charged > 0.0 {
                c.budget += self.charged - self.used.map_or(self.charged, |u| u as f64);
            }
        }
    }
}

/// What an attempt's outcome says about the credential it used.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CredVerdict {
    RateLimited { retry_after: Option<Duration> },
    Refused,
    ForbiddenForModel,
}

impl Pools {
    pub fn new(clock: Arc<dyn Clock>) -> Pools {
        Pools {
            clock,
            state: Arc::new(Mutex::new(PoolState::default())),
        }
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reserves the credential with the most headroom among `labels` (skipping `tried`), or
    /// says when one frees up. A channel without credentials gets index 0 of an empty list.
    pub fn reserve(
        &self,
        channel: &Arc<str>,
        labels: &[(Arc<str>, Limits)],
        model: &str,
        tried: &[usize],
        estimate: u64,
    ) -> Result<Option<Reservation>, NoHeadroom> {
        self.reserve_preferring(channel, labels, model, tried, estimate, None)
    }

    /// As [`Pools::reserve`], taking `prefer` (a session's bound credential: its provider
    /// cache) whenever it has any headroom; when it has none the best other one serves.
    pub fn reserve_preferring(
        &self,
        channel: &Arc<str>,
        labels: &[(Arc<str>, Limits)],
        model: &str,
        tried: &[usize],
        estimate: u64,
        prefer: Option<&str>,
    ) -> Result<Option<Reservation>, NoHeadroom> {
        if labels.is_empty() {
            return Ok(None);
        }
        let now = self.clock.now();
        let mut st = self.lock();
        let start = st.rotation.get(channel).copied().unwrap_or(0);
        let mut best: Option<(usize, f64)> = None;
        let mut retry_in: Option<Duration> = None;
        let mut refused = true;
        let mut wait = |d: Duration| retry_in = Some(retry_in.map_or(d, |r: Duration| r.min(d)));
        // From the rotation point on, so that credentials with equal headroom take turns.
        for step in 0..labels.len() {
            let i = (start + step) % labels.len();
            let (label, limits) = &labels[i];
            if tried.contains(&i) {
                continue;
            }
            let c = st
                .creds
                .entry((channel.clone(), label.clone()))
                .or_default();
            refill(c, limits, now);
            if c.disabled {
                continue;
            }
            refused = false;
            if let Some(t) = c.cooling_until.filter(|t| *t > now) {
                wait(t - now);
                continue;
            }
            if let Some(t) = c.model_cooling.get(model).filter(|t| **t > now) {
                wait(*t - now);
                continue;
            }
            if limits.max_concurrency.is_some_and(|m| c.in_flight >= m) {
                continue;
            }
            if let Some(rpm) = limits.rpm
                && c.tokens < 1.0
            {
                // Time until the bucket holds one token again.
                wait(Duration::from_secs_f64(
                    (1.0 - c.tokens) * 60.0 / f64::from(rpm),
                ));
                continue;
            }
            if let Some(tpm) = limits.tpm
                && c.budget <= 0.0
            {
                // Time until the overdraft is paid back.
                wait(Duration::from_secs_f64(
                    (1.0 - c.budget) * 60.0 / f64::from(tpm),
                ));
                continue;
            }
            // Headroom: the smaller of the free shares of its limits (1.0 when unlimited).
            let conc = limits
                .max_concurrency
                .map_or(1.0, |m| 1.0 - f64::from(c.in_flight) / f64::from(m));
            let rate = limits.rpm.map_or(1.0, |r| c.tokens / f64::from(r));
            let budget = limits.tpm.map_or(1.0, |t| c.budget / f64::from(t));
            let mut headroom = conc.min(rate).min(budget);
            if prefer == Some(&**label) {
                headroom = f64::INFINITY;
            }
            if best.is_none_or(|(_, h)| headroom > h) {
                best = Some((i, headroom));
            }
        }
        let Some((index, _)) = best else {
            return Err(NoHeadroom { retry_in, refused });
        };
        st.rotation
            .insert(channel.clone(), (index + 1) % labels.len());
        let key = (channel.clone(), labels[index].0.clone());
        let mut charged = 0.0;
        if let Some(c) = st.creds.get_mut(&key) {
            c.in_flight += 1;
            if labels[index].1.rpm.is_some() {
                c.tokens -= 1.0;
            }
            if labels[index].1.tpm.is_some() {
                charged = estimate.max(1) as f64;
                c.budget -= charged;
            }
        }
        Ok(Some(Reservation {
            index,
            key,
            state: self.state.clone(),
            charged,
            used: None,
        }))
    }

    /// Cools or disables the credential an attempt used.
    /// Applies a verdict on a credential; returns the cooldown it started (for other replicas:
    /// the model it is for, when only that model is cooled, and how long).
    pub fn judge(
        &self,
        r: &Reservation,
        model: &str,
        v: CredVerdict,
        default_cooldown: Duration,
    ) -> Option<(Option<Arc<str>>, Duration)> {
        let now = self.clock.now();
        let mut st = self.lock();
        let c = st.creds.get_mut(&r.key)?;
        match v {
            CredVerdict::RateLimited { retry_after } => {
                // The longer of an earlier cooldown and this one: a short Retry-After does not
                // cut a longer wait short.
                let d = retry_after.unwrap_or(default_cooldown);
                let until = now + d;
                c.cooling_until = Some(c.cooling_until.map_or(until, |t| t.max(until)));
                Some((None, d))
            }
            CredVerdict::Refused => {
                c.disabled = true;
                tracing::warn!(
                    channel = &*r.key.0,
                    credential = &*r.key.1,
                    "upstream refused the credential (401): disabled until the config changes"
                );
                None
            }
            CredVerdict::ForbiddenForModel => {
                c.model_cooling.insert(model.into(), now + default_cooldown);
                tracing::warn!(
                    channel = &*r.key.0,
                    credential = &*r.key.1,
                    model,
                    "upstream forbade the credential for this model (403): cooled for it"
                );
                Some((Some(model.into()), default_cooldown))
            }
        }
    }

    /// Honours another replica's cooldown of a credential (for one model, or all).
    pub fn apply_cooled(
        &self,
        channel: &Arc<str>,
        label: &Arc<str>,
        model: Option<&Arc<str>>,
        cooldown: Duration,
    ) {
        let until = self.clock.now() + cooldown;
        let mut st = self.lock();
        let c = st
            .creds
            .entry((channel.clone(), label.clone()))
            .or_default();
        match model {
            Some(m) => {
                let t = c.model_cooling.entry(m.clone()).or_insert(until);
                *t = (*t).max(until);
            }
            None => c.cooling_until = Some(c.cooling_until.map_or(until, |t| t.max(until))),
        }
    }

    /// A disabled credential due for a probe (none in the last `interval`): its index, claimed.
    pub fn claim_credential_probe(
        &self,
        channel: &Arc<str>,
        labels: &[(Arc<str>, Limits)],
        interval: Duration,
    ) -> Option<usize> {
        let now = self.clock.now();
        let mut st = self.lock();
        for (i, (label, _)) in labels.iter().enumerate() {
            if let Some(c) = st.creds.get_mut(&(channel.clone(), label.clone()))
                && c.disabled
                && c.probed_at
                    .is_none_or(|t| now.duration_since(t) >= interval)
            {
                c.probed_at = Some(now);
                return Some(i);
            }
        }
        None
    }

    /// A probe with a disabled credential succeeded: it serves again.
    pub fn enable(&self, channel: &Arc<str>, label: &Arc<str>) {
        if let Some(c) = self.lock().creds.get_mut(&(channel.clone(), label.clone())) {
            c.disabled = false;
            tracing::info!(
                channel = &**channel,
                credential = &**label,
                "credential re-enabled by a probe"
            );
        }
    }

    /// The config changed: refused (401) credentials get another chance. Cooldowns, rate
    /// buckets and slots in flight are kept: the upstream's limits did not change with it.
    pub fn config_changed(&self) {
        for c in self.lock().creds.values_mut() {
            c.disabled = false;
        }
    }

    /// How many of `labels` (a channel's credentials) can take a call now: not refused, not
    /// cooling (a key cooled for one model only still counts).
    pub fn available(&self, channel: &str, labels: &[(Arc<str>, Limits)]) -> usize {
        let now = self.clock.now();
        let st = self.lock();
        labels
            .iter()
            .filter(|(label, _)| {
                let key = (Arc::<str>::from(channel), label.clone());
                st.creds
                    .get(&key)
                    .is_none_or(|c| !c.disabled && c.cooling_until.is_none_or(|t| t <= now))
            })
            .count()
    }

    /// Each credential's state by label, for `GET /admin/health`. Never the key.
    pub fn report(&self, channel: &str) -> Value {
        let now = self.clock.now();
        let st = self.lock();
        let mut rows: Vec<Value> = st
            .creds
            .iter()
            .filter(|((ch, _), _)| &**ch == channel)
            .map(|((_, label), c)| {
                json!({
                    "label": &**label,
                    "in_flight": c.in_flight,
                    "disabled": c.disabled,
                    "cooling_seconds_left": c.cooling_until
                        .filter(|t| *t > now)
                        .map(|t| t.duration_since(now).as_secs_f64()),
                    "models_forbidden": c.model_cooling
                        .iter()
                        .filter(|(_, t)| **t > now)
                        .map(|(m, _)| &**m)
                        .collect::<Vec<_>>(),
                })
            })
            .collect();
        rows.sort_by(|a, b| a["label"].as_str().cmp(&b["label"].as_str()));
        Value::Array(rows)
    }
}

/// Tops the rpm and tpm buckets up for the time since the last refill (full on first use).
fn refill(c: &mut CredState, limits: &Limits, now: Instant) {
    let minutes = c
        .refilled
        .map(|t| now.duration_since(t).as_secs_f64() / 60.0);
    let top = |level: &mut f64, per_minute: Option<u32>| {
        if let Some(cap) = per_minute.map(f64::from) {
            *level = match minutes {
                None => cap,
                Some(m) => (*level + m * cap).min(cap),
            };
        }
    };
    top(&mut c.tokens, limits.rpm);
    top(&mut c.budget, limits.tpm);
    c.refilled = Some(now);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn labels(n: usize, limits: Limits) -> Vec<(Arc<str>, Limits)> {
        (0..n).map(|i| (format!("k{i}").into(), limits)).collect()
    }

    #[test]
    fn concurrency_slots_are_held_until_released() {
        let p = Pools::new(ManualClock::new());
        let ch: Arc<str> = "c".into();
        let l = labels(
            2,
            Limits {
                max_concurrency: Some(1),
                ..Limits::default()
            },
        );
        let a = p.reserve(&ch, &l, "m", &[], 10).unwrap().unwrap();
        let b = p.reserve(&ch, &l, "m", &[], 10).unwrap().unwrap();
        assert_ne!(a.index, b.index);
        assert!(
            p.reserve(&ch, &l, "m", &[], 10).is_err(),
            "both slots taken"
        );
        drop(a);
        assert!(p.reserve(&ch, &l, "m", &[], 10).unwrap().is_some());
    }

    #[test]
    fn rate_limits_cool_one_credential_and_say_when_it_frees() {
        let clock = ManualClock::new();
        let p = Pools::new(clock.clone());
        let ch: Arc<str> = "c".into();
        let l = labels(2, Limits::default());
        let a = p.reserve(&ch, &l, "m", &[], 10).unwrap().unwrap();
        p.judge(
            &a,
            "m",
            CredVerdict::RateLimited {
                retry_after: Some(Duration::from_secs(2)),
            },
            Duration::from_secs(60),
        );
        let b = p.reserve(&ch, &l, "m", &[], 10).unwrap().unwrap();
        assert_ne!(a.index, b.index);
        p.judge(&b, "m", CredVerdict::Refused, Duration::from_secs(60));
        drop((a, b));
        let err = p.reserve(&ch, &l, "m", &[], 10).err().unwrap();
        assert_eq!(err.retry_in, Some(Duration::from_secs(2)));
        clock.advance(Duration::from_secs(2));
        assert_eq!(p.reserve(&ch, &l, "m", &[], 10).unwrap().unwrap().index, 0);
    }

    #[test]
    fn rpm_buckets_refill_over_time() {
        let clock = ManualClock::new();
        let p = Pools::new(clock.clone());
        let ch: Arc<str> = "c".into();
        let l = labels(
            1,
            Limits {
                rpm: Some(2),
                ..Limits::default()
            },
        );
        for _ in 0..2 {
            drop(p.reserve(&ch, &l, "m", &[], 10).unwrap());
        }
        let err = p.reserve(&ch, &l, "m", &[], 10).err().unwrap();
        assert_eq!(err.retry_in, Some(Duration::from_secs(30)));
        clock.advance(Duration::from_secs(30));
        assert!(p.reserve(&ch, &l, "m", &[], 10).is_ok());
    }

    #[test]
    fn forbidden_cools_only_that_model() {
        let p = Pools::new(ManualClock::new());
        let ch: Arc<str> = "c".into();
        let l = labels(1, Limits::default());
        let a = p.reserve(&ch, &l, "m1", &[], 10).unwrap().unwrap();
        p.judge(
            &a,
            "m1",
            CredVerdict::ForbiddenForModel,
            Duration::from_secs(60),
        );
        drop(a);
        assert!(p.reserve(&ch, &l, "m1", &[], 10).is_err());
        assert!(p.reserve(&ch, &l, "m2", &[], 10).is_ok());
        let report = p.report("c");
        assert_eq!(report[0]["models_forbidden"][0], "m1");
        assert!(!report.to_string().contains("sk-"));
    }

    #[test]
    fn tpm_charges_an_estimate_settles_to_usage_and_refills() {
        let clock = ManualClock::new();
        let p = Pools::new(clock.clone());
        let ch: Arc<str> = "c".into();
        let l = labels(
            1,
            Limits {
                tpm: Some(600),
                ..Limits::default()
            },
        );
        // Charged 500 up front, but the upstream used 700: the budget is overdrawn by 100.
        let mut r = p.reserve(&ch, &l, "m", &[], 500).unwrap().unwrap();
        r.used(700);
        drop(r);
        let err = p.reserve(&ch, &l, "m", &[], 10).err().unwrap();
        // 101 tokens at 600 per minute: about 10 s.
        let wait = err.retry_in.unwrap().as_secs_f64();
        assert!((wait - 10.1).abs() < 0.01, "{wait}");
        clock.advance(Duration::from_secs(11));
        assert!(p.reserve(&ch, &l, "m", &[], 10).is_ok());
    }
}
