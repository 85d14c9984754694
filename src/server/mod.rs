//! HTTP (axum): routes, authentication, body limits, the failover report headers, admin API.
//! Handlers parse, call `exec`, and render; they hold no lock across an await.

mod affinity;
mod error;
pub mod explain;
mod sse;

pub use error::ApiError;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::config::{GatewayKey, Live, Snapshot};
use crate::exec::{self, Report};
use crate::health::Health;
use crate::protocol::chain::{self, ChainSpec};
use crate::protocol::{Protocol, anthropic, gemini, openai};
use crate::router::{self, Chain};
use crate::store::{LogRow, RequestLog};

/// Shared by every handler: the live config, channel health (which outlives config swaps) and
/// the request log.
#[derive(Clone)]
pub struct AppState {
    pub live: Arc<Live>,
    pub health: Arc<Health>,
    pub log: Arc<RequestLog>,
    /// Session bindings (in memory, or Redis shared by replicas).
    pub state: Arc<crate::state::State>,
    /// Semantic routers' reference embeddings, by config version.
    pub semantic: Arc<crate::semantic::Semantic>,
}

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/messages", post(messages))
        .route("/v1/responses", post(responses))
        .route("/v1beta/models/{model_action}", post(generate_content))
        .route("/v1/models/{model_action}", post(generate_content))
        .route("/v1/embeddings", post(embeddings))
        .route("/v1/models", get(models))
        .route("/v1/route/explain", post(route_explain))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/admin/requests", get(admin_requests))
        .route("/admin/reload", post(admin_reload))
        .route("/admin/health", get(admin_health))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

/// A gateway serving on a bound listener, until shut down, dropped or aborted.
pub struct Running {
    pub addr: SocketAddr,
    pub state: AppState,
    task: tokio::task::JoinHandle<()>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// Tasks that live as long as the server (the prober).
    pub background: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    pub fn abort(&self) {
        self.task.abort();
        self.background.iter().for_each(|t| t.abort());
    }

    /// Stops accepting, lets requests in flight finish for up to `grace`, then writes every
    /// queued log row. Returns whether everything in flight finished within the grace period.
    pub async fn shutdown(mut self, grace: std::time::Duration) -> bool {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let finished = tokio::time::timeout(grace, &mut self.task).await.is_ok();
        self.abort();
        self.state.log.flush().await;
        finished
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.abort();
    }
}

/// Starts serving on `listener` in a background task.
pub fn spawn(listener: TcpListener, state: AppState) -> std::io::Result<Running> {
    let addr = listener.local_addr()?;
    let app = router(state.clone());
    // Without TCP_NODELAY each small SSE write waits for the client's delayed ACK (~40 ms).
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let serve = axum::serve(listener, app).with_graceful_shutdown(async {
            let _ = stopped.await;
        });
        if let Err(e) = serve.await {
            tracing::error!(error = %e, "server stopped");
        }
    });
    Ok(Running {
        addr,
        state,
        task,
        stop: Some(stop),
        background: Vec::new(),
    })
}

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// Request ids: unique per process and sortable by start (time prefix, then a counter).
fn request_id() -> String {
    let ms = now_ms();
    let n = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    format!("req_{ms:x}{n:06x}")
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Per-request context carried through a handler. It owns the failover report and writes the
/// request's one log row: explicitly when the handler answers, or on drop when the client went
/// away first (499 `client_closed`), so an abandoned request is never missing from the log.
struct Ctx {
    id: String,
    started: Instant,
    ts_ms: i64,
    snap: Arc<Snapshot>,
    log: Arc<RequestLog>,
    endpoint: &'static str,
    key: Option<Arc<str>>,
    /// The authenticated key's index in `snap.keys`.
    key_idx: Option<usize>,
    /// `x-switchyard-hops` as received.
    hops: u32,
    requested_model: Option<String>,
    stream: bool,
    report: Report,
    /// The session's short hash, and what the request did to its binding.
    session: Option<String>,
    affinity: Option<&'static str>,
    /// The semantic decision, when a router named in the request made one.
    semantic: Option<crate::semantic::Decision>,
    logged: bool,
    /// The client's protocol: errors and answers are written in it.
    protocol: Protocol,
    /// For a Responses API client: what its answer repeats, and what reading it dropped.
    responses: Option<Box<crate::protocol::responses::Echo>>,
    /// A Responses request continuing a kept response: its channel, and whether only that
    /// channel may serve (the conversation lives there, not here).
    continuation: Option<(Arc<str>, bool)>,
}

impl Ctx {
    fn new(state: &AppState, endpoint: &'static str) -> Ctx {
        Ctx {
            id: request_id(),
            started: Instant::now(),
            ts_ms: now_ms(),
            snap: state.live.load(),
            log: state.log.clone(),
            endpoint,
            key: None,
            key_idx: None,
            hops: 0,
            requested_model: None,
            stream: false,
            report: Report::default(),
            session: None,
            affinity: None,
            semantic: None,
            logged: false,
            protocol: Protocol::OpenAiChat,
            responses: None,
            continuation: None,
        }
    }

    /// The deadline for everything before commit, measured from the request's arrival.
    fn deadline(&self) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.started) + self.snap.server.request_timeout
    }

    /// The row as it stands; taking it means the caller records it (now or at stream end).
    fn take_row(&mut self, status: u16, outcome: &str) -> LogRow {
        self.logged = true;
        let served = self.report.served.clone();
        LogRow {
            id: self.id.clone(),
            ts_ms: self.ts_ms,
            key_name: self.key.as_deref().map(str::to_string),
            endpoint: self.endpoint,
            requested_model: self.requested_model.clone(),
            served_model: served.as_ref().map(|s| s.model.to_string()),
            channel: served.as_ref().map(|s| s.channel.to_string()),
            status,
            outcome: outcome.to_string(),
            attempts: self.report.attempts_text(),
            stream: self.stream,
            total_ms: self.started.elapsed().as_millis() as u64,
            session: self.session.clone(),
            affinity: self.affinity,
            prompt_tokens: self.report.context.map(|c| c.prompt_tokens),
            trimmed_turns: self.report.context.map(|c| c.trimmed_turns as u64),
            ..LogRow::default()
        }
    }

    fn authenticate(&mut self, headers: &HeaderMap) -> Result<(), ApiError> {
        let found = bearer(headers).and_then(|p| self.snap.authenticate(p));
        let Some(key) = found else {
            // Unauthenticated traffic is not logged: it would let anyone fill the log.
            self.logged = true;
            return Err(ApiError::Unauthorized);
        };
        self.key = Some(key.name.clone());
        self.key_idx = self.snap.keys.iter().position(|k| std::ptr::eq(k, key));
        // A loop is refused before anything is read or routed.
        self.hops = hops(headers, self.snap.server.max_hops)?;
        Ok(())
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        if !self.logged {
            let row = self.take_row(499, "client_closed");
            self.log.record(row);
        }
    }
}

/// `Authorization: Bearer <key>`, else `x-api-key: <key>` (also when Authorization carries
/// another scheme, as some clients send for a proxy in between).
fn bearer(headers: &HeaderMap) -> Option<&str> {
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

/// Reads the body up to `limit` bytes; more is a 413 (checked against Content-Length first, so
/// an honest oversized upload is refused before it is read).
async fn read_body(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    within: std::time::Duration,
) -> Result<Bytes, ApiError> {
    // A client that trickles its body must not hold a task for ever.
    tokio::time::timeout(within, read_body_inner(headers, body, limit))
        .await
        .map_err(|_| ApiError::BodyTimeout)?
}

async fn read_body_inner(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes, ApiError> {
    if let Some(len) = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.parse::<u64>().ok())
        && len > limit as u64
    {
        return Err(ApiError::TooLarge { limit });
    }
    let mut stream = body.into_data_stream();
    // The common case is one frame: keep it as is, without a copy.
    let mut first: Option<Bytes> = None;
    let mut buf = Vec::new();
    let mut total = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|_| ApiError::BodyRead)?;
        total += chunk.len();
        if total > limit {
            return Err(ApiError::TooLarge { limit });
        }
        match first.take() {
            None if buf.is_empty() => first = Some(chunk),
            prev => {
                if let Some(p) = prev {
                    buf.extend_from_slice(&p);
                }
                buf.extend_from_slice(&chunk);
            }
        }
    }
    Ok(first.unwrap_or_else(|| Bytes::from(buf)))
}

fn parse_json(bytes: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| ApiError::InvalidJson(e.to_string()))
}

/// Response header names, made at compile time (`from_static` at run time parses the name on
/// every call, several times per request).
mod hdr {
    use axum::http::HeaderName;
    pub const CHANNEL: HeaderName = HeaderName::from_static("x-switchyard-channel");
    pub const MODEL: HeaderName = HeaderName::from_static("x-switchyard-model");
    pub const UPSTREAM_MODEL: HeaderName = HeaderName::from_static("x-switchyard-upstream-model");
    pub const REQUESTED_MODEL: HeaderName = HeaderName::from_static("x-switchyard-requested-model");
    pub const ATTEMPTS: HeaderName = HeaderName::from_static("x-switchyard-attempts");
    pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
    pub const TRANSLATION: HeaderName = HeaderName::from_static("x-switchyard-translation");
    pub const AFFINITY: HeaderName = HeaderName::from_static("x-switchyard-affinity");
    pub const SEMANTIC_ROUTE: HeaderName = HeaderName::from_static("x-switchyard-semantic-route");
    pub const SEMANTIC_SCORES: HeaderName = HeaderName::from_static("x-switchyard-semantic-scores");
    pub const TRIM: HeaderName = HeaderName::from_static("x-switchyard-trim");
    pub const PROMPT_TOKENS: HeaderName = HeaderName::from_static("x-switchyard-prompt-tokens");
    pub const TRIMMED_TURNS: HeaderName = HeaderName::from_static("x-switchyard-trimmed-turns");
}

fn set_header(resp: &mut Response, name: HeaderName, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        resp.headers_mut().insert(name, v);
    }
}

/// A served response with the failover report headers (true at the moment they are sent:
/// the commit point, for streams) and the request id.
fn served(mut resp: Response, ctx: &Ctx) -> Response {
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
    let attempts = ctx.report.tried().to_string();
    set_header(&mut resp, hdr::ATTEMPTS, &attempts);
    set_header(&mut resp, hdr::REQUEST_ID, &ctx.id);
    resp
}

fn json_response(body: Vec<u8>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

/// Logs a failed request and renders its error, with the request id.
fn fail(mut ctx: Ctx, err: ApiError) -> Response {
    let status = err.status().as_u16();
    let outcome = match (&err, ctx.report.last_class()) {
        (ApiError::Exec { err: e, .. }, _) if e.exhausted() => e.code(),
        (ApiError::Exec { .. }, Some(class)) => class.as_str(),
        _ => err.code(),
    };
    if !ctx.logged {
        let row = ctx.take_row(status, outcome);
        ctx.log.record(row);
    }
    let mut resp = err.render(ctx.protocol);
    if ctx.report.tried() > 0 {
        let n = ctx.report.tried().to_string();
        set_header(&mut resp, hdr::ATTEMPTS, &n);
    }
    set_header(&mut resp, hdr::REQUEST_ID, &ctx.id);
    resp
}

fn exec_error(ctx: &Ctx, err: exec::ExecError) -> ApiError {
    ApiError::Exec {
        err: Box::new(err),
        attempts: ctx.report.attempts_json(),
    }
}

async fn chat_completions(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let ctx = Ctx::new(&state, "chat.completions");
    chat_ingress(state, headers, body, ctx, openai::request_from_value).await
}

/// A chat body in one client protocol: read, parsed by `parse`, served.
async fn chat_ingress(
    state: AppState,
    headers: HeaderMap,
    body: Body,
    mut ctx: Ctx,
    parse: fn(Value) -> Result<crate::protocol::ChatRequest, crate::protocol::InvalidRequest>,
) -> Response {
    let parsed = match read_chat_json(&mut ctx, &headers, body).await {
        Ok((v, spec)) => parse(v).map(|r| (r, spec)).map_err(ApiError::from),
        Err(e) => Err(e),
    };
    match parsed {
        Ok((req, spec)) => Box::pin(serve_chat(&state, &headers, ctx, req, spec)).await,
        Err(e) => fail(ctx, e),
    }
}

/// OpenAI Responses API: read into a chat request (stateless), served by any channel, answered
/// as a Response object or its event stream.
async fn responses(State(state): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let mut ctx = Ctx::new(&state, "responses");
    ctx.protocol = Protocol::OpenAiResponses;
    let parsed = match read_chat_json(&mut ctx, &headers, body).await {
        Ok((mut v, spec)) => match Box::pin(continuation(&state, &ctx, &mut v)).await {
            Ok(cont) => {
                ctx.continuation = cont;
                crate::protocol::responses::request_from_value(v)
                    .map(|r| (r, spec))
                    .map_err(ApiError::from)
            }
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    match parsed {
        Ok(((req, echo), spec)) => {
            ctx.responses = Some(Box::new(echo));
            Box::pin(serve_chat(&state, &headers, ctx, req, spec)).await
        }
        Err(e) => fail(ctx, e),
    }
}

/// A `previous_response_id`: with the conversation kept here, the request becomes whole again
/// (any channel may serve, the one that made the response first); without it, only that
/// channel can continue it. An id this key never got → 404.
async fn continuation(
    state: &AppState,
    ctx: &Ctx,
    body: &mut Value,
) -> Result<Option<(Arc<str>, bool)>, ApiError> {
    let Some(id) = crate::protocol::responses::previous_response_id(body).map(str::to_string)
    else {
        return Ok(None);
    };
    let key = ctx.key.as_deref().unwrap_or_default();
    let kept = state
        .state
        .response(&affinity::response_key(key, &id))
        .await
        .ok_or_else(|| ApiError::PreviousResponseNotFound(id.clone()))?;
    if let Some(items) = &kept.items {
        crate::protocol::responses::continue_from(body, items)?;
        return Ok(Some((kept.channel, false)));
    }
    if !kept.upstream_keeps {
        return Err(ApiError::PreviousResponseNotFound(id));
    }
    // Only that channel has the conversation, and only as long as it speaks the API.
    let speaks = ctx
        .snap
        .channels
        .iter()
        .any(|c| c.name == kept.channel && c.responses);
    if !speaks {
        return Err(ApiError::Exec {
            err: Box::new(exec::ExecError::PreviousResponseUnavailable(
                kept.channel.to_string(),
            )),
            attempts: Value::Array(Vec::new()),
        });
    }
    Ok(Some((kept.channel, true)))
}

/// Keeps a served Responses answer for continuations: the upstream's own id when the channel
/// speaks the API (it keeps the conversation, if the client let it), else this gateway's, with
/// the conversation (unless `store: false` or too large: then nothing can continue it).
async fn keep_response(state: &AppState, ctx: &Ctx, id: Option<&str>, items: Option<String>) {
    let (Some(echo), Some(served), Some(key)) =
        (&ctx.responses, &ctx.report.served, ctx.key.as_deref())
    else {
        return;
    };
    let upstream_keeps = served_by_responses_channel(ctx);
    let keep = if upstream_keeps {
        echo.store
    } else {
        items.is_some()
    };
    let Some(id) = id.filter(|_| keep) else {
        return;
    };
    let stored = crate::state::StoredResponse {
        channel: served.channel.clone(),
        upstream_keeps,
        items: items.filter(|_| !upstream_keeps).map(Into::into),
    };
    let ttl = ctx.snap.affinity.ttl;
    Box::pin(
        state
            .state
            .keep_response(&affinity::response_key(key, id), &stored, ttl),
    )
    .await;
}

/// The channel that served speaks the Responses API (it got the request as sent).
fn served_by_responses_channel(ctx: &Ctx) -> bool {
    ctx.report.served.as_ref().is_some_and(|s| {
        ctx.snap
            .channels
            .iter()
            .any(|c| c.name == s.channel && c.responses)
    })
}

/// For a translated Responses stream the client lets be kept: where its conversation goes when
/// the stream completes.
fn keeper(state: &AppState, ctx: &Ctx, store: bool) -> Option<sse::Keeper> {
    let served = ctx.report.served.as_ref()?;
    (store && !served_by_responses_channel(ctx)).then(|| sse::Keeper {
        state: state.state.clone(),
        key: ctx.key.clone().unwrap_or_else(|| "".into()),
        channel: served.channel.clone(),
        ttl: ctx.snap.affinity.ttl,
    })
}

/// Anthropic Messages (`anthropic-version` and `anthropic-beta` headers are accepted and not
/// needed): translated to the canonical request, served by any channel, answered as Anthropic.
async fn messages(State(state): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let mut ctx = Ctx::new(&state, "messages");
    ctx.protocol = Protocol::AnthropicMessages;
    chat_ingress(state, headers, body, ctx, anthropic::request_from_value).await
}

#[derive(Deserialize)]
struct GeminiQuery {
    key: Option<String>,
}

/// Gemini: `POST /v1beta/models/{model}:generateContent` and `:streamGenerateContent?alt=sse`,
/// with `x-goog-api-key` or `?key=`.
async fn generate_content(
    State(state): State<AppState>,
    axum::extract::Path(model_action): axum::extract::Path<String>,
    Query(q): Query<GeminiQuery>,
    mut headers: HeaderMap,
    body: Body,
) -> Response {
    let mut ctx = Ctx::new(&state, "generateContent");
    ctx.protocol = Protocol::Gemini;
    // The key may come as a query parameter: present it like the header form.
    if let Some(k) = q.key.as_deref().and_then(|k| HeaderValue::from_str(k).ok()) {
        headers.insert("x-goog-api-key", k);
    }
    let Some((model, action)) = model_action.rsplit_once(':') else {
        return fail(
            ctx,
            ApiError::NotFound(format!("/v1beta/models/{model_action}")),
        );
    };
    let stream = match action {
        "generateContent" => false,
        "streamGenerateContent" => true,
        _ => {
            return fail(
                ctx,
                ApiError::NotFound(format!("/v1beta/models/{model_action}")),
            );
        }
    };
    let parsed = match read_json(&mut ctx, &headers, body).await {
        Ok(v) => gemini::request_from_value(v, model, stream).map_err(ApiError::from),
        Err(e) => Err(e),
    };
    ctx.requested_model = Some(model.to_string());
    ctx.stream = stream;
    match parsed {
        Ok(req) => Box::pin(serve_chat(&state, &headers, ctx, req, ChainSpec::default())).await,
        Err(e) => fail(ctx, e),
    }
}

/// `lossless`, or `lossy (<what>)`: what reaching the serving channel's protocol dropped.
fn translation(snap: &Snapshot, ctx: &Ctx, req: &crate::protocol::ChatRequest) -> String {
    let report = &ctx.report;
    let channel = report
        .served
        .as_ref()
        .and_then(|s| snap.channels.iter().find(|c| c.name == s.channel));
    // A Responses request to an upstream that speaks the Responses API went as it was sent.
    if ctx.responses.is_some() && channel.is_some_and(|c| c.responses) {
        return "lossless".into();
    }
    let target = channel.map(|c| c.kind.protocol());
    let mut lost = target
        .map(|t| req.translation_losses(t))
        .unwrap_or_default();
    // What reading a Responses request as a chat request dropped (hosted tools...).
    if let Some(e) = &ctx.responses {
        lost.extend(e.losses.iter().cloned());
    }
    if lost.is_empty() {
        "lossless".into()
    } else {
        format!("lossy ({})", lost.join(", "))
    }
}

/// The decisions of the semantic routers the request names (as `model` or in its chain, after
/// redirects): one embedding each. None when the config has no routers.
async fn decide(
    state: &AppState,
    ctx: &Ctx,
    snap: &Snapshot,
    spec: &ChainSpec,
    req: &crate::protocol::ChatRequest,
    session: Option<&affinity::Session>,
) -> Vec<crate::semantic::Decision> {
    if snap.routers.is_empty() {
        return Vec::new();
    }
    let key = ctx.key_idx.and_then(|i| snap.keys.get(i));
    let mut out: Vec<crate::semantic::Decision> = Vec::new();
    let names =
        std::iter::once(req.model.as_str()).chain(spec.entries.iter().map(|e| e.model.as_str()));
    for name in names {
        let routed = key
            .and_then(|k| snap.redirect(k, name))
            .map_or_else(|| name.to_string(), |(to, _)| to);
        if let Some((i, r)) = snap.router(&routed)
            && !out.iter().any(|d| d.router == r.model)
        {
            // A session keeps the instance its first routed turn chose.
            let earlier = match session {
                Some(s) => Box::pin(state.state.instance(&s.key, &r.model)).await,
                None => None,
            };
            if let Some(d) = earlier.and_then(|inst| crate::semantic::Decision::kept(r, &inst)) {
                out.push(d);
                continue;
            }
            let d = Box::pin(state.semantic.decide(snap, &state.health, i, req)).await;
            out.push(d);
        }
    }
    out
}

/// After the attempts: what the request did to its session's binding (and its semantic
/// instance), noted for the headers and the log.
async fn settle(
    state: &AppState,
    snap: &Snapshot,
    session: Option<&affinity::Session>,
    before: Option<&Arc<str>>,
    ctx: &mut Ctx,
) {
    let Some(s) = session else {
        return;
    };
    ctx.affinity = Box::pin(affinity::settle(
        &state.state,
        &snap.affinity,
        snap,
        s,
        before,
        &ctx.report,
    ))
    .await;
    remember_instance(state, snap, s, ctx).await;
}

/// After a served turn, the session remembers (or keeps fresh) the instance its semantic router
/// chose, so later turns stay on it. A failed turn remembers nothing.
async fn remember_instance(
    state: &AppState,
    snap: &Snapshot,
    session: &affinity::Session,
    ctx: &Ctx,
) {
    let (Some(d), Some(_)) = (&ctx.semantic, &ctx.report.served) else {
        return;
    };
    let Some((_, router)) = snap.router(&d.router) else {
        return;
    };
    let instance = if d.kept {
        d.winner.as_deref()
    } else {
        d.chosen(router)
    };
    if let Some(inst) = instance {
        Box::pin(
            state
                .state
                .keep_instance(&session.key, &router.model, inst, snap.affinity.ttl),
        )
        .await;
    }
}

/// Resolves what may serve the request: the key's chain (redirects, defaults, groups).
fn resolve<'s>(
    ctx: &mut Ctx,
    snap: &'s Snapshot,
    spec: &ChainSpec,
    model: &str,
    defaults: bool,
    decisions: &[crate::semantic::Decision],
) -> Result<(&'s GatewayKey, Chain), ApiError> {
    let key = ctx
        .key_idx
        .and_then(|i| snap.keys.get(i))
        .ok_or(ApiError::Unauthorized)?;
    let chain = router::chain(snap, key, spec, model, defaults, decisions).map_err(|e| {
        ctx.report = Report::new(model);
        exec_error(ctx, exec::ExecError::Route(e))
    })?;
    ctx.requested_model = Some(chain.requested_model.clone());
    ctx.report = Report::for_chain(&chain);
    Ok((key, chain))
}

/// Runs a chat request and answers in the client's protocol. Handlers await it boxed: its
/// future is ~11 KB, and inline in theirs it was copied whole as axum moved them (measured
/// ~8k instructions a request, `bench/instructions.sh`).
async fn serve_chat(
    state: &AppState,
    headers: &HeaderMap,
    mut ctx: Ctx,
    mut req: crate::protocol::ChatRequest,
    spec: ChainSpec,
) -> Response {
    let snap = ctx.snap.clone();
    let session = ctx
        .key_idx
        .and_then(|i| snap.keys.get(i))
        .and_then(|k| affinity::session(headers, &req, &k.name, snap.affinity.implicit));
    let decisions = decide(state, &ctx, &snap, &spec, &req, session.as_ref()).await;
    let (key, chain) = match resolve(&mut ctx, &snap, &spec, &req.model, true, &decisions) {
        Ok(r) => r,
        Err(e) => return fail(ctx, e),
    };
    ctx.semantic = decisions.into_iter().next();
    // Boxed: the store's futures (Redis's are large) would otherwise sit inline in every
    // request's future, sessions or not, and be copied with it.
    let before = match &session {
        Some(s) => Box::pin(state.state.binding(&s.key)).await,
        None => None,
    };
    ctx.session = session.as_ref().map(|s| s.tag.clone());
    let trim = match trim_choice(headers) {
        Ok(t) => t,
        Err(e) => return fail(ctx, e),
    };
    // A continued response's channel comes first, before the session's.
    let bound = ctx.continuation.as_ref().map(|(c, _)| c.clone());
    let only = ctx.continuation.as_ref().filter(|(_, only)| *only);
    let route = exec::Route {
        key,
        chain: &chain,
        bound: bound.as_deref().or(before.as_deref()),
        shared: Some(&state.state),
        trim,
        only: only.map(|(c, _)| &**c),
    };
    req.hops = ctx.hops;
    let deadline = ctx.deadline();
    if req.stream {
        let result =
            exec::chat_stream(&snap, &state.health, route, &req, deadline, &mut ctx.report).await;
        settle(state, &snap, session.as_ref(), before.as_ref(), &mut ctx).await;
        return match result {
            Ok(committed) => {
                let ttfb = ctx.started.elapsed();
                // An upstream that speaks the Responses API named its response before the first
                // content: kept now. A translated one is kept when its stream completes.
                if ctx.responses.is_some() && served_by_responses_channel(&ctx) {
                    let upstream_id = committed.head.iter().find_map(|c| c.id.clone());
                    keep_response(state, &ctx, upstream_id.as_deref(), None).await;
                }
                let translated = translation(&snap, &ctx, &req);
                let mut row = ctx.take_row(200, "ok");
                row.translation = Some(translated.clone());
                let wire = match (ctx.protocol, ctx.responses.take()) {
                    (Protocol::OpenAiResponses, Some(echo)) => sse::Wire::Responses {
                        keep: keeper(state, &ctx, echo.store),
                        enc: Box::new(crate::protocol::responses::StreamEncoder::new(
                            *echo,
                            req.model.clone(),
                        )),
                    },
                    (Protocol::OpenAiChat | Protocol::OpenAiResponses, _) => sse::Wire::OpenAi,
                    (Protocol::AnthropicMessages, _) => sse::Wire::Anthropic {
                        enc: Box::default(),
                        model: req.model.clone(),
                    },
                    (Protocol::Gemini, _) => sse::Wire::Gemini {
                        enc: Box::default(),
                        model: req.model.clone(),
                    },
                };
                let resp = sse::response(
                    committed,
                    snap.server.stream_idle_timeout,
                    wire,
                    req.stream_include_usage,
                    ctx.report.body_extension(),
                    sse::StreamLog::new(state.log.clone(), row, ctx.started, ttfb),
                );
                let mut resp = served(resp, &ctx);
                set_header(&mut resp, hdr::TRANSLATION, &translated);
                resp
            }
            Err(err) => {
                let e = exec_error(&ctx, err);
                fail(ctx, e)
            }
        };
    }
    let result = exec::chat(&snap, &state.health, route, &req, deadline, &mut ctx.report).await;
    settle(state, &snap, session.as_ref(), before.as_ref(), &mut ctx).await;
    match result {
        Ok(resp) => {
            let ext = ctx.report.body_extension();
            // A Responses answer's id and the conversation to keep with it.
            let mut kept: Option<(Option<String>, Option<String>)> = None;
            let body = match ctx.protocol {
                Protocol::OpenAiResponses if ctx.responses.is_some() => {
                    let echo = ctx.responses.as_deref();
                    let mut v = match (&resp.raw, echo) {
                        // From an upstream that speaks it: its own Response, as it came.
                        (Some(raw), _) if raw.protocol == Protocol::OpenAiResponses => {
                            kept = Some((raw.body["id"].as_str().map(str::to_string), None));
                            raw.body.clone()
                        }
                        (_, Some(e)) => {
                            let v =
                                crate::protocol::responses::response_to_value(&resp, e, &req.model);
                            let output = v["output"].as_array().map_or(&[][..], Vec::as_slice);
                            kept = Some((Some(e.id.clone()), e.kept_with(output)));
                            v
                        }
                        (_, None) => Value::Null,
                    };
                    if let (Some(ext), Some(obj)) = (ext, v.as_object_mut()) {
                        obj.insert("switchyard".into(), ext);
                    }
                    serde_json::to_vec(&v)
                }
                Protocol::OpenAiChat | Protocol::OpenAiResponses => {
                    serde_json::to_vec(&openai::ResponseBody {
                        resp: &resp,
                        report: ext.as_ref(),
                    })
                }
                Protocol::Gemini => match &resp.raw {
                    // From a Gemini upstream: its own body, thought signatures and all.
                    Some(raw) if raw.protocol == Protocol::Gemini => serde_json::to_vec(&raw.body),
                    _ => serde_json::to_vec(&gemini::response_to_value(&resp, &req.model)),
                },
                Protocol::AnthropicMessages => {
                    let mut v = match resp.raw {
                        // From an Anthropic upstream: its own body, thinking signatures and all.
                        Some(raw) if raw.protocol == Protocol::AnthropicMessages => raw.body,
                        _ => anthropic::response_to_value(&resp, &req.model),
                    };
                    if let (Some(ext), Some(obj)) = (ext, v.as_object_mut()) {
                        obj.insert("switchyard".into(), ext);
                    }
                    serde_json::to_vec(&v)
                }
            }
            .unwrap_or_default();
            if let Some((id, items)) = kept {
                keep_response(state, &ctx, id.as_deref(), items).await;
            }
            let translated = translation(&snap, &ctx, &req);
            let mut row = ctx.take_row(200, "ok");
            row.translation = Some(translated.clone());
            row.ttfb_ms = Some(row.total_ms);
            if let Some(u) = &resp.usage {
                row.input_tokens = u.input_tokens;
                row.output_tokens = u.output_tokens;
                let secs = ctx.started.elapsed().as_secs_f64();
                row.tokens_per_s = u
                    .output_tokens
                    .filter(|_| secs > 0.0)
                    .map(|n| n as f64 / secs);
            }
            state.log.record(row);
            let mut out = served(json_response(body), &ctx);
            set_header(&mut out, hdr::TRANSLATION, &translated);
            out
        }
        Err(err) => {
            let e = exec_error(&ctx, err);
            fail(ctx, e)
        }
    }
}

/// Authenticates, reads the body within its limits and parses it as JSON, noting the
/// requested model (and stream flag) for the log even if the rest of the body is invalid.
async fn read_json(ctx: &mut Ctx, headers: &HeaderMap, body: Body) -> Result<Value, ApiError> {
    ctx.authenticate(headers)?;
    let server = &ctx.snap.server;
    let bytes = read_body(headers, body, server.max_body_bytes, server.request_timeout).await?;
    let value = parse_json(&bytes)?;
    ctx.requested_model = value
        .get("model")
        .and_then(Value::as_str)
        .map(str::to_string);
    ctx.stream = value
        .get("stream")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok(value)
}

/// [`read_json`] for OpenAI and Anthropic chat bodies: the caller's chain fields taken out.
async fn read_chat_json(
    ctx: &mut Ctx,
    headers: &HeaderMap,
    body: Body,
) -> Result<(Value, ChainSpec), ApiError> {
    let mut value = read_json(ctx, headers, body).await?;
    let spec = match value.as_object_mut() {
        Some(m) => chain::take(m)?,
        None => ChainSpec::default(),
    };
    Ok((value, spec))
}

/// `x-switchyard-hops`: Switchyards the request passed before this one. More than `max` is a loop.
fn hops(headers: &HeaderMap, max: u32) -> Result<u32, ApiError> {
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

/// `x-switchyard-trim: auto` trims this request to fit the serving model's window; `off` sends
/// it whole even where the key or the model's route would trim.
fn trim_choice(headers: &HeaderMap) -> Result<Option<bool>, ApiError> {
    let Some(v) = headers.get(hdr::TRIM) else {
        return Ok(None);
    };
    match v.to_str().map(str::trim) {
        Ok(s) if s.eq_ignore_ascii_case("auto") => Ok(Some(true)),
        Ok(s) if s.eq_ignore_ascii_case("off") => Ok(Some(false)),
        _ => Err(ApiError::BadHeader {
            name: TRIM_HEADER,
            expected: "auto or off",
        }),
    }
}

const TRIM_HEADER: &str = "x-switchyard-trim";

async fn embeddings(State(state): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let mut ctx = Ctx::new(&state, "embeddings");
    let parsed = match read_json(&mut ctx, &headers, body).await {
        Ok(value) => openai::embeddings_from_value(value).map_err(ApiError::from),
        Err(e) => Err(e),
    };
    let req = match parsed {
        Ok(r) => r,
        Err(e) => return fail(ctx, e),
    };
    let snap = ctx.snap.clone();
    let (key, chain) = match resolve(
        &mut ctx,
        &snap,
        &ChainSpec::default(),
        &req.model,
        false,
        &[],
    ) {
        Ok(r) => r,
        Err(e) => return fail(ctx, e),
    };
    let mut req = req;
    req.hops = ctx.hops;
    let route = exec::Route {
        key,
        chain: &chain,
        bound: None,
        shared: Some(&state.state),
        trim: None,
        only: None,
    };
    let deadline = ctx.deadline();
    match exec::embeddings(&snap, &state.health, route, &req, deadline, &mut ctx.report).await {
        Ok(mut v) => {
            let mut row = ctx.take_row(200, "ok");
            row.ttfb_ms = Some(row.total_ms);
            row.input_tokens = v.pointer("/usage/prompt_tokens").and_then(Value::as_u64);
            state.log.record(row);
            if let (Some(ext), Some(obj)) = (ctx.report.body_extension(), v.as_object_mut()) {
                obj.insert("switchyard".into(), ext);
            }
            served(
                json_response(serde_json::to_vec(&v).unwrap_or_default()),
                &ctx,
            )
        }
        Err(err) => {
            let e = exec_error(&ctx, err);
            fail(ctx, e)
        }
    }
}

async fn models(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let snap = state.live.load();
    let Some(key) = bearer(&headers).and_then(|p| snap.authenticate(p)) else {
        return ApiError::Unauthorized.into_response();
    };
    // Only models that some enabled channel of the key's groups serves: the rest would answer
    // 404 or 503.
    let data: Vec<Value> = snap
        .models
        .iter()
        .filter(|(m, _)| snap.serves(key, m, true))
        .map(
            |(m, _)| json!({"id": &**m, "object": "model", "created": 0, "owned_by": "switchyard"}),
        )
        .collect();
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

/// `POST /v1/route/explain`: the same body and headers as a chat request; answers with the
/// plan that request would follow (redirects, chain, candidates with health), calling no one.
async fn route_explain(State(state): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let mut ctx = Ctx::new(&state, "route.explain");
    // A preview is not traffic: it is not logged.
    ctx.logged = true;
    let (value, spec) = match read_chat_json(&mut ctx, &headers, body).await {
        Ok(r) => r,
        Err(e) => return fail(ctx, e),
    };
    let Some(model) = value
        .get("model")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
    else {
        return fail(
            ctx,
            ApiError::Invalid(crate::protocol::InvalidRequest::new("model", "is required")),
        );
    };
    let snap = ctx.snap.clone();
    // The prompt, for a semantic router, from the body read as an OpenAI or Anthropic request.
    let parsed = openai::request_from_value(value.clone())
        .or_else(|_| anthropic::request_from_value(value.clone()))
        .ok();
    let decisions = match &parsed {
        Some(req) => decide(&state, &ctx, &snap, &spec, req, None).await,
        None => Vec::new(),
    };
    let model = model.to_string();
    match resolve(&mut ctx, &snap, &spec, &model, true, &decisions) {
        Ok((key, chain)) => {
            let mut plan = explain::explain(&snap, &state.health, key, &chain, &decisions);
            let trim = match trim_choice(&headers) {
                Ok(t) => t,
                Err(e) => return fail(ctx, e),
            };
            if let Some(req) = &parsed {
                explain::explain_context_into(&mut plan, &snap, key, &chain, req, trim);
            }
            axum::Json(plan).into_response()
        }
        Err(e) => fail(ctx, e),
    }
}

async fn healthz() -> Response {
    axum::Json(json!({"status": "ok"})).into_response()
}

async fn readyz(State(state): State<AppState>) -> Response {
    let alive = state.log.alive();
    let snap = state.live.load();
    let body = json!({
        "status": if alive { "ready" } else { "not_ready" },
        "config": {"channels": snap.channels.len(), "models": snap.models.len()},
        "request_log": {"writer_alive": alive, "dropped_rows": state.log.dropped()},
        // Redis being down does not make the gateway unready: it serves on local state.
        "state": state.state.describe(),
    });
    let status = if alive {
        axum::http::StatusCode::OK
    } else {
        axum::http::StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(body)).into_response()
}

/// Admin routes exist only when an admin token is configured; anything else looks like 404.
fn admin_guard(snap: &Snapshot, headers: &HeaderMap, uri: &Uri) -> Result<(), ApiError> {
    let Some(token) = &snap.server.admin_token else {
        return Err(ApiError::NotFound(uri.path().to_string()));
    };
    match bearer(headers) {
        Some(p) if token.matches(p.as_bytes()) => Ok(()),
        _ => Err(ApiError::Unauthorized),
    }
}

#[derive(Deserialize)]
struct RecentQuery {
    limit: Option<u32>,
}

async fn admin_requests(
    State(state): State<AppState>,
    headers: HeaderMap,
    uri: Uri,
    query: Result<Query<RecentQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let snap = state.live.load();
    if let Err(e) = admin_guard(&snap, &headers, &uri) {
        return e.into_response();
    }
    let Ok(Query(q)) = query else {
        return ApiError::Invalid(crate::protocol::InvalidRequest::new(
            "limit",
            "expected a non-negative integer",
        ))
        .into_response();
    };
    let limit = q.limit.unwrap_or(50).min(1000);
    let log = state.log.clone();
    match tokio::task::spawn_blocking(move || log.recent(limit)).await {
        Ok(Ok(rows)) => axum::Json(json!({"object": "list", "data": rows})).into_response(),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "reading the request log failed");
            ApiError::LogUnavailable.into_response()
        }
        Err(_) => ApiError::LogUnavailable.into_response(),
    }
}

async fn admin_reload(State(state): State<AppState>, headers: HeaderMap, uri: Uri) -> Response {
    let snap = state.live.load();
    if let Err(e) = admin_guard(&snap, &headers, &uri) {
        return e.into_response();
    }
    // Reading and compiling a file is blocking work: off the runtime threads.
    let live = state.live.clone();
    let reloaded = match tokio::task::spawn_blocking(move || live.reload()).await {
        Ok(r) => r,
        Err(_) => return ApiError::Admin("the reload task failed".into()).into_response(),
    };
    match reloaded {
        Ok(next) => {
            // A changed config is a fresh start for refused or cooled credentials.
            state.health.pools.config_changed();
            tracing::info!(channels = next.channels.len(), "config reloaded");
            axum::Json(json!({
                "reloaded": true,
                "channels": next.channels.len(),
                "models": next.models.len(),
            }))
            .into_response()
        }
        Err(e) => {
            tracing::error!(error = %e, "config reload refused; the running config stays");
            ApiError::Admin(e.to_string()).into_response()
        }
    }
}

/// Channel health as the router sees it: score, success rate, circuit and cooldowns.
async fn admin_health(State(state): State<AppState>, headers: HeaderMap, uri: Uri) -> Response {
    let snap = state.live.load();
    if let Err(e) = admin_guard(&snap, &headers, &uri) {
        return e.into_response();
    }
    let known = state.health.report(&snap.health);
    // Channels health has no verdicts for yet are healthy by default: list them too.
    let mut rows: Vec<Value> = known.as_array().cloned().unwrap_or_default();
    for ch in &snap.channels {
        if !rows.iter().any(|r| r["channel"] == *ch.name) {
            rows.push(json!({
                "channel": &*ch.name, "model": null, "score": 100.0, "verdicts": 0,
                "success_rate": null, "circuit": "closed", "circuit_seconds_left": null,
                "rate_limited_seconds_left": null,
            }));
        }
    }
    for r in &mut rows {
        let enabled = snap
            .channels
            .iter()
            .find(|c| r["channel"] == *c.name)
            .map(|c| c.enabled && c.breaker.enabled);
        r["health_checked"] = json!(enabled);
        // Each configured credential by its label (never the key): in flight, cooling,
        // disabled; keys not used yet are listed idle.
        let name = r["channel"].as_str().unwrap_or("").to_string();
        let mut creds = state.health.pools.report(&name);
        if let (Some(list), Some(ch)) = (
            creds.as_array_mut(),
            snap.channels.iter().find(|c| *c.name == *name),
        ) {
            list.retain(|c| ch.credentials.iter().any(|(l, _)| c["label"] == **l));
            for (label, _) in &ch.credentials {
                if !list.iter().any(|c| c["label"] == **label) {
                    list.push(json!({"label": &**label, "in_flight": 0, "disabled": false,
                        "cooling_seconds_left": null, "models_forbidden": []}));
                }
            }
        }
        r["credentials"] = creds;
    }
    axum::Json(json!({"object": "list", "data": rows, "state": state.state.describe()}))
        .into_response()
}

async fn not_found(uri: Uri) -> Response {
    ApiError::NotFound(uri.path().to_string()).into_response()
}

async fn method_not_allowed() -> Response {
    ApiError::MethodNotAllowed.into_response()
}
