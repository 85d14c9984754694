//! One model's attempts: the router's plan in order; on each channel a credential is
//! reserved, the call made, its outcome fed to health, and `judge` says what comes next (the
//! channel's next key, a retry, the next channel, or the end). Returns the answer with the
//! credential it holds: the caller keeps it for as long as the answer lasts.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, timeout_at};

use super::judge::{At, Next, judge};
use super::{
    AttemptRecord, Call, CallerLimits, ExecError, Failure, Job, OutcomeClass, Report, Served,
    Timing,
};
use crate::config::{Balance, Channel};
use crate::context::fit::Note;
use crate::health::{CredVerdict, Health, Key, Reservation, Sample, Skip, Slot, Verdict};
use crate::protocol::ChatRequest;
use crate::router::{self, Candidate, Estimate, Measured, Prefer, RouteError, Step, Strategy};
use crate::spend::{self, Ask, Holds, Limit};

/// The request as fitted to the model being tried.
#[derive(Default)]
pub(super) struct Fitted {
    /// The trimmed copy (`None`: the client's request as is).
    pub body: Option<Arc<ChatRequest>>,
    /// What fitting did, when the request was counted.
    pub note: Option<Note>,
}

/// Runs one model's attempts until one succeeds, the request must stop (the client's own
/// mistake, the deadline, the attempt cap, the retry budget), or nothing is left. `blocked` is
/// set when the retry budget refused a call.
pub(super) async fn run<'s, T, F, Fut>(
    job: &Job<'s>,
    step: &Step,
    fitted: Fitted,
    report: &mut Report,
    call: &mut F,
    blocked: &mut bool,
) -> Result<(T, Slot), ExecError>
where
    F: FnMut(Call<'s>) -> Fut,
    Fut: Future<Output = Result<T, Failure>>,
{
    let mut model = Model {
        job,
        step,
        fitted,
        first: report.attempts.len(),
        report,
        rng: fastrand::Rng::new(),
        retry_after: None,
        strategy: Strategy::Weighted,
    };
    let candidates = model.plan()?;
    let last = candidates.len().saturating_sub(1);
    for (pos, cand) in candidates.into_iter().enumerate() {
        match model.channel(cand, pos == last, call).await {
            Turn::Next => {}
            Turn::Served(v) => return Ok(v),
            Turn::Stop(e) => return Err(e),
            Turn::Capped => break,
            Turn::Blocked => {
                *blocked = true;
                break;
            }
        }
    }
    Err(model.exhausted())
}

/// How one channel's turn ended.
enum Turn<T> {
    Next,
    Served((T, Slot)),
    Stop(ExecError),
    /// The request's attempt cap is reached.
    Capped,
    /// The retry budget refused a call.
    Blocked,
}

/// A model's attempts in progress.
struct Model<'j, 's, 'r> {
    job: &'j Job<'s>,
    step: &'j Step,
    fitted: Fitted,
    report: &'r mut Report,
    rng: fastrand::Rng,
    /// The soonest Retry-After or cooldown end seen for this model.
    retry_after: Option<Duration>,
    /// Where this model's records start in the report.
    first: usize,
    /// How the model's first try is chosen (set by `plan`).
    strategy: Strategy,
}

impl<'s> Model<'_, 's, '_> {
    /// The router's plan with live health, the channels it skipped recorded.
    fn plan(&mut self) -> Result<Vec<Candidate>, ExecError> {
        let (snap, health) = (self.job.snap, self.job.health);
        let model: &str = &self.step.model;
        let standing = health.view(snap, model);
        let rotate = |(rank, prio): router::Tier, items: &[(usize, f64)]| {
            let named: Vec<(Arc<str>, f64)> = items
                .iter()
                .filter_map(|(i, w)| Some((snap.channels.get(*i)?.name.clone(), *w)))
                .collect();
            health.round_robin(&format!("{model}#{rank}#{prio}"), &named)
        };
        let strategy = snap.routing.strategy(model);
        self.strategy = strategy;
        // Read only by a measured strategy: `weighted` costs nothing here.
        let signals = (strategy != Strategy::Weighted)
            .then(|| health.signals.view(&snap.channels, model, self.job.stream));
        let pick = match (&signals, snap.balance) {
            (Some(signal), _) => router::Pick::Measured(Measured {
                strategy,
                signal,
                estimate: Estimate {
                    prompt: self.job.spend.prompt,
                    output: self.job.spend.reply,
                },
                exploration: snap.routing.exploration,
                rng: &mut self.rng,
            }),
            (None, Balance::Random) => router::Pick::Random(&mut self.rng),
            (None, Balance::RoundRobin) => router::Pick::RoundRobin(&rotate),
        };
        let prefer = Prefer {
            bound: self.job.route.bound,
            only: self.job.route.only,
            counting: self.job.route.counting,
        };
        let mut plan = router::plan(snap, self.job.route.key, model, &standing, pick, prefer)?;
        if self.report.route.is_none() {
            self.report.route = plan.why.map(|w| (strategy, w));
        }
        let meter = self.job.spend.meter;
        let bound = self.job.route.bound;
        router::demote(&mut plan.candidates, |c| {
            snap.channels.get(c.channel).is_some_and(|ch| {
                bound != Some(&*ch.name)
                    && ch
                        .quota
                        .budget
                        .and_then(|b| b.soft)
                        .is_some_and(|share| meter.past(&ch.scope, share))
            })
        });
        for s in &plan.skipped {
            if let Some(ch) = snap.channels.get(s.channel) {
                self.skip(ch, s.reason);
            }
            if let Some(d) = s.retry_in {
                self.soonest(d);
            }
        }
        Ok(plan.candidates)
    }

    /// While routing measures: the call counted in flight on its channel from now on, for as
    /// long as its answer lasts.
    fn busy(&self, ch: &Channel) -> Option<crate::health::Busy> {
        let r = &self.job.snap.routing;
        r.measured.then(|| {
            let feed_cache = self.strategy == Strategy::Cost;
            self.job
                .health
                .signals
                .busy(&ch.name, &self.step.model, r.half_life, feed_cache)
        })
    }

    /// An attempt's latency, for the measured strategies (only while one is in use).
    fn measure(&self, ch: &Channel, took: Duration, sample: Sample) {
        let r = &self.job.snap.routing;
        // Latency is read by `latency` and `p2c`, and shown by `route/explain` for them.
        if matches!(self.strategy, Strategy::Latency | Strategy::P2c) {
            self.job.health.signals.latency(
                &ch.name,
                &self.step.model,
                self.job.stream,
                took,
                sample,
                r.half_life,
            );
        }
    }

    fn soonest(&mut self, d: Duration) {
        self.retry_after = Some(self.retry_after.map_or(d, |r| r.min(d)));
    }

    fn skip(&mut self, ch: &Channel, reason: Skip) {
        self.report.attempts.push(AttemptRecord {
            channel: ch.name.clone(),
            model: self.step.model.clone(),
            status: None,
            class: None,
            latency_ms: 0,
            skip: Some(reason),
            upstream_model: None,
            credential: None,
            price: None,
            provider: Some(ch.kind),
            timing: None,
        });
    }

    /// One channel's turn: its half-open trial if it is one, then calls with its keys and
    /// retries until `judge` moves on.
    async fn channel<T, F, Fut>(&mut self, cand: Candidate, last: bool, call: &mut F) -> Turn<T>
    where
        F: FnMut(Call<'s>) -> Fut,
        Fut: Future<Output = Result<T, Failure>>,
    {
        let (snap, health) = (self.job.snap, self.job.health);
        let Some(ch) = snap.channels.get(cand.channel) else {
            return Turn::Next;
        };
        let key = Key::of(ch, &self.step.model);
        let _trial = if cand.half_open {
            if !health.begin_trial(&key, &ch.breaker) {
                self.skip(ch, Skip::TrialInFlight);
                return Turn::Next;
            }
            Some(Trial {
                health,
                key: key.clone(),
            })
        } else {
            None
        };
        // The channel's own budget and limits, held for its whole turn.
        let mut held = match self.channel_hold(ch, &cand).await {
            Ok(h) => h,
            Err(why) => {
                self.skip(ch, why);
                return Turn::Next;
            }
        };
        let mut retries = 0;
        // Credentials of this channel that failed this request (429/401/403): not tried again.
        let mut spent: Vec<usize> = Vec::new();
        loop {
            if self.report.tried() >= snap.server.max_attempts as usize {
                return Turn::Capped;
            }
            let reservation = match self.reserve(ch, &spent).await {
                Ok(r) => r,
                Err(Some(index)) => {
                    spent.push(index);
                    continue;
                }
                Err(None) => return Turn::Next,
            };
            if self.retry_refused(ch) {
                return Turn::Blocked;
            }
            let busy = self.busy(ch);
            let failure = match self
                .attempt(ch, &cand, &key, reservation.as_ref(), call)
                .await
            {
                Ok(v) => {
                    if let Some(h) = held.take() {
                        *self
                            .job
                            .spend
                            .served
                            .lock()
                            .unwrap_or_else(|p| p.into_inner()) = Some(h);
                    }
                    return Turn::Served((
                        v,
                        Slot {
                            credential: reservation,
                            busy,
                        },
                    ));
                }
                Err(Err(e)) => return Turn::Stop(e),
                Err(Ok(f)) => f,
            };
            let credential_spent = self.credential_failed(ch, &failure, reservation, &mut spent);
            let at = At {
                other_credential: credential_spent && spent.len() < ch.credentials.len(),
                retries_left: ch.max_retries.saturating_sub(retries),
                last_candidate: last,
                circuit_opened: health
                    .standing(&key, &snap.health, &ch.breaker)
                    .skip
                    .is_some_and(|s| s == Skip::CircuitOpen),
                wait: backoff(
                    ch.retry_interval,
                    retries,
                    failure.retry_after,
                    snap.server.max_retry_after,
                    &mut self.rng,
                ),
                time_left: self.job.deadline.saturating_duration_since(Instant::now()),
            };
            let next = judge(failure.class, &at);
            if failure.class == OutcomeClass::RateLimit && next != Next::NextCredential {
                self.soonest(failure.retry_after.unwrap_or(Duration::from_secs(1)));
            }
            match next {
                Next::NextCredential => {}
                Next::Retry(wait) => {
                    tokio::time::sleep(wait).await;
                    self.report.backoff += wait;
                    retries += 1;
                    // The wait is over: the channel's keys may be tried again.
                    spent.clear();
                }
                Next::NextChannel => return Turn::Next,
                Next::Stop => {
                    return Turn::Stop(match failure.passthrough {
                        Some(p) => ExecError::Rejected(p),
                        None => ExecError::AllAttemptsFailed,
                    });
                }
            }
        }
    }

    /// A call to a channel this request already called (a retry, its next key, the next model
    /// of a chain there) spends from the process-wide retry budget: that is the load that
    /// multiplies on one sick upstream. A failover to a channel not yet called is free: it adds
    /// one call to another upstream, never a second to the same one. Refused (recorded), the
    /// request ends with the outcome of the calls it made.
    fn retry_refused(&mut self, ch: &Channel) -> bool {
        let (snap, health) = (self.job.snap, self.job.health);
        if !self.report.called(&ch.name) || health.retries.try_retry(&snap.server.retry_budget) {
            return false;
        }
        tracing::warn!(
            channel = &*ch.name,
            model = &*self.step.model,
            "retry budget exhausted: not failing over"
        );
        self.skip(ch, Skip::RetryBudget);
        true
    }

    /// The channel's hold on its own budget and limits (`Ok(None)`: it has none); `Err`: why
    /// the channel is skipped.
    async fn channel_hold(&self, ch: &Channel, cand: &Candidate) -> Result<Option<Holds>, Skip> {
        if ch.quota.is_empty() {
            return Ok(None);
        }
        let sp = &self.job.spend;
        let price = cand.price.as_ref();
        let ask = Ask {
            micros: price.map_or(0, |p| p.worst_case(sp.prompt, sp.reply)),
            tokens: sp.prompt.saturating_add(sp.reply),
        };
        // Boxed: the shared counters' futures are large and would sit in every attempt's.
        match Box::pin(sp.meter.admit(&ch.scope, &ch.quota, ask, sp.hold)).await {
            spend::Verdict::Held(h) => {
                let mut holds = Holds::new(sp.meter.clone());
                holds.push(h);
                Ok(Some(holds))
            }
            spend::Verdict::Refused(r) if r.limit == Limit::Budget => Err(Skip::ChannelBudget),
            spend::Verdict::Refused(_) => Err(Skip::ChannelLimited),
            spend::Verdict::Unavailable => Err(Skip::ChannelMeterDown),
        }
    }

    /// A credential of the channel with headroom (`Ok(None)`: the channel has none). `Err(Some(i))`:
    /// key `i` is out of its shared `rpm` for now, try another; `Err(None)`: no key has
    /// headroom, skip the channel (not a failure of it).
    async fn reserve(
        &mut self,
        ch: &Channel,
        spent: &[usize],
    ) -> Result<Option<Reservation>, Option<usize>> {
        let job = self.job;
        // A session bound to this channel and one of its keys keeps the key (and its cache).
        let prefer = job
            .route
            .bound_credential
            .filter(|_| job.route.bound == Some(&*ch.name));
        let reservation = match job.health.pools.reserve_preferring(
            &ch.name,
            &ch.credentials,
            &self.step.model,
            spent,
            job.estimate,
            prefer,
        ) {
            Ok(r) => r,
            Err(none) => {
                if spent.is_empty() {
                    let why = if none.refused {
                        Skip::CredentialsRefused
                    } else {
                        Skip::NoCredential
                    };
                    self.skip(ch, why);
                }
                if let Some(d) = none.retry_in {
                    self.soonest(d);
                }
                return Err(None);
            }
        };
        // A key with an rpm limit also takes from the bucket every replica shares.
        if let (Some(st), Some(r)) = (job.route.shared, &reservation)
            && let Some((label, limits)) = ch.credentials.get(r.index)
            && let Some(rpm) = limits.rpm
            // Boxed: the Redis future is large and would sit inline in every attempt's.
            && let Err(wait) = Box::pin(st.take_rate(&ch.name, label, rpm)).await
        {
            self.soonest(wait);
            if spent.len() + 1 >= ch.credentials.len() {
                self.skip(ch, Skip::NoCredential);
            }
            return Err(Some(r.index));
        }
        Ok(reservation)
    }

    /// One call, recorded. `Err(Ok(failure))`: the attempt failed; `Err(Err(e))`: the
    /// request's deadline passed (not the channel's verdict: health is not told).
    async fn attempt<T, F, Fut>(
        &mut self,
        ch: &'s Channel,
        cand: &Candidate,
        key: &Key,
        reservation: Option<&Reservation>,
        call: &mut F,
    ) -> Result<T, Result<Failure, ExecError>>
    where
        F: FnMut(Call<'s>) -> Fut,
        Fut: Future<Output = Result<T, Failure>>,
    {
        let (snap, health) = (self.job.snap, self.job.health);
        // A traced request's call gets a span of its own, which the upstream continues.
        let span_id = match self.job.trace {
            Some(_) => self.rng.u64(1..),
            None => 0,
        };
        let waited_before = self.job.waited.total();
        let started = Instant::now();
        let res = timeout_at(
            self.job.deadline,
            call(Call {
                channel: ch,
                upstream_model: cand.upstream_model.clone(),
                credential: reservation.map(|r| r.index),
                limits: CallerLimits {
                    timeout: self.step.timeout,
                    first_token_timeout: self.step.first_token_timeout,
                },
                fitted: self.fitted.body.clone(),
                trace: self.job.trace.and_then(|t| t.headers(span_id)),
                waited: self.job.waited,
            }),
        )
        .await;
        let latency = started.elapsed();
        let timing = Timing {
            started: started.into_std(),
            took: latency,
            waited: self.job.waited.total().saturating_sub(waited_before),
            span_id,
        };
        let mut record = AttemptRecord {
            channel: ch.name.clone(),
            model: self.step.model.clone(),
            status: None,
            class: None,
            latency_ms: latency.as_millis() as u64,
            skip: None,
            upstream_model: Some(cand.upstream_model.clone()),
            credential: reservation
                .and_then(|r| ch.credentials.get(r.index))
                .map(|(label, _)| label.clone()),
            price: cand.price.clone(),
            provider: Some(ch.kind),
            timing: Some(timing),
        };
        let failure = match res {
            Err(_) => {
                record.class = Some(OutcomeClass::Timeout);
                self.report.attempts.push(record);
                return Err(Err(ExecError::Deadline));
            }
            Ok(Ok(v)) => {
                health.record(key, &snap.health, &ch.breaker, Verdict::Success { latency });
                self.measure(ch, latency, Sample::Answered);
                record.status = Some(200);
                self.report.attempts.push(record);
                self.report.served = Some(Served {
                    channel: ch.name.clone(),
                    model: self.step.model.clone(),
                    upstream_model: cand.upstream_model.clone(),
                });
                self.report.context = self.fitted.note;
                return Ok(v);
            }
            Ok(Err(f)) => f,
        };
        record.status = failure.status;
        record.class = Some(failure.class);
        self.report.attempts.push(record);
        log_failure(ch, &self.step.model, cand, &failure);
        // A failure of the key, not the channel, is judged by `credential_failed`.
        let judged = verdict(&failure, latency);
        if !is_credential_failure(&failure) || reservation.is_none() {
            health.record(key, &snap.health, &ch.breaker, judged);
        }
        if matches!(judged, Verdict::Failure { .. }) {
            self.measure(ch, latency, Sample::Failed);
        }
        Err(Ok(failure))
    }

    /// A failure of the key, not the channel (429, 401, 403): cool or disable that credential;
    /// the channel's other keys are tried before failing over. Returns whether it was one.
    fn credential_failed(
        &mut self,
        ch: &Channel,
        failure: &Failure,
        reservation: Option<Reservation>,
        spent: &mut Vec<usize>,
    ) -> bool {
        let cred_verdict = match (failure.class, failure.status) {
            (OutcomeClass::RateLimit, _) => Some(CredVerdict::RateLimited {
                retry_after: failure.retry_after,
            }),
            (OutcomeClass::AuthError, Some(401)) => Some(CredVerdict::Refused),
            (OutcomeClass::AuthError, Some(403)) => Some(CredVerdict::ForbiddenForModel),
            _ => None,
        };
        match (reservation, cred_verdict) {
            (Some(r), Some(v)) => {
                let model = &self.step.model;
                self.job
                    .health
                    .judge_credential(&r, model, v, ch.credential_cooldown);
                spent.push(r.index);
                true
            }
            _ => false,
        }
    }

    /// Nothing served this model: every channel rate limited, every channel skipped, or failed.
    fn exhausted(&self) -> ExecError {
        let mine = &self.report.attempts[self.first..];
        if super::chain::all_rate_limited(mine) {
            return ExecError::AllRateLimited {
                retry_after: self.retry_after.unwrap_or(Duration::from_secs(1)),
            };
        }
        if mine.iter().all(|a| a.skip.is_some()) {
            // Every channel was skipped by its health: answer (or move on) at once.
            return ExecError::Route(RouteError::NoAvailableChannel(self.step.model.to_string()));
        }
        ExecError::AllAttemptsFailed
    }
}

/// A 429, 401 or 403: about the key the attempt used.
fn is_credential_failure(f: &Failure) -> bool {
    matches!(
        (f.class, f.status),
        (OutcomeClass::RateLimit, _) | (OutcomeClass::AuthError, Some(401 | 403))
    )
}

fn log_failure(ch: &Channel, model: &str, cand: &Candidate, failure: &Failure) {
    match failure.class {
        OutcomeClass::Misrouted => tracing::error!(
            channel = &*ch.name,
            model,
            upstream_model = &*cand.upstream_model,
            "upstream says this model does not exist there: the channel is misconfigured; failing over"
        ),
        OutcomeClass::AuthError => tracing::warn!(
            channel = &*ch.name,
            status = failure.status,
            "upstream refused the channel's credential; failing over"
        ),
        OutcomeClass::Blocked => tracing::warn!(
            channel = &*ch.name,
            "upstream gateway detected a routing loop (508); not failing over"
        ),
        _ => tracing::debug!(
            channel = &*ch.name, class = failure.class.as_str(), detail = %failure.detail,
            "attempt failed"
        ),
    }
}

/// What a failed attempt says about the channel itself.
fn verdict(f: &Failure, latency: Duration) -> Verdict {
    if f.neutral {
        return Verdict::Neutral;
    }
    match f.class {
        // The channel answered correctly: the fault is the request (or our translation of it).
        OutcomeClass::ClientError
        | OutcomeClass::TranslationError
        | OutcomeClass::Blocked
        | OutcomeClass::ContextWindow => Verdict::Neutral,
        OutcomeClass::RateLimit => Verdict::RateLimited {
            retry_after: f.retry_after,
        },
        _ => Verdict::Failure { latency },
    }
}

/// Backoff before an in-channel retry: exponential with full jitter on top, or the upstream's
/// Retry-After when it gave one, capped.
fn backoff(
    base: Duration,
    retry: u32,
    retry_after: Option<Duration>,
    cap: Duration,
    rng: &mut fastrand::Rng,
) -> Duration {
    if let Some(ra) = retry_after {
        return ra.min(cap);
    }
    let exp = base.saturating_mul(1u32 << retry.min(16));
    let jitter =
        Duration::from_micros(rng.u64(0..=base.as_micros().min(u128::from(u64::MAX)) as u64));
    (exp + jitter).min(cap)
}

/// Holds a channel's half-open trial; gives it back unjudged if the attempt never finished
/// (the client left, the deadline passed). A judged trial has already moved the circuit on.
struct Trial<'h> {
    health: &'h Health,
    key: Key,
}

impl Drop for Trial<'_> {
    fn drop(&mut self) {
        self.health.release_trial(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_honours_retry_after_up_to_the_cap() {
        let mut rng = fastrand::Rng::with_seed(3);
        let base = Duration::from_millis(100);
        let cap = Duration::from_secs(5);
        let b0 = backoff(base, 0, None, cap, &mut rng);
        let b3 = backoff(base, 3, None, cap, &mut rng);
        assert!(b0 >= base && b0 <= base * 2, "{b0:?}");
        assert!(b3 >= base * 8 && b3 <= base * 9, "{b3:?}");
        assert_eq!(backoff(base, 30, None, cap, &mut rng), cap);
        assert_eq!(
            backoff(base, 0, Some(Duration::from_secs(2)), cap, &mut rng),
            Duration::from_secs(2)
        );
        assert_eq!(
            backoff(base, 0, Some(Duration::from_secs(60)), cap, &mut rng),
            cap
        );
    }
}
