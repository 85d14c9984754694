//! The plan a request would follow, as data: what `POST /v1/route/explain` answers and
//! `switchyard explain` prints. Reads health; calls no upstream.

use std::time::Duration;

use axum::response::IntoResponse;
use serde_json::{Value, json};

use crate::config::{GatewayKey, Snapshot};
use crate::context::fit::{Fitter, Plan};
use crate::health::Health;
use crate::protocol::ChatRequest;
use crate::router::{self, Chain};

/// What the request asks that the measured strategies weigh: its size (for `cost`) and whether
/// it streams (`latency` to the first token, else to the whole answer).
#[derive(Debug, Clone, Copy, Default)]
pub struct Ask {
    pub estimate: router::Estimate,
    pub stream: bool,
}

impl Ask {
    pub fn of(snap: &Snapshot, req: &ChatRequest) -> Ask {
        Ask {
            estimate: router::Estimate {
                prompt: req.prompt_estimate(),
                output: super::admission::reply_reservation(snap, req.max_tokens.map(|(_, n)| n)),
            },
            stream: req.stream,
        }
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
    ask: Ask,
) -> Value {
    let ms = |d: Option<Duration>| d.map(|d| d.as_millis() as u64);
    let steps: Vec<Value> = chain
        .steps
        .iter()
        .map(|step| {
            let model: &str = &step.model;
            let standing = health.view(snap, model);
            let mut v = json!({
                "model": model,
                "requested_as": step.written,
                "redirect": step.redirect.as_deref(),
                "timeout_ms": ms(step.timeout),
                "first_token_timeout_ms": ms(step.first_token_timeout),
            });
            let signal = health.signals.view(&snap.channels, model, ask.stream);
            match router::explain(snap, key, model, &standing, &signal, ask.estimate) {
                Ok(view) => {
                    v["strategy"] = json!(view.strategy);
                    v["first_try"] = json!(view.first_try);
                    v["candidates"] = json!(view.candidates);
                    v["excluded"] = json!(view.excluded);
                }
                Err(e) => {
                    v["candidates"] = json!([]);
                    v["error"] = json!(crate::exec::ExecError::Route(e).code());
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
        "stream": ask.stream,
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
                    "levels": levels(snap, d),
                })
            })
            .collect::<Vec<_>>(),
    })
}

/// The levels a semantic decision was made by: each instance's threshold (`derived` when it
/// came from the examples, `"auto"`) and the router's margin.
fn levels(snap: &Snapshot, d: &crate::semantic::Decision) -> Value {
    let (Some(rule), Some((_, router))) = (&d.rule, snap.router(&d.router)) else {
        return Value::Null;
    };
    json!({
        "thresholds": router.instances.iter().zip(&rule.thresholds).zip(&rule.derived)
            .filter(|((_, t), _)| t.is_finite())
            .map(|((i, t), derived)| json!({"instance": &*i.name, "threshold": t, "derived": derived}))
            .collect::<Vec<_>>(),
        "margin": rule.margin,
        "margin_derived": rule.margin_derived,
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

/// `POST /v1/route/explain`: the same body and headers as a chat request; answers with the
/// plan that request would follow (redirects, chain, candidates with health), calling no one.
pub async fn route_explain(
    axum::extract::State(state): axum::extract::State<super::AppState>,
    headers: axum::http::HeaderMap,
    body: axum::body::Body,
) -> axum::response::Response {
    let mut ctx = super::ctx::Ctx::new(
        &state,
        "route.explain",
        &super::ingress::openai::OpenAiEnvelope,
    );
    // A preview is not traffic: it is not logged.
    ctx.logged = true;
    match preview(&state, &headers, &mut ctx, body).await {
        Ok(plan) => axum::Json(plan).into_response(),
        Err(e) => ctx.fail(e),
    }
}

async fn preview(
    state: &super::AppState,
    headers: &axum::http::HeaderMap,
    ctx: &mut super::ctx::Ctx,
    body: axum::body::Body,
) -> Result<Value, super::ApiError> {
    let value = super::body::read_json(ctx, headers, body).await?;
    plan(state, headers, ctx, value).await
}

/// The plan for a request body already read, as the key `ctx` holds sees it (the admin API's
/// preview names the key instead of presenting it).
pub async fn plan(
    state: &super::AppState,
    headers: &axum::http::HeaderMap,
    ctx: &mut super::ctx::Ctx,
    mut value: Value,
) -> Result<Value, super::ApiError> {
    use crate::protocol::{InvalidRequest, anthropic, openai};
    let spec = super::ingress::openai::take_chain(&mut value)?;
    let model = value
        .get("model")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .ok_or_else(|| InvalidRequest::new("model", "is required"))?
        .to_string();
    let snap = ctx.snap.clone();
    // The prompt, for a semantic router, from the body read as an OpenAI or Anthropic request.
    let parsed = openai::request_from_value(value.clone())
        .or_else(|_| anthropic::request_from_value(value))
        .ok();
    let decisions = match &parsed {
        Some(req) => super::semantic::decide(state, ctx, &snap, &spec, req, None).await,
        None => Vec::new(),
    };
    let (key, chain) = super::pipeline::resolve(ctx, &snap, &spec, &model, true, &decisions)?;
    let ask = parsed
        .as_ref()
        .map(|r| Ask::of(&snap, r))
        .unwrap_or_default();
    let mut plan = explain(&snap, &state.health, key, &chain, &decisions, ask);
    let trim = super::body::trim_choice(headers)?;
    if let Some(req) = &parsed {
        explain_context_into(&mut plan, &snap, key, &chain, req, trim);
        explain_spend_into(&mut plan, &snap, &state.meter, key, &chain, req).await;
    }
    Ok(plan)
}

/// Whether a budget would admit `ask` as it stands (spent and held), read without taking.
async fn budget_view(
    meter: &crate::spend::Meter,
    scope: &str,
    tag: Option<&str>,
    quota: &crate::config::quota::Quota,
    ask: u64,
) -> Value {
    let Some(b) = quota.budget else {
        return Value::Null;
    };
    let at = meter.standing(scope, tag, quota).await;
    json!({
        "micros": b.micros,
        "period": b.period.as_str(),
        "spent_micros": at.map(|s| s.spent),
        "reserved_micros": at.map(|s| s.reserved),
        "would_admit": at.map(|s| b.admits(s.spent + s.reserved, ask)),
    })
}

/// The request's estimated cost on each candidate (its worst case at that channel's price) and
/// whether the key's and each channel's budget would admit it; nothing is spent or held.
pub async fn explain_spend_into(
    plan: &mut Value,
    snap: &Snapshot,
    meter: &crate::spend::Meter,
    key: &GatewayKey,
    chain: &Chain,
    req: &ChatRequest,
) {
    let prompt = req.prompt_estimate();
    let reply = super::admission::reply_reservation(snap, req.max_tokens.map(|(_, n)| n));
    let ask = super::admission::worst_case(snap, chain, prompt, reply);
    plan["spend"] = json!({
        "prompt_tokens_estimate": prompt,
        "reply_tokens_reserved": reply,
        "worst_case_micros": ask.micros,
        "key_budget": budget_view(meter, &key.scope, key.tag(), &key.quota, ask.micros).await,
    });
    let Some(steps) = plan["chain"].as_array_mut() else {
        return;
    };
    for (step, s) in steps.iter_mut().zip(&chain.steps) {
        let Some(cands) = step["candidates"].as_array_mut() else {
            continue;
        };
        for c in cands {
            let Some(ch) = snap.channels.iter().find(|ch| c["channel"] == *ch.name) else {
                continue;
            };
            let up = c["upstream_model"].as_str().unwrap_or(&s.model).to_string();
            let price = snap.price(ch, &s.model, &up);
            let cost = price.map_or(0, |p| p.worst_case(prompt, reply));
            c["estimated_cost_micros"] = json!(cost);
            c["price_version"] = json!(price.map(|p| p.version.as_str()));
            c["channel_budget"] = budget_view(meter, &ch.scope, None, &ch.quota, cost).await;
        }
    }
}
