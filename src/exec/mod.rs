//! The attempt loop: a request's chain of models (`chain.rs`), each model's attempts in plan
//! order (`attempts.rs`, deciding each next move with the pure `judge.rs`), the streaming
//! commit point (`stream.rs`), and the failover report (`report.rs`). Classification lives in
//! `outcome.rs`, the post-commit relay in `relay.rs`; exec never renders anything.

mod attempts;
mod beside;
mod chain;
mod error;
mod judge;
mod outcome;
mod relay;
mod report;
mod stream;

pub use beside::{count_tokens, kept_response};
pub use error::ExecError;
pub use judge::{At, Next, judge};
pub use outcome::{Failure, OutcomeClass, Passthrough, classify};
pub use relay::{Relay, RelayItem};
pub use report::{AttemptRecord, Report, Served, Timing};
pub use stream::{BreakReport, Committed, chat_stream};

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::time::{Instant, timeout_at};

use crate::config::{Channel, GatewayKey, Snapshot};
use crate::context::fit::Fitter;
use crate::health::Health;
use crate::protocol::{ChatRequest, ChatResponse, EmbeddingsRequest};
use crate::provider::{TraceContext, TraceHeaders, Via, Waited};
use crate::router::Chain;
use crate::spend::{Holds, Meter};

/// Who asks and what may serve it: the caller's gateway key and the resolved chain of models.
#[derive(Clone, Copy)]
pub struct Route<'a> {
    pub key: &'a GatewayKey,
    pub chain: &'a Chain,
    /// The channel the request's session is bound to: tried first where it serves the model.
    pub bound: Option<&'a str>,
    /// The credential of `bound` the session is bound to: taken while it has headroom.
    pub bound_credential: Option<&'a str>,
    /// State shared with other replicas (credentials' `rpm` buckets).
    pub shared: Option<&'a crate::state::State>,
    /// The request's own trimming choice (`x-switchyard-trim`); `None` leaves it to the key
    /// and the model's route.
    pub trim: Option<bool>,
    /// The only channel that may serve (a continuation of a response only it keeps).
    pub only: Option<&'a str>,
    /// Only channels that count tokens in this protocol (a count forwarded upstream).
    pub counting: Option<crate::protocol::Protocol>,
}

/// One request's run: what every model and attempt of it reads.
pub struct Job<'a> {
    pub snap: &'a Snapshot,
    pub health: &'a Arc<Health>,
    pub route: Route<'a>,
    /// Tokens this request is expected to use, charged to tpm budgets until usage settles it.
    pub estimate: u64,
    /// Everything before commit ends by then.
    pub deadline: Instant,
    /// Channels' budgets and limits: where they are counted and what the request asks.
    pub spend: ChannelSpend<'a>,
    /// The request's trace, when it is traced: each call sends its own span upstream.
    pub trace: Option<&'a TraceContext>,
    /// Where calls add up their time waiting on upstreams (one call at a time).
    pub waited: &'a Waited,
    /// A stream: latency is measured to the first token.
    pub stream: bool,
}

/// What a channel's budget and limits are asked before each channel's turn, and the serving
/// channel's holds, handed back for the answer to settle.
pub struct ChannelSpend<'a> {
    pub meter: &'a Arc<Meter>,
    /// The prompt's tokens as estimated, and the reply's reservation.
    pub prompt: u64,
    pub reply: u64,
    pub hold: Duration,
    pub served: std::sync::Mutex<Option<Holds>>,
}

impl<'a> ChannelSpend<'a> {
    pub fn new(meter: &'a Arc<Meter>, prompt: u64, reply: u64, hold: Duration) -> Self {
        ChannelSpend {
            meter,
            prompt,
            reply,
            hold,
            served: std::sync::Mutex::new(None),
        }
    }

    /// The serving channel's holds (taken once).
    pub fn take_served(&self) -> Option<Holds> {
        self.served.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// The caller's attempt timeouts for the model being tried (none: the channel's own).
#[derive(Debug, Clone, Copy)]
pub struct CallerLimits {
    pub timeout: Option<Duration>,
    pub first_token_timeout: Option<Duration>,
}

/// One upstream call as the attempt loop asks for it.
pub struct Call<'s> {
    pub channel: &'s Channel,
    pub upstream_model: Arc<str>,
    /// The reserved credential's index (`None`: the channel has no key).
    pub credential: Option<usize>,
    pub limits: CallerLimits,
    /// The request fitted to this model's window (`None`: the client's, as is).
    pub fitted: Option<Arc<ChatRequest>>,
    /// This call's span as the upstream's parent, when the request is traced.
    pub trace: Option<TraceHeaders>,
    pub waited: &'s Waited,
}

impl Call<'_> {
    /// What the provider is handed beside the request.
    pub fn via(&self) -> Via<'_> {
        Via {
            cred: self.credential,
            trace: self.trace.as_ref(),
            waited: self.waited,
        }
    }
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

/// A client error from a channel of another protocol, to a request carrying history only its
/// own provider accepts, is a translation defect: failed over, never returned as the client's.
/// Only a 400 that names that content counts: any other (context too long, a bad parameter)
/// stays the client's, returned as is, as clients such as Claude Code act on it.
fn translated(mut f: Failure, ch: &Channel, model: &str, req: &ChatRequest) -> Failure {
    let about_history = |p: &Passthrough| {
        let body = String::from_utf8_lossy(&p.body).to_ascii_lowercase();
        ["signature", "thinking", "thought"]
            .iter()
            .any(|w| body.contains(w))
    };
    if f.class == OutcomeClass::ClientError
        && ch.upstream.protocol(ch.kind, model) != req.origin
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
fn overflowed(mut f: Failure, ch: &Channel, model: &str) -> Failure {
    if f.class == OutcomeClass::ClientError
        && let Some(p) = f.passthrough.as_mut()
        && outcome::context_exceeded(ch.upstream.protocol(ch.kind, model), p)
    {
        p.context_window = true;
        f.class = OutcomeClass::ContextWindow;
    }
    f
}

/// What a chat attempt's failure is, as seen from its channel, the upstream model it asked
/// and the request.
fn judged(f: Failure, ch: &Channel, model: &str, req: &ChatRequest) -> Failure {
    overflowed(translated(f, ch, model, req), ch, model)
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
    job: &Job<'_>,
    req: &ChatRequest,
    report: &mut Report,
) -> Result<ChatResponse, ExecError> {
    let fitter = fitter(job.snap, &job.route, req);
    let (resp, slot) = chain::run(job, report, fitter, |c| async move {
        let req = c.fitted.as_deref().unwrap_or(req);
        let ch = c.channel;
        within(
            Limit::of(ch.timeout, c.limits.timeout),
            ch.upstream.chat(req, &c.upstream_model, c.via()),
        )
        .await
        .map_err(|f| judged(f, ch, &c.upstream_model, req))
    })
    .await?;
    if let Some(u) = resp.usage.as_ref() {
        let mut slot = slot;
        slot.settle(u);
    }
    Ok(resp)
}

pub async fn embeddings(
    job: &Job<'_>,
    req: &EmbeddingsRequest,
    report: &mut Report,
) -> Result<Value, ExecError> {
    let (v, slot) = chain::run(job, report, None, |c| async move {
        let ch = c.channel;
        within(
            Limit::of(ch.timeout, c.limits.timeout),
            ch.upstream.embeddings(req, &c.upstream_model, c.via()),
        )
        .await
    })
    .await?;
    let used = v.pointer("/usage/total_tokens").and_then(Value::as_u64);
    if let (Some(mut r), Some(used)) = (slot.credential, used) {
        r.used(used);
    }
    Ok(v)
}
