//! What every route of the standalone mock server shares: its state and the record of what it
//! received, the request as read (one extractor), and the answers each route may give before
//! its own (a refusal, a scripted status).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::Notify;

use super::reply::error_json;
use super::spec::MockSpec;

/// What the mock server received: path, headers and JSON body of one request.
#[derive(Debug, Clone)]
pub struct Received {
    /// Which request this was, from 0 (the script's index: what fault it met).
    pub call: u64,
    /// The route that answered (`/chat/completions`, `/embeddings`).
    pub path: String,
    /// The request's path and query as sent.
    pub uri: String,
    pub version: axum::http::Version,
    pub headers: HeaderMap,
    pub body: Value,
}

pub(super) struct MockState {
    pub(super) spec: Mutex<MockSpec>,
    pub(super) seen: AtomicU64,
    pub(super) record: bool,
    pub(super) received: Mutex<Vec<Received>>,
    /// Responses whose connection went away before the answer was complete.
    pub(super) aborted: AtomicU64,
    /// Responses sent to the end (for a stream: its last byte was taken by the connection).
    pub(super) completed: AtomicU64,
    /// Requests being answered now, and the most there ever were at once.
    pub(super) in_flight: AtomicU64,
    pub(super) max_in_flight: AtomicU64,
    /// Connections accepted (a gateway that keeps its connections opens one for many requests).
    pub(super) connections: AtomicU64,
    pub(super) changed: Notify,
    pub(super) cache: super::cache::PromptCache,
}

/// Everything a mock route reads of a request, taken in one extractor.
pub(super) struct Incoming {
    uri: axum::http::Uri,
    version: axum::http::Version,
    pub(super) headers: HeaderMap,
    body: Bytes,
}

impl Incoming {
    /// A GET or DELETE: nothing to parse.
    pub(super) fn bodiless(self) -> Incoming {
        Incoming {
            body: Bytes::from_static(b"null"),
            ..self
        }
    }
}

impl<S: Send + Sync> axum::extract::FromRequest<S> for Incoming {
    type Rejection = axum::extract::rejection::BytesRejection;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Self::Rejection> {
        let (uri, version, headers) = (req.uri().clone(), req.version(), req.headers().clone());
        let body = Bytes::from_request(req, state).await?;
        Ok(Incoming {
            uri,
            version,
            headers,
            body,
        })
    }
}

/// What every mock route does first: parse the body, count and record the request, and pick
/// the spec in force.
pub(super) fn begin(
    state: &MockState,
    path: &str,
    req: Incoming,
) -> Result<(u64, MockSpec, Value), Box<Response>> {
    let body: Value = serde_json::from_slice(&req.body)
        .map_err(|e| Box::new(bad_request(&format!("invalid JSON: {e}"))))?;
    let n = state.seen.fetch_add(1, Ordering::SeqCst);
    if state.record
        && let Ok(mut r) = state.received.lock()
    {
        r.push(Received {
            call: n,
            path: path.to_string(),
            uri: req.uri.to_string(),
            version: req.version,
            headers: req.headers,
            body: body.clone(),
        });
    }
    state.changed.notify_waiters();
    let spec = state.spec.lock().map(|s| s.clone()).unwrap_or_default();
    Ok((n, spec, body))
}

pub(super) fn status_response(status: u16, retry_after: Option<u64>) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        error_json(status).to_string(),
    )
        .into_response();
    if let Some(s) = retry_after
        && let Ok(v) = s.to_string().parse()
    {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    if (300..400).contains(&status) {
        // Back to this same mock: a client that follows it shows up as a second request.
        resp.headers_mut().insert(
            header::LOCATION,
            header::HeaderValue::from_static("/v1/chat/completions?redirected=1"),
        );
    }
    resp
}

pub(super) fn bad_request(msg: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        [(header::CONTENT_TYPE, "application/json")],
        json!({"error": {"message": msg, "type": "invalid_request_error", "param": null, "code": null}})
            .to_string(),
    )
        .into_response()
}
