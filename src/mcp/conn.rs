//! A connection that carries all of one session's messages from the server on one stream: the
//! older HTTP+SSE transport's GET stream (messages POSTed to the endpoint it names), or a stdio
//! server's standard output (messages written to its input). Each message the server sends is
//! routed here: an answer to the request waiting for it, a progress notification to the request
//! that gave its token, a server's request to the one request waiting (the old transports
//! cannot say which it belongs to), everything else to the session's GET stream; a
//! `list_changed` also to every session, through `Mcp::changed`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::{broadcast, mpsc};

use super::link::Failure;
use super::lists::{Kind, Lists};

/// Where the connection's messages to the server go.
pub enum Out {
    /// POSTed to the endpoint the SSE stream named.
    Post {
        http: reqwest::Client,
        endpoint: reqwest::Url,
        headers: Vec<(http::HeaderName, http::HeaderValue)>,
    },
    /// One line each on a stdio server's input.
    Pipe(mpsc::Sender<Vec<u8>>),
}

/// What the connection tells the rest of the gateway.
pub struct Ears {
    pub server: Arc<str>,
    pub lists: Arc<Lists>,
    pub changed: broadcast::Sender<(Arc<str>, String)>,
}

pub struct Conn {
    out: Out,
    ears: Ears,
    waiting: Mutex<HashMap<String, mpsc::UnboundedSender<Value>>>,
    tokens: Mutex<HashMap<String, String>>,
    /// What the session's GET stream hears.
    pub heard: broadcast::Sender<Value>,
    alive: AtomicBool,
    /// The task reading the server; ended with the connection.
    reader: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The server's `initialize` result, for a connection opened once for many sessions.
    pub opened: Mutex<Option<(String, Value)>>,
}

fn key(id: &Value) -> String {
    id.to_string()
}

impl Conn {
    pub fn new(out: Out, ears: Ears) -> Arc<Conn> {
        Arc::new(Conn {
            out,
            ears,
            waiting: Mutex::new(HashMap::new()),
            tokens: Mutex::new(HashMap::new()),
            heard: broadcast::channel(64).0,
            alive: AtomicBool::new(true),
            reader: Mutex::new(None),
            opened: Mutex::new(None),
        })
    }

    pub fn reading(&self, task: tokio::task::JoinHandle<()>) {
        *self.reader.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
    }

    pub fn alive(&self) -> bool {
        self.alive.load(Ordering::Relaxed)
    }

    /// The stream ended: every waiting request hears the connection close.
    pub fn ended(&self) {
        self.alive.store(false, Ordering::Relaxed);
        self.waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// Closes it (the session ended, or the gateway gave up on it).
    pub fn close(&self) {
        self.ended();
        if let Some(t) = self.reader.lock().unwrap_or_else(|p| p.into_inner()).take() {
            t.abort();
        }
    }

    /// One message from the server, to whoever waits for it.
    pub fn deliver(&self, msg: Value) {
        let method = msg.get("method").and_then(Value::as_str);
        let id = msg.get("id");
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        match (method, id) {
            (None, Some(id)) => {
                if let Some(tx) = waiting.remove(&key(id)) {
                    let _ = tx.send(msg);
                }
                return;
            }
            (Some("notifications/progress"), None) => {
                let token = msg.pointer("/params/progressToken").map(key);
                let tokens = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(tx) = token
                    .and_then(|t| tokens.get(&t))
                    .and_then(|id| waiting.get(id))
                {
                    let _ = tx.send(msg);
                    return;
                }
            }
            (Some(m), None) if m.ends_with("/list_changed") => {
                self.ears
                    .lists
                    .forget(&self.ears.server, Kind::changed_by(m));
                let _ = self
                    .ears
                    .changed
                    .send((self.ears.server.clone(), m.to_string()));
                return;
            }
            (Some(_), Some(_)) if waiting.len() == 1 => {
                if let Some(tx) = waiting.values().next() {
                    let _ = tx.send(msg);
                    return;
                }
            }
            _ => {}
        }
        drop(waiting);
        let _ = self.heard.send(msg);
    }

    /// Sends one message.
    pub async fn send(&self, msg: &Value, timeout: std::time::Duration) -> Result<(), Failure> {
        if !self.alive() {
            return Err(Failure::SessionGone);
        }
        let mut bytes = serde_json::to_vec(msg).unwrap_or_default();
        match &self.out {
            Out::Pipe(tx) => {
                bytes.push(b'\n');
                tx.send(bytes)
                    .await
                    .map_err(|_| Failure::Connect("the server's process ended".into()))
            }
            Out::Post {
                http,
                endpoint,
                headers,
            } => {
                let req = http
                    .post(endpoint.clone())
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(bytes);
                let req = crate::config::mcp::authorize(headers, req);
                let resp = tokio::time::timeout(timeout, req.send())
                    .await
                    .map_err(|_| Failure::Timeout)?
                    .map_err(|e| Failure::Connect(e.without_url().to_string()))?;
                match resp.status().as_u16() {
                    200..=299 => Ok(()),
                    404 => Err(Failure::SessionGone),
                    s => Err(Failure::Status(s)),
                }
            }
        }
    }

    /// Sends a request; its messages (progress, the server's requests, the answer) arrive on
    /// what this returns.
    pub async fn request(
        self: &Arc<Self>,
        msg: &Value,
        timeout: std::time::Duration,
    ) -> Result<Waiting, Failure> {
        let id = key(msg.get("id").unwrap_or(&Value::Null));
        let (tx, rx) = mpsc::unbounded_channel();
        self.waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone(), tx);
        if let Some(t) = msg.pointer("/params/_meta/progressToken") {
            self.tokens
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key(t), id.clone());
        }
        let w = Waiting {
            conn: self.clone(),
            id,
            rx,
        };
        self.send(msg, timeout).await?;
        Ok(w)
    }
}

/// A request's messages as they arrive; forgotten when dropped.
pub struct Waiting {
    conn: Arc<Conn>,
    id: String,
    pub rx: mpsc::UnboundedReceiver<Value>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.conn
            .waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
        self.conn
            .tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|_, id| *id != self.id);
    }
}
