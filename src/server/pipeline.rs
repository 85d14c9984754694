//! The one pipeline every chat request follows, whatever its client protocol:
//! authenticate → session → semantic decision → chain → fit → attempts → settle → render → log.
//! The protocol is a [`Codec`]: it reads the body and writes the answer, the stream and errors.

use std::sync::Arc;

use axum::body::Body;
use axum::http::HeaderMap;
use axum::response::Response;

use super::affinity::{self, Session};
use super::ctx::Ctx;
use super::ctx::served;
use super::headers::{hdr, json_response, set_header};
use super::ingress::{Answer, Codec, Envelope, Parsed, StreamStart};
use super::{ApiError, AppState, admission, body, cache, continuation, semantic, sse};
use crate::config::{GatewayKey, Snapshot};
use crate::exec::{self, Committed, Report};
use crate::protocol::chain::ChainSpec;
use crate::protocol::{ChatRequest, ChatResponse};
use crate::router::{self, Chain};
use crate::telemetry::Answered;
use crate::usage;

/// Serves a chat request in `codec`'s protocol. The run is awaited boxed: its future is
/// ~11 KB, and inline in the handler's it was copied whole as axum moved it (measured ~8k
/// instructions a request, `bench/instructions.sh`).
pub async fn serve<C: Codec>(
    state: AppState,
    headers: HeaderMap,
    body: Body,
    codec: C,
) -> Response {
    let mut ctx = Ctx::new(&state, C::ENDPOINT, codec.envelope());
    ctx.traced(&headers);
    match Box::pin(pipeline(&state, &headers, &codec, &mut ctx, body)).await {
        Ok(resp) => resp,
        Err(e) => ctx.fail(e),
    }
}

/// A request refused before its pipeline starts (a path no protocol route knows).
pub fn refuse(
    state: &AppState,
    endpoint: &'static str,
    envelope: &'static dyn Envelope,
    err: ApiError,
) -> Response {
    Ctx::new(state, endpoint, envelope).fail(err)
}

async fn pipeline<C: Codec>(
    state: &AppState,
    headers: &HeaderMap,
    codec: &C,
    ctx: &mut Ctx,
    body: Body,
) -> Result<Response, ApiError> {
    if let Some((model, stream)) = codec.path_target() {
        (ctx.requested_model, ctx.stream) = (Some(model.to_string()), stream);
    }
    let mut value = body::read_json(ctx, headers, body).await?;
    if codec.path_target().is_none() {
        (ctx.requested_model, ctx.stream) = body::requested(&value);
    }
    // A JWT's end user stands; any other request's is the one it names (checked either way).
    let header = headers.get(&hdr::USER);
    let named =
        crate::protocol::end_user::end_user(C::PROTOCOL, &value, header.map(|h| h.as_bytes()))?;
    if ctx.end_user.is_none() {
        ctx.end_user = named.map(Arc::from);
    }
    if C::CONTINUES {
        ctx.continuation = continuation::resolve(state, ctx, &mut value).await?;
    }
    let Parsed {
        mut req,
        spec,
        extra,
    } = codec.parse(value)?;
    let snap = ctx.snap.clone();
    let session = ctx
        .gateway_key(&snap)
        .and_then(|k| affinity::session(headers, &req, &k.name, snap.affinity.implicit));
    let decisions = semantic::decide(state, ctx, &snap, &spec, &req, session.as_ref()).await;
    let (key, chain) = resolve(ctx, &snap, &spec, &req.model, true, &decisions)?;
    ctx.semantic = decisions.into_iter().next();
    // The cache before admission: a hit calls no upstream and is charged to no budget.
    // Without a cache nothing is asked; a request its protocol keeps (or continuing one) is
    // never replayed.
    let kept = codec.kept(&extra) || ctx.continuation.is_some();
    let keep = match cache::consult(state, ctx, &snap, key, &chain, &req, headers, kept).await? {
        cache::Consulted::Hit(hit) => return Ok(cached(state, codec, ctx, &req, extra, hit).await),
        cache::Consulted::Go(plan) => plan.map(|p| *p),
    };
    let reply = admit(state, ctx, &snap, key, &chain, &req).await?;
    // Boxed: the store's futures (Redis's are large) would otherwise sit inline in every
    // request's future, sessions or not, and be copied with it.
    let before = match &session {
        Some(s) => Box::pin(state.state.binding(&s.key)).await,
        None => None,
    };
    ctx.session = session.as_ref().map(|s| s.tag.clone());
    let trim = body::trim_choice(headers)?;
    // A continued response's channel comes first, before the session's.
    let bound = ctx.continuation.as_ref().map(|(c, _)| c.clone());
    let only = ctx.continuation.as_ref().filter(|(_, only)| *only);
    let session_bound = before.as_deref().map(affinity::Bound::parse);
    let route = exec::Route {
        key,
        chain: &chain,
        bound: bound
            .as_deref()
            .or(session_bound.as_ref().map(|b| b.channel)),
        bound_credential: session_bound
            .as_ref()
            .filter(|_| bound.is_none())
            .and_then(|b| b.credential),
        shared: Some(&state.state),
        trim,
        only: only.map(|(c, _)| &**c),
        counting: None,
    };
    req.hops = ctx.hops;
    let waited = crate::provider::Waited::default();
    let trace = ctx.trace.as_ref().map(|t| t.ctx.clone());
    let job = exec::Job {
        snap: &snap,
        health: &state.health,
        route,
        estimate: req.estimated_tokens(),
        deadline: ctx.deadline(),
        spend: exec::ChannelSpend::new(
            &state.meter,
            ctx.prompt_estimate,
            reply,
            snap.server.hold_ttl,
        ),
        trace: trace.as_ref(),
        waited: &waited,
        stream: req.stream,
    };
    if req.stream {
        let committed = exec::chat_stream(&job, &req, &mut ctx.report).await;
        ctx.hold(job.spend.take_served());
        settle(state, &snap, session.as_ref(), before.as_ref(), ctx).await;
        let committed = committed.map_err(|e| ctx.exec_error(e))?;
        let keep = keep.and_then(|plan| keep_stream(state, &snap, plan));
        return Ok(stream(state, codec, ctx, &req, extra, committed, keep).await);
    }
    let resp = exec::chat(&job, &req, &mut ctx.report).await;
    ctx.hold(job.spend.take_served());
    settle(state, &snap, session.as_ref(), before.as_ref(), ctx).await;
    let resp = resp.map_err(|e| ctx.exec_error(e))?;
    Ok(answer(state, codec, ctx, &req, extra, resp, keep).await)
}

/// Resolves what may serve the request: the key's chain (redirects, defaults, groups).
pub fn resolve<'s>(
    ctx: &mut Ctx,
    snap: &'s Snapshot,
    spec: &ChainSpec,
    model: &str,
    defaults: bool,
    decisions: &[crate::semantic::Decision],
) -> Result<(&'s GatewayKey, Chain), ApiError> {
    let key = ctx.gateway_key(snap).ok_or(ApiError::Unauthorized)?;
    let chain = router::chain(snap, key, spec, model, defaults, decisions).map_err(|e| {
        ctx.report = Report::new(model);
        ctx.exec_error(exec::ExecError::Route(e))
    })?;
    ctx.requested_model = Some(chain.requested_model.clone());
    if let Some(team) = &key.team
        && let Some(step) = chain.steps.iter().find(|s| !team.allows_model(&s.model))
    {
        return Err(ApiError::ModelNotAllowed {
            team: team.team.clone(),
            model: step.model.to_string(),
        });
    }
    ctx.report = Report::for_chain(&chain);
    Ok((key, chain))
}

/// After the attempts: what the request did to its session's binding (and its semantic
/// instance), noted for the headers and the log.
async fn settle(
    state: &AppState,
    snap: &Snapshot,
    session: Option<&Session>,
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
    semantic::remember(state, snap, s, ctx).await;
}

/// How the answer is written (the model asked for, the report, whether the serving channel
/// got the request as sent), and what reading the request and reaching the serving channel's
/// protocol dropped: `lossless`, or `lossy (<what>)`.
fn answer_of<'a, C: Codec>(
    codec: &C,
    ctx: &Ctx,
    req: &'a ChatRequest,
    extra: &C::Extra,
) -> (Answer<'a>, String) {
    let channel = ctx
        .report
        .served
        .as_ref()
        .and_then(|s| ctx.snap.channels.iter().find(|c| c.name == s.channel));
    let as_sent = channel.is_some_and(|c| codec.as_sent(c));
    let mut lost = match (channel, &ctx.report.served) {
        (Some(c), Some(s)) if !as_sent => {
            req.translation_losses(c.upstream.protocol(c.kind, &s.upstream_model))
        }
        _ => Vec::new(),
    };
    if !as_sent {
        lost.extend(codec.read_losses(extra));
    }
    let translated = if lost.is_empty() {
        "lossless".into()
    } else {
        format!("lossy ({})", lost.join(", "))
    };
    let a = Answer {
        model: &req.model,
        ext: ctx.report.body_extension(),
        as_sent,
    };
    (a, translated)
}

/// A whole answer: written in the client's protocol, kept for a later turn if it says so, and
/// logged with its usage.
async fn answer<C: Codec>(
    state: &AppState,
    codec: &C,
    ctx: &mut Ctx,
    req: &ChatRequest,
    extra: C::Extra,
    resp: ChatResponse,
    keep: Option<cache::Plan>,
) -> Response {
    let (a, translated) = answer_of(codec, ctx, req, &extra);
    // A whole successful answer of a cached request is kept (a copy: the client's is
    // rendered from this one).
    let kept = keep
        .filter(|_| cache::keepable(&resp))
        .map(|plan| (plan, resp.clone()));
    // Only the counts, for the log: the rest of the usage goes into the answer.
    let counts = resp
        .usage
        .as_ref()
        .map(|u| (u.input_tokens, u.output_tokens));
    let used = usage::Used::of_answer(&resp, ctx.prompt_estimate);
    let answered = match ctx.records() {
        Some(capture) => Answered::of_response(&resp, req, capture),
        None => Answered::default(),
    };
    let rendered = codec.render(resp, &extra, &a);
    if let Some(keep) = rendered.keep {
        continuation::keep(state, ctx, keep).await;
    }
    let mut row = ctx.take_row(200, "ok");
    row.ttfb_ms = Some(row.total_ms);
    if let Some((input, output)) = counts {
        row.input_tokens = input;
        row.output_tokens = output;
        let secs = ctx.started.elapsed().as_secs_f64();
        row.tokens_per_s = output.filter(|_| secs > 0.0).map(|n| n as f64 / secs);
    }
    let cost = ctx.pending().finish(Some(used), None, &mut row);
    if let (Some((plan, r)), Some(s)) = (kept, &ctx.snap.cache) {
        let cache::Keep(key, keeping, question) = plan.keeping(cost);
        state.cache(s).store(key, r, keeping, question);
    }
    let mut out = served(json_response(rendered.body), ctx);
    set_header(&mut out, hdr::TRANSLATION, &translated);
    out.headers_mut().insert(hdr::COST, cost.into());
    row.translation = Some(translated);
    ctx.record(row, answered);
    out
}

/// A cached stream's keeper: its answer collected, for the cache (made now if it is not yet).
fn keep_stream(state: &AppState, snap: &Snapshot, plan: cache::Plan) -> Option<cache::KeepStream> {
    let s = snap.cache.as_ref()?;
    state.cache(s);
    Some(cache::KeepStream {
        collect: Default::default(),
        cache: state.cache.clone(),
        plan,
    })
}

/// Reserves the request's worst case against its key's budgets and limits; returns the reply
/// tokens reserved.
async fn admit(
    state: &AppState,
    ctx: &mut Ctx,
    snap: &Snapshot,
    key: &crate::config::GatewayKey,
    chain: &crate::router::Chain,
    req: &ChatRequest,
) -> Result<u64, ApiError> {
    ctx.prompt_estimate = req.prompt_estimate();
    let reply = admission::reply_reservation(snap, req.max_tokens.map(|(_, n)| n));
    let ask = admission::worst_case(snap, chain, ctx.prompt_estimate, reply);
    admission::admit(&state.meter, snap, key, ask, ctx).await?;
    Ok(reply)
}

/// A hit: the kept answer in the client's protocol, whole or as a stream, no upstream called.
async fn cached<C: Codec>(
    state: &AppState,
    codec: &C,
    ctx: &mut Ctx,
    req: &ChatRequest,
    extra: C::Extra,
    hit: Arc<crate::cache::Entry>,
) -> Response {
    ctx.cache = Some(match ctx.cache_similarity {
        Some(_) => "semantic-hit",
        None => "hit",
    });
    ctx.cache_age = Some(cache::age(&hit));
    let model = hit
        .origin
        .models
        .first()
        .cloned()
        .unwrap_or_else(|| req.model.as_str().into());
    ctx.cache_hit = Some((model, hit.cost_micros));
    if req.stream {
        return stream(state, codec, ctx, req, extra, cache::committed(&hit), None).await;
    }
    answer(state, codec, ctx, req, extra, hit.response.clone(), None).await
}

/// A committed stream: its headers now (true at the commit point), its body written by the
/// protocol's encoder as the upstream goes on, its log row when it ends.
async fn stream<C: Codec>(
    state: &AppState,
    codec: &C,
    ctx: &mut Ctx,
    req: &ChatRequest,
    extra: C::Extra,
    committed: Committed,
    to_cache: Option<cache::KeepStream>,
) -> Response {
    let ttfb = ctx.started.elapsed();
    let (a, translated) = answer_of(codec, ctx, req, &extra);
    let (enc, keep) = codec.encoder(
        extra,
        StreamStart {
            state,
            ctx,
            committed: &committed,
            answer: a,
            include_usage: req.stream_include_usage,
        },
    );
    if let Some(keep) = keep {
        continuation::keep(state, ctx, keep).await;
    }
    let mut row = ctx.take_row(200, "ok");
    row.translation = Some(translated.clone());
    let pending = ctx.pending();
    let answered = ctx
        .records()
        .map(|capture| Answered::of_stream(req, capture));
    let trail = ctx.trail(answered);
    let log = sse::StreamLog::new(state.log.clone(), row, pending, (ctx.started, ttfb), trail)
        .keeping(to_cache);
    let resp = sse::response(committed, ctx.snap.server.stream_idle_timeout, enc, log);
    let mut resp = served(resp, ctx);
    set_header(&mut resp, hdr::TRANSLATION, &translated);
    resp
}
