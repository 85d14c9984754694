//! What the gateway's side of an MCP exchange with one server replica is made of, whatever
//! the transport: where a message goes ([`Target`]), a session opened there ([`Opened`]), why
//! a call failed ([`Failure`]), and the names on the wire. A leaf: the transports build on it.

use serde_json::Value;

use crate::config::mcp::McpServer;

pub const SESSION_HEADER: &str = "mcp-session-id";
pub const VERSION_HEADER: &str = "mcp-protocol-version";
/// The revision the gateway asks its servers for (they may answer an older one).
pub const LATEST: &str = "2025-11-25";

/// Why a call to a server failed. `Display` never includes a header or a token.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Failure {
    #[error("could not connect: {0}")]
    Connect(String),
    #[error("timed out")]
    Timeout,
    #[error("answered HTTP {0}")]
    Status(u16),
    /// 404 to a request carrying a session id: the server forgot the session.
    #[error("the server's session ended")]
    SessionGone,
    #[error("answered something that is not MCP: {0}")]
    Malformed(String),
}

impl Failure {
    /// Whether the call may not have reached the server's logic: a connection error, a
    /// timeout or a 5xx. Only these fail a safe call over to another replica.
    pub fn replica_fault(&self) -> bool {
        match self {
            Failure::Connect(_) | Failure::Timeout => true,
            Failure::Status(s) => *s >= 500,
            Failure::SessionGone | Failure::Malformed(_) => false,
        }
    }

    /// A short word for the log and metrics.
    pub fn outcome(&self) -> &'static str {
        match self {
            Failure::Connect(_) => "connect_error",
            Failure::Timeout => "timeout",
            Failure::Status(s) if *s >= 500 => "upstream_5xx",
            Failure::Status(_) => "upstream_4xx",
            Failure::SessionGone => "session_gone",
            Failure::Malformed(_) => "malformed",
        }
    }
}

/// Where a message goes: one replica of a server, in a session of it (if it keeps sessions),
/// at the revision the session was opened with.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub server: &'a McpServer,
    pub replica: usize,
    pub session: Option<&'a str>,
    pub version: &'a str,
}

/// A session opened on a replica: its id (none for a server without sessions), the revision
/// it speaks and its `initialize` result.
#[derive(Debug, Clone)]
pub struct Opened {
    pub session: Option<String>,
    pub version: String,
    pub result: Value,
}

/// The `initialize` request the gateway opens a session with, offering `capabilities`.
pub fn initialize(capabilities: &Value) -> Value {
    serde_json::json!({
        "jsonrpc": "2.0", "id": super::relay::fresh_id(), "method": "initialize",
        "params": {
            "protocolVersion": LATEST,
            "capabilities": capabilities,
            "clientInfo": {"name": "switchyard", "version": env!("CARGO_PKG_VERSION")},
        },
    })
}

/// `notifications/initialized`, sent once the server answered `initialize`.
pub fn initialized() -> Value {
    serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
}

/// The session a server's answer to `initialize` opened (its id, when it keeps sessions).
pub fn opened(answer: &Value, session: Option<String>) -> Result<Opened, Failure> {
    let result = answer
        .get("result")
        .cloned()
        .ok_or_else(|| Failure::Malformed("initialize was refused".into()))?;
    let version = result
        .get("protocolVersion")
        .and_then(Value::as_str)
        .unwrap_or(LATEST)
        .to_string();
    Ok(Opened {
        session,
        version,
        result,
    })
}
