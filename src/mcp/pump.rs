//! A server's answer carried back to the client: one JSON message, or its event stream relayed
//! as it comes (progress and log notifications passed on, the server's own requests relayed
//! under ids that lead back to it, the answer under the client's id), ended by the answer, the
//! server's deadline, or the client's cancellation. What it ends with is the call's record.

use std::sync::Arc;

use axum::response::Response;
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};

use super::link::Failure;
use super::messages::Messages;
use super::record::{Outcome, ToolCall};
use super::reply::{CANCELLED, SERVER_FAILED, answer, event_stream};
use super::{Mcp, relay};
use crate::server::AppState;

pub struct Pump {
    pub mcp: Arc<Mcp>,
    pub app: AppState,
    pub server: Arc<str>,
    pub sid: String,
    pub client_id: Value,
    pub our_id: Value,
    pub cancel: Arc<Notify>,
    pub deadline: tokio::time::Instant,
    pub rec: Option<ToolCall>,
    /// The call is safe to repeat (the client may, when it fails).
    pub repeatable: bool,
}

impl Pump {
    fn done(&mut self, outcome: Outcome, answer: Option<&Value>) {
        self.mcp.landed(&self.sid, &self.client_id);
        if let Some(r) = self.rec.take() {
            r.finish(&self.app, outcome, answer);
        }
    }

    /// Ended without the server's answer.
    pub fn end(mut self, outcome: Outcome, resp: Response) -> Response {
        self.done(outcome, None);
        resp
    }

    /// The server answered with one message.
    pub fn answered(mut self, mut v: Value) -> Response {
        v["id"] = self.client_id.clone();
        self.done(Outcome::of(&v), Some(&v));
        answer(&v)
    }

    /// The server answered with a stream: relayed as it comes to a client that reads streams,
    /// else read to its answer.
    pub async fn stream(self, msgs: Messages, streams: bool) -> Response {
        if streams {
            let (tx, rx) = mpsc::channel(32);
            tokio::spawn(self.run(msgs, Some(tx)));
            event_stream(rx)
        } else {
            let last = self.run(msgs, None).await;
            answer(&last)
        }
    }

    fn failed(&self, code: i64, message: String, reason: &str) -> Value {
        json!({"jsonrpc": "2.0", "id": self.client_id, "error": {"code": code,
            "message": message, "data": {"server": &*self.server, "reason": reason,
            "repeatable": self.repeatable}}})
    }

    /// Relays until the answer; returns the last message the client was given.
    async fn run(mut self, mut msgs: Messages, tx: Option<mpsc::Sender<Bytes>>) -> Value {
        let cancel = self.cancel.clone();
        let (last, outcome) = loop {
            // Cancellation first: the server's own answer to it (the MCP SDK's is code 0) may be
            // ready by the time this task runs again, and the client is owed -32800.
            let next = tokio::select! {
                biased;
                _ = cancel.notified() => {
                    break (self.failed(CANCELLED, "cancelled".into(), "cancelled"), Outcome::Cancelled);
                }
                m = msgs.next() => m,
                _ = tokio::time::sleep_until(self.deadline) => Err(Failure::Timeout),
            };
            let mut m = match next {
                Ok(Some(m)) => m,
                Ok(None) => {
                    let why = format!(
                        "MCP server {} ended its stream before answering",
                        self.server
                    );
                    let f = Failure::Malformed("stream ended".into());
                    break (
                        self.failed(SERVER_FAILED, why, "stream_ended"),
                        Outcome::Failed(f.outcome()),
                    );
                }
                Err(f) => {
                    let why = format!("MCP server {} failed: {f}", self.server);
                    break (
                        self.failed(SERVER_FAILED, why, f.outcome()),
                        Outcome::Failed(f.outcome()),
                    );
                }
            };
            let method = m.get("method").and_then(Value::as_str).map(str::to_string);
            match (method, m.get("id").cloned()) {
                (None, Some(id)) if id == self.our_id => {
                    m["id"] = self.client_id.clone();
                    let outcome = Outcome::of(&m);
                    break (m, outcome);
                }
                // An answer to something else: not the client's.
                (None, _) => continue,
                (Some(method), None) if method.ends_with("/list_changed") => {
                    // Every session's GET stream hears of it (this one's too).
                    self.mcp.list_changed(&self.server, &method);
                    continue;
                }
                (Some(_), Some(id)) => m["id"] = relay::outward_id(&self.server, &id),
                (Some(_), None) => {}
            }
            if let Some(tx) = &tx
                && tx.send(relay::event(&m)).await.is_err()
            {
                break (m, Outcome::Cancelled);
            }
        };
        if let Some(tx) = &tx {
            let _ = tx.send(relay::event(&last)).await;
        }
        self.done(outcome, Some(&last));
        last
    }
}
