//! The MCP gateway: `/mcp`, one authenticated Streamable HTTP endpoint in front of the
//! `[[mcp_servers]]`, a room of its own built on the gateway's public parts (the config's keys
//! and access rules, the health model, the meters, the log, telemetry, events), never on the
//! request path's internals.
//!
//! `endpoint.rs` answers the client (POST, GET, DELETE) and `dispatch.rs` decides each method;
//! `forward.rs` sends to the owning server with its health and failover; `upstream.rs` is the
//! client of one server replica (`pipes.rs` and `conn.rs` for the transports that keep a
//! connection; `messages.rs` what comes back; `link.rs` the leaf they share); `reply.rs` the
//! answers `/mcp` gives; `session.rs` the sessions any replica continues; `lists.rs`
//! the merged lists; `relay.rs` ids across the gateway and the SSE events; `record.rs` what a
//! tool call leaves (log row, series, event); `probe.rs` the pings that close a circuit;
//! `jsonrpc.rs` and `names.rs` are pure.

mod conn;
mod dispatch;
pub mod endpoint;
mod forward;
pub mod jsonrpc;
mod link;
pub mod lists;
mod messages;
pub mod names;
mod pipes;
mod probe;
mod pump;
mod record;
pub mod relay;
mod reply;
pub mod session;
pub mod upstream;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::FromRef;
use axum::routing::post;
use serde_json::Value;
use tokio::sync::{Notify, broadcast};

use crate::server::AppState;

/// What the MCP gateway keeps while it runs.
pub struct Mcp {
    pub client: upstream::Client,
    pub sessions: session::Sessions,
    pub lists: Arc<lists::Lists>,
    /// `(server, method)` of every `list_changed` a server sent: each session's GET stream
    /// passes on those of the servers its key reaches.
    pub changed: broadcast::Sender<(Arc<str>, String)>,
    /// Requests on their way, by (session id, the client's id), for cancellation.
    flights: Mutex<HashMap<(String, String), Flight>>,
}

/// A request sent to a server and not yet answered.
#[derive(Clone)]
pub struct Flight {
    pub server: Arc<str>,
    pub id: Value,
    pub cancel: Arc<Notify>,
}

impl Mcp {
    pub fn new(state: Arc<crate::state::State>) -> Mcp {
        let lists = Arc::new(lists::Lists::default());
        let changed = broadcast::channel(256).0;
        Mcp {
            client: upstream::Client::new(lists.clone(), changed.clone()),
            sessions: session::Sessions::new(state),
            lists,
            changed,
            flights: Mutex::new(HashMap::new()),
        }
    }

    fn flights(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Flight>> {
        self.flights.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn fly(&self, session: &str, client_id: &Value, f: Flight) {
        self.flights()
            .insert((session.to_string(), client_id.to_string()), f);
    }

    pub fn landed(&self, session: &str, client_id: &Value) -> Option<Flight> {
        self.flights()
            .remove(&(session.to_string(), client_id.to_string()))
    }

    /// A server said a list changed: forget it and tell the sessions.
    pub fn list_changed(&self, server: &Arc<str>, method: &str) {
        self.lists.forget(server, lists::Kind::changed_by(method));
        let _ = self.changed.send((server.clone(), method.to_string()));
    }
}

/// The MCP routes' state: the gateway's and the MCP gateway's own.
#[derive(Clone)]
pub struct McpState {
    pub app: AppState,
    pub mcp: Arc<Mcp>,
}

impl FromRef<McpState> for AppState {
    fn from_ref(s: &McpState) -> AppState {
        s.app.clone()
    }
}

/// `/mcp`, for the public listener, and the prober that closes servers' circuits.
pub fn router(app: AppState, mcp: Arc<Mcp>) -> (Router<AppState>, tokio::task::JoinHandle<()>) {
    let prober = tokio::spawn(probe::run(app.clone(), mcp.clone()));
    let state = McpState { app, mcp };
    let r = Router::new()
        .route(
            "/mcp",
            post(endpoint::post)
                .get(endpoint::get)
                .delete(endpoint::delete),
        )
        .with_state(state);
    (r, prober)
}
