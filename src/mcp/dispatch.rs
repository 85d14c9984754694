//! What each method does for a key: `initialize` opens the session and its legs and answers
//! the union of the servers' capabilities; the lists are merged; `tools/call`, `prompts/get`,
//! `resources/read` and the rest go to their owning server, only when the key may reach it;
//! the client's notifications and its answers to relayed requests reach the server they are
//! for.

use std::sync::Arc;
use std::time::Instant;

use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::{Map, Value, json};
use tokio::sync::Notify;

use super::forward::{Exchange, Tried};
use super::jsonrpc::Id;
use super::lists::{self, Kind};
use super::pump::Pump;
use super::record::{Outcome, ToolCall};
use super::reply::{
    CANCELLED, INVALID_PARAMS, METHOD_NOT_FOUND, RESOURCE_NOT_FOUND, SERVER_FAILED, VERSIONS,
    answer, rpc_error,
};
use super::session::{Session, new_id};
use super::upstream::{Failure, Reply, SESSION_HEADER};
use super::{Flight, McpState, names, relay};
use crate::config::mcp::McpServer;
use crate::config::{GatewayKey, Snapshot};

/// One call on a session.
pub struct Call<'a> {
    pub st: &'a McpState,
    pub snap: &'a Arc<Snapshot>,
    pub key: &'a GatewayKey,
    pub sid: &'a str,
    pub session: Session,
    /// The client reads event streams.
    pub streams: bool,
    pub headers: &'a axum::http::HeaderMap,
}

fn error(id: Value, code: i64, message: &str) -> Response {
    rpc_error(StatusCode::OK, id, code, message)
}

/// The servers a key reaches, in the config's order.
fn reachable<'s>(snap: &'s Snapshot, key: &GatewayKey) -> Vec<&'s McpServer> {
    snap.mcp
        .servers
        .iter()
        .filter(|s| key.mcp.allows_server(&s.name))
        .collect()
}

/// The capabilities `/mcp` offers: what any of the key's servers does.
fn union<'v>(results: impl Iterator<Item = &'v Value>) -> Value {
    let mut caps = Map::new();
    for r in results {
        let Some(c) = r.get("capabilities").and_then(Value::as_object) else {
            continue;
        };
        for k in ["tools", "prompts"] {
            if c.contains_key(k) {
                caps.insert(k.into(), json!({"listChanged": true}));
            }
        }
        if let Some(res) = c.get("resources") {
            let sub = res
                .get("subscribe")
                .and_then(Value::as_bool)
                .unwrap_or(false)
                || caps
                    .get("resources")
                    .and_then(|r| r.get("subscribe"))
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
            caps.insert(
                "resources".into(),
                json!({"listChanged": true, "subscribe": sub}),
            );
        }
        for k in ["logging", "completions"] {
            if c.contains_key(k) {
                caps.insert(k.into(), json!({}));
            }
        }
    }
    Value::Object(caps)
}

/// `initialize`: a new session, a leg opened on every server the key reaches (at once; one
/// that cannot be reached now is opened on first use), the revision negotiated.
pub async fn initialize(
    st: &McpState,
    snap: &Arc<Snapshot>,
    key: &GatewayKey,
    id: Value,
    params: Option<&Value>,
) -> Response {
    let asked = params
        .and_then(|p| p.get("protocolVersion"))
        .and_then(Value::as_str);
    let version = VERSIONS
        .iter()
        .find(|v| Some(**v) == asked)
        .unwrap_or(&VERSIONS[0]);
    let session = Session {
        key: key.name.to_string(),
        version: version.to_string(),
        client: params
            .and_then(|p| p.get("capabilities"))
            .cloned()
            .unwrap_or_else(|| json!({})),
        legs: Default::default(),
    };
    let opening = reachable(snap, key).into_iter().map(|server| {
        let mut mine = session.clone();
        async move {
            let mut ex = Exchange {
                mcp: &st.mcp,
                health: &st.app.health,
                snap,
                session: &mut mine,
                moved: false,
            };
            let r = ex.open_any(server).await;
            if let Err(f) = &r {
                tracing::warn!(server = %server.name, "MCP server not reached at initialize: {f}");
            }
            (server.name.clone(), mine.legs.remove(&*server.name), r.ok())
        }
    });
    let opened = futures_util::future::join_all(opening).await;
    let mut session = session;
    let mut results = Vec::new();
    for (name, leg, o) in opened {
        if let (Some(leg), Some(o)) = (leg, o) {
            results.push(o.result);
            session.legs.insert(name.to_string(), leg);
        }
    }
    let sid = new_id();
    st.mcp
        .sessions
        .put(&sid, &session, snap.mcp.session_ttl)
        .await;
    let result = json!({
        "protocolVersion": version,
        "capabilities": union(results.iter()),
        "serverInfo": {"name": "switchyard", "version": env!("CARGO_PKG_VERSION")},
    });
    let mut r = answer(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
    if let Ok(v) = HeaderValue::from_str(&sid) {
        r.headers_mut().insert(SESSION_HEADER, v);
    }
    r
}

impl Call<'_> {
    fn exchange(&mut self) -> Exchange<'_> {
        Exchange {
            mcp: &self.st.mcp,
            health: &self.st.app.health,
            snap: self.snap,
            session: &mut self.session,
            moved: false,
        }
    }

    async fn keep(&self, moved: bool) {
        if moved {
            let ttl = self.snap.mcp.session_ttl;
            self.st.mcp.sessions.put(self.sid, &self.session, ttl).await;
        }
    }

    /// The key's server of this name.
    fn server(&self, name: &str) -> Option<&McpServer> {
        let snap: &Snapshot = self.snap;
        snap.mcp
            .server(name)
            .filter(|s| self.key.mcp.allows_server(&s.name))
    }

    /// A name from a merged list: its server (one the key reaches) and the server's own name.
    fn owner<'n>(&self, name: &'n str) -> Option<(&McpServer, &'n str)> {
        let snap: &Snapshot = self.snap;
        let servers = reachable(snap, self.key);
        let (server, own) =
            names::split(servers.iter().map(|s| &*s.name), &snap.mcp.separator, name)?;
        Some((self.server(server)?, own))
    }

    pub async fn request(&mut self, id: Value, method: &str, params: Option<Value>) -> Response {
        if let Some(kind) = Kind::of_method(method) {
            return self.list(id, kind, params).await;
        }
        let params = params.unwrap_or_else(|| json!({}));
        match method {
            "ping" => answer(&json!({"jsonrpc": "2.0", "id": id, "result": {}})),
            "tools/call" => self.tool_call(id, params).await,
            "prompts/get" => self.by_name(id, method, params, "name").await,
            "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
                self.by_uri(id, method, params).await
            }
            "completion/complete" => {
                let by_prompt =
                    params.pointer("/ref/type").and_then(Value::as_str) == Some("ref/prompt");
                if by_prompt {
                    self.by_name(id, method, params, "ref").await
                } else {
                    self.by_uri(id, method, params).await
                }
            }
            "logging/setLevel" => {
                let legs: Vec<String> = self.session.legs.keys().cloned().collect();
                let msg = json!({"jsonrpc": "2.0", "id": relay::fresh_id(), "method": method, "params": params});
                for name in legs {
                    if let Some(server) = self.snap.mcp.server(&name) {
                        self.exchange().tell(server, &msg).await;
                    }
                }
                answer(&json!({"jsonrpc": "2.0", "id": id, "result": {}}))
            }
            _ => error(id, METHOD_NOT_FOUND, &format!("method not found: {method}")),
        }
    }

    /// A merged list's page: each server's list the key reaches, only what it may call.
    async fn list(&mut self, id: Value, kind: Kind, params: Option<Value>) -> Response {
        let snap = self.snap.clone();
        let sep = &*snap.mcp.separator;
        let servers = reachable(&snap, self.key);
        let mut parts = Vec::with_capacity(servers.len());
        let mut ex = self.exchange();
        for s in &servers {
            match ex.list(s, kind).await {
                Ok(items) => parts.push((&*s.name, items)),
                Err(f) => tracing::warn!(server = %s.name, "MCP {}: {f}", kind.method()),
            }
        }
        let moved = ex.moved;
        self.keep(moved).await;
        let borrowed: Vec<(&str, &[Value])> =
            parts.iter().map(|(s, i)| (*s, i.as_slice())).collect();
        let access = &self.key.mcp;
        let merged = lists::merge(&borrowed, sep, |server, name| {
            kind != Kind::Tools || access.allows_tool(server, sep, name)
        });
        let cursor = params
            .as_ref()
            .and_then(|p| p.get("cursor"))
            .and_then(Value::as_str);
        match lists::page(merged, cursor, snap.mcp.page_size) {
            Ok((items, next)) => {
                let mut result = json!({ kind.field(): items });
                if let Some(n) = next {
                    result["nextCursor"] = Value::String(n);
                }
                answer(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
            }
            Err(lists::BadCursor) => error(id, INVALID_PARAMS, "invalid cursor"),
        }
    }

    /// A tool call: the key's access and limits first (a refusal never reaches the server),
    /// then the owning server; repeated on another replica only for a tool the server says
    /// is read-only or idempotent.
    async fn tool_call(&mut self, id: Value, mut params: Value) -> Response {
        let Some(name) = params
            .get("name")
            .and_then(Value::as_str)
            .map(str::to_string)
        else {
            return error(id, INVALID_PARAMS, "params.name is required");
        };
        let mut rec = ToolCall::start(
            self.st,
            (self.headers, self.snap.log.mcp_bodies),
            self.key,
            &name,
            &params,
        );
        let sep = self.snap.mcp.separator.clone();
        let Some((server, tool)) = self.owner(&name) else {
            rec.refused(self.st, "unknown_tool");
            return error(id, INVALID_PARAMS, &format!("Unknown tool: {name}"));
        };
        rec.server(&server.name, tool);
        if !self.key.mcp.allows_tool(&server.name, &sep, tool) {
            rec.refused(self.st, "denied");
            return error(id, INVALID_PARAMS, &format!("Unknown tool: {name}"));
        }
        let holds = match super::record::hold(self.st, self.snap, self.key).await {
            Ok(h) => h,
            Err(limited) => {
                let message = limited.message();
                rec.refused(self.st, limited.reason);
                return answer(&json!({"jsonrpc": "2.0", "id": id,
                    "error": {"code": SERVER_FAILED, "message": message, "data": limited.data}}));
            }
        };
        let (server_name, tool) = (server.name.clone(), tool.to_string());
        // The tool's annotations, from its server's list (read now if it is not kept).
        let mut listed = self.st.mcp.lists.tool(&server_name, &tool);
        if listed.is_none() {
            let snap = self.snap.clone();
            if let Some(s) = snap.mcp.server(&server_name) {
                let mut ex = self.exchange();
                let _ = ex.list(s, Kind::Tools).await;
                let moved = ex.moved;
                self.keep(moved).await;
            }
            listed = self.st.mcp.lists.tool(&server_name, &tool);
        }
        rec.listed(listed.is_some());
        let safe = listed == Some(true);
        params["name"] = Value::String(tool);
        let snap = self.snap.clone();
        let Some(server) = snap.mcp.server(&server_name) else {
            return error(id, INVALID_PARAMS, &format!("Unknown tool: {name}"));
        };
        rec.hold(holds);
        self.forward(id, server, "tools/call", params, safe, Some(rec))
            .await
    }

    /// A request naming a prompt (`params[field].name`, or `params.name`).
    async fn by_name(
        &mut self,
        id: Value,
        method: &str,
        mut params: Value,
        field: &str,
    ) -> Response {
        let at: &mut Value = if field == "name" {
            &mut params
        } else {
            &mut params[field]
        };
        let Some(name) = at.get("name").and_then(Value::as_str).map(str::to_string) else {
            return error(id, INVALID_PARAMS, "a name is required");
        };
        let snap = self.snap.clone();
        let Some((server, own)) = self.owner(&name) else {
            return error(id, INVALID_PARAMS, &format!("unknown prompt: {name}"));
        };
        let server_name = server.name.clone();
        at["name"] = Value::String(own.to_string());
        let Some(server) = snap.mcp.server(&server_name) else {
            return error(id, INVALID_PARAMS, &format!("unknown prompt: {name}"));
        };
        self.forward(id, server, method, params, true, None).await
    }

    /// A request naming a resource by URI: the server that listed it (or a template of it).
    async fn by_uri(&mut self, id: Value, method: &str, params: Value) -> Response {
        let uri = params
            .get("uri")
            .or_else(|| params.pointer("/ref/uri"))
            .and_then(Value::as_str)
            .map(str::to_string);
        let Some(uri) = uri else {
            return error(id, INVALID_PARAMS, "a uri is required");
        };
        let snap = self.snap.clone();
        let servers = reachable(&snap, self.key);
        let mut owner = self.owner_of(&servers, &uri);
        if owner.is_none() {
            // Not in the lists kept: read them, then look again.
            let mut ex = self.exchange();
            for s in &servers {
                let _ = ex.list(s, Kind::Resources).await;
                let _ = ex.list(s, Kind::Templates).await;
            }
            let moved = ex.moved;
            self.keep(moved).await;
            owner = self.owner_of(&servers, &uri);
        }
        let Some(server) = owner.and_then(|n| snap.mcp.server(&n)) else {
            return error(
                id,
                RESOURCE_NOT_FOUND,
                &format!("Resource not found: {uri}"),
            );
        };
        let safe = method != "resources/subscribe" && method != "resources/unsubscribe";
        self.forward(id, server, method, params, safe, None).await
    }

    fn owner_of(&self, servers: &[&McpServer], uri: &str) -> Option<Arc<str>> {
        let names: Vec<&Arc<str>> = servers.iter().map(|s| &s.name).collect();
        self.st.mcp.lists.resource_owner(&names, uri).cloned()
    }

    /// Sends a request to `server` under a fresh id and answers the client with what comes
    /// back (a stream relayed as it arrives when the client reads streams).
    async fn forward(
        &mut self,
        client_id: Value,
        server: &McpServer,
        method: &str,
        params: Value,
        failover: bool,
        mut rec: Option<ToolCall>,
    ) -> Response {
        let our_id = relay::call_id(self.sid, &client_id);
        let msg = json!({"jsonrpc": "2.0", "id": our_id, "method": method, "params": params});
        let cancel = Arc::new(Notify::new());
        let flight = Flight {
            server: server.name.clone(),
            id: our_id.clone(),
            cancel: cancel.clone(),
        };
        self.st.mcp.fly(self.sid, &client_id, flight);
        let mut tried = Tried::default();
        let started = Instant::now();
        let mut ex = self.exchange();
        let sent = tokio::select! {
            biased;
            _ = cancel.notified() => None,
            r = ex.send(server, &msg, failover, &mut tried) => Some(r),
        };
        let moved = ex.moved;
        self.keep(moved).await;
        if let Some(r) = rec.as_mut() {
            r.tried(server, &tried);
        }
        let pump = Pump {
            mcp: self.st.mcp.clone(),
            app: self.st.app.clone(),
            server: server.name.clone(),
            sid: self.sid.to_string(),
            client_id: client_id.clone(),
            our_id,
            cancel,
            deadline: tokio::time::Instant::from_std(started) + server.timeout,
            rec,
            repeatable: failover,
        };
        match sent {
            None => pump.end(Outcome::Cancelled, error(client_id, CANCELLED, "cancelled")),
            Some(Err(f)) => {
                let message = format!("MCP server {} failed: {f}", server.name);
                let data = json!({"server": &*server.name, "reason": f.outcome(),
                    "attempts": tried.replicas.len(), "repeatable": failover});
                let body = json!({"jsonrpc": "2.0", "id": client_id,
                    "error": {"code": SERVER_FAILED, "message": message, "data": data}});
                pump.end(Outcome::Failed(f.outcome()), answer(&body))
            }
            Some(Ok((Reply::Message(v), _))) => pump.answered(v),
            Some(Ok((Reply::Accepted, _))) => {
                let f = Failure::Malformed("202 to a request".into());
                pump.end(
                    Outcome::Failed(f.outcome()),
                    error(client_id, SERVER_FAILED, &f.to_string()),
                )
            }
            Some(Ok((Reply::Stream(msgs), _))) => pump.stream(msgs, self.streams).await,
        }
    }

    /// A notification from the client: cancellation reaches the request's server, the roots'
    /// change every server of the session; the rest are the gateway's own.
    pub async fn notification(&mut self, method: &str, params: Option<Value>) {
        match method {
            "notifications/cancelled" => {
                let Some(rid) = params.as_ref().and_then(|p| p.get("requestId")).cloned() else {
                    return;
                };
                // The server knows the call by the gateway's id for it, which any replica
                // can name: the call may be running on another one.
                let mut p = json!({"requestId": relay::call_id(self.sid, &rid)});
                if let Some(r) = params.as_ref().and_then(|p| p.get("reason")).cloned() {
                    p["reason"] = r;
                }
                let msg = json!({"jsonrpc": "2.0", "method": method, "params": p});
                let snap = self.snap.clone();
                let servers: Vec<String> = match self.st.mcp.landed(self.sid, &rid) {
                    // Here: its stream ends now, and only its server is told.
                    Some(f) => {
                        f.cancel.notify_one();
                        vec![f.server.to_string()]
                    }
                    // Elsewhere: every server of the session is told (the others know no
                    // such call), and the replica running it relays the server's answer.
                    None => self.session.legs.keys().cloned().collect(),
                };
                for name in servers {
                    if let Some(server) = snap.mcp.server(&name) {
                        self.exchange().tell(server, &msg).await;
                    }
                }
            }
            "notifications/roots/list_changed" => {
                let msg = json!({"jsonrpc": "2.0", "method": method});
                let snap = self.snap.clone();
                let legs: Vec<String> = self.session.legs.keys().cloned().collect();
                for name in legs {
                    if let Some(server) = snap.mcp.server(&name) {
                        self.exchange().tell(server, &msg).await;
                    }
                }
            }
            _ => {}
        }
    }

    /// The client's answer to a request a server sent it: back to that server, under its id.
    pub async fn response(&mut self, id: &Id, outcome: Result<Value, Value>) {
        let Some((server, inner)) = relay::inward_id(id) else {
            return;
        };
        let snap = self.snap.clone();
        let Some(server) = snap.mcp.server(server) else {
            return;
        };
        let mut msg = json!({"jsonrpc": "2.0", "id": inner});
        match outcome {
            Ok(r) => msg["result"] = r,
            Err(e) => msg["error"] = e,
        }
        self.exchange().tell(server, &msg).await;
    }
}
