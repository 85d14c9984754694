//! The Responses the gateway keeps (`store`, `previous_response_id`), for the key that made
//! them: `GET /v1/responses/{id}`, `DELETE /v1/responses/{id}` and `GET
//! /v1/responses/{id}/input_items`. A response the gateway answered itself (translated from
//! another protocol) is read from what it kept; one its channel's upstream keeps (the channel
//! speaks the Responses API) is asked of that channel, and of no other.

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::{Value, json};

use super::{Run, admit, answered, route};
use crate::config::{GatewayKey, Snapshot};
use crate::exec::{self, ExecError, Report};
use crate::protocol::chain::OnSet;
use crate::protocol::responses::{ItemsQuery, input_items, items_page};
use crate::provider::KeptCall;
use crate::router::{Chain, ChainSource, Step};
use crate::server::affinity::response_key;
use crate::server::ingress::openai::OpenAiEnvelope;
use crate::server::{ApiError, AppState, ctx::Ctx};
use crate::state::StoredResponse;

type Pairs = Vec<(String, String)>;

/// What the client asks of a kept response.
enum Op {
    Get,
    Delete,
    Items(Pairs),
}

impl Op {
    fn endpoint(&self) -> &'static str {
        match self {
            Op::Get => "responses.retrieve",
            Op::Delete => "responses.delete",
            Op::Items(_) => "responses.input_items",
        }
    }
}

pub async fn get(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    serve(state, headers, id, Op::Get).await
}

pub async fn delete(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    serve(state, headers, id, Op::Delete).await
}

pub async fn items(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(q): Query<Pairs>,
) -> Response {
    serve(state, headers, id, Op::Items(q)).await
}

async fn serve(state: AppState, headers: HeaderMap, id: String, op: Op) -> Response {
    let mut ctx = Ctx::new(&state, op.endpoint(), &OpenAiEnvelope);
    ctx.traced(&headers);
    match Box::pin(run(&state, &headers, &mut ctx, &id, op)).await {
        Ok(resp) => resp,
        Err(e) => ctx.fail(e),
    }
}

async fn run(
    state: &AppState,
    headers: &HeaderMap,
    ctx: &mut Ctx,
    id: &str,
    op: Op,
) -> Result<Response, ApiError> {
    admit(state, headers, ctx).await?;
    let stored_at = response_key(ctx.key.as_deref().unwrap_or_default(), id);
    let stored = Box::pin(state.state.response(&stored_at))
        .await
        .ok_or_else(|| ApiError::ResponseNotFound(id.to_string()))?;
    if stored.upstream_keeps {
        let query = match &op {
            Op::Items(q) => {
                ItemsQuery::parse(q)?;
                forwarded_query(q)
            }
            _ => None,
        };
        let call = match &op {
            Op::Get => KeptCall::Get,
            Op::Delete => KeptCall::Delete,
            Op::Items(_) => KeptCall::InputItems(query.as_deref()),
        };
        let v = forward(state, ctx, &stored.channel, id, call).await?;
        if matches!(op, Op::Delete) {
            Box::pin(state.state.forget_response(&stored_at)).await;
        }
        return Ok(answered(ctx, &v, None));
    }
    let v = match op {
        Op::Get => kept_response(&stored).ok_or_else(|| ApiError::ResponseNotFound(id.into()))?,
        Op::Delete => {
            Box::pin(state.state.forget_response(&stored_at)).await;
            json!({"id": id, "object": "response", "deleted": true})
        }
        Op::Items(q) => {
            let q = ItemsQuery::parse(&q)?;
            let items = stored
                .items
                .as_deref()
                .ok_or_else(|| ApiError::ResponseNotFound(id.into()))?;
            let output = kept_response(&stored)
                .and_then(|r| r["output"].as_array().map(Vec::len))
                .unwrap_or(0);
            items_page(input_items(items, output)?, &q)
        }
    };
    Ok(answered(ctx, &v, None))
}

/// The Response object the gateway kept (it answered it itself).
fn kept_response(stored: &StoredResponse) -> Option<Value> {
    serde_json::from_str(stored.response.as_deref()?).ok()
}

/// The client's paging for an upstream's `input_items`: only the parameters the API defines.
fn forwarded_query(q: &Pairs) -> Option<String> {
    use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
    let kept: Vec<String> = q
        .iter()
        .filter(|(k, _)| {
            matches!(
                k.as_str(),
                "after" | "limit" | "order" | "include" | "include[]"
            )
        })
        .map(|(k, v)| {
            let (k, v) = (
                utf8_percent_encode(k, NON_ALPHANUMERIC),
                utf8_percent_encode(v, NON_ALPHANUMERIC),
            );
            format!("{k}={v}")
        })
        .collect();
    (!kept.is_empty()).then(|| kept.join("&"))
}

/// Asks the channel that keeps the response, through the attempt loop with it as the only
/// candidate (its credentials, health and timeouts), under a model it serves for this key.
async fn forward(
    state: &AppState,
    ctx: &mut Ctx,
    channel: &str,
    id: &str,
    call: KeptCall<'_>,
) -> Result<Value, ApiError> {
    let snap = ctx.snap.clone();
    let key = ctx.gateway_key(&snap).ok_or(ApiError::Unauthorized)?;
    let Some(chain) = one_model(&snap, key, channel) else {
        return Err(ApiError::ResponseUnavailable(channel.to_string()));
    };
    ctx.report = Report::for_chain(&chain);
    let mut r = route(state, key, &chain);
    (r.only, r.bound) = (Some(channel), Some(channel));
    let attempts = Run::of(ctx);
    let job = attempts.job(state, &snap, r);
    let hops = ctx.hops;
    exec::kept_response(&job, &mut ctx.report, id, call, hops)
        .await
        .map_err(|e| match e {
            ExecError::PreviousResponseUnavailable(ch) => ApiError::ResponseUnavailable(ch),
            e => ctx.exec_error(e),
        })
}

/// A chain of one model that `channel` serves and `key` may use.
fn one_model(snap: &Snapshot, key: &GatewayKey, channel: &str) -> Option<Chain> {
    let at = snap.channels.iter().position(|c| &*c.name == channel)?;
    let (model, _) = snap
        .models
        .iter()
        .find(|(m, routes)| routes.iter().any(|r| r.channel == at) && snap.serves(key, m, false))?;
    Some(Chain {
        requested_model: model.to_string(),
        steps: vec![Step {
            model: model.clone(),
            written: model.to_string(),
            redirect: None,
            timeout: None,
            first_token_timeout: None,
        }],
        on: OnSet::ALL,
        source: ChainSource::Single,
    })
}
