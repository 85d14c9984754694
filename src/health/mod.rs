//! Channel health: a sliding window of each channel's own verdicts, a 0–100 score, a circuit
//! breaker, and rate-limit cooldowns. Keyed by channel name (and model, for `per_model`
//! channels), so state survives config reloads. Time comes from an injected [`Clock`], so tests
//! drive windows and cooldowns without sleeping.
//!
//! Locking: one `std::sync::Mutex` around the map, held only for short arithmetic, never across
//! an await.

mod budget;
mod credentials;
mod signals;
mod view;
mod window;

pub use budget::RetryBudget;
pub use credentials::{CredVerdict, NoHeadroom, Pools, Reservation};
pub use signals::{Busy, Counts, Sample, Signal, Signals};

/// What an answer holds while it lasts: its credential's reservation and, while routing
/// measures, its place among the channel's requests in flight.
#[derive(Default)]
pub struct Slot {
    pub credential: Option<Reservation>,
    pub busy: Option<Busy>,
}

impl Slot {
    /// The answer's usage: the credential's real token count, the channel's cache figure.
    pub fn settle(&mut self, u: &crate::protocol::Usage) {
        if let (Some(r), Some(total)) = (self.credential.as_mut(), u.total()) {
            r.used(total);
        }
        // Only an upstream that reports its cache says anything about it.
        if let (Some(b), Some(input), Some(cached)) = (&self.busy, u.input_tokens, u.cached_tokens)
        {
            b.usage(input, cached);
        }
    }
}

use window::Window;

use crate::clock::Clock;
use crate::config::{BreakerSettings, Channel, HealthSettings, Snapshot};

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::json;

/// Why a probe is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeReason {
    /// The open circuit's cooldown is over: probes decide when it closes.
    Recovery,
    /// Closed, but scoring low: probes let the score rise without risking client requests.
    LowScore,
}

/// An open circuit's cooldown doubles on each failed trial, up to this many times the setting.
const MAX_COOLDOWN_FACTOR: u32 = 5;

/// What one attempt says about a channel.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    Success {
        latency: Duration,
    },
    /// A retryable failure of the channel's own (connection, its own timeout, 5xx...).
    Failure {
        latency: Duration,
    },
    RateLimited {
        retry_after: Option<Duration>,
    },
    /// Says nothing about the channel (the client's own error, a caller's tighter deadline).
    Neutral,
}

/// Why a channel is not tried now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    CircuitOpen,
    RateLimited,
    /// Half-open, and another request is already its trial.
    TrialInFlight,
    /// No credential of the channel has headroom (cooling, at its limits).
    NoCredential,
    /// Every credential of the channel was refused (401).
    CredentialsRefused,
    /// Not a health verdict: the process-wide retry budget refused the call.
    RetryBudget,
    /// Not a health verdict: the request does not fit the model's context window; the route's
    /// context fallback serves it.
    ContextWindow,
    /// Not a health verdict: the channel's own budget has no room for the request.
    ChannelBudget,
    /// Not a health verdict: the channel's own `rpm`, `tpm` or `max_concurrency` is reached.
    ChannelLimited,
    /// Not a health verdict: the shared counter for the channel's limits did not answer and
    /// they fail closed.
    ChannelMeterDown,
}

impl Skip {
    pub fn as_str(self) -> &'static str {
        match self {
            Skip::CircuitOpen => "circuit_open",
            Skip::RateLimited => "rate_limited_cooldown",
            Skip::TrialInFlight => "circuit_half_open",
            Skip::NoCredential => "no_credential_headroom",
            Skip::CredentialsRefused => "credentials_refused",
            Skip::RetryBudget => "retry_budget_exhausted",
            Skip::ContextWindow => "context_window",
            Skip::ChannelBudget => "channel_budget_exhausted",
            Skip::ChannelLimited => "channel_rate_limited",
            Skip::ChannelMeterDown => "channel_budget_unavailable",
        }
    }
}

/// A channel's standing for routing, read once per request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Standing {
    pub skip: Option<Skip>,
    /// 0–100.
    pub score: f64,
    /// Multiplies the channel's weight inside its tier.
    pub factor: f64,
    /// The next attempt is the half-open trial: take it with [`Health::begin_trial`].
    pub half_open: bool,
    /// For a rate-limit cooldown: how long until it ends.
    pub retry_in: Option<Duration>,
}

impl Standing {
    pub fn healthy() -> Standing {
        Standing {
            skip: None,
            score: 100.0,
            factor: 1.0,
            half_open: false,
            retry_in: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    pub channel: Arc<str>,
    pub model: Option<Arc<str>>,
}

impl Key {
    /// A channel's key for a model: per model when its breaker keeps health per model.
    pub fn of(ch: &Channel, model: &str) -> Key {
        Key {
            channel: ch.name.clone(),
            model: ch.breaker.per_model.then(|| model.into()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Circuit {
    Closed,
    Open { until: Instant },
    HalfOpen { trial: bool },
}

#[derive(Debug)]
struct Entry {
    window: Window,
    /// Times of recent retryable failures, for the breaker's own window.
    failures: VecDeque<Instant>,
    circuit: Circuit,
    /// The cooldown the next opening uses (doubles on failed trials).
    cooldown: Duration,
    cooling_until: Option<Instant>,
    /// When the circuit last closed after being open (slow start runs from here).
    recovered_at: Option<Instant>,
    probe_in_flight: bool,
    /// Consecutive probe successes while open (`success_threshold` closes it).
    probe_successes: u32,
    last_probe: Option<(Instant, bool)>,
}

impl Entry {
    fn new(b: &BreakerSettings) -> Entry {
        Entry {
            window: Window::default(),
            failures: VecDeque::new(),
            circuit: Circuit::Closed,
            cooldown: b.cooldown,
            cooling_until: None,
            recovered_at: None,
            probe_in_flight: false,
            probe_successes: 0,
            last_probe: None,
        }
    }

    fn prune(&mut self, now: Instant, s: &HealthSettings, b: &BreakerSettings) {
        self.window.prune(now, s.window, s.window_size);
        while self
            .failures
            .front()
            .is_some_and(|t| now.duration_since(*t) > b.window)
        {
            self.failures.pop_front();
        }
    }

    fn score(&self, s: &HealthSettings) -> f64 {
        self.window.score(s)
    }
}

/// A change in this process that other replicas should honour (published through shared state).
#[derive(Debug, Clone, PartialEq)]
pub enum Shared {
    /// A circuit opened here: skip the channel for `cooldown`.
    CircuitOpened { key: Key, cooldown: Duration },
    /// A keyless channel answered 429 here: cool it for `cooldown`.
    ChannelCooled { key: Key, cooldown: Duration },
    /// A credential answered 429 (all models) or 403 (`model` only) here.
    CredentialCooled {
        channel: Arc<str>,
        label: Arc<str>,
        model: Option<Arc<str>>,
        cooldown: Duration,
    },
}

type Entries = HashMap<Key, Entry, foldhash::fast::RandomState>;

pub struct Health {
    clock: Arc<dyn Clock>,
    /// Where changes to share go (set when shared state runs); never waited on.
    shared: std::sync::OnceLock<tokio::sync::mpsc::Sender<Shared>>,
    /// Where circuit and credential events go (a default emitter discards them).
    events: crate::events::Emitter,
    /// Hashed by foldhash: every attempt looks its key up here (SipHash was 0.3 % of a
    /// request's instructions, `bench/instructions.sh`).
    entries: Mutex<Entries>,
    /// The channels' credentials (their own locks; never held with `entries`).
    pub pools: Pools,
    /// Retries and failovers against requests, process-wide.
    pub retries: RetryBudget,
    /// Latency, load and cache figures the measured strategies read.
    pub signals: Arc<Signals>,
    /// Smooth weighted round robin: each (group, channel)'s current weight.
    rr: Mutex<HashMap<(String, Arc<str>), f64>>,
}

impl Health {
    pub fn new(clock: Arc<dyn Clock>) -> Health {
        Health {
            pools: Pools::new(clock.clone()),
            retries: RetryBudget::new(clock.clone()),
            signals: Arc::new(Signals::new(clock.clone())),
            shared: std::sync::OnceLock::new(),
            events: crate::events::Emitter::default(),
            clock,
            entries: Mutex::new(Entries::default()),
            rr: Mutex::new(HashMap::new()),
        }
    }

    /// The changes this process makes that replicas should honour. Call once; later calls get a
    /// receiver that never yields.
    pub fn share(&self) -> tokio::sync::mpsc::Receiver<Shared> {
        let (tx, rx) = tokio::sync::mpsc::channel(1024);
        let _ = self.shared.set(tx);
        rx
    }

    /// Health, sending its circuit and credential events to `events`.
    pub fn with_events(mut self, events: crate::events::Emitter) -> Health {
        self.events = events;
        self
    }

    fn emit(&self, ev: Shared) {
        if let Some(tx) = self.shared.get()
            && tx.try_send(ev).is_err()
        {
            tracing::warn!("shared-state queue full: a circuit change was not published");
        }
    }

    /// Judges a credential (see [`Pools::judge`]) and shares the cooldown it starts.
    pub fn judge_credential(
        &self,
        r: &Reservation,
        model: &str,
        v: CredVerdict,
        default_cooldown: Duration,
    ) {
        let (channel, label) = r.key();
        if v == CredVerdict::Refused {
            self.events.emit(
                "credential.disabled",
                json!({"channel": &**channel, "label": &**label, "status": 401}),
            );
        }
        if let Some((model, cooldown)) = self.pools.judge(r, model, v, default_cooldown) {
            self.events.emit(
                "credential.cooling",
                json!({"channel": &**channel, "label": &**label, "model": model.as_deref(),
                       "cooldown_seconds": cooldown.as_secs_f64(),
                       "status": if model.is_some() { 403 } else { 429 }}),
            );
            self.emit(Shared::CredentialCooled {
                channel: channel.clone(),
                label: label.clone(),
                model,
                cooldown,
            });
        }
    }

    /// Honours another replica's change: the circuit opens (or the channel or credential
    /// cools) here too, for the same time (unless it already is, for longer). Not published
    /// again.
    pub fn apply(&self, ev: &Shared, b: &BreakerSettings) {
        if let Shared::CredentialCooled {
            channel,
            label,
            model,
            cooldown,
        } = ev
        {
            self.pools
                .apply_cooled(channel, label, model.as_ref(), *cooldown);
            return;
        }
        if !b.enabled {
            return;
        }
        let now = self.clock.now();
        match ev {
            Shared::CredentialCooled { .. } => {}
            Shared::ChannelCooled { key, cooldown } => {
                let mut map = self.lock();
                let e = map.entry(key.clone()).or_insert_with(|| Entry::new(b));
                let until = now + *cooldown;
                e.cooling_until = Some(e.cooling_until.map_or(until, |t| t.max(until)));
            }
            Shared::CircuitOpened { key, cooldown } => {
                let mut map = self.lock();
                let e = map.entry(key.clone()).or_insert_with(|| Entry::new(b));
                let until = now + *cooldown;
                let later = match e.circuit {
                    Circuit::Open { until: u } => until > u,
                    _ => true,
                };
                if later {
                    e.circuit = Circuit::Open { until };
                    tracing::info!(
                        channel = &*key.channel,
                        model = key.model.as_deref(),
                        cooldown_s = cooldown.as_secs(),
                        "circuit opened by another replica"
                    );
                }
            }
        }
    }

    /// Smooth weighted round robin (as nginx does): every item gains its weight, the one with
    /// the most is picked and pays the total back. Over Σw picks each item is picked w times,
    /// interleaved. Returns the index into `items`.
    pub fn round_robin(&self, group: &str, items: &[(Arc<str>, f64)]) -> usize {
        let mut rr = self.rr.lock().unwrap_or_else(|e| e.into_inner());
        let total: f64 = items.iter().map(|(_, w)| *w).sum();
        let mut best = 0;
        let mut best_current = f64::NEG_INFINITY;
        for (i, (name, w)) in items.iter().enumerate() {
            let c = rr.entry((group.to_string(), name.clone())).or_insert(0.0);
            *c += *w;
            if *c > best_current {
                best_current = *c;
                best = i;
            }
        }
        if let Some((name, _)) = items.get(best)
            && let Some(c) = rr.get_mut(&(group.to_string(), name.clone()))
        {
            *c -= total;
        }
        best
    }

    fn lock(&self) -> MutexGuard<'_, Entries> {
        // A panic elsewhere while holding the lock leaves plain numbers: keep using them.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The channel's standing now. An open circuit whose cooldown has passed turns half-open.
    /// The health view routing reads for `model`: each channel's standing, by index.
    pub fn view<'a>(
        &'a self,
        snap: &'a Snapshot,
        model: &'a str,
    ) -> impl Fn(usize) -> Standing + 'a {
        move |i| match snap.channels.get(i) {
            Some(ch) => self.standing(&Key::of(ch, model), &snap.health, &ch.breaker),
            None => Standing::healthy(),
        }
    }

    pub fn standing(&self, key: &Key, s: &HealthSettings, b: &BreakerSettings) -> Standing {
        if !b.enabled {
            return Standing::healthy();
        }
        let now = self.clock.now();
        let mut map = self.lock();
        let Some(e) = map.get_mut(key) else {
            return Standing::healthy();
        };
        e.prune(now, s, b);
        // Without probes an expired cooldown lets one live request be the trial; with them
        // the circuit stays open (no client request is risked) until probes close it.
        if let Circuit::Open { until } = e.circuit
            && now >= until
            && b.probe.is_none()
        {
            e.circuit = Circuit::HalfOpen { trial: false };
        }
        let score = e.score(s);
        let skip = match e.circuit {
            Circuit::Open { .. } => Some(Skip::CircuitOpen),
            // Probes test it (e.g. probes were switched on by a reload while half-open).
            Circuit::HalfOpen { trial: false } if b.probe.is_some() => Some(Skip::CircuitOpen),
            Circuit::HalfOpen { trial: true } => Some(Skip::TrialInFlight),
            _ if e.cooling_until.is_some_and(|t| now < t) => Some(Skip::RateLimited),
            _ => None,
        };
        // Slow start: a just-recovered channel takes a growing share, not all of it at once.
        let ramp = match e.recovered_at {
            Some(t) if !b.slow_start.is_zero() && now.duration_since(t) < b.slow_start => {
                now.duration_since(t).as_secs_f64() / b.slow_start.as_secs_f64()
            }
            _ => 1.0,
        };
        Standing {
            skip,
            score,
            factor: (ramp * score / 100.0).max(s.min_factor),
            half_open: b.probe.is_none() && matches!(e.circuit, Circuit::HalfOpen { trial: false }),
            retry_in: e
                .cooling_until
                .filter(|t| *t > now)
                .map(|t| t.duration_since(now)),
        }
    }

    /// Claims the single half-open trial (an open circuit whose cooldown has passed is
    /// half-open); false when another request holds it, the circuit is not half-open, or
    /// probes (not client requests) test this channel.
    pub fn begin_trial(&self, key: &Key, b: &BreakerSettings) -> bool {
        if b.probe.is_some() {
            return false;
        }
        let now = self.clock.now();
        let mut map = self.lock();
        let Some(e) = map.get_mut(key) else {
            return false;
        };
        let due = match e.circuit {
            Circuit::HalfOpen { trial } => !trial,
            Circuit::Open { until } => now >= until,
            Circuit::Closed => false,
        };
        if due {
            e.circuit = Circuit::HalfOpen { trial: true };
        }
        due
    }

    /// Claims a probe of `key` if one is due: a recovery probe once an open circuit's
    /// cooldown is over, or a periodic one for a closed channel scoring below the bar. Healthy
    /// channels are never probed. The caller runs it and reports with [`Health::probe_result`].
    pub fn claim_probe(
        &self,
        key: &Key,
        s: &HealthSettings,
        b: &BreakerSettings,
    ) -> Option<ProbeReason> {
        let p = b.probe.filter(|_| b.enabled)?;
        let now = self.clock.now();
        let mut map = self.lock();
        let e = map.get_mut(key)?;
        if e.probe_in_flight {
            return None;
        }
        e.prune(now, s, b);
        let reason = match e.circuit {
            Circuit::Open { until } if now >= until => ProbeReason::Recovery,
            Circuit::HalfOpen { trial: false } => ProbeReason::Recovery,
            Circuit::Closed
                if e.score(s) < p.unhealthy_below
                    && e.last_probe
                        .is_none_or(|(t, _)| now.duration_since(t) >= p.interval) =>
            {
                ProbeReason::LowScore
            }
            _ => return None,
        };
        e.probe_in_flight = true;
        Some(reason)
    }

    /// A probe's outcome. Recovery: `success_threshold` successes close the circuit, a failure
    /// re-opens it with the cooldown doubled. Low score: the result is one more verdict.
    pub fn probe_result(
        &self,
        key: &Key,
        s: &HealthSettings,
        b: &BreakerSettings,
        ok: bool,
        latency: Duration,
    ) {
        let now = self.clock.now();
        let threshold = b.probe.map_or(1, |p| p.success_threshold.max(1));
        {
            let mut map = self.lock();
            let Some(e) = map.get_mut(key) else {
                return;
            };
            e.probe_in_flight = false;
            e.last_probe = Some((now, ok));
            let recovering = match e.circuit {
                Circuit::Open { until } => now >= until,
                Circuit::HalfOpen { trial } => !trial,
                Circuit::Closed => false,
            };
            if recovering {
                if ok {
                    e.probe_successes += 1;
                    if e.probe_successes < threshold {
                        return;
                    }
                    e.probe_successes = 0;
                    // Closing goes through the half-open path so recovery is handled once.
                    e.circuit = Circuit::HalfOpen { trial: true };
                } else {
                    e.probe_successes = 0;
                    e.circuit = Circuit::HalfOpen { trial: true };
                }
            }
        }
        let v = if ok {
            Verdict::Success { latency }
        } else {
            Verdict::Failure { latency }
        };
        self.record(key, s, b, v);
    }

    /// Gives a probe claim back without a verdict (the probe could not run: no usable key,
    /// the channel is gone, the task ended early).
    pub fn release_probe(&self, key: &Key) {
        if let Some(e) = self.lock().get_mut(key) {
            e.probe_in_flight = false;
        }
    }

    /// Every key health holds for a channel (one, or one per model for `per_model`).
    pub fn keys_of(&self, channel: &str) -> Vec<Key> {
        self.lock()
            .keys()
            .filter(|k| &*k.channel == channel)
            .cloned()
            .collect()
    }

    /// Gives the trial back unjudged (the request was cancelled or gave up mid-trial).
    pub fn release_trial(&self, key: &Key) {
        let mut map = self.lock();
        if let Some(e) = map.get_mut(key)
            && e.circuit == (Circuit::HalfOpen { trial: true })
        {
            e.circuit = Circuit::HalfOpen { trial: false };
        }
    }

    pub fn record(&self, key: &Key, s: &HealthSettings, b: &BreakerSettings, v: Verdict) {
        if !b.enabled || v == Verdict::Neutral {
            return;
        }
        let now = self.clock.now();
        let mut opened = None;
        let mut closed = None;
        let mut cooled = None;
        let mut map = self.lock();
        let e = map.entry(key.clone()).or_insert_with(|| Entry::new(b));
        e.prune(now, s, b);
        match v {
            Verdict::Success { latency } => {
                e.window.push(now, true, latency, s);
                if matches!(e.circuit, Circuit::HalfOpen { .. }) {
                    e.circuit = Circuit::Closed;
                    closed = Some((e.cooldown, e.failures.len()));
                    e.cooldown = b.cooldown;
                    e.failures.clear();
                    e.recovered_at = Some(now);
                    tracing::info!(
                        channel = &*key.channel,
                        model = key.model.as_deref(),
                        "circuit closed: the channel recovered and ramps up"
                    );
                }
            }
            Verdict::Failure { latency } => {
                e.window.push(now, false, latency, s);
                e.failures.push_back(now);
                match e.circuit {
                    Circuit::HalfOpen { .. } => {
                        e.cooldown = (e.cooldown * 2).min(b.cooldown * MAX_COOLDOWN_FACTOR);
                        e.circuit = Circuit::Open {
                            until: now + e.cooldown,
                        };
                        opened = Some((e.cooldown, e.failures.len()));
                    }
                    Circuit::Closed if e.failures.len() >= b.failure_threshold as usize => {
                        e.circuit = Circuit::Open {
                            until: now + e.cooldown,
                        };
                        opened = Some((e.cooldown, e.failures.len()));
                        tracing::warn!(
                            channel = &*key.channel,
                            model = key.model.as_deref(),
                            cooldown_s = e.cooldown.as_secs(),
                            "circuit opened: the channel is skipped until its cooldown ends"
                        );
                    }
                    _ => {}
                }
            }
            Verdict::RateLimited { retry_after } => {
                let d = retry_after.unwrap_or(b.rate_limit_cooldown);
                cooled = Some(d);
                let until = now + d;
                e.cooling_until = Some(e.cooling_until.map_or(until, |t| t.max(until)));
                // A rate limit is not a broken channel: a half-open trial that met one ends
                // without a verdict.
                if e.circuit == (Circuit::HalfOpen { trial: true }) {
                    e.circuit = Circuit::HalfOpen { trial: false };
                }
            }
            Verdict::Neutral => {}
        }
        e.window.prune(now, s.window, s.window_size);
        drop(map);
        if let Some((cooldown, failures)) = opened {
            self.events.emit(
                "circuit.opened",
                json!({"channel": &*key.channel, "model": key.model.as_deref(),
                       "failures": failures, "cooldown_seconds": cooldown.as_secs_f64()}),
            );
            self.emit(Shared::CircuitOpened {
                key: key.clone(),
                cooldown,
            });
        }
        if let Some((cooldown, failures)) = closed {
            self.events.emit(
                "circuit.closed",
                json!({"channel": &*key.channel, "model": key.model.as_deref(),
                       "failures": failures, "cooldown_seconds": cooldown.as_secs_f64()}),
            );
        }
        if let Some(cooldown) = cooled {
            self.emit(Shared::ChannelCooled {
                key: key.clone(),
                cooldown,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::config::ProbeSettings;

    fn key(c: &str) -> Key {
        Key {
            channel: c.into(),
            model: None,
        }
    }

    fn fail() -> Verdict {
        Verdict::Failure {
            latency: Duration::from_millis(10),
        }
    }

    fn ok(ms: u64) -> Verdict {
        Verdict::Success {
            latency: Duration::from_millis(ms),
        }
    }

    /// A health whose channel `a` has just had its circuit opened (three failures).
    fn opened(
        b: BreakerSettings,
    ) -> (
        Arc<ManualClock>,
        Health,
        HealthSettings,
        BreakerSettings,
        Key,
    ) {
        let clock = ManualClock::new();
        let h = Health::new(clock.clone());
        let s = HealthSettings::default();
        let k = key("a");
        for _ in 0..3 {
            h.record(&k, &s, &b, fail());
        }
        (clock, h, s, b, k)
    }

    /// Breaker settings without probes: a half-open circuit is tested by a live request.
    fn live_trials() -> BreakerSettings {
        BreakerSettings {
            probe: None,
            ..BreakerSettings::default()
        }
    }

    #[test]
    fn threshold_opens_cooldown_half_opens_one_trial_closes() {
        let clock = ManualClock::new();
        let h = Health::new(clock.clone());
        let (s, b) = (HealthSettings::default(), live_trials());
        let k = key("a");
        h.record(&k, &s, &b, fail());
        h.record(&k, &s, &b, fail());
        assert_eq!(h.standing(&k, &s, &b).skip, None);
        h.record(&k, &s, &b, fail());
        assert_eq!(h.standing(&k, &s, &b).skip, Some(Skip::CircuitOpen));
        clock.advance(Duration::from_secs(59));
        assert_eq!(h.standing(&k, &s, &b).skip, Some(Skip::CircuitOpen));
        clock.advance(Duration::from_secs(1));
        let st = h.standing(&k, &s, &b);
        assert!(st.half_open && st.skip.is_none());
        assert!(h.begin_trial(&k, &b));
        assert!(!h.begin_trial(&k, &b), "only one trial at a time");
        assert_eq!(h.standing(&k, &s, &b).skip, Some(Skip::TrialInFlight));
        h.record(&k, &s, &b, ok(5));
        let st = h.standing(&k, &s, &b);
        assert_eq!(st.skip, None);
        assert!(!st.half_open);
    }

    #[test]
    fn a_recovered_channel_ramps_up_over_slow_start() {
        let (clock, h, s, b, k) = opened(live_trials());
        clock.advance(Duration::from_secs(60));
        assert!(h.begin_trial(&k, &b));
        h.record(&k, &s, &b, ok(5));
        let f0 = h.standing(&k, &s, &b).factor;
        clock.advance(Duration::from_secs(15));
        let f15 = h.standing(&k, &s, &b).factor;
        clock.advance(Duration::from_secs(15));
        let f30 = h.standing(&k, &s, &b).factor;
        let score = h.standing(&k, &s, &b).score / 100.0;
        assert_eq!(f0, s.min_factor);
        assert!((f15 - 0.5 * score).abs() < 1e-9, "{f15}");
        assert!((f30 - score).abs() < 1e-9, "{f30}");
    }

    #[test]
    fn a_failed_trial_doubles_the_cooldown_up_to_five_times() {
        let (clock, h, s, b, k) = opened(live_trials());
        let mut expected = 60;
        for want in [120, 240, 300, 300] {
            clock.advance(Duration::from_secs(expected));
            assert!(h.standing(&k, &s, &b).half_open);
            assert!(h.begin_trial(&k, &b));
            h.record(&k, &s, &b, fail());
            clock.advance(Duration::from_secs(want - 1));
            assert_eq!(
                h.standing(&k, &s, &b).skip,
                Some(Skip::CircuitOpen),
                "{want}"
            );
            expected = 1;
        }
    }

    #[test]
    fn failures_outside_the_window_do_not_open() {
        let clock = ManualClock::new();
        let h = Health::new(clock.clone());
        let (s, b) = (HealthSettings::default(), BreakerSettings::default());
        let k = key("a");
        for _ in 0..5 {
            h.record(&k, &s, &b, fail());
            clock.advance(Duration::from_secs(16));
        }
        assert_eq!(h.standing(&k, &s, &b).skip, None);
    }

    #[test]
    fn rate_limits_cool_for_retry_after_or_the_setting() {
        let clock = ManualClock::new();
        let h = Health::new(clock.clone());
        let (s, b) = (HealthSettings::default(), BreakerSettings::default());
        let k = key("a");
        h.record(
            &k,
            &s,
            &b,
            Verdict::RateLimited {
                retry_after: Some(Duration::from_secs(2)),
            },
        );
        assert_eq!(h.standing(&k, &s, &b).skip, Some(Skip::RateLimited));
        clock.advance(Duration::from_millis(1999));
        assert_eq!(h.standing(&k, &s, &b).skip, Some(Skip::RateLimited));
        clock.advance(Duration::from_millis(1));
        assert_eq!(h.standing(&k, &s, &b).skip, None);
        h.record(&k, &s, &b, Verdict::RateLimited { retry_after: None });
        clock.advance(Duration::from_secs(14));
        assert_eq!(h.standing(&k, &s, &b).skip, Some(Skip::RateLimited));
        clock.advance(Duration::from_secs(1));
        assert_eq!(h.standing(&k, &s, &b).skip, None);
    }

    #[test]
    fn score_follows_the_formula_and_client_errors_do_not_count() {
        let clock = ManualClock::new();
        let h = Health::new(clock);
        let (s, b) = (HealthSettings::default(), BreakerSettings::default());
        let k = key("a");
        // 3 successes at 1 s (latency score 1), 1 at 5.5 s (0.5), 1 failure.
        for _ in 0..3 {
            h.record(&k, &s, &b, ok(1000));
        }
        h.record(&k, &s, &b, ok(5500));
        h.record(&k, &s, &b, Verdict::Neutral);
        h.record(&k, &s, &b, fail());
        let expected = 100.0 * (0.7 * 0.8 + 0.3 * (3.5 / 4.0));
        let st = h.standing(&k, &s, &b);
        assert!(
            (st.score - expected).abs() < 1e-9,
            "{} vs {expected}",
            st.score
        );
        assert!((st.factor - expected / 100.0).abs() < 1e-9);
    }

    #[test]
    fn the_floor_keeps_a_trickle_and_disabled_breakers_ignore_health() {
        let clock = ManualClock::new();
        let h = Health::new(clock);
        let s = HealthSettings::default();
        let b = BreakerSettings {
            failure_threshold: 100,
            ..BreakerSettings::default()
        };
        let k = key("a");
        for _ in 0..10 {
            h.record(&k, &s, &b, fail());
        }
        let st = h.standing(&k, &s, &b);
        assert_eq!(st.score, 0.0);
        assert_eq!(st.factor, s.min_factor);
        let off = BreakerSettings {
            enabled: false,
            ..b
        };
        assert_eq!(h.standing(&k, &s, &off), Standing::healthy());
    }

    #[test]
    fn per_model_keys_are_separate() {
        let clock = ManualClock::new();
        let h = Health::new(clock);
        let (s, b) = (HealthSettings::default(), BreakerSettings::default());
        let k1 = Key {
            channel: "a".into(),
            model: Some("m1".into()),
        };
        let k2 = Key {
            channel: "a".into(),
            model: Some("m2".into()),
        };
        for _ in 0..3 {
            h.record(&k1, &s, &b, fail());
        }
        assert_eq!(h.standing(&k1, &s, &b).skip, Some(Skip::CircuitOpen));
        assert_eq!(h.standing(&k2, &s, &b).skip, None);
    }

    #[test]
    fn with_probes_no_client_request_is_the_trial_and_probes_close_it() {
        let clock = ManualClock::new();
        let h = Health::new(clock.clone());
        let s = HealthSettings::default();
        let b = BreakerSettings {
            probe: Some(ProbeSettings {
                success_threshold: 2,
                ..ProbeSettings::default()
            }),
            ..BreakerSettings::default()
        };
        let k = key("a");
        for _ in 0..3 {
            h.record(&k, &s, &b, fail());
        }
        assert_eq!(h.claim_probe(&k, &s, &b), None, "cooldown not over");
        clock.advance(Duration::from_secs(60));
        let st = h.standing(&k, &s, &b);
        assert_eq!(
            st.skip,
            Some(Skip::CircuitOpen),
            "still skipped: probes decide"
        );
        assert!(!st.half_open && !h.begin_trial(&k, &b));
        assert_eq!(h.claim_probe(&k, &s, &b), Some(ProbeReason::Recovery));
        assert_eq!(h.claim_probe(&k, &s, &b), None, "one probe at a time");
        h.probe_result(&k, &s, &b, true, Duration::from_millis(5));
        assert_eq!(
            h.standing(&k, &s, &b).skip,
            Some(Skip::CircuitOpen),
            "1 of 2 successes"
        );
        assert_eq!(h.claim_probe(&k, &s, &b), Some(ProbeReason::Recovery));
        h.probe_result(&k, &s, &b, true, Duration::from_millis(5));
        assert_eq!(h.standing(&k, &s, &b).skip, None, "closed");
        // A failed recovery probe re-opens with the cooldown doubled.
        for _ in 0..3 {
            h.record(&k, &s, &b, fail());
        }
        clock.advance(Duration::from_secs(60));
        assert_eq!(h.claim_probe(&k, &s, &b), Some(ProbeReason::Recovery));
        h.probe_result(&k, &s, &b, false, Duration::from_millis(5));
        clock.advance(Duration::from_secs(119));
        assert_eq!(h.claim_probe(&k, &s, &b), None);
        clock.advance(Duration::from_secs(1));
        assert_eq!(h.claim_probe(&k, &s, &b), Some(ProbeReason::Recovery));
    }

    #[test]
    fn low_scoring_closed_channels_are_probed_each_interval_healthy_ones_never() {
        let clock = ManualClock::new();
        let h = Health::new(clock.clone());
        let s = HealthSettings::default();
        let b = BreakerSettings {
            failure_threshold: 100,
            ..BreakerSettings::default()
        };
        let (sick, fine) = (key("sick"), key("fine"));
        for _ in 0..5 {
            h.record(&sick, &s, &b, fail());
            h.record(&fine, &s, &b, ok(5));
        }
        assert_eq!(h.claim_probe(&fine, &s, &b), None);
        assert_eq!(h.claim_probe(&sick, &s, &b), Some(ProbeReason::LowScore));
        h.probe_result(&sick, &s, &b, true, Duration::from_millis(5));
        assert_eq!(
            h.claim_probe(&sick, &s, &b),
            None,
            "not before the interval"
        );
        clock.advance(Duration::from_secs(300));
        assert_eq!(h.claim_probe(&sick, &s, &b), Some(ProbeReason::LowScore));
        clock.advance(Duration::from_secs(3600));
        assert_eq!(h.claim_probe(&fine, &s, &b), None);
    }

    #[test]
    fn smooth_round_robin_interleaves_by_weight() {
        let h = Health::new(ManualClock::new());
        let items: Vec<(Arc<str>, f64)> =
            vec![("a".into(), 5.0), ("b".into(), 1.0), ("c".into(), 1.0)];
        let seq: String = (0..7)
            .map(|_| ["a", "b", "c"][h.round_robin("g", &items)])
            .collect();
        // nginx's reference sequence for weights 5, 1, 1.
        assert_eq!(seq, "aabacaa");
        // Groups keep their own rotation.
        assert_eq!(h.round_robin("other", &items), 0);
    }
}
