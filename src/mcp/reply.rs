//! The answers `/mcp` gives: a JSON message, a JSON-RPC error object (with the HTTP status the
//! transport says), an event stream fed as messages come; the revisions it speaks and the
//! error codes it answers with. A leaf of the room.

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Value, json};

/// JSON-RPC codes the gateway answers with besides the reader's.
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
/// A server could not answer (unreachable, timed out, failed): the reason in `data`.
pub const SERVER_FAILED: i64 = -32000;
pub const RESOURCE_NOT_FOUND: i64 = -32002;
pub const CANCELLED: i64 = -32800;

/// The revisions `/mcp` speaks, newest first.
pub const VERSIONS: [&str; 2] = ["2025-11-25", "2025-06-18"];

/// A JSON-RPC error object as the whole answer.
pub fn rpc_error(status: StatusCode, id: Value, code: i64, message: &str) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    (status, axum::Json(body)).into_response()
}

/// A JSON answer to a request.
pub fn answer(msg: &Value) -> Response {
    (StatusCode::OK, axum::Json(msg)).into_response()
}

/// An event stream fed by a task: what the task sends, as it sends it.
pub fn event_stream(rx: tokio::sync::mpsc::Receiver<Bytes>) -> Response {
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, std::convert::Infallible>(b), rx))
    });
    let mut r = Response::new(Body::from_stream(stream));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}
