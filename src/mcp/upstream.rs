//! The gateway as an MCP client of one server replica, over Streamable HTTP: a message POSTed
//! (answered with one JSON message, an event stream of messages, or 202 for a notification or
//! a response), the standalone GET stream of server-initiated messages, a session opened
//! (`initialize`, then `notifications/initialized`) and closed (DELETE). The server's headers
//! and bearer token are added here and nowhere else; errors never carry them.

use std::time::Duration;

use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde_json::Value;

pub use super::link::{Failure, LATEST, Opened, SESSION_HEADER, Target, VERSION_HEADER};
pub use super::messages::{Messages, Reply};
use crate::config::mcp::McpServer;

/// The client every server is called with: HTTP for Streamable HTTP, the kept connections
/// of the older transports beside it.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    pipes: std::sync::Arc<super::pipes::Pipes>,
}

impl Client {
    pub fn new(
        lists: std::sync::Arc<super::lists::Lists>,
        changed: tokio::sync::broadcast::Sender<(std::sync::Arc<str>, String)>,
    ) -> Client {
        crate::provider::install_crypto_provider();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .pool_idle_timeout(Duration::from_secs(60))
            .build()
            .unwrap_or_default();
        let pipes = super::pipes::Pipes::new(http.clone(), lists, changed);
        Client {
            http,
            pipes: std::sync::Arc::new(pipes),
        }
    }

    fn piped(server: &McpServer) -> bool {
        server.transport != crate::config::mcp::Transport::StreamableHttp
    }

    fn request(&self, method: reqwest::Method, t: &Target) -> reqwest::RequestBuilder {
        let replica = &t.server.replicas[t.replica.min(t.server.replicas.len() - 1)];
        let mut req = self
            .http
            .request(method, replica.url.clone())
            .header(VERSION_HEADER, t.version);
        if let Some(s) = t.session {
            req = req.header(SESSION_HEADER, s);
        }
        t.server.authorize(req)
    }

    /// POSTs one message; the reply's headers within the server's timeout (a stream's
    /// messages are read by the caller, under the same deadline).
    pub async fn post(
        &self,
        t: &Target<'_>,
        msg: &Value,
    ) -> Result<(Reply, Option<String>), Failure> {
        if Client::piped(t.server) {
            return Ok((self.pipes.post(t, msg).await?, None));
        }
        let body = serde_json::to_vec(msg).unwrap_or_default();
        let req = self
            .request(reqwest::Method::POST, t)
            .header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .body(body);
        let resp = tokio::time::timeout(t.server.timeout, req.send())
            .await
            .map_err(|_| Failure::Timeout)?
            .map_err(|e| {
                Failure::Connect(crate::provider::redact_url(&e.without_url().to_string()))
            })?;
        let session = resp
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let status = resp.status().as_u16();
        if status == 404 && t.session.is_some() {
            return Err(Failure::SessionGone);
        }
        if status == 202 {
            return Ok((Reply::Accepted, session));
        }
        if !(200..300).contains(&status) {
            return Err(Failure::Status(status));
        }
        let streamed = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| c.starts_with("text/event-stream"));
        if streamed {
            return Ok((Reply::Stream(Messages::of(resp)), session));
        }
        let bytes = tokio::time::timeout(t.server.timeout, resp.bytes())
            .await
            .map_err(|_| Failure::Timeout)?
            .map_err(|e| Failure::Connect(e.without_url().to_string()))?;
        if bytes.is_empty() {
            return Ok((Reply::Accepted, session));
        }
        let v: Value =
            serde_json::from_slice(&bytes).map_err(|e| Failure::Malformed(e.to_string()))?;
        Ok((Reply::Message(v), session))
    }

    /// The response to request `id`, reading past what comes before it in a stream.
    pub async fn answer(
        &self,
        t: &Target<'_>,
        msg: &Value,
    ) -> Result<(Value, Option<String>), Failure> {
        let id = msg.get("id").cloned().unwrap_or(Value::Null);
        let (reply, session) = self.post(t, msg).await?;
        let v = reply.answer(&id, t.server.timeout).await?;
        Ok((v, session))
    }

    /// Opens a session: `initialize` (asking for `version`, offering `capabilities`), then
    /// `notifications/initialized`.
    pub async fn open(
        &self,
        server: &McpServer,
        replica: usize,
        capabilities: &Value,
    ) -> Result<Opened, Failure> {
        if Client::piped(server) {
            return self.pipes.open(server, replica, capabilities).await;
        }
        let t = Target {
            server,
            replica,
            session: None,
            version: LATEST,
        };
        let (answer, session) = self
            .answer(&t, &super::link::initialize(capabilities))
            .await?;
        let opened = super::link::opened(&answer, session)?;
        let t = Target {
            session: opened.session.as_deref(),
            version: &opened.version,
            ..t
        };
        self.post(&t, &super::link::initialized()).await?;
        Ok(opened)
    }

    /// The server's stream of messages it sends on its own (`None`: it offers none, 405).
    pub async fn listen(&self, t: &Target<'_>) -> Result<Option<Messages>, Failure> {
        if Client::piped(t.server) {
            return Ok(self.pipes.listen(t));
        }
        let req = self
            .request(reqwest::Method::GET, t)
            .header(ACCEPT, "text/event-stream");
        let resp = tokio::time::timeout(t.server.timeout, req.send())
            .await
            .map_err(|_| Failure::Timeout)?
            .map_err(|e| Failure::Connect(e.without_url().to_string()))?;
        match resp.status().as_u16() {
            200 => Ok(Some(Messages::of(resp))),
            404 if t.session.is_some() => Err(Failure::SessionGone),
            405 => Ok(None),
            s => Err(Failure::Status(s)),
        }
    }

    /// Ends a session (best effort: the server forgets it on its own anyway).
    pub async fn close(&self, t: &Target<'_>) {
        if Client::piped(t.server) {
            return self.pipes.close(t);
        }
        if t.session.is_none() {
            return;
        }
        let req = self.request(reqwest::Method::DELETE, t);
        let _ = tokio::time::timeout(Duration::from_secs(2), req.send()).await;
    }
}
