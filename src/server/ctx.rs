//! The per-request context: request id, the authenticated key, the failover report and the
//! request's one log row, written when the handler answers or, if the client went away first,
//! on drop (499 `client_closed`), so an abandoned request is never missing from the log.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;

use super::envelope::Envelope;
use super::headers::{hdr, set_header};
use super::{ApiError, AppState};
use crate::config::{GatewayKey, Snapshot};
use crate::exec::{self, AttemptRecord, Report};
use crate::spend::Holds;
use crate::store::{LogRow, RequestLog};
use crate::telemetry::{Answered, Finished, RequestTrace, Telemetry};
use crate::usage::Pending;

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// This process's part of its request ids: replicas sharing a store share its log, and two
/// processes counting from 0 in the same millisecond would name two requests alike.
static PROCESS_TAG: std::sync::LazyLock<u32> = std::sync::LazyLock::new(|| fastrand::u32(..));

/// Request ids: sortable by start (time prefix), then the process's random tag and its
/// counter, so unique across replicas.
fn request_id() -> String {
    let ms = crate::clock::unix_ms();
    let n = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    format!("req_{ms:x}{:08x}{n:06x}", *PROCESS_TAG)
}

pub struct Ctx {
    pub id: String,
    pub started: Instant,
    ts_ms: i64,
    pub snap: Arc<Snapshot>,
    log: Arc<RequestLog>,
    endpoint: &'static str,
    pub key: Option<Arc<str>>,
    /// The authenticated key's index in `snap.keys`.
    key_idx: Option<usize>,
    /// `x-switchyard-hops` as received.
    pub hops: u32,
    pub requested_model: Option<String>,
    pub stream: bool,
    /// Sent with `x-switchyard-test`: logged as test traffic, which log readers may hide.
    pub test: bool,
    pub report: Report,
    /// The session's short hash, and what the request did to its binding.
    pub session: Option<String>,
    pub affinity: Option<&'static str>,
    /// What the response cache did: `hit`, `miss`, `bypass` (none: no cache).
    pub cache: Option<&'static str>,
    /// A hit's age in seconds (the `age` header).
    pub cache_age: Option<u64>,
    /// Why a request was not cached (`x-switchyard-cache-bypass`).
    pub cache_bypass: Option<&'static str>,
    /// A response-cache hit: the model its entry answered and what it saved (the ledger's row).
    pub cache_hit: Option<(Arc<str>, u64)>,
    /// A semantic hit's cosine (`x-switchyard-cache-similarity`).
    pub cache_similarity: Option<f32>,
    /// The semantic decision, when a router named in the request made one.
    pub semantic: Option<crate::semantic::Decision>,
    pub logged: bool,
    /// The client's protocol's error envelope: every error is written in it.
    pub envelope: &'static dyn Envelope,
    /// A Responses request continuing a kept response: its channel, and whether only that
    /// channel may serve (the conversation lives there, not here).
    pub continuation: Option<(Arc<str>, bool)>,
    /// The prompt as the gateway counts it, charged when an upstream reports no usage.
    pub prompt_estimate: u64,
    /// The request's holds on its key's and serving channel's budgets and limits.
    pub holds: Option<Holds>,
    /// The end user the request names (`user`, `metadata.user_id`, `x-switchyard-user`...),
    /// or its JWT's.
    pub end_user: Option<Arc<str>>,
    /// Where JWT clients' tokens are checked, when the config names issuers.
    jwks: Option<Arc<crate::auth::jwt::Jwks>>,
    /// Where the request's `model.failover` goes, if it has one.
    events: crate::events::Emitter,
    /// The request's trace, when spans go anywhere.
    pub trace: Option<RequestTrace>,
    /// Time spent waiting on the client (its body), not the gateway's own.
    pub client_wait: Duration,
    telemetry: Arc<Telemetry>,
}

/// What the end of a committed stream tells telemetry about its request (taken from its
/// `Ctx` at commit).
pub struct Trail {
    pub telemetry: Arc<Telemetry>,
    pub snap: Arc<Snapshot>,
    pub attempts: Vec<AttemptRecord>,
    key_idx: Option<usize>,
    semantic: Option<(Arc<str>, Arc<str>)>,
    trace: Option<RequestTrace>,
    /// The gateway's own time up to the commit point.
    pub before_commit: Duration,
    /// `Some` when the request's spans are recorded: what the stream says.
    pub answered: Option<Answered>,
}

impl Trail {
    /// The stream has ended at `ended`: its series and spans. `overhead`: `None` when the
    /// client left.
    pub fn finish(
        &mut self,
        row: &LogRow,
        started: Instant,
        ended: Instant,
        overhead: Option<Duration>,
    ) {
        let answered = self.answered.take().unwrap_or_default();
        let f = Finished {
            snap: &self.snap,
            row,
            attempts: &self.attempts,
            key_idx: self.key_idx,
            semantic: self.semantic.as_ref().map(|(r, i)| (&**r, &**i)),
            started,
            ended,
            overhead,
        };
        self.telemetry.finish(&f, self.trace.as_ref(), answered);
    }
}

impl Ctx {
    pub fn new(state: &AppState, endpoint: &'static str, envelope: &'static dyn Envelope) -> Ctx {
        let snap = state.live.load();
        Ctx {
            id: request_id(),
            started: Instant::now(),
            ts_ms: crate::clock::unix_ms(),
            jwks: (!snap.jwt.is_empty()).then(|| state.jwks.clone()),
            snap,
            log: state.log.clone(),
            endpoint,
            key: None,
            key_idx: None,
            hops: 0,
            requested_model: None,
            stream: false,
            test: false,
            report: Report::default(),
            session: None,
            affinity: None,
            semantic: None,
            cache: None,
            cache_age: None,
            cache_bypass: None,
            cache_hit: None,
            cache_similarity: None,
            logged: false,
            envelope,
            continuation: None,
            prompt_estimate: 0,
            holds: None,
            end_user: None,
            events: state.events.emitter.clone(),
            trace: None,
            client_wait: Duration::ZERO,
            telemetry: state.telemetry.clone(),
        }
    }

    /// Starts the request's trace (the client's `traceparent` continued), when spans go anywhere.
    pub fn traced(&mut self, headers: &HeaderMap) {
        self.trace = self.telemetry.start(headers, self.endpoint);
    }

    /// Whether the answer's facts are wanted (the request's spans are recorded), and with
    /// its content.
    pub fn records(&self) -> Option<bool> {
        self.telemetry
            .records(self.trace.as_ref())
            .then(|| self.telemetry.captures_content())
    }

    /// The gateway's own time so far: since arrival, less waiting on the client, on
    /// upstreams and between retries.
    pub fn own_time(&self) -> Duration {
        let upstream: Duration = self
            .report
            .attempts
            .iter()
            .filter_map(|a| a.timing)
            .map(|t| t.waited)
            .sum();
        self.started
            .elapsed()
            .saturating_sub(self.client_wait + upstream + self.report.backoff)
    }

    /// The semantic router that picked, and the instance that served (the catchall's name
    /// when none cleared its threshold).
    fn semantic_pick(&self) -> Option<(Arc<str>, Arc<str>)> {
        let d = self.semantic.as_ref()?;
        let instance = match &d.winner {
            Some(w) => w.clone(),
            None => {
                let (_, r) = self.snap.router(&d.router)?;
                r.instances.get(r.catchall)?.name.clone()
            }
        };
        Some((d.router.clone(), instance))
    }

    /// What a committed stream carries to its end for telemetry (the trace moves with it).
    pub fn trail(&mut self, answered: Option<Answered>) -> Trail {
        Trail {
            telemetry: self.telemetry.clone(),
            snap: self.snap.clone(),
            attempts: self.report.attempts.clone(),
            key_idx: self.key_idx,
            semantic: self.semantic_pick(),
            trace: self.trace.take(),
            before_commit: self.own_time(),
            answered,
        }
    }

    /// Records the row, after telemetry has read it with the request's attempts.
    fn finish(&self, row: LogRow, answered: Answered, overhead: Option<Duration>) {
        let pick = self.semantic_pick();
        let f = Finished {
            snap: &self.snap,
            row: &row,
            attempts: &self.report.attempts,
            key_idx: self.key_idx,
            semantic: pick.as_ref().map(|(r, i)| (&**r, &**i)),
            started: self.started,
            ended: Instant::now(),
            overhead,
        };
        self.telemetry.finish(&f, self.trace.as_ref(), answered);
        self.log.record(row);
    }

    /// The request's charges so far, to be finished when its usage is known.
    pub fn pending(&mut self) -> Pending {
        let mut p = match self.cache_hit.take() {
            Some((model, saved)) => {
                let charged = self.snap.cache.as_ref().is_some_and(|c| c.charge_hits);
                Pending::cache_hit(model, saved, self.prompt_estimate, charged)
            }
            None => Pending::of(&self.report, self.prompt_estimate),
        };
        p.holds = self.holds.take();
        p
    }

    /// Adds holds (the serving channel's) to the request's.
    pub fn hold(&mut self, more: Option<Holds>) {
        match (&mut self.holds, more) {
            (Some(mine), Some(more)) => mine.absorb(more),
            (mine @ None, more) => *mine = more,
            (Some(_), None) => {}
        }
    }

    /// The row of a request that ended without an answer: its calls charged 0.
    fn unanswered_row(&mut self, status: u16, outcome: &str) -> LogRow {
        let mut row = self.take_row(status, outcome);
        self.pending().finish(None, None, &mut row);
        row
    }

    /// The deadline for everything before commit, measured from the request's arrival.
    pub fn deadline(&self) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.started) + self.snap.server.request_timeout
    }

    /// The authenticated key, in the snapshot the request reads.
    pub fn gateway_key<'s>(&self, snap: &'s Snapshot) -> Option<&'s GatewayKey> {
        self.key_idx.and_then(|i| snap.keys.get(i))
    }

    /// The row as it stands; taking it means the caller records it (now or at stream end).
    pub fn take_row(&mut self, status: u16, outcome: &str) -> LogRow {
        self.logged = true;
        if self.report.attempts.len() > 1 {
            self.failover_event(status, outcome);
        }
        let served = self.report.served.clone();
        LogRow {
            id: self.id.clone(),
            ts_ms: self.ts_ms,
            key_name: self.key.as_deref().map(str::to_string),
            endpoint: self.endpoint.into(),
            requested_model: self.requested_model.clone(),
            served_model: served.as_ref().map(|s| s.model.to_string()),
            channel: served.as_ref().map(|s| s.channel.to_string()),
            status,
            outcome: outcome.to_string(),
            attempts: self.report.attempts_text(),
            stream: self.stream,
            total_ms: self.started.elapsed().as_millis() as u64,
            session: self.session.clone(),
            affinity: self.affinity.map(Into::into),
            prompt_tokens: self.report.context.map(|c| c.prompt_tokens),
            trimmed_turns: self.report.context.map(|c| c.trimmed_turns as u64),
            attempt_count: self.report.tried() as u32,
            test: self.test,
            route_reason: self.report.route_reason().map(Into::into),
            cache: self.cache.map(Into::into),
            team: self
                .gateway_key(&self.snap)
                .and_then(|k| Some(k.team.as_ref()?.team.clone())),
            end_user: self.end_user.clone(),
            ..LogRow::default()
        }
    }

    /// `model.failover`: the request moved past its first choice (served or not), once.
    fn failover_event(&self, status: u16, outcome: &str) {
        let served = self.report.served.as_ref();
        self.events.emit(
            "model.failover",
            serde_json::json!({
                "request_id": self.id,
                "key": self.key.as_deref(),
                "requested_model": self.requested_model.as_deref()
                    .unwrap_or(&self.report.requested_model),
                "served_model": served.map(|s| &*s.model),
                "served_channel": served.map(|s| &*s.channel),
                // `served`, or why not (`all_failed`, `client_closed`, the last class).
                "outcome": if served.is_some() { "served" } else { outcome },
                "status": status,
                "stream": self.stream,
                "attempts": &self.report.attempts,
            }),
        );
    }

    /// Records an answered request's row (its series and spans too).
    pub fn record(&self, row: LogRow, answered: Answered) {
        self.finish(row, answered, Some(self.own_time()));
    }

    /// The client: a gateway key, or a JWT from an `[[auth.jwt]]` issuer (its team's key, its
    /// end user from the token).
    pub async fn authenticate(&mut self, headers: &HeaderMap) -> Result<(), ApiError> {
        let token = bearer(headers);
        let found = token.and_then(|p| self.snap.authenticate(p));
        let idx = match (found, &self.jwks, token) {
            (Some(key), _, _) => self.snap.keys.iter().position(|k| std::ptr::eq(k, key)),
            (None, Some(jwks), Some(t)) if crate::auth::jwt::looks_like_jwt(t) => {
                let jwks = jwks.clone();
                match Box::pin(jwks.verify(&self.snap, t)).await {
                    Ok(client) => {
                        self.end_user = client.user.map(Arc::from);
                        Some(client.key)
                    }
                    Err(e) => {
                        self.logged = true;
                        return Err(ApiError::InvalidToken(e));
                    }
                }
            }
            _ => None,
        };
        let Some(key) = idx.and_then(|i| self.snap.keys.get(i)) else {
            // Unauthenticated traffic is not logged: it would let anyone fill the log.
            self.logged = true;
            return Err(ApiError::Unauthorized);
        };
        self.key = Some(key.name.clone());
        self.test = headers
            .get(&super::headers::hdr::TEST)
            .is_some_and(|v| matches!(v.as_bytes(), b"1" | b"true"));
        self.key_idx = idx;
        // A loop is refused before anything is read or routed.
        self.hops = hops(headers, self.snap.server.max_hops)?;
        Ok(())
    }

    /// Acts for the key named `name` without its secret (the admin API's route preview);
    /// false when no key has that name.
    pub fn act_as(&mut self, name: &str) -> bool {
        let Some(i) = self.snap.keys.iter().position(|k| *k.name == *name) else {
            return false;
        };
        self.key = Some(self.snap.keys[i].name.clone());
        self.key_idx = Some(i);
        true
    }

    /// The exec error with the attempts made, for the client's envelope.
    pub fn exec_error(&self, err: exec::ExecError) -> ApiError {
        ApiError::Exec {
            err: Box::new(err),
            attempts: self.report.attempts_json(),
        }
    }

    /// Logs a failed request and renders its error in the client's envelope, with the
    /// request id.
    pub fn fail(mut self, err: ApiError) -> Response {
        let status = err.status().as_u16();
        let outcome = match (&err, self.report.last_class()) {
            (ApiError::Exec { err: e, .. }, _) if e.exhausted() => e.code(),
            (ApiError::Exec { .. }, Some(class)) => class.as_str(),
            _ => err.code(),
        };
        if !self.logged {
            let row = self.unanswered_row(status, outcome);
            self.finish(row, Answered::default(), Some(self.own_time()));
        } else if matches!(err, ApiError::Unauthorized) && self.snap.metrics.enabled {
            // Not logged (anyone could fill the log), but counted: a wave of bad keys shows.
            let ingress = crate::telemetry::metrics::ingress(self.endpoint);
            let m = &self.telemetry.metrics;
            m.requests
                .with([ingress, "other", err.code()], |c| c.add(1));
        }
        let mut resp = err.render(self.envelope);
        if self.report.tried() > 0 {
            let n = self.report.tried().to_string();
            set_header(&mut resp, hdr::ATTEMPTS, &n);
        }
        set_header(&mut resp, hdr::REQUEST_ID, &self.id);
        resp
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        if !self.logged {
            let row = self.unanswered_row(499, "client_closed");
            self.finish(row, Answered::default(), None);
        }
    }
}

/// `Authorization: Bearer <key>`, else `x-api-key: <key>` (also when Authorization carries
/// another scheme, as some clients send for a proxy in between).
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let from_auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .and_then(|v| {
            let scheme = v.get(..7)?;
            scheme
                .eq_ignore_ascii_case("bearer ")
                .then(|| v.get(7..).map(str::trim))
                .flatten()
        });
    from_auth.or_else(|| {
        ["x-api-key", "x-goog-api-key"]
            .iter()
            .find_map(|h| headers.get(*h)?.to_str().ok())
            .map(str::trim)
    })
}

/// `x-switchyard-hops`: Switchyards the request passed before this one. More than `max` is a loop.
pub(super) fn hops(headers: &HeaderMap, max: u32) -> Result<u32, ApiError> {
    let Some(v) = headers.get(crate::provider::HOPS_HEADER) else {
        return Ok(0);
    };
    let n = v
        .to_str()
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .ok_or(ApiError::BadHeader {
            name: crate::provider::HOPS_HEADER,
            expected: "a non-negative integer",
        })?;
    if n > max {
        return Err(ApiError::LoopDetected { hops: n, max });
    }
    Ok(n)
}

/// A served response with the failover report headers and the request id.
pub fn served(mut resp: Response, ctx: &Ctx) -> Response {
    if let Some(s) = &ctx.report.served {
        set_header(&mut resp, hdr::CHANNEL, &s.channel);
        set_header(&mut resp, hdr::MODEL, &s.model);
        set_header(&mut resp, hdr::UPSTREAM_MODEL, &s.upstream_model);
    }
    if !ctx.report.requested_model.is_empty() {
        set_header(&mut resp, hdr::REQUESTED_MODEL, &ctx.report.requested_model);
    }
    if let Some(a) = ctx.affinity {
        set_header(&mut resp, hdr::AFFINITY, a);
    }
    // Counted only when trimming or a context fallback needed it.
    if let Some(n) = &ctx.report.context {
        let h = resp.headers_mut();
        h.insert(hdr::PROMPT_TOKENS, HeaderValue::from(n.prompt_tokens));
        h.insert(hdr::TRIMMED_TURNS, HeaderValue::from(n.trimmed_turns));
    }
    // Debugging headers, when the router exposes them and the embedding worked.
    if let Some(d) = &ctx.semantic
        && (!d.scores.is_empty() || d.kept)
        && ctx
            .snap
            .router(&d.router)
            .is_some_and(|(_, r)| r.expose_scores)
    {
        set_header(
            &mut resp,
            hdr::SEMANTIC_ROUTE,
            d.winner.as_deref().unwrap_or("fallback"),
        );
        if !d.scores.is_empty() {
            set_header(&mut resp, hdr::SEMANTIC_SCORES, &d.scores_text());
        }
    }
    if ctx.gateway_key(&ctx.snap).is_some_and(|k| k.expose_route)
        && let Some(reason) = ctx.report.route_reason()
    {
        resp.headers_mut()
            .insert(hdr::ROUTE, HeaderValue::from_static(reason));
    }
    if let Some(c) = ctx.cache {
        let h = resp.headers_mut();
        h.insert(hdr::CACHE, HeaderValue::from_static(c));
        if let Some(age) = ctx.cache_age {
            h.insert(header::AGE, HeaderValue::from(age));
        }
        if let Some(why) = ctx.cache_bypass {
            h.insert(hdr::CACHE_BYPASS, HeaderValue::from_static(why));
        }
        if let Some(sim) = ctx.cache_similarity
            && let Ok(v) = HeaderValue::from_str(&format!("{sim:.4}"))
        {
            h.insert(hdr::CACHE_SIMILARITY, v);
        }
    }
    let attempts = ctx.report.tried().to_string();
    set_header(&mut resp, hdr::ATTEMPTS, &attempts);
    set_header(&mut resp, hdr::REQUEST_ID, &ctx.id);
    resp
}
