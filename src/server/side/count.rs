//! Token counting in each protocol that has it: `POST /v1/messages/count_tokens` (Anthropic),
//! `POST /v1beta/models/{model}:countTokens` (Gemini: its route is the ingress's) and `POST
//! /v1/responses/input_tokens` (Responses). The count goes to the model's channels that count
//! in the client's protocol, routed and failed over like a chat request; where the model has
//! none, or none of them answers, it is counted here with the model's tokenizer (the one
//! trimming uses). `x-switchyard-count: upstream | local` says which.

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::Value;

use super::{Run, admit_key, answered, route};
use crate::config::Snapshot;
use crate::exec::{self, ExecError};
use crate::protocol::chain::ChainSpec;
use crate::protocol::{ChatRequest, InvalidRequest, Protocol, count};
use crate::router::Chain;
use crate::server::headers::{hdr, set_header};
use crate::server::ingress::Envelope;
use crate::server::ingress::anthropic::AnthropicEnvelope;
use crate::server::ingress::gemini::GeminiEnvelope;
use crate::server::ingress::openai::{OpenAiEnvelope, take_chain};
use crate::server::pipeline::resolve;
use crate::server::{ApiError, AppState, body, continuation, ctx::Ctx, semantic};

/// A counting request of one protocol.
struct Counting {
    p: Protocol,
    endpoint: &'static str,
    envelope: &'static dyn Envelope,
    /// Gemini's model is its path's.
    path_model: Option<String>,
}

pub async fn anthropic(State(state): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let c = Counting {
        p: Protocol::AnthropicMessages,
        endpoint: "messages.count_tokens",
        envelope: &AnthropicEnvelope,
        path_model: None,
    };
    serve(state, headers, body, c).await
}

pub async fn responses(State(state): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let c = Counting {
        p: Protocol::OpenAiResponses,
        endpoint: "responses.input_tokens",
        envelope: &OpenAiEnvelope,
        path_model: None,
    };
    serve(state, headers, body, c).await
}

/// Gemini's `:countTokens`, for the model its path names (the key already in the headers).
pub async fn gemini(state: AppState, headers: HeaderMap, body: Body, model: String) -> Response {
    let c = Counting {
        p: Protocol::Gemini,
        endpoint: "countTokens",
        envelope: &GeminiEnvelope,
        path_model: Some(model),
    };
    serve(state, headers, body, c).await
}

async fn serve(state: AppState, headers: HeaderMap, body: Body, c: Counting) -> Response {
    let mut ctx = Ctx::new(&state, c.endpoint, c.envelope);
    ctx.traced(&headers);
    match Box::pin(run(&state, &headers, &mut ctx, body, &c)).await {
        Ok(resp) => resp,
        Err(e) => ctx.fail(e),
    }
}

async fn run(
    state: &AppState,
    headers: &HeaderMap,
    ctx: &mut Ctx,
    body: Body,
    c: &Counting,
) -> Result<Response, ApiError> {
    ctx.requested_model = c.path_model.clone();
    let mut value = body::read_json(ctx, headers, body).await?;
    let model = match &c.path_model {
        Some(m) => m.clone(),
        None => match value.get("model") {
            Some(Value::String(m)) if !m.is_empty() => m.clone(),
            _ => return Err(InvalidRequest::new("model", "is required").into()),
        },
    };
    ctx.requested_model = Some(model.clone());
    // Only the first model is counted: a chain's others would see the same prompt.
    take_chain(&mut value)?;
    if c.p == Protocol::OpenAiResponses {
        ctx.continuation = continuation::resolve(state, ctx, &mut value).await?;
    }
    let req = count::request(c.p, &value, &model)?;
    let snap = ctx.snap.clone();
    let none = ChainSpec::default();
    let decisions = semantic::decide(state, ctx, &snap, &none, &req, None).await;
    let (key, chain) = resolve(ctx, &snap, &none, &model, false, &decisions)?;
    admit_key(state, ctx).await?;
    let only = ctx.continuation.clone().filter(|(_, only)| *only);
    let forwarded = if only.is_some() || counts_upstream(&snap, key, &chain, c.p) {
        let mut r = route(state, key, &chain);
        r.counting = Some(c.p);
        r.only = only.as_ref().map(|(ch, _)| &**ch);
        r.bound = ctx.continuation.as_ref().map(|(ch, _)| &**ch);
        let attempts = Run::of(ctx);
        let job = attempts.job(state, &snap, r);
        match exec::count_tokens(&job, &mut ctx.report, c.p, &value, ctx.hops).await {
            Ok(v) => Some(v),
            // The request's own mistake, or a conversation only its channel has: the client's.
            Err(e @ (ExecError::Rejected(_) | ExecError::Deadline)) => {
                return Err(ctx.exec_error(e));
            }
            Err(e) if only.is_some() => return Err(ctx.exec_error(e)),
            // No channel that counts could answer: counted here, the attempts in the report.
            Err(_) => None,
        }
    } else {
        None
    };
    let (v, who) = match forwarded {
        Some(v) => (v, "upstream"),
        None => (count::answer(c.p, local(&snap, &chain, &req)), "local"),
    };
    let mut resp = answered(ctx, &v, count::tokens_of(c.p, &v));
    set_header(&mut resp, hdr::COUNT, who);
    Ok(resp)
}

/// Whether a channel of the chain's first model, in the key's groups, counts in `p`.
fn counts_upstream(
    snap: &Snapshot,
    key: &crate::config::GatewayKey,
    chain: &Chain,
    p: Protocol,
) -> bool {
    let Some(step) = chain.steps.first() else {
        return false;
    };
    snap.models.get(&step.model).is_some_and(|routes| {
        routes.iter().any(|r| {
            snap.channels.get(r.channel).is_some_and(|ch| {
                ch.enabled && key.group_rank(ch).is_some() && ch.upstream.counts_in() == Some(p)
            })
        })
    })
}

/// The prompt's tokens for the chain's first model, as trimming counts them.
fn local(snap: &Snapshot, chain: &Chain, req: &ChatRequest) -> u64 {
    let model = chain.steps.first().map_or(req.model.as_str(), |s| &s.model);
    crate::context::fit::count_for(req, model, &snap.catalog).total()
}
