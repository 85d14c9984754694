//! The mock's MCP server at `/mcp`: stateless Streamable HTTP answering JSON, with one tool,
//! `echo` (read-only: its `text` back). What the benchmarks put behind the gateway's `/mcp`
//! when the measure is the gateway, not the server (the tests use the official SDK's servers).

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

fn answer(id: &Value, result: Value) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": id, "result": result});
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

pub(super) async fn post(body: axum::body::Bytes) -> Response {
    let Ok(msg) = serde_json::from_slice::<Value>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let Some(id) = msg.get("id") else {
        return StatusCode::ACCEPTED.into_response();
    };
    let params = msg.get("params").cloned().unwrap_or_default();
    match msg.get("method").and_then(Value::as_str) {
        Some("initialize") => {
            let version = params
                .get("protocolVersion")
                .cloned()
                .unwrap_or_else(|| json!("2025-11-25"));
            answer(
                id,
                json!({"protocolVersion": version, "capabilities": {"tools": {}},
                       "serverInfo": {"name": "switchyard-mock", "version": env!("CARGO_PKG_VERSION")}}),
            )
        }
        Some("ping") => answer(id, json!({})),
        Some("tools/list") => answer(
            id,
            json!({"tools": [{"name": "echo", "description": "Says it back.",
                "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
                "annotations": {"readOnlyHint": true}}]}),
        ),
        Some("tools/call") if params.get("name") == Some(&json!("echo")) => {
            let text = params
                .pointer("/arguments/text")
                .cloned()
                .unwrap_or_default();
            answer(
                id,
                json!({"content": [{"type": "text", "text": text}], "isError": false}),
            )
        }
        _ => {
            let body = json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32601, "message": "method not found"}});
            (
                [(header::CONTENT_TYPE, "application/json")],
                body.to_string(),
            )
                .into_response()
        }
    }
}
