//! The attempt loop: attempts in plan order, per-channel retries with backoff, failover by
//! outcome class, the request deadline, the streaming commit point, and the failover report.

mod outcome;
mod relay;

pub use outcome::{Failure, OutcomeClass, Passthrough, classify};
pub use relay::{Relay, RelayItem};

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::time::{Instant, timeout_at};

use crate::config::{Channel, GatewayKey, Snapshot};
use crate::context::fit::{Fitter, Note, Overflow, Plan};
use crate::health::{CredVerdict, Health, Key, Reservation, Skip, Verdict};
use crate::protocol::{ChatRequest, ChatResponse, EmbeddingsRequest, StreamChunk, Usage};
use crate::provider::ChunkStream;
use crate::router::{self, Chain, RouteError, Step};

/// One upstream call (or a channel skipped by its health) as reported to clients and the log.
/// Never carries upstream error text.
#[derive(Debug, Clone)]
pub struct AttemptRecord {
    pub channel: Arc<str>,
    pub model: Arc<str>,
    pub status: Option<u16>,
    /// `None` = success (or a skip).
    pub class: Option<OutcomeClass>,
    pub latency_ms: u64,
    /// Set when the channel was not called: why.
    pub skip: Option<Skip>,
}

impl AttemptRecord {
    fn reason(&self) -> &'static str {
        match (self.skip, self.class) {
            (Some(s), _) => s.as_str(),
            (None, Some(c)) => c.as_str(),
            (None, None) => "ok",
        }
    }
}

impl serde::Serialize for AttemptRecord {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(5))?;
        // No channel: a step skipped before any channel was chosen (a context fallback).
        m.serialize_entry(
            "channel",
            &(!self.channel.is_empty()).then_some(&*self.channel),
        )?;
        m.serialize_entry("model", &*self.model)?;
        m.serialize_entry("status", &self.status)?;
        m.serialize_entry("reason", self.reason())?;
        m.serialize_entry("latency_ms", &self.latency_ms)?;
        m.end()
    }
}

/// The channel that served, the model as the client named it, and the upstream's name for it.
#[derive(Debug, Clone)]
pub struct Served {
    pub channel: Arc<str>,
    pub model: Arc<str>,
    pub upstream_model: Arc<str>,
}

/// What happened to a request: the failover report.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The first model of the chain as the client sent it (before any redirect).
    pub requested_model: String,
    /// Redirects applied to the chain's models: (as written, routed as, rule).
    pub redirects: Vec<(String, Arc<str>, Arc<str>)>,
    pub attempts: Vec<AttemptRecord>,
    /// Who served (set at success / the commit point).
    pub served: Option<Served>,
    /// What fitting the request to the serving model's window did, when it was counted.
    pub context: Option<Note>,
}

impl Report {
    pub fn new(requested_model: &str) -> Self {
        Report {
            requested_model: requested_model.to_string(),
            ..Report::default()
        }
    }

    /// The report for a resolved chain.
    pub fn for_chain(chain: &Chain) -> Self {
        Report {
            requested_model: chain.requested_model.clone(),
            redirects: chain
                .steps
                .iter()
                .filter_map(|s| Some((s.written.clone(), s.model.clone(), s.redirect.clone()?)))
                .collect(),
            ..Report::default()
        }
    }

    /// Upstream calls made (skipped channels not counted).
    pub fn tried(&self) -> usize {
        self.attempts.iter().filter(|a| a.skip.is_none()).count()
    }

    pub fn attempts_json(&self) -> Value {
        serde_json::to_value(&self.attempts).unwrap_or(Value::Null)
    }

    /// The attempts as JSON text, for the log row (written directly, no tree).
    pub fn attempts_text(&self) -> String {
        serde_json::to_string(&self.attempts).unwrap_or_else(|_| "[]".into())
    }

    /// The body extension, present only when something moved the request: a failover (more
    /// than one attempt), a redirect, or a chain served by another model than the first.
    pub fn body_extension(&self) -> Option<Value> {
        let served = self.served.as_ref()?;
        let failover = self.tried() > 1;
        if !failover && self.redirects.is_empty() && *served.model == *self.requested_model {
            return None;
        }
        let mut ext = json!({
            "requested_model": self.requested_model,
            "served_model": &*served.model,
            "served_channel": &*served.channel,
            // Anything before the served attempt (a failure, or a channel skipped) moved it.
            "failover": {"occurred": self.attempts.len() > 1, "attempts": self.attempts_json()},
        });
        if !self.redirects.is_empty() {
            ext["redirects"] = self
                .redirects
                .iter()
                .map(|(from, to, rule)| json!({"from": from, "to": &**to, "rule": &**rule}))
                .collect();
        }
        Some(ext)
    }

    /// The last failure's class: what the request log calls the outcome of a failed request.
    pub fn last_class(&self) -> Option<OutcomeClass> {
        self.attempts.iter().rev().find_map(|a| a.class)
    }
}

/// Why a request was not served. Each variant maps to exactly one HTTP status and code.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error(transparent)]
    Route(#[from] RouteError),
    #[error("every upstream for this request is rate limited")]
    AllRateLimited { retry_after: Duration },
    #[error("every upstream attempt for this request failed")]
    AllAttemptsFailed,
    #[error("every model of the chain failed")]
    AllModelsFailed,
    #[error("the request deadline passed before any upstream answered")]
    Deadline,
    /// The upstream judged the request itself malformed (400/413/422): its answer, as is.
    #[error("the upstream rejected the request (HTTP {})", .0.status)]
    Rejected(Passthrough),
    /// A continued response lives only on its channel, which could not serve.
    #[error(
        "the response this request continues was made by channel {0}, which cannot serve now, and its conversation is not kept by the gateway (store: false, or the upstream keeps it): retry later, or send the whole conversation as input"
    )]
    PreviousResponseUnavailable(String),
    /// Trimming is on and the instructions, tools and latest turn alone exceed the window.
    // Worded as Anthropic words it: Claude Code and the Anthropic SDK act on that prefix.
    #[error(
        "prompt is too long: {} tokens > {} maximum for {} (its context window of {} tokens less {} reserved for the reply; the instructions, tools and latest turn are never trimmed)",
        .0.needed, .0.budget, .0.model, .0.context_window, .0.reserved
    )]
    ContextTooLong(Overflow),
}

impl ExecError {
    pub fn status(&self) -> u16 {
        match self {
            ExecError::Route(RouteError::ModelNotFound(_)) => 404,
            ExecError::Route(RouteError::NoAvailableChannel(_)) => 503,
            ExecError::AllRateLimited { .. } => 429,
            ExecError::AllAttemptsFailed | ExecError::AllModelsFailed => 502,
            ExecError::Deadline => 504,
            ExecError::Rejected(p) => p.status,
            ExecError::ContextTooLong(_) => 400,
            ExecError::PreviousResponseUnavailable(_) => 503,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            ExecError::Route(RouteError::ModelNotFound(_)) => "model_not_found",
            ExecError::Route(RouteError::NoAvailableChannel(_)) => "no_available_channel",
            ExecError::AllRateLimited { .. } => "all_rate_limited",
            ExecError::AllAttemptsFailed => "all_attempts_failed",
            ExecError::AllModelsFailed => "all_models_failed",
            ExecError::Deadline => "request_timeout",
            ExecError::Rejected(_) => "upstream_rejected_request",
            ExecError::ContextTooLong(_) => "context_length_exceeded",
            ExecError::PreviousResponseUnavailable(_) => "previous_response_unavailable",
        }
    }

    /// The gateway itself gave up: SDKs must not multiply the attempts by retrying.
    pub fn exhausted(&self) -> bool {
        matches!(
            self,
            ExecError::Route(RouteError::NoAvailableChannel(_))
                | ExecError::AllRateLimited { .. }
                | ExecError::AllAttemptsFailed
                | ExecError::AllModelsFailed
                | ExecError::Deadline
        )
    }
}

/// The plan a request would follow, as `POST /v1/route/explain` and `switchyard explain` show
/// it: redirects applied, the chain, and for each model the candidate channels in their
/// expected order with tier, weight, health score and circuit state, and every channel left
/// out with the reason. Reads health; calls no upstream.
pub fn explain(
    snap: &Snapshot,
    health: &Health,
    key: &GatewayKey,
    chain: &Chain,
    decisions: &[crate::semantic::Decision],
) -> Value {
    let ms = |d: Option<Duration>| d.map(|d| d.as_millis() as u64);
    let steps: Vec<Value> = chain
        .steps
        .iter()
        .map(|step| {
            let model: &str = &step.model;
            let standing = |i: usize| match snap.channels.get(i) {
                Some(ch) => health.standing(&health_key(ch, model), &snap.health, &ch.breaker),
                None => crate::health::Standing::healthy(),
            };
            let mut v = json!({
                "model": model,
                "requested_as": step.written,
                "redirect": step.redirect.as_deref(),
                "timeout_ms": ms(step.timeout),
                "first_token_timeout_ms": ms(step.first_token_timeout),
            });
            match router::explain(snap, key, model, &standing) {
                Ok(view) => {
                    v["candidates"] = json!(view.candidates);
                    v["excluded"] = json!(view.excluded);
                }
                Err(e) => {
                    v["candidates"] = json!([]);
                    v["error"] = json!(ExecError::Route(e).code());
                }
            }
            v
        })
        .collect();
    json!({
        "object": "route.explain",
        "key": &*key.name,
        "requested_model": chain.requested_model,
        "source": chain.source.as_str(),
        "on": chain.on.names(),
        "balance": match snap.balance {
            crate::config::Balance::Random => "random",
            crate::config::Balance::RoundRobin => "round_robin",
        },
        "max_attempts": snap.server.max_attempts,
        "chain": steps,
        // What each semantic router named in the request decided, and by which scores.
        "semantic": decisions
            .iter()
            .map(|d| {
                json!({
                    "router": &*d.router,
                    "winner": d.winner.as_deref(),
                    "models": d.models.iter().map(|m| &**m).collect::<Vec<_>>(),
                    "scores": d
                        .scores
                        .iter()
                        .map(|(n, s)| json!({"instance": &**n, "score": s}))
                        .collect::<Vec<_>>(),
                })
            })
            .collect::<Vec<_>>(),
    })
}

/// Adds to an `explain` plan, per chain step where the request is counted, what fitting it to
/// that model would do (`context`).
pub fn explain_context_into(
    plan: &mut Value,
    snap: &Snapshot,
    key: &GatewayKey,
    chain: &Chain,
    req: &ChatRequest,
    trim: Option<bool>,
) {
    if let Some(steps) = plan["chain"].as_array_mut() {
        let fits = explain_context(snap, key, chain, req, trim);
        for (step, fit) in steps.iter_mut().zip(fits).filter(|(_, f)| !f.is_null()) {
            step["context"] = fit;
        }
    }
}

/// What fitting `req` to each model of the chain would do, for `explain`: counted, the
/// window, and whether it goes as is, trimmed, to a context fallback, or is refused. `Null`
/// per step where nothing asks for counting.
fn explain_context(
    snap: &Snapshot,
    key: &GatewayKey,
    chain: &Chain,
    req: &ChatRequest,
    trim: Option<bool>,
) -> Vec<Value> {
    let Some(mut f) = Fitter::new(req, &snap.catalog, trim.or(key.trim.then_some(true))) else {
        return vec![Value::Null; chain.steps.len()];
    };
    chain
        .steps
        .iter()
        .map(|step| {
            let window = snap.catalog.lookup(&step.model).map(|i| i.context_window);
            match f.plan(&step.model) {
                Plan::AsIs => Value::Null,
                Plan::Fit { request, note } => json!({
                    "action": if request.is_some() { "trim" } else { "as_is" },
                    "context_window": window,
                    "prompt_tokens": note.prompt_tokens,
                    "trimmed_turns": note.trimmed_turns,
                    "exact": note.exact,
                }),
                Plan::Exceeds { overflow, trimming } => {
                    let fallback = f.fallback(
                        &step.model,
                        &step.model,
                        std::slice::from_ref(&step.model),
                        |m| snap.serves(key, m, true),
                    );
                    json!({
                        "action": match (&fallback, trimming) {
                            (Some(_), _) => "context_fallback",
                            (None, true) => "context_length_exceeded",
                            // Not trimmed and nothing larger fits: the upstream judges.
                            (None, false) => "as_is",
                        },
                        "fallback": fallback.as_deref(),
                        "context_window": overflow.context_window,
                        "prompt_tokens": overflow.needed,
                        "prompt_tokens_budget": overflow.budget,
                    })
                }
            }
        })
        .collect()
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

/// Health's key for a channel serving a model.
fn health_key(ch: &Channel, model: &str) -> Key {
    Key {
        channel: ch.name.clone(),
        model: ch.breaker.per_model.then(|| model.into()),
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

/// Who asks and what may serve it: the caller's gateway key and the resolved chain of models.
#[derive(Clone, Copy)]
pub struct Route<'a> {
    pub key: &'a GatewayKey,
    pub chain: &'a Chain,
    /// The channel the request's session is bound to: tried first where it serves the model.
    pub bound: Option<&'a str>,
    /// State shared with other replicas (credentials' `rpm` buckets).
    pub shared: Option<&'a crate::state::State>,
    /// The request's own trimming choice (`x-switchyard-trim`); `None` leaves it to the key
    /// and the model's route.
    pub trim: Option<bool>,
    /// The only channel that may serve (a continuation of a response only it keeps).
    pub only: Option<&'a str>,
}

/// The caller's attempt timeouts for the model being tried (none: the channel's own).
#[derive(Debug, Clone, Copy)]
pub struct CallerLimits {
    pub timeout: Option<Duration>,
    pub first_token_timeout: Option<Duration>,
}

/// An attempt's time limit: the channel's own, or the caller's when that is tighter. A caller's
/// tighter limit running out says nothing about the channel's health.
#[derive(Debug, Clone, Copy)]
pub struct Limit {
    pub within: Duration,
    pub callers: bool,
}

impl Limit {
    fn of(own: Duration, caller: Option<Duration>) -> Limit {
        match caller {
            Some(c) if c < own => Limit {
                within: c,
                callers: true,
            },
            _ => Limit {
                within: own,
                callers: false,
            },
        }
    }

    fn expired(self, what: &str) -> Failure {
        let mut f = Failure::timeout(what);
        f.neutral = self.callers;
        f
    }
}

/// Runs the chain: each model through its own channels (tiers, retries, health) before the
/// next. A model whose failures are all of the classes in the chain's `on` (or whose channels
/// are all unavailable) moves the chain on; anything else ends it.
#[allow(clippy::too_many_arguments)]
async fn run<'s, T, F, Fut>(
    snap: &'s Snapshot,
    health: &Health,
    route: Route<'_>,
    // Tokens this request is expected to use, charged to tpm budgets until usage settles it.
    estimate: u64,
    deadline: Instant,
    report: &mut Report,
    // Fits the request to each model's window (chat only; `None` when nothing asks for it).
    fitter: Option<Fitter<'_>>,
    call: F,
) -> Result<(T, Option<Reservation>), ExecError>
where
    F: FnMut(&'s Channel, Arc<str>, Option<usize>, CallerLimits, Option<Arc<ChatRequest>>) -> Fut,
    Fut: Future<Output = Result<T, Failure>>,
{
    let result = run_chain(
        snap, health, route, estimate, deadline, report, fitter, call,
    )
    .await;
    match (result, route.only) {
        // Only that channel could serve: say so, unless the request itself was at fault.
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

#[allow(clippy::too_many_arguments)]
async fn run_chain<'s, T, F, Fut>(
    snap: &'s Snapshot,
    health: &Health,
    route: Route<'_>,
    estimate: u64,
    deadline: Instant,
    report: &mut Report,
    mut fitter: Option<Fitter<'_>>,
    mut call: F,
) -> Result<(T, Option<Reservation>), ExecError>
where
    F: FnMut(&'s Channel, Arc<str>, Option<usize>, CallerLimits, Option<Arc<ChatRequest>>) -> Fut,
    Fut: Future<Output = Result<T, Failure>>,
{
    health.retries.request(&snap.server.retry_budget);
    let steps = &route.chain.steps;
    let mut retry_after: Option<Duration> = None;
    // Models a context fallback already ran: a later step naming one is not run again.
    let mut ran_as_fallback: Vec<Arc<str>> = Vec::new();
    // The last step refused before any call because not even its minimum fit.
    let mut refused: Option<Overflow> = None;
    for step in steps {
        if ran_as_fallback.contains(&step.model) {
            continue;
        }
        // Set when the retry budget refused a call: a deliberate block, which ends the chain.
        let mut blocked = false;
        // The model tried for this step: the step's own, or a context fallback of its route.
        let mut current = std::borrow::Cow::Borrowed(step);
        let mut too_small: Vec<Arc<str>> = Vec::new();
        // Where the attempts of the model being tried start (a fallback starts anew).
        let mut from = report.attempts.len();
        let usable = |m: &str| snap.serves(route.key, m, true);
        let result = loop {
            let mut body = None;
            let mut note = None;
            if let Some(f) = fitter.as_mut() {
                match f.plan(&current.model) {
                    Plan::AsIs => {}
                    Plan::Fit { request, note: n } => {
                        body = request;
                        note = Some(n);
                    }
                    Plan::Exceeds { overflow, trimming } => {
                        too_small.push(current.model.clone());
                        if let Some(fb) =
                            f.fallback(&step.model, &current.model, &too_small, usable)
                        {
                            report.attempts.push(context_skip(&current.model));
                            current = std::borrow::Cow::Owned(fallback_step(&current, fb));
                            ran_as_fallback.push(current.model.clone());
                            from = report.attempts.len();
                            continue;
                        }
                        if trimming {
                            break Err(ExecError::ContextTooLong(overflow));
                        }
                        // Not trimmed and no fallback fits: the upstream is the judge.
                        note = Some(Note {
                            prompt_tokens: overflow.needed,
                            trimmed_turns: 0,
                            exact: overflow.exact,
                        });
                    }
                }
            }
            let r = run_model(
                snap,
                health,
                route.key,
                (route.bound, route.only),
                route.shared,
                &current,
                (body, note),
                estimate,
                deadline,
                report,
                &mut call,
                &mut blocked,
            )
            .await;
            // The upstream said the prompt is too long for this model: a larger one may take it.
            let overflowed = report.attempts[from..]
                .last()
                .is_some_and(|a| a.class == Some(OutcomeClass::ContextWindow));
            if r.is_err()
                && overflowed
                && let Some(f) = fitter.as_mut()
            {
                too_small.push(current.model.clone());
                if let Some(fb) = f.fallback(&step.model, &current.model, &too_small, usable) {
                    current = std::borrow::Cow::Owned(fallback_step(&current, fb));
                    ran_as_fallback.push(current.model.clone());
                    from = report.attempts.len();
                    continue;
                }
            }
            break r;
        };
        let err = match result {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        if steps.len() == 1 {
            return Err(err);
        }
        if let ExecError::AllRateLimited { retry_after: ra } = &err {
            retry_after = Some(retry_after.map_or(*ra, |r| r.min(*ra)));
        }
        // Judged on the calls to the model tried last, not a context skip before it.
        let in_on = || {
            report.attempts[from..]
                .iter()
                .filter_map(|a| a.class)
                .all(|c| c.fail_on().is_some_and(|f| route.chain.on.contains(f)))
        };
        refused = None;
        let moves_on = !blocked
            && match err {
                ExecError::Route(RouteError::NoAvailableChannel(_)) => true,
                ExecError::AllRateLimited { .. } | ExecError::AllAttemptsFailed => in_on(),
                // A later, larger model of the chain may take what this one cannot.
                ExecError::ContextTooLong(ref o) => {
                    refused = Some(o.clone());
                    true
                }
                // The deadline, the client's own mistake, a loop: final as they are.
                _ => false,
            };
        let capped = report.tried() >= snap.server.max_attempts as usize;
        if !moves_on || capped {
            return Err(match err {
                e @ (ExecError::Rejected(_)
                | ExecError::ContextTooLong(_)
                | ExecError::Deadline
                | ExecError::Route(RouteError::ModelNotFound(_))) => e,
                _ => spent(report, retry_after, &route.chain.requested_model),
            });
        }
    }
    if let Some(o) = refused {
        return Err(ExecError::ContextTooLong(o));
    }
    Err(spent(report, retry_after, &route.chain.requested_model))
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

/// What a chain of two or more models that got no answer says: 429 if every failure was a rate
/// limit, 503 if nothing could be called, else 502 `all_models_failed`.
fn spent(report: &Report, retry_after: Option<Duration>, requested: &str) -> ExecError {
    if all_rate_limited(&report.attempts) {
        return ExecError::AllRateLimited {
            retry_after: retry_after.unwrap_or(Duration::from_secs(1)),
        };
    }
    if report.tried() == 0 {
        return ExecError::Route(RouteError::NoAvailableChannel(requested.to_string()));
    }
    ExecError::AllModelsFailed
}

/// Every attempt was a rate limit: now, or still cooling from an earlier 429 (a call the retry
/// budget refused, or a model passed over for its window, says nothing either way).
fn all_rate_limited(attempts: &[AttemptRecord]) -> bool {
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

/// Runs one model's attempts in plan order until one succeeds, the client's own mistake is
/// found, the attempt cap or the deadline is reached, or nothing is left. Returns the result
/// with the credential it holds: the caller keeps it for as long as the attempt lasts.
#[allow(clippy::too_many_arguments)]
async fn run_model<'s, T, F, Fut>(
    snap: &'s Snapshot,
    health: &Health,
    gkey: &GatewayKey,
    // The channel tried first, and the only one allowed.
    (bound, only): (Option<&str>, Option<&str>),
    shared: Option<&crate::state::State>,
    step: &Step,
    // The request fitted to this model (`None`: the client's as is) and what fitting did.
    (body, note): (Option<Arc<ChatRequest>>, Option<Note>),
    estimate: u64,
    deadline: Instant,
    report: &mut Report,
    call: &mut F,
    blocked: &mut bool,
) -> Result<(T, Option<Reservation>), ExecError>
where
    F: FnMut(&'s Channel, Arc<str>, Option<usize>, CallerLimits, Option<Arc<ChatRequest>>) -> Fut,
    Fut: Future<Output = Result<T, Failure>>,
{
    let model: &str = &step.model;
    let first = report.attempts.len();
    let mut rng = fastrand::Rng::new();
    let standing = |i: usize| match snap.channels.get(i) {
        Some(ch) => health.standing(&health_key(ch, model), &snap.health, &ch.breaker),
        None => crate::health::Standing::healthy(),
    };
    let names = |i: usize| snap.channels.get(i).map(|c| c.name.clone());
    let rotate = |(rank, prio): router::Tier, items: &[(usize, f64)]| {
        let named: Vec<(Arc<str>, f64)> = items
            .iter()
            .filter_map(|(i, w)| Some((names(*i)?, *w)))
            .collect();
        health.round_robin(&format!("{model}#{rank}#{prio}"), &named)
    };
    let pick = match snap.balance {
        crate::config::Balance::Random => router::Pick::Random(&mut rng),
        crate::config::Balance::RoundRobin => router::Pick::RoundRobin(&rotate),
    };
    let mut plan = router::plan(snap, gkey, model, &standing, pick)?;
    if let Some(only) = only {
        let named = |i: usize| snap.channels.get(i).is_some_and(|c| &*c.name == only);
        plan.candidates.retain(|c| named(c.channel));
        plan.skipped.retain(|s| named(s.channel));
    }
    if let Some(i) = bound.and_then(|b| {
        snap.channels
            .iter()
            .position(|c| &*c.name == b && c.affinity)
    }) {
        router::bind_first(&mut plan, i);
    }
    let model_name: Arc<str> = step.model.clone();
    let skip_record = |ch: &Channel, reason: Skip| AttemptRecord {
        channel: ch.name.clone(),
        model: model_name.clone(),
        status: None,
        class: None,
        latency_ms: 0,
        skip: Some(reason),
    };
    let mut retry_after: Option<Duration> = None;
    for s in &plan.skipped {
        if let Some(ch) = snap.channels.get(s.channel) {
            report.attempts.push(skip_record(ch, s.reason));
        }
        if let Some(d) = s.retry_in {
            retry_after = Some(retry_after.map_or(d, |r| r.min(d)));
        }
    }
    let last = plan.candidates.len().saturating_sub(1);
    'channels: for (pos, cand) in plan.candidates.into_iter().enumerate() {
        let Some(ch) = snap.channels.get(cand.channel) else {
            continue;
        };
        let key = health_key(ch, model);
        let _trial = if cand.half_open {
            if !health.begin_trial(&key, &ch.breaker) {
                report.attempts.push(skip_record(ch, Skip::TrialInFlight));
                continue;
            }
            Some(Trial {
                health,
                key: key.clone(),
            })
        } else {
            None
        };
        let mut retries = 0;
        // Credentials of this channel that failed this request (429/401/403): not tried again.
        let mut spent: Vec<usize> = Vec::new();
        loop {
            if report.tried() >= snap.server.max_attempts as usize {
                break 'channels;
            }
            let reservation =
                match health
                    .pools
                    .reserve(&ch.name, &ch.credentials, model, &spent, estimate)
                {
                    Ok(r) => r,
                    Err(none) => {
                        // No credential with headroom: skipped, not a failure of the channel.
                        if spent.is_empty() {
                            let why = if none.refused {
                                Skip::CredentialsRefused
                            } else {
                                Skip::NoCredential
                            };
                            report.attempts.push(skip_record(ch, why));
                        }
                        if let Some(d) = none.retry_in {
                            retry_after = Some(retry_after.map_or(d, |r| r.min(d)));
                        }
                        continue 'channels;
                    }
                };
            // Every call after a request's first spends from the process-wide retry budget.
            // A key with an rpm limit also takes from the bucket every replica shares.
            if let (Some(st), Some(r)) = (shared, &reservation)
                && let Some((label, limits)) = ch.credentials.get(r.index)
                && let Some(rpm) = limits.rpm
                // Boxed: the Redis future is large and would sit inline in every attempt's.
                && let Err(wait) = Box::pin(st.take_rate(&ch.name, label, rpm)).await
            {
                spent.push(r.index);
                retry_after = Some(retry_after.map_or(wait, |x| x.min(wait)));
                if spent.len() >= ch.credentials.len() {
                    report.attempts.push(skip_record(ch, Skip::NoCredential));
                }
                continue;
            }
            // Refused: the request ends with the outcome of the calls it made.
            if report.tried() > 0 && !health.retries.try_retry(&snap.server.retry_budget) {
                tracing::warn!(
                    channel = &*ch.name,
                    model,
                    "retry budget exhausted: not failing over"
                );
                report.attempts.push(skip_record(ch, Skip::RetryBudget));
                *blocked = true;
                break 'channels;
            }
            let cred = reservation.as_ref().map(|r| r.index);
            let t0 = Instant::now();
            let res = timeout_at(
                deadline,
                call(
                    ch,
                    cand.upstream_model.clone(),
                    cred,
                    CallerLimits {
                        timeout: step.timeout,
                        first_token_timeout: step.first_token_timeout,
                    },
                    body.clone(),
                ),
            )
            .await;
            let latency = t0.elapsed();
            let mut record = AttemptRecord {
                channel: ch.name.clone(),
                model: model_name.clone(),
                status: None,
                class: None,
                latency_ms: latency.as_millis() as u64,
                skip: None,
            };
            let failure = match res {
                Err(_) => {
                    // The request's deadline, not the channel's verdict: health is not told.
                    record.class = Some(OutcomeClass::Timeout);
                    report.attempts.push(record);
                    return Err(ExecError::Deadline);
                }
                Ok(Ok(v)) => {
                    health.record(
                        &key,
                        &snap.health,
                        &ch.breaker,
                        Verdict::Success { latency },
                    );
                    record.status = Some(200);
                    report.attempts.push(record);
                    report.served = Some(Served {
                        channel: ch.name.clone(),
                        model: model_name,
                        upstream_model: cand.upstream_model,
                    });
                    report.context = note;
                    return Ok((v, reservation));
                }
                Ok(Err(f)) => f,
            };
            // A failure of the key, not the channel: cool or disable that credential and try
            // another key of the same channel at once, before failing over.
            let cred_verdict = match (failure.class, failure.status) {
                (OutcomeClass::RateLimit, _) => Some(CredVerdict::RateLimited {
                    retry_after: failure.retry_after,
                }),
                (OutcomeClass::AuthError, Some(401)) => Some(CredVerdict::Refused),
                (OutcomeClass::AuthError, Some(403)) => Some(CredVerdict::ForbiddenForModel),
                _ => None,
            };
            let per_key = match (&reservation, cred_verdict) {
                (Some(r), Some(v)) => {
                    health.judge_credential(r, model, v, ch.credential_cooldown);
                    spent.push(r.index);
                    true
                }
                _ => false,
            };
            drop(reservation);
            if !per_key {
                health.record(&key, &snap.health, &ch.breaker, verdict(&failure, latency));
            }
            record.status = failure.status;
            record.class = Some(failure.class);
            report.attempts.push(record);
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
            if per_key && spent.len() < ch.credentials.len() {
                continue;
            }
            if !failure.class.fail_over() {
                return match failure.passthrough {
                    Some(p) => Err(ExecError::Rejected(p)),
                    None => Err(ExecError::AllAttemptsFailed),
                };
            }
            let rate_limited = failure.class == OutcomeClass::RateLimit;
            if rate_limited {
                let ra = failure.retry_after.unwrap_or(Duration::from_secs(1));
                retry_after = Some(retry_after.map_or(ra, |r| r.min(ra)));
            }
            // A rate-limited channel is left at once while another is available; the last one
            // may wait out its Retry-After (capped, inside the deadline) if it allows retries.
            let may_retry = if rate_limited {
                pos == last
            } else {
                failure.class.retry_same_channel()
            };
            // A circuit this failure opened (or a failed trial re-opened) ends the retries here.
            let opened = health
                .standing(&key, &snap.health, &ch.breaker)
                .skip
                .is_some_and(|s| s == Skip::CircuitOpen);
            if may_retry && retries < ch.max_retries && !opened {
                let wait = backoff(
                    ch.retry_interval,
                    retries,
                    failure.retry_after,
                    snap.server.max_retry_after,
                    &mut rng,
                );
                if Instant::now() + wait >= deadline {
                    continue 'channels;
                }
                tokio::time::sleep(wait).await;
                retries += 1;
                // The wait is over: the channel's keys may be tried again.
                spent.clear();
                continue;
            }
            continue 'channels;
        }
    }
    let mine = &report.attempts[first..];
    if all_rate_limited(mine) {
        return Err(ExecError::AllRateLimited {
            retry_after: retry_after.unwrap_or(Duration::from_secs(1)),
        });
    }
    if mine.iter().all(|a| a.skip.is_some()) {
        // Every channel was skipped by its health: answer (or move on) at once, without waiting.
        return Err(ExecError::Route(RouteError::NoAvailableChannel(
            model.to_string(),
        )));
    }
    Err(ExecError::AllAttemptsFailed)
}

/// A client error from a channel of another protocol, to a request carrying history only its
/// own provider accepts, is a translation defect: failed over, never returned as the client's.
/// Only a 400 that names that content counts: any other (context too long, a bad parameter)
/// stays the client's, returned as is, as clients such as Claude Code act on it.
fn translated(mut f: Failure, ch: &Channel, req: &ChatRequest) -> Failure {
    let about_history = |p: &Passthrough| {
        let body = String::from_utf8_lossy(&p.body).to_ascii_lowercase();
        ["signature", "thinking", "thought"]
            .iter()
            .any(|w| body.contains(w))
    };
    if f.class == OutcomeClass::ClientError
        && ch.kind.protocol() != req.origin
        && f.passthrough.as_ref().is_some_and(about_history)
        && req.has_provider_only_history()
    {
        f.class = OutcomeClass::TranslationError;
        f.passthrough = None;
    }
    f
}

/// A client error that says the prompt exceeds the model's window, as this channel's protocol
/// says it: its own class, so a larger context fallback may take the request.
fn overflowed(mut f: Failure, ch: &Channel) -> Failure {
    if f.class == OutcomeClass::ClientError
        && let Some(p) = f.passthrough.as_mut()
        && outcome::context_exceeded(ch.kind.protocol(), p)
    {
        p.context_window = true;
        f.class = OutcomeClass::ContextWindow;
    }
    f
}

/// The key's or request's trimming choice.
fn fitter<'r>(snap: &'r Snapshot, route: &Route<'_>, req: &'r ChatRequest) -> Option<Fitter<'r>> {
    let trim = route.trim.or(route.key.trim.then_some(true));
    Fitter::new(req, &snap.catalog, trim)
}

/// One non-streaming upstream call, bounded by the attempt timeout and classified.
async fn within<T>(
    limit: Limit,
    call: impl Future<Output = Result<T, crate::provider::UpstreamError>>,
) -> Result<T, Failure> {
    match timeout_at(Instant::now() + limit.within, call).await {
        Err(_) => Err(limit.expired("attempt timeout")),
        Ok(r) => r.map_err(classify),
    }
}

/// Non-streaming chat: each attempt bounded by the channel's `timeout_ms`.
pub async fn chat(
    snap: &Snapshot,
    health: &Health,
    route: Route<'_>,
    req: &ChatRequest,
    deadline: Instant,
    report: &mut Report,
) -> Result<ChatResponse, ExecError> {
    run(
        snap,
        health,
        route,
        req.estimated_tokens(),
        deadline,
        report,
        fitter(snap, &route, req),
        |ch, up, cred, step, fitted| async move {
            let req = fitted.as_deref().unwrap_or(req);
            within(
                Limit::of(ch.timeout, step.timeout),
                ch.upstream.chat(req, &up, cred),
            )
            .await
            .map_err(|f| overflowed(translated(f, ch, req), ch))
        },
    )
    .await
    .map(|(resp, slot)| {
        if let (Some(mut slot), Some(total)) = (slot, resp.usage.as_ref().and_then(Usage::total)) {
            slot.used(total);
        }
        resp
    })
}

pub async fn embeddings(
    snap: &Snapshot,
    health: &Health,
    route: Route<'_>,
    req: &EmbeddingsRequest,
    deadline: Instant,
    report: &mut Report,
) -> Result<Value, ExecError> {
    run(
        snap,
        health,
        route,
        (req.input.to_string().len() as u64).div_ceil(4),
        deadline,
        report,
        None,
        |ch, up, cred, step, _| async move {
            within(
                Limit::of(ch.timeout, step.timeout),
                ch.upstream.embeddings(req, &up, cred),
            )
            .await
        },
    )
    .await
    .map(|(v, slot)| {
        let used = v.pointer("/usage/total_tokens").and_then(Value::as_u64);
        if let (Some(mut slot), Some(used)) = (slot, used) {
            slot.used(used);
        }
        v
    })
}

/// Chunks held before commit, at most: role-only or empty chunks past this commit the stream.
const MAX_HEAD_CHUNKS: usize = 64;

/// A stream past its commit point: the chunks read before commit (role-only chunks and the
/// first content), and the rest of the same upstream stream.
pub struct Committed {
    pub head: Vec<StreamChunk>,
    pub rest: ChunkStream,
    /// The credential's slot, held until the stream ends (or the client leaves).
    pub slot: Option<Reservation>,
    /// Where a break after commit is reported, so it counts against the channel's health.
    pub on_break: Option<BreakReport>,
}

/// Tells health that a committed stream broke.
pub struct BreakReport {
    health: Arc<Health>,
    key: Key,
    settings: crate::config::HealthSettings,
    breaker: crate::config::BreakerSettings,
}

impl BreakReport {
    pub fn record(&self, latency: Duration) {
        self.health.record(
            &self.key,
            &self.settings,
            &self.breaker,
            Verdict::Failure { latency },
        );
    }
}

/// Streaming chat: an attempt succeeds only when its upstream yields the first content (or a
/// finished empty answer) within `first_token_timeout_ms`. Everything before that is invisible
/// to the client, so any failure there just moves on to the next attempt.
pub async fn chat_stream(
    snap: &Snapshot,
    health: &Arc<Health>,
    route: Route<'_>,
    req: &ChatRequest,
    deadline: Instant,
    report: &mut Report,
) -> Result<Committed, ExecError> {
    let (mut committed, slot) = run(
        snap,
        health,
        route,
        req.estimated_tokens(),
        deadline,
        report,
        fitter(snap, &route, req),
        |ch, up, cred, step, fitted| async move {
            let req = fitted.as_deref().unwrap_or(req);
            let limit = Limit::of(ch.first_token_timeout, step.first_token_timeout);
            let open = async {
                let mut rest = ch
                    .upstream
                    .chat_stream(req, &up, cred)
                    .await
                    .map_err(classify)?;
                let mut head = Vec::new();
                loop {
                    match rest.next().await {
                        Some(item) => {
                            let chunk = item.map_err(classify)?;
                            // A live upstream that keeps sending empty chunks commits at the cap:
                            // what is held before commit stays bounded.
                            let commit = chunk.has_content()
                                || chunk.has_finish()
                                || head.len() + 1 >= MAX_HEAD_CHUNKS;
                            head.push(chunk);
                            if commit {
                                return Ok(Committed {
                                    head,
                                    rest,
                                    slot: None,
                                    on_break: None,
                                });
                            }
                        }
                        // `[DONE]` with neither content nor a finish reason is not an answer.
                        None => return Err(Failure::empty_stream()),
                    }
                }
            };
            match timeout_at(Instant::now() + limit.within, open).await {
                Err(_) => Err(limit.expired("first token timeout")),
                Ok(r) => r.map_err(|f| overflowed(translated(f, ch, req), ch)),
            }
        },
    )
    .await?;
    committed.slot = slot;
    // After commit a broken stream is still the channel's failure: the relay reports it.
    let served = report
        .served
        .as_ref()
        .map(|s| (s.channel.clone(), s.model.clone()));
    if let Some((ch, model)) =
        served.and_then(|(n, m)| Some((snap.channels.iter().find(|c| c.name == n)?, m)))
    {
        committed.on_break = Some(BreakReport {
            health: health.clone(),
            key: health_key(ch, &model),
            settings: snap.health,
            breaker: ch.breaker,
        });
    }
    Ok(committed)
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

    #[test]
    fn report_extension_only_when_failover_occurred() {
        let mut r = Report::new("m");
        let ok = AttemptRecord {
            channel: "a".into(),
            model: "m".into(),
            status: Some(200),
            class: None,
            latency_ms: 1,
            skip: None,
        };
        r.attempts.push(ok.clone());
        r.served = Some(Served {
            channel: "a".into(),
            model: "m".into(),
            upstream_model: "m-1".into(),
        });
        assert!(r.body_extension().is_none());
        r.attempts.insert(
            0,
            AttemptRecord {
                class: Some(OutcomeClass::ServerError),
                status: Some(500),
                channel: "b".into(),
                ..ok
            },
        );
        let ext = r.body_extension().unwrap();
        assert_eq!(ext["failover"]["attempts"][0]["reason"], "server_error");
        assert_eq!(ext["served_channel"], "a");
    }
}
