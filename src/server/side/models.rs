//! Model lists and retrieval in each protocol's shape, listing what the asking key may use
//! (models with an enabled channel in its groups, and semantic routers with an instance it may
//! use). `GET /v1/models` and `GET /v1/models/{id}` answer in OpenAI's shape; in Anthropic's
//! when the client sends `anthropic-version` (or `x-api-key` without `Authorization`), in
//! Gemini's when it sends `x-goog-api-key` or `?key=`. `GET /v1beta/models` and
//! `/v1beta/models/{model}` answer in Gemini's. A model the key may not use is the protocol's
//! 404, never an empty answer.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;

use super::{admit, answered};
use crate::config::{GatewayKey, Snapshot};
use crate::exec::ExecError;
use crate::protocol::InvalidRequest;
use crate::protocol::listing::{self, Card};
use crate::router::RouteError;
use crate::server::ingress::Envelope;
use crate::server::ingress::anthropic::AnthropicEnvelope;
use crate::server::ingress::gemini::GeminiEnvelope;
use crate::server::ingress::openai::OpenAiEnvelope;
use crate::server::{ApiError, AppState, ctx::Ctx};

/// The query's pairs as sent (never refused for its form: the values are checked here).
type Pairs = Vec<(String, String)>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    OpenAi,
    Anthropic,
    Gemini,
}

impl Shape {
    /// The shape a `/v1/models` client expects, from the headers its SDK sends.
    fn of(headers: &HeaderMap, query: &Pairs) -> Shape {
        if headers.contains_key("anthropic-version")
            || (headers.contains_key("x-api-key") && !headers.contains_key("authorization"))
        {
            Shape::Anthropic
        } else if headers.contains_key("x-goog-api-key") || query.iter().any(|(k, _)| k == "key") {
            Shape::Gemini
        } else {
            Shape::OpenAi
        }
    }

    fn envelope(self) -> &'static dyn Envelope {
        match self {
            Shape::OpenAi => &OpenAiEnvelope,
            Shape::Anthropic => &AnthropicEnvelope,
            Shape::Gemini => &GeminiEnvelope,
        }
    }
}

/// The error envelope a client outside any protocol route reads, from its headers.
pub fn envelope_for(headers: &HeaderMap) -> &'static dyn Envelope {
    Shape::of(headers, &Vec::new()).envelope()
}

pub async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<Pairs>,
) -> Response {
    let shape = Shape::of(&headers, &q);
    serve(state, headers, q, shape, None).await
}

pub async fn gemini_list(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<Pairs>,
) -> Response {
    serve(state, headers, q, Shape::Gemini, None).await
}

pub async fn retrieve(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(q): Query<Pairs>,
) -> Response {
    let shape = Shape::of(&headers, &q);
    serve(state, headers, q, shape, Some(id)).await
}

pub async fn gemini_retrieve(
    State(state): State<AppState>,
    Path(model): Path<String>,
    headers: HeaderMap,
    Query(q): Query<Pairs>,
) -> Response {
    serve(state, headers, q, Shape::Gemini, Some(model)).await
}

async fn serve(
    state: AppState,
    mut headers: HeaderMap,
    q: Pairs,
    shape: Shape,
    id: Option<String>,
) -> Response {
    // Gemini's key may come as a query parameter: presented like the header form.
    if let Some(k) = q.iter().find(|(k, _)| k == "key")
        && let Ok(v) = HeaderValue::from_str(&k.1)
    {
        headers.insert("x-goog-api-key", v);
    }
    let mut ctx = Ctx::new(&state, "models", shape.envelope());
    ctx.requested_model = id.clone();
    let result = match admit(&state, &headers, &mut ctx).await {
        Ok(()) => answer(&mut ctx, &q, shape, id.as_deref()),
        Err(e) => Err(e),
    };
    match result {
        Ok(resp) => resp,
        Err(e) => ctx.fail(e),
    }
}

fn answer(ctx: &mut Ctx, q: &Pairs, shape: Shape, id: Option<&str>) -> Result<Response, ApiError> {
    let snap = ctx.snap.clone();
    let key = ctx.gateway_key(&snap).ok_or(ApiError::Unauthorized)?;
    let cards = usable(&snap, key);
    let body = match id {
        Some(id) => {
            let id = id.strip_prefix("models/").unwrap_or(id);
            let Some(card) = find(&snap, key, &cards, id) else {
                let e = ExecError::Route(RouteError::ModelNotFound(id.to_string()));
                return Err(ctx.exec_error(e));
            };
            match shape {
                Shape::OpenAi => listing::openai(&card),
                Shape::Anthropic => listing::anthropic(&card),
                Shape::Gemini => listing::gemini(&card),
            }
        }
        None => match shape {
            Shape::OpenAi => listing::openai_list(&cards),
            Shape::Anthropic => {
                let limit = number(q, "limit", 20, 1000)?;
                let (page, more) =
                    listing::page(&cards, value(q, "after_id"), value(q, "before_id"), limit);
                listing::anthropic_list(page, more)
            }
            Shape::Gemini => {
                let size = number(q, "pageSize", 50, usize::MAX)?.min(1000);
                let (page, more) = listing::page(&cards, value(q, "pageToken"), None, size);
                listing::gemini_list(page, more)
            }
        },
    };
    Ok(answered(ctx, &body, None))
}

fn value<'q>(q: &'q Pairs, name: &str) -> Option<&'q str> {
    q.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.is_empty())
}

/// A page size: `default` when absent, 1 to `max` when given.
fn number(q: &Pairs, name: &'static str, default: usize, max: usize) -> Result<usize, ApiError> {
    match value(q, name) {
        None => Ok(default),
        Some(v) => v
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=max).contains(n))
            .ok_or_else(|| InvalidRequest::new(name, "must be a positive whole number").into()),
    }
}

/// What `key` may use, sorted by name: models an enabled channel of its groups serves, and
/// semantic routers one of whose instances it may use.
fn usable(snap: &Snapshot, key: &GatewayKey) -> Vec<Card> {
    let mut cards: Vec<Card> = snap
        .models
        .keys()
        .filter(|m| snap.serves(key, m, true))
        .map(|m| card(snap, m))
        .collect();
    for r in &snap.routers {
        if r.instances.iter().any(|i| snap.serves(key, &i.model, true)) {
            cards.push(card(snap, &r.model));
        }
    }
    cards.sort_by(|a, b| a.id.cmp(&b.id));
    cards.dedup_by(|a, b| a.id == b.id);
    cards
}

/// `id` if the key may use it, also through a redirect (the answer names it as asked).
fn find(snap: &Snapshot, key: &GatewayKey, cards: &[Card], id: &str) -> Option<Card> {
    let routed = snap
        .redirect(key, id)
        .map_or_else(|| id.to_string(), |(to, _)| to);
    let c = cards.iter().find(|c| c.id == routed)?;
    Some(Card {
        id: id.to_string(),
        ..c.clone()
    })
}

/// A model's card: its window and output budget from the catalog, by its name or else by the
/// name its first channel knows it by.
fn card(snap: &Snapshot, model: &str) -> Card {
    let upstream = snap
        .models
        .get(model)
        .and_then(|routes| routes.first())
        .map(|r| r.upstream_model.clone());
    let info = snap
        .catalog
        .lookup(model)
        .or_else(|| upstream.and_then(|u| snap.catalog.lookup(&u)));
    Card {
        id: model.to_string(),
        context_window: info.map(|i| i.context_window),
        max_output_tokens: info.map(|i| i.max_output_tokens),
    }
}
