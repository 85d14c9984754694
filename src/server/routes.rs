//! Every route: the client protocols' (from the ingress registry), embeddings, the model list,
//! the route preview, liveness and readiness, and the admin API.

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::ctx::Ctx;
use super::ctx::served;
use super::headers::json_response;
use super::ingress::openai::OpenAiEnvelope;
use super::pipeline::resolve;
use super::{ApiError, AppState, body, explain, ingress, side};
use crate::exec;
use crate::protocol::chain::ChainSpec;
use crate::protocol::openai;

/// The public routes, with the operator's (the admin API and console, state applied) unless they have a
/// listener of their own, and `beside`: other rooms' public routes (the MCP gateway's `/mcp`).
pub fn router(
    state: AppState,
    operator: Option<Router<AppState>>,
    beside: Router<AppState>,
    with_metrics: bool,
) -> Router {
    let r = super::handlers::routes()
        .route("/v1/embeddings", post(embeddings))
        .route("/v1/models", get(side::models::list))
        .route(
            "/v1/models/{model_action}",
            get(side::models::retrieve).post(gemini_post),
        )
        .route("/v1beta/models", get(side::models::gemini_list))
        .route(
            "/v1beta/models/{model_action}",
            get(side::models::gemini_retrieve).post(gemini_post),
        )
        .route("/v1/messages/count_tokens", post(side::count::anthropic))
        .route("/v1/responses/input_tokens", post(side::count::responses))
        .route(
            "/v1/responses/{id}",
            get(side::kept::get).delete(side::kept::delete),
        )
        .route("/v1/responses/{id}/input_items", get(side::kept::items))
        .route("/v1/route/explain", post(explain::route_explain))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz));
    let r = match operator {
        Some(o) => r.merge(o),
        None => r,
    }
    .merge(beside);
    let r = if with_metrics {
        r.route("/metrics", get(super::metrics::metrics))
    } else {
        r
    };
    r.fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

/// The operator's routes alone, for `[admin] listen`.
pub fn admin_router(state: AppState, operator: Router<AppState>) -> Router {
    operator
        .route("/healthz", get(healthz))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

/// `/metrics` alone, for `[metrics] listen`.
pub fn metrics_router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(super::metrics::metrics))
        .route("/healthz", get(healthz))
        .fallback(not_found)
        .with_state(state)
}

/// OpenAI embeddings: routed like chat (no chain defaults: the vectors must come from the
/// model asked for), passed through as is.
async fn embeddings(State(state): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let mut ctx = Ctx::new(&state, "embeddings", &OpenAiEnvelope);
    ctx.traced(&headers);
    match embed(&state, &headers, &mut ctx, body).await {
        Ok(resp) => resp,
        Err(e) => ctx.fail(e),
    }
}

async fn embed(
    state: &AppState,
    headers: &HeaderMap,
    ctx: &mut Ctx,
    body: Body,
) -> Result<Response, ApiError> {
    let value = body::read_json(ctx, headers, body).await?;
    ctx.requested_model = body::requested(&value).0;
    let mut req = openai::embeddings_from_value(value)?;
    let snap = ctx.snap.clone();
    let (key, chain) = resolve(ctx, &snap, &ChainSpec::default(), &req.model, false, &[])?;
    req.hops = ctx.hops;
    let trace = ctx.trace.as_ref().map(|t| t.ctx.clone());
    let estimate = req.estimated_tokens();
    let ask = super::admission::worst_case(&snap, &chain, estimate, 0);
    super::admission::admit(&state.meter, &snap, key, ask, ctx).await?;
    let route = exec::Route {
        key,
        chain: &chain,
        bound: None,
        bound_credential: None,
        shared: Some(&state.state),
        trim: None,
        only: None,
        counting: None,
    };
    let waited = crate::provider::Waited::default();
    let job = exec::Job {
        snap: &snap,
        health: &state.health,
        route,
        estimate,
        deadline: ctx.deadline(),
        spend: exec::ChannelSpend::new(&state.meter, estimate, 0, snap.server.hold_ttl),
        trace: trace.as_ref(),
        waited: &waited,
        stream: false,
    };
    let result = exec::embeddings(&job, &req, &mut ctx.report).await;
    ctx.hold(job.spend.take_served());
    let mut v = result.map_err(|e| ctx.exec_error(e))?;
    let mut row = ctx.take_row(200, "ok");
    row.ttfb_ms = Some(row.total_ms);
    row.input_tokens = v.pointer("/usage/prompt_tokens").and_then(Value::as_u64);
    let used = crate::usage::Used {
        tokens: crate::pricing::Tokens {
            input: row.input_tokens.unwrap_or(estimate),
            ..Default::default()
        },
        estimated: row.input_tokens.is_none(),
    };
    let cost = ctx.pending().finish(Some(used), None, &mut row);
    ctx.record(row, crate::telemetry::Answered::default());
    if let (Some(ext), Some(obj)) = (ctx.report.body_extension(), v.as_object_mut()) {
        obj.insert("switchyard".into(), ext);
    }
    let body = serde_json::to_vec(&v).unwrap_or_default();
    let mut out = served(json_response(body), ctx);
    out.headers_mut()
        .insert(super::headers::hdr::COST, cost.into());
    Ok(out)
}

/// Gemini's `POST models/{model}:{action}`: token counting beside chat, the rest the
/// protocol's (which refuses an action it does not know).
async fn gemini_post(
    State(state): State<AppState>,
    Path(model_action): Path<String>,
    Query(q): Query<ingress::gemini::KeyQuery>,
    mut headers: HeaderMap,
    body: Body,
) -> Response {
    match model_action.strip_suffix(":countTokens") {
        Some(model) => {
            q.into_header(&mut headers);
            side::count::gemini(state, headers, body, model.to_string()).await
        }
        None => {
            let (path, query) = (Path(model_action), Query(q));
            super::handlers::gemini(State(state), path, query, headers, body).await
        }
    }
}

async fn healthz() -> Response {
    axum::Json(json!({"status": "ok"})).into_response()
}

async fn readyz(State(state): State<AppState>) -> Response {
    // Behind the store (its newest config does not compile here): this replica may still
    // accept revoked keys, so it asks to be taken out of rotation.
    let behind = state.store.as_ref().and_then(|s| s.behind());
    let alive = state.log.alive() && behind.is_none();
    let snap = state.live.load();
    let body = json!({
        "status": if alive { "ready" } else { "not_ready" },
        "config": {"channels": snap.channels.len(), "models": snap.models.len()},
        "request_log": {
            "backend": state.log.backend(),
            "writer_alive": alive,
            "dropped_rows": state.log.dropped(),
        },
        // Redis being down does not make the gateway unready: it serves on local state.
        "state": state.state.describe(),
        "store": state.store.as_ref().map(|s| s.describe()),
        // Reported, not a reason to be taken out: each budget says what happens without it.
        "budgets": state.meter.describe(),
        "events": {"dropped": state.events.emitter.dropped()},
    });
    let status = if alive {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(body)).into_response()
}

/// A path no route knows: logged (for a caller with a valid key; anyone else could fill the
/// log) and answered in the envelope the client's headers say it reads.
async fn not_found(State(state): State<AppState>, headers: HeaderMap, uri: Uri) -> Response {
    let mut ctx = Ctx::new(
        &state,
        "unknown_route",
        side::models::envelope_for(&headers),
    );
    if ctx.authenticate(&headers).await.is_ok() {
        tracing::warn!(
            path = uri.path(),
            "a request for a route the gateway does not serve"
        );
    }
    ctx.fail(ApiError::NotFound(uri.path().to_string()))
}

async fn method_not_allowed() -> Response {
    ApiError::MethodNotAllowed.into_response()
}
