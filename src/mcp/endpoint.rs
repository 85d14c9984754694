//! `/mcp` as the Streamable HTTP transport says: POST carries one message (a request is
//! answered with JSON or an event stream, a notification or a response with 202), GET opens
//! the stream of what servers send on their own, DELETE ends the session. Every call is
//! authenticated by the gateway key; every session belongs to the key that opened it (another
//! key's session is 404, as an unknown one is). Errors are JSON-RPC error objects, never a 5xx
//! for the client's mistake.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body_util::BodyExt as _;
use serde_json::{Value, json};

use super::jsonrpc::{self, INVALID_REQUEST, Message};
use super::reply::{VERSIONS, event_stream, rpc_error};
use super::session::Session;
use super::upstream::{SESSION_HEADER, VERSION_HEADER};
use super::{McpState, relay};
use crate::config::{GatewayKey, Snapshot};

fn unauthorized() -> Response {
    let mut r = rpc_error(
        StatusCode::UNAUTHORIZED,
        Value::Null,
        INVALID_REQUEST,
        "a gateway key is required: Authorization: Bearer <key>",
    );
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

/// The key the call is made with.
fn authenticate<'s>(snap: &'s Snapshot, headers: &HeaderMap) -> Option<&'s GatewayKey> {
    crate::server::bearer(headers).and_then(|p| snap.authenticate(p))
}

/// The body, at most `max` bytes (413 past it).
async fn read(body: Body, max: usize) -> Result<Bytes, Response> {
    let limited = http_body_util::Limited::new(body, max);
    match limited.collect().await {
        Ok(b) => Ok(b.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(rpc_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            Value::Null,
            INVALID_REQUEST,
            &format!("a message is at most {max} bytes ([mcp] max_message_bytes)"),
        )),
        Err(_) => Err(rpc_error(
            StatusCode::BAD_REQUEST,
            Value::Null,
            INVALID_REQUEST,
            "the body could not be read",
        )),
    }
}

/// The session a call names, if it is the key's and alive; else the answer to give.
pub async fn session(
    st: &McpState,
    snap: &Snapshot,
    key: &GatewayKey,
    headers: &HeaderMap,
) -> Result<(String, Session), Response> {
    let Some(id) = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) else {
        return Err(rpc_error(
            StatusCode::BAD_REQUEST,
            Value::Null,
            INVALID_REQUEST,
            "Mcp-Session-Id is required after initialize",
        ));
    };
    if let Some(v) = headers.get(VERSION_HEADER)
        && !VERSIONS.iter().any(|s| s.as_bytes() == v.as_bytes())
    {
        return Err(rpc_error(
            StatusCode::BAD_REQUEST,
            Value::Null,
            INVALID_REQUEST,
            &format!(
                "unsupported MCP-Protocol-Version; supported: {}",
                VERSIONS.join(", ")
            ),
        ));
    }
    match st.mcp.sessions.get(id, snap.mcp.session_ttl).await {
        Some(s) if s.key == *key.name => Ok((id.to_string(), s)),
        _ => Err(rpc_error(
            StatusCode::NOT_FOUND,
            Value::Null,
            -32001,
            "session not found: initialize again",
        )),
    }
}

/// Whether the client reads event streams (else answers are whole JSON).
pub fn takes_streams(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/event-stream") || a.contains("*/*"))
}

pub async fn post(State(st): State<McpState>, headers: HeaderMap, body: Body) -> Response {
    let snap = st.app.live.load();
    let Some(key) = authenticate(&snap, &headers) else {
        return unauthorized();
    };
    let bytes = match read(body, snap.mcp.max_message_bytes).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let msg = match jsonrpc::read(&bytes) {
        Ok(m) => m,
        Err(refusal) => {
            return (StatusCode::BAD_REQUEST, axum::Json(refusal.to_value())).into_response();
        }
    };
    if let Message::Request { id, method, params } = &msg
        && method == "initialize"
    {
        return super::dispatch::initialize(&st, &snap, key, id.to_value(), params.as_ref()).await;
    }
    let (sid, session) = match self::session(&st, &snap, key, &headers).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let streams = takes_streams(&headers);
    let mut call = super::dispatch::Call {
        st: &st,
        snap: &snap,
        key,
        sid: &sid,
        session,
        streams,
        headers: &headers,
    };
    match msg {
        Message::Request { id, method, params } => {
            call.request(id.to_value(), &method, params).await
        }
        Message::Notification { method, params } => {
            call.notification(&method, params).await;
            StatusCode::ACCEPTED.into_response()
        }
        Message::Response { id, outcome } => {
            call.response(&id, outcome).await;
            StatusCode::ACCEPTED.into_response()
        }
    }
}

/// The session's stream of what its servers send on their own: each server's own stream
/// (requests relayed, notifications passed), and every `list_changed` of a server the key
/// reaches, whoever's session it came on.
pub async fn get(State(st): State<McpState>, headers: HeaderMap) -> Response {
    let snap = st.app.live.load();
    let Some(key) = authenticate(&snap, &headers) else {
        return unauthorized();
    };
    if !takes_streams(&headers) {
        return rpc_error(
            StatusCode::NOT_ACCEPTABLE,
            Value::Null,
            INVALID_REQUEST,
            "GET /mcp is an event stream: Accept: text/event-stream",
        );
    }
    let (_, session) = match self::session(&st, &snap, key, &headers).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(32);
    let mut changed = st.mcp.changed.subscribe();
    // The key's rules as the session began: what it may hear of.
    let access = key.mcp.clone();
    for (name, leg) in &session.legs {
        let Some(server) = snap.mcp.server(name) else {
            continue;
        };
        let (mcp, tx, snap, name) = (
            st.mcp.clone(),
            tx.clone(),
            snap.clone(),
            server.name.clone(),
        );
        let leg = leg.clone();
        tokio::spawn(async move {
            let Some(server) = snap.mcp.server(&name) else {
                return;
            };
            let t = super::upstream::Target {
                server,
                replica: leg.replica,
                session: leg.id.as_deref(),
                version: &leg.version,
            };
            let Ok(Some(mut msgs)) = mcp.client.listen(&t).await else {
                return;
            };
            while let Ok(Some(mut m)) = msgs.next().await {
                let method = m.get("method").and_then(Value::as_str).map(str::to_string);
                match (method, m.get("id").cloned()) {
                    (Some(method), None)
                        if method.ends_with("/list_changed")
                            && method != "notifications/roots/list_changed" =>
                    {
                        // To every session through the broadcast, this one included.
                        mcp.list_changed(&name, &method);
                        continue;
                    }
                    (Some(_), Some(id)) => m["id"] = relay::outward_id(&name, &id),
                    _ => {}
                }
                if tx.send(relay::event(&m)).await.is_err() {
                    return;
                }
            }
        });
    }
    tokio::spawn(async move {
        loop {
            let (server, method) = match changed.recv().await {
                Ok(c) => c,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(_) => return,
            };
            if !access.allows_server(&server) {
                continue;
            }
            let note = json!({"jsonrpc": "2.0", "method": method});
            if tx.send(relay::event(&note)).await.is_err() {
                return;
            }
        }
    });
    event_stream(rx)
}

/// Ends the session here and at its servers.
pub async fn delete(State(st): State<McpState>, headers: HeaderMap) -> Response {
    let snap = st.app.live.load();
    let Some(key) = authenticate(&snap, &headers) else {
        return unauthorized();
    };
    let (sid, session) = match self::session(&st, &snap, key, &headers).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    st.mcp.sessions.remove(&sid).await;
    let closing = session.legs.iter().filter_map(|(name, leg)| {
        let server = snap.mcp.server(name)?;
        let client = st.mcp.client.clone();
        Some(async move {
            let t = super::upstream::Target {
                server,
                replica: leg.replica,
                session: leg.id.as_deref(),
                version: &leg.version,
            };
            client.close(&t).await
        })
    });
    futures_util::future::join_all(closing).await;
    StatusCode::NO_CONTENT.into_response()
}
