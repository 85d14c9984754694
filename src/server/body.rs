//! Request bodies: read within the size limit and the request timeout, parsed as JSON once,
//! and the headers that change how a request is served.

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, header};
use futures_util::StreamExt;
use serde_json::Value;

use super::ApiError;
use super::ctx::Ctx;
use super::headers::hdr;

/// Authenticates, reads the body within its limits and parses it as JSON.
pub async fn read_json(ctx: &mut Ctx, headers: &HeaderMap, body: Body) -> Result<Value, ApiError> {
    ctx.authenticate(headers).await?;
    let server = &ctx.snap.server;
    // Reading the body is waiting on the client: not the gateway's own time.
    let since = std::time::Instant::now();
    let bytes = read_body(headers, body, server.max_body_bytes, server.request_timeout).await;
    ctx.client_wait += since.elapsed();
    parse_json(&bytes?)
}

/// The model and stream flag a JSON body names, noted for the log before the body is parsed
/// (so a row names them even when the rest is invalid).
pub fn requested(body: &Value) -> (Option<String>, bool) {
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .map(str::to_string);
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    (model, stream)
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

/// `x-switchyard-trim: auto` trims this request to fit the serving model's window; `off` sends
/// it whole even where the key or the model's route would trim.
pub fn trim_choice(headers: &HeaderMap) -> Result<Option<bool>, ApiError> {
    let Some(v) = headers.get(hdr::TRIM) else {
        return Ok(None);
    };
    match v.to_str().map(str::trim) {
        Ok(s) if s.eq_ignore_ascii_case("auto") => Ok(Some(true)),
        Ok(s) if s.eq_ignore_ascii_case("off") => Ok(Some(false)),
        _ => Err(ApiError::BadHeader {
            name: "x-switchyard-trim",
            expected: "auto or off",
        }),
    }
}
