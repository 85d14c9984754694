//! The transports that keep one connection per session: the older HTTP+SSE (a GET stream
//! that names where to POST, every answer on the stream) and stdio (a process the gateway runs,
//! one line per message; a pool of them, each a replica, shared by every session and started
//! again when it exits). Their connections are kept here, by the leg's id (SSE) or the
//! server's process (stdio); a connection that ended is gone, so the leg is opened again.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt as _;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
use tokio::sync::{broadcast, mpsc};

use super::conn::{Conn, Ears, Out};
use super::link::{Failure, Opened, Target};
use super::lists::Lists;
use super::messages::{Messages, Reply};
use crate::config::mcp::{McpServer, Transport};
use crate::provider::Frames;

/// A stdio server's process: the server and its place in the pool.
type Process = (Arc<str>, usize);

pub struct Pipes {
    http: reqwest::Client,
    lists: Arc<Lists>,
    changed: broadcast::Sender<(Arc<str>, String)>,
    sse: Mutex<HashMap<String, Arc<Conn>>>,
    stdio: Mutex<HashMap<Process, Arc<Conn>>>,
    /// One process started at a time (two sessions at once must not start two).
    spawning: tokio::sync::Mutex<()>,
}

impl Pipes {
    pub fn new(
        http: reqwest::Client,
        lists: Arc<Lists>,
        changed: broadcast::Sender<(Arc<str>, String)>,
    ) -> Pipes {
        Pipes {
            http,
            lists,
            changed,
            sse: Mutex::new(HashMap::new()),
            stdio: Mutex::new(HashMap::new()),
            spawning: tokio::sync::Mutex::new(()),
        }
    }

    fn ears(&self, server: &McpServer) -> Ears {
        Ears {
            server: server.name.clone(),
            lists: self.lists.clone(),
            changed: self.changed.clone(),
        }
    }

    /// The leg's live connection.
    pub fn conn(&self, t: &Target) -> Option<Arc<Conn>> {
        let c = match t.server.transport {
            Transport::Sse => self
                .sse
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(t.session?)
                .cloned(),
            _ => self
                .stdio
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&(t.server.name.clone(), t.replica))
                .cloned(),
        }?;
        c.alive().then_some(c)
    }

    /// A message on the leg: a request's messages come back as a stream.
    pub async fn post(&self, t: &Target<'_>, msg: &Value) -> Result<Reply, Failure> {
        let conn = self.conn(t).ok_or(Failure::SessionGone)?;
        let timeout = t.server.timeout;
        if msg.get("method").is_some() && msg.get("id").is_some() {
            let w = conn.request(msg, timeout).await?;
            return Ok(Reply::Stream(Messages::waiting(w)));
        }
        conn.send(msg, timeout).await?;
        Ok(Reply::Accepted)
    }

    /// What the leg's server sends on its own.
    pub fn listen(&self, t: &Target) -> Option<Messages> {
        self.conn(t).map(|c| Messages::heard(c.heard.subscribe()))
    }

    /// Ends an SSE leg (a stdio process serves every session and stays).
    pub fn close(&self, t: &Target) {
        if t.server.transport == Transport::Sse
            && let Some(id) = t.session
            && let Some(c) = self
                .sse
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(id)
        {
            c.close();
        }
    }

    /// Opens a leg: an SSE stream of its own, or the stdio process (started if it is not).
    pub async fn open(
        &self,
        server: &McpServer,
        replica: usize,
        caps: &Value,
    ) -> Result<Opened, Failure> {
        match server.transport {
            Transport::Sse => self.open_sse(server, replica, caps).await,
            _ => self.open_stdio(server, replica).await,
        }
    }

    async fn open_sse(
        &self,
        server: &McpServer,
        replica: usize,
        caps: &Value,
    ) -> Result<Opened, Failure> {
        let url = &server.replicas[replica].url;
        let req = server.authorize(
            self.http
                .get(url.clone())
                .header(reqwest::header::ACCEPT, "text/event-stream"),
        );
        let resp = tokio::time::timeout(server.timeout, req.send())
            .await
            .map_err(|_| Failure::Timeout)?
            .map_err(|e| Failure::Connect(e.without_url().to_string()))?;
        if !resp.status().is_success() {
            return Err(Failure::Status(resp.status().as_u16()));
        }
        let mut body = resp.bytes_stream();
        let mut frames = Frames::default();
        // The stream's first event names where messages go.
        let endpoint = tokio::time::timeout(server.timeout, async {
            loop {
                match frames.next(false) {
                    Ok(Some(f)) if f.name.as_deref() == Some("endpoint") => {
                        return url
                            .join(f.data.trim())
                            .map_err(|e| Failure::Malformed(e.to_string()));
                    }
                    Ok(Some(_)) => continue,
                    Ok(None) => {}
                    Err(e) => return Err(Failure::Malformed(e.to_string())),
                }
                match body.next().await {
                    Some(Ok(b)) => frames.push(&b),
                    _ => return Err(Failure::Malformed("no endpoint event".into())),
                }
            }
        })
        .await
        .map_err(|_| Failure::Timeout)??;
        let out = Out::Post {
            http: self.http.clone(),
            endpoint: endpoint.clone(),
            headers: server.headers.clone(),
        };
        let conn = Conn::new(out, self.ears(server));
        let reader = conn.clone();
        conn.reading(tokio::spawn(async move {
            loop {
                match frames.next(false) {
                    Ok(Some(f)) => {
                        if let Ok(v) = serde_json::from_str::<Value>(&f.data) {
                            reader.deliver(v);
                        }
                        continue;
                    }
                    Ok(None) => {}
                    Err(_) => break,
                }
                match body.next().await {
                    Some(Ok(b)) => frames.push(&b),
                    _ => break,
                }
            }
            reader.ended();
        }));
        let opened = match handshake(&conn, caps, server.timeout).await {
            Ok(o) => o,
            Err(f) => {
                conn.close();
                return Err(f);
            }
        };
        let id = endpoint.to_string();
        self.sse
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone(), conn);
        Ok(Opened {
            session: Some(id),
            ..opened
        })
    }

    async fn open_stdio(&self, server: &McpServer, replica: usize) -> Result<Opened, Failure> {
        let _one = self.spawning.lock().await;
        let at = (server.name.clone(), replica);
        let live = self
            .stdio
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&at)
            .filter(|c| c.alive())
            .cloned();
        if let Some(c) = live
            && let Some((version, result)) =
                c.opened.lock().unwrap_or_else(|p| p.into_inner()).clone()
        {
            return Ok(Opened {
                session: None,
                version,
                result,
            });
        }
        let conn = self.spawn(server)?;
        // One process answers every session: it is offered all a client may do.
        let caps = json!({"sampling": {}, "elicitation": {}, "roots": {"listChanged": true}});
        let opened = match handshake(&conn, &caps, server.timeout).await {
            Ok(o) => o,
            Err(f) => {
                conn.close();
                return Err(f);
            }
        };
        *conn.opened.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((opened.version.clone(), opened.result.clone()));
        self.stdio
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(at, conn);
        Ok(opened)
    }

    /// Starts the server's process: a writer task on its input, a reader on its output.
    fn spawn(&self, server: &McpServer) -> Result<Arc<Conn>, Failure> {
        let Some(cmd) = &server.stdio else {
            return Err(Failure::Connect("no command".into()));
        };
        let mut child = tokio::process::Command::new(&cmd.command)
            .args(&cmd.args)
            .envs(cmd.env.iter().map(|(k, v)| (k.as_str(), v.expose())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| Failure::Connect(format!("could not start {}: {e}", cmd.command)))?;
        let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(Failure::Connect("no pipes".into()));
        };
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(64);
        tokio::spawn(async move {
            while let Some(line) = rx.recv().await {
                if stdin.write_all(&line).await.is_err() || stdin.flush().await.is_err() {
                    return;
                }
            }
        });
        let conn = Conn::new(Out::Pipe(tx), self.ears(server));
        let reader = conn.clone();
        conn.reading(tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    reader.deliver(v);
                }
            }
            reader.ended();
            // Reaped, so an exited server leaves no zombie.
            let _ = child.wait().await;
        }));
        Ok(conn)
    }
}

/// `initialize` and `notifications/initialized` on a connection.
async fn handshake(
    conn: &Arc<Conn>,
    caps: &Value,
    timeout: std::time::Duration,
) -> Result<Opened, Failure> {
    let mut w = conn
        .request(&super::link::initialize(caps), timeout)
        .await?;
    let answer = tokio::time::timeout(timeout, w.rx.recv())
        .await
        .map_err(|_| Failure::Timeout)?
        .ok_or_else(|| Failure::Connect("the server ended before answering".into()))?;
    let opened = super::link::opened(&answer, None)?;
    conn.send(&super::link::initialized(), timeout).await?;
    Ok(opened)
}
