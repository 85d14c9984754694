//! The registry of client protocols: which path is served by which codec, each through the
//! one pipeline. The codecs (`ingress/`) only read and write; serving is here, so neither
//! imports the other's caller.

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;

use super::ingress::Codec;
use super::ingress::anthropic::Anthropic;
use super::ingress::gemini::{Gemini, GeminiEnvelope, KeyQuery};
use super::ingress::openai::OpenAiChat;
use super::ingress::responses::Responses;
use super::{ApiError, AppState, pipeline};

/// Every client protocol's routes but Gemini's, whose paths it shares with its token counting
/// (`server::routes` sends `:countTokens` beside, the rest to [`gemini`]).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/v1/chat/completions",
            post(|State(s): State<AppState>, h: HeaderMap, b: Body| {
                pipeline::serve(s, h, b, OpenAiChat)
            }),
        )
        .route(
            "/v1/messages",
            post(|State(s): State<AppState>, h: HeaderMap, b: Body| {
                pipeline::serve(s, h, b, Anthropic)
            }),
        )
        .route(
            "/v1/responses",
            post(|State(s): State<AppState>, h: HeaderMap, b: Body| {
                pipeline::serve(s, h, b, Responses)
            }),
        )
}

/// `models/{model}:generateContent` and `:streamGenerateContent` (any other action is a 404;
/// `:countTokens` is routed beside it, by `server::routes`).
pub async fn gemini(
    State(state): State<AppState>,
    Path(model_action): Path<String>,
    Query(q): Query<KeyQuery>,
    mut headers: HeaderMap,
    body: Body,
) -> Response {
    q.into_header(&mut headers);
    match Gemini::for_path(&model_action) {
        Some(codec) => pipeline::serve(state, headers, body, codec).await,
        None => {
            let e = ApiError::NotFound(format!("/v1beta/models/{model_action}"));
            pipeline::refuse(&state, Gemini::ENDPOINT, &GeminiEnvelope, e)
        }
    }
}
