//! What a tool call leaves behind: a request-log row (`endpoint = "mcp.tools/call"`, the key,
//! the server as the channel, the tool by its gateway name and the server's, the outcome, the
//! replicas tried, the sizes of its arguments and result), the series
//! `switchyard_mcp_calls_total{server,tool,outcome}` and the call's duration, and for a
//! refusal an `mcp.refused` event. A tool's label is its name only when its server listed it
//! (else `other`), so clients cannot grow the series.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

use super::McpState;
use super::forward::Tried;
use crate::config::GatewayKey;
use crate::config::mcp::McpServer;
use crate::server::AppState;
use crate::spend::{Ask, Holds, Verdict};
use crate::store::LogRow;
use crate::telemetry::{Answered, Finished, RequestTrace};
use axum::http::HeaderMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// The tool ran and said it failed (`isError`).
    ToolError,
    /// The server answered with a JSON-RPC error.
    RpcError,
    /// The server could not answer: why.
    Failed(&'static str),
    Cancelled,
    /// The gateway refused it: why.
    Refused(&'static str),
}

impl Outcome {
    /// What a server's answer says.
    pub fn of(answer: &Value) -> Outcome {
        if answer.get("error").is_some() {
            Outcome::RpcError
        } else if answer.pointer("/result/isError").and_then(Value::as_bool) == Some(true) {
            Outcome::ToolError
        } else {
            Outcome::Ok
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::ToolError => "tool_error",
            Outcome::RpcError => "error",
            Outcome::Failed(w) | Outcome::Refused(w) => w,
            Outcome::Cancelled => "cancelled",
        }
    }

    /// The status the log row says, as an HTTP call's would.
    fn status(self) -> u16 {
        match self {
            Outcome::Ok | Outcome::ToolError | Outcome::RpcError => 200,
            Outcome::Failed("timeout") => 504,
            Outcome::Failed(_) => 502,
            Outcome::Cancelled => 499,
            Outcome::Refused("rate_limited") => 429,
            Outcome::Refused("limits_unavailable") => 503,
            Outcome::Refused(_) => 403,
        }
    }
}

/// A tool call on its way: what its record will say.
pub struct ToolCall {
    id: String,
    started: Instant,
    ts_ms: i64,
    key: Arc<str>,
    name: String,
    server: Option<Arc<str>>,
    tool: Option<String>,
    /// The tool is one its server listed (so its name may be a label).
    listed: bool,
    args_bytes: usize,
    /// With `[log] mcp_bodies`: the arguments, kept for the row.
    arguments: Option<Value>,
    attempts: Vec<Value>,
    holds: Option<Holds>,
    /// The call's trace (the client's `traceparent` continued), when spans go anywhere.
    trace: Option<RequestTrace>,
}

impl ToolCall {
    pub fn start(
        st: &McpState,
        (headers, bodies): (&HeaderMap, bool),
        key: &GatewayKey,
        name: &str,
        params: &Value,
    ) -> ToolCall {
        let args = params.get("arguments");
        let args_bytes = args.map_or(0, |a| serde_json::to_vec(a).map_or(0, |v| v.len()));
        let arguments = bodies.then(|| args.cloned().unwrap_or(Value::Null));
        ToolCall {
            // The gateway's id for the call, unique across replicas: no random bytes per call.
            id: format!(
                "mcp_{}",
                super::relay::fresh_id().as_str().unwrap_or_default()
            ),
            started: Instant::now(),
            ts_ms: crate::clock::unix_ms(),
            key: key.name.clone(),
            name: name.to_string(),
            server: None,
            tool: None,
            listed: false,
            args_bytes,
            arguments,
            attempts: Vec::new(),
            holds: None,
            trace: st.app.telemetry.start(headers, "mcp.tools/call"),
        }
    }

    pub fn server(&mut self, server: &Arc<str>, tool: &str) {
        self.server = Some(server.clone());
        self.tool = Some(tool.to_string());
    }

    /// Refused before the server: recorded, and an event.
    pub fn refused(self, st: &McpState, reason: &'static str) {
        st.app.events.emitter.emit(
            "mcp.refused",
            json!({"key": &*self.key, "tool": self.name, "server": self.server.as_deref(),
                   "reason": reason}),
        );
        self.finish(&st.app, Outcome::Refused(reason), None);
    }

    pub fn hold(&mut self, holds: Option<Holds>) {
        self.holds = holds;
    }

    pub fn listed(&mut self, yes: bool) {
        self.listed = yes;
    }

    pub fn tried(&mut self, server: &McpServer, tried: &Tried) {
        self.attempts = tried
            .replicas
            .iter()
            .map(|(r, outcome)| {
                let url = server
                    .replicas
                    .get(*r)
                    .map(|x| crate::provider::redact_url(x.url.as_str()));
                json!({"channel": &*server.name, "replica": r, "url": url, "reason": outcome})
            })
            .collect();
    }

    /// The row, the series and the holds given back.
    pub fn finish(mut self, app: &AppState, outcome: Outcome, answer: Option<&Value>) {
        if let Some(h) = self.holds.take() {
            h.settle(0, 0);
        }
        let result_bytes = answer
            .and_then(|a| a.get("result"))
            .map_or(0, |r| serde_json::to_vec(r).map_or(0, |v| v.len()));
        let took = self.started.elapsed();
        let snap = app.live.load();
        if snap.metrics.enabled {
            let server = self
                .server
                .as_deref()
                .unwrap_or(crate::telemetry::metrics::OTHER);
            let tool = match (&self.tool, self.listed) {
                (Some(t), true) => t.as_str(),
                _ => crate::telemetry::metrics::OTHER,
            };
            let m = &app.telemetry.metrics;
            m.mcp_calls
                .with([server, tool, outcome.as_str()], |c| c.add(1));
            m.mcp_duration
                .with([server], |h| h.observe(took.as_nanos() as u64));
        }
        let row = LogRow {
            id: self.id,
            ts_ms: self.ts_ms,
            key_name: Some(self.key.to_string()),
            endpoint: "mcp.tools/call".into(),
            requested_model: Some(self.name),
            served_model: self.tool,
            channel: self.server.map(|s| s.to_string()),
            status: outcome.status(),
            outcome: outcome.as_str().to_string(),
            attempt_count: self.attempts.len() as u32,
            attempts: serde_json::to_string(&self.attempts).unwrap_or_default(),
            total_ms: took.as_millis() as u64,
            request_bytes: Some(self.args_bytes as u64),
            bodies: self.arguments.map(|a| {
                let result = answer.map_or(Value::Null, |v| {
                    v.get("result")
                        .or_else(|| v.get("error"))
                        .cloned()
                        .unwrap_or_default()
                });
                json!({"arguments": a, "result": result}).to_string()
            }),
            response_bytes: Some(result_bytes as u64),
            ..LogRow::default()
        };
        if let (Some(tracer), Some(t)) = (&app.telemetry.tracer, &self.trace) {
            let f = Finished {
                snap: &snap,
                row: &row,
                attempts: &[],
                key_idx: None,
                semantic: None,
                started: self.started,
                ended: Instant::now(),
                overhead: None,
            };
            tracer.finish(&f, t, Answered::default());
        }
        app.log.record(row);
    }
}

/// Why the key's MCP limits refused a call: the record's reason and the error's `data`.
pub struct Limited {
    pub reason: &'static str,
    pub data: Value,
}

impl Limited {
    pub fn message(&self) -> String {
        format!("the key's MCP limits refused the call ({})", self.reason)
    }
}

/// The key's `mcp_rpm` and `mcp_max_concurrency` held for a call (none: it has neither).
pub async fn hold(
    st: &McpState,
    snap: &crate::config::Snapshot,
    key: &GatewayKey,
) -> Result<Option<Holds>, Limited> {
    if key.mcp_quota == Default::default() {
        return Ok(None);
    }
    let v = st
        .app
        .meter
        .admit(
            &key.mcp_scope,
            &key.mcp_quota,
            Ask::default(),
            snap.server.hold_ttl,
        )
        .await;
    match v {
        Verdict::Held(h) => {
            let mut holds = Holds::new(st.app.meter.clone());
            holds.push(h);
            Ok(Some(holds))
        }
        Verdict::Refused(r) => Err(Limited {
            reason: "rate_limited",
            data: json!({"code": "rate_limited", "limit": format!("mcp_{}", r.limit.as_str()),
                         "retry_after_seconds": r.retry_after.as_secs().max(1)}),
        }),
        Verdict::Unavailable => Err(Limited {
            reason: "limits_unavailable",
            data: json!({"code": "budget_unavailable"}),
        }),
    }
}
