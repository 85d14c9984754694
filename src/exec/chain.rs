//! The chain: each model through its own channels (tiers, retries, health) before the next. A
//! model is first fitted to its window (as is, trimmed, or handed to a larger context
//! fallback of its route); a model whose failures are all of the chain's `on` classes (or whose
//! channels are all unavailable) moves the chain on; anything else ends it.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::attempts::{self, Fitted};
use super::{AttemptRecord, Call, ExecError, Failure, Job, OutcomeClass, Report};
use crate::context::fit::{Fitter, Note, Overflow, Plan};
use crate::health::{Skip, Slot};
use crate::router::{RouteError, Step};

/// Runs the request's chain; with a continuation only one channel may serve, and when it
/// cannot (for any reason but the request's own) the answer says so.
pub(super) async fn run<'s, T, F, Fut>(
    job: &Job<'s>,
    report: &mut Report,
    fitter: Option<Fitter<'_>>,
    call: F,
) -> Result<(T, Slot), ExecError>
where
    F: FnMut(Call<'s>) -> Fut,
    Fut: Future<Output = Result<T, Failure>>,
{
    let mut walk = Walk {
        job,
        fitter,
        retry_after: None,
        ran_as_fallback: Vec::new(),
        refused: None,
    };
    let result = walk.run(report, call).await;
    match (result, job.route.only) {
        (
            Err(
                ExecError::AllAttemptsFailed
                | ExecError::AllModelsFailed
                | ExecError::AllRateLimited { .. }
                | ExecError::Route(RouteError::NoAvailableChannel(_)),
            ),
            Some(only),
        ) => Err(ExecError::PreviousResponseUnavailable(only.to_string())),
        (r, _) => r,
    }
}

/// The chain's state across its steps.
struct Walk<'j, 's, 'f> {
    job: &'j Job<'s>,
    fitter: Option<Fitter<'f>>,
    /// The soonest Retry-After seen, for an answer that every upstream is rate limited.
    retry_after: Option<Duration>,
    /// Models a context fallback already ran: a later step naming one is not run again.
    ran_as_fallback: Vec<Arc<str>>,
    /// The last step refused before any call because not even its minimum fit.
    refused: Option<Overflow>,
}

/// How one step of the chain ended.
struct StepEnd<T> {
    result: Result<(T, Slot), ExecError>,
    /// Where the attempts of the model tried last start (a context fallback starts anew).
    from: usize,
    /// The retry budget refused a call: a deliberate block, which ends the chain.
    blocked: bool,
}

/// What fitting the request to the model being tried says.
enum Fit {
    Go(Fitted),
    /// A larger model of the route's context fallbacks takes it instead.
    Fallback(Arc<str>),
    Refuse(Overflow),
}

impl<'s> Walk<'_, 's, '_> {
    async fn run<T, F, Fut>(
        &mut self,
        report: &mut Report,
        mut call: F,
    ) -> Result<(T, Slot), ExecError>
    where
        F: FnMut(Call<'s>) -> Fut,
        Fut: Future<Output = Result<T, Failure>>,
    {
        let job = self.job;
        job.health.retries.request(&job.snap.server.retry_budget);
        let steps = &job.route.chain.steps;
        for step in steps {
            if self.ran_as_fallback.contains(&step.model) {
                continue;
            }
            let StepEnd {
                result,
                from,
                blocked,
            } = self.step(step, report, &mut call).await;
            let err = match result {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            if steps.len() == 1 {
                return Err(err);
            }
            if let Some(stop) = self.after(err, from, blocked, report) {
                return Err(stop);
            }
        }
        if let Some(o) = self.refused.take() {
            return Err(ExecError::ContextTooLong(o));
        }
        Err(self.spent(report))
    }

    /// One step: its model, or the context fallbacks its route hands the request to.
    async fn step<T, F, Fut>(
        &mut self,
        step: &Step,
        report: &mut Report,
        call: &mut F,
    ) -> StepEnd<T>
    where
        F: FnMut(Call<'s>) -> Fut,
        Fut: Future<Output = Result<T, Failure>>,
    {
        let mut current = Cow::Borrowed(step);
        let mut too_small: Vec<Arc<str>> = Vec::new();
        let mut from = report.attempts.len();
        let mut blocked = false;
        loop {
            let fitted = match self.fit(step, &current, &mut too_small) {
                Fit::Go(f) => f,
                Fit::Fallback(fb) => {
                    report.attempts.push(context_skip(&current.model));
                    current = Cow::Owned(fallback_step(&current, fb));
                    from = report.attempts.len();
                    continue;
                }
                Fit::Refuse(o) => {
                    return StepEnd {
                        result: Err(ExecError::ContextTooLong(o)),
                        from,
                        blocked,
                    };
                }
            };
            let result =
                attempts::run(self.job, &current, fitted, report, call, &mut blocked).await;
            // The upstream said the prompt is too long for this model: a larger one may take it.
            let overflowed = report.attempts[from..]
                .last()
                .is_some_and(|a| a.class == Some(OutcomeClass::ContextWindow));
            if result.is_err()
                && overflowed
                && let Some(fb) = self.fallback(step, &current, &mut too_small)
            {
                current = Cow::Owned(fallback_step(&current, fb));
                from = report.attempts.len();
                continue;
            }
            return StepEnd {
                result,
                from,
                blocked,
            };
        }
    }

    /// Fits the request to `current` (the step's model or a fallback of it).
    fn fit(&mut self, step: &Step, current: &Step, too_small: &mut Vec<Arc<str>>) -> Fit {
        let Some(f) = self.fitter.as_mut() else {
            return Fit::Go(Fitted::default());
        };
        match f.plan(&current.model) {
            Plan::AsIs => Fit::Go(Fitted::default()),
            Plan::Fit { request, note } => Fit::Go(Fitted {
                body: request,
                note: Some(note),
            }),
            Plan::Exceeds { overflow, trimming } => {
                if let Some(fb) = self.fallback(step, current, too_small) {
                    return Fit::Fallback(fb);
                }
                if trimming {
                    return Fit::Refuse(overflow);
                }
                // Not trimmed and no fallback fits: the upstream is the judge.
                Fit::Go(Fitted {
                    body: None,
                    note: Some(Note {
                        prompt_tokens: overflow.needed,
                        trimmed_turns: 0,
                        exact: overflow.exact,
                    }),
                })
            }
        }
    }

    /// The next context fallback of the step's route larger than `current`, if one serves.
    fn fallback(
        &mut self,
        step: &Step,
        current: &Step,
        too_small: &mut Vec<Arc<str>>,
    ) -> Option<Arc<str>> {
        let (snap, key) = (self.job.snap, self.job.route.key);
        let f = self.fitter.as_mut()?;
        too_small.push(current.model.clone());
        let fb = f.fallback(&step.model, &current.model, too_small, |m| {
            snap.serves(key, m, true)
        })?;
        self.ran_as_fallback.push(fb.clone());
        Some(fb)
    }

    /// After a failed step of a chain of two or more: `None` moves the chain on, else the
    /// error it ends with.
    fn after(
        &mut self,
        err: ExecError,
        from: usize,
        blocked: bool,
        report: &Report,
    ) -> Option<ExecError> {
        if let ExecError::AllRateLimited { retry_after: ra } = &err {
            self.retry_after = Some(self.retry_after.map_or(*ra, |r| r.min(*ra)));
        }
        let chain = self.job.route.chain;
        // Judged on the calls to the model tried last, not a context skip before it.
        let in_on = || {
            report.attempts[from..]
                .iter()
                .filter_map(|a| a.class)
                .all(|c| c.fail_on().is_some_and(|f| chain.on.contains(f)))
        };
        self.refused = None;
        let moves_on = !blocked
            && match err {
                ExecError::Route(RouteError::NoAvailableChannel(_)) => true,
                ExecError::AllRateLimited { .. } | ExecError::AllAttemptsFailed => in_on(),
                // A later, larger model of the chain may take what this one cannot.
                ExecError::ContextTooLong(ref o) => {
                    self.refused = Some(o.clone());
                    true
                }
                // The deadline, the client's own mistake, a loop: final as they are.
                _ => false,
            };
        let capped = report.tried() >= self.job.snap.server.max_attempts as usize;
        if moves_on && !capped {
            return None;
        }
        Some(match err {
            e @ (ExecError::Rejected(_)
            | ExecError::ContextTooLong(_)
            | ExecError::Deadline
            | ExecError::Route(RouteError::ModelNotFound(_))) => e,
            _ => self.spent(report),
        })
    }

    /// What a chain of two or more models that got no answer says: 429 if every failure was
    /// a rate limit, 503 if nothing could be called, else 502 `all_models_failed`.
    fn spent(&self, report: &Report) -> ExecError {
        if all_rate_limited(&report.attempts) {
            return ExecError::AllRateLimited {
                retry_after: self.retry_after.unwrap_or(Duration::from_secs(1)),
            };
        }
        if report.tried() == 0 {
            return ExecError::Route(RouteError::NoAvailableChannel(
                self.job.route.chain.requested_model.clone(),
            ));
        }
        ExecError::AllModelsFailed
    }
}

/// The record of a model passed over because the request does not fit its window.
fn context_skip(model: &Arc<str>) -> AttemptRecord {
    AttemptRecord {
        channel: "".into(),
        model: model.clone(),
        status: None,
        class: None,
        latency_ms: 0,
        skip: Some(Skip::ContextWindow),
        upstream_model: None,
        credential: None,
        price: None,
        provider: None,
        timing: None,
    }
}

/// A step for `model`, a context fallback of `of`: same timeouts, named as the caller wrote it.
fn fallback_step(of: &Step, model: Arc<str>) -> Step {
    Step {
        model,
        written: of.written.clone(),
        redirect: None,
        timeout: of.timeout,
        first_token_timeout: of.first_token_timeout,
    }
}

/// Every attempt was a rate limit: now, or still cooling from an earlier 429 (a call the retry
/// budget refused, or a model passed over for its window, says nothing either way).
pub(super) fn all_rate_limited(attempts: &[AttemptRecord]) -> bool {
    let mut counted = attempts
        .iter()
        .filter(|a| !matches!(a.skip, Some(Skip::RetryBudget | Skip::ContextWindow)))
        .peekable();
    counted.peek().is_some()
        && counted.all(|a| {
            a.class == Some(OutcomeClass::RateLimit)
                || matches!(a.skip, Some(Skip::RateLimited | Skip::NoCredential))
        })
}
