//! A message sent to the server that owns it, in the client session's leg there: the leg
//! opened on first use (or again when the server forgot it), replicas whose circuit is open
//! passed over, and a call that failed on a replica's fault tried on the next replica only
//! when it is safe to repeat (lists, reads, tools annotated read-only or idempotent). Every
//! call's outcome feeds the replica's health, as a channel's would.

use std::time::Instant;

use serde_json::{Value, json};

use super::Mcp;
use super::session::{Leg, Session};
use super::upstream::{Failure, Opened, Reply, Target};
use crate::config::Snapshot;
use crate::config::mcp::McpServer;
use crate::health::{Health, Key, Verdict};

/// What one exchange with the servers reads and changes: the session's legs.
pub struct Exchange<'a> {
    pub mcp: &'a Mcp,
    pub health: &'a Health,
    pub snap: &'a Snapshot,
    pub session: &'a mut Session,
    /// A leg was opened or moved: the session must be stored again.
    pub moved: bool,
}

/// A call's attempts: the replicas tried and how each went.
#[derive(Debug, Default, Clone)]
pub struct Tried {
    pub replicas: Vec<(usize, &'static str)>,
}

fn key_of(server: &McpServer, replica: usize) -> Key {
    Key {
        channel: server.replicas[replica].health.clone(),
        model: None,
    }
}

impl Exchange<'_> {
    /// The replicas in the order to try: the leg's first, then the others; those whose
    /// circuit is open last (tried only if nothing else is left).
    fn order(&self, server: &McpServer) -> Vec<usize> {
        let first = self.session.legs.get(&*server.name).map(|l| l.replica);
        let mut all: Vec<usize> = (0..server.replicas.len()).collect();
        all.sort_by_key(|&r| {
            let st = self
                .health
                .standing(&key_of(server, r), &self.snap.health, &server.breaker);
            (st.skip.is_some(), Some(r) != first)
        });
        all
    }

    fn judge(&self, server: &McpServer, replica: usize, started: Instant, r: &Result<(), Failure>) {
        let latency = started.elapsed();
        let v = match r {
            Ok(()) => Verdict::Success { latency },
            Err(f) if f.replica_fault() => Verdict::Failure { latency },
            Err(_) => Verdict::Neutral,
        };
        self.health.record(
            &key_of(server, replica),
            &self.snap.health,
            &server.breaker,
            v,
        );
    }

    /// Opens the session's leg on `replica` (the client's capabilities offered).
    async fn open(&mut self, server: &McpServer, replica: usize) -> Result<Opened, Failure> {
        let started = Instant::now();
        let caps = self.session.client.clone();
        let r = self.mcp.client.open(server, replica, &caps).await;
        self.judge(
            server,
            replica,
            started,
            &r.as_ref().map(|_| ()).map_err(Clone::clone),
        );
        let opened = r?;
        self.session.legs.insert(
            server.name.to_string(),
            Leg {
                replica,
                id: opened.session.clone(),
                version: opened.version.clone(),
            },
        );
        self.moved = true;
        Ok(opened)
    }

    /// Opens a leg on the first replica that answers (opening never acts: always safe).
    pub async fn open_any(&mut self, server: &McpServer) -> Result<Opened, Failure> {
        let mut last = Failure::Connect("no replica".into());
        for r in self.order(server) {
            match self.open(server, r).await {
                Ok(o) => return Ok(o),
                Err(f) => last = f,
            }
        }
        Err(last)
    }

    /// Sends `msg` to `server`; with `failover`, a replica's fault moves it to the next one.
    pub async fn send(
        &mut self,
        server: &McpServer,
        msg: &Value,
        failover: bool,
        tried: &mut Tried,
    ) -> Result<(Reply, usize), Failure> {
        let mut last = Failure::Connect("no replica".into());
        for r in self.order(server) {
            match self.send_to(server, r, msg).await {
                Ok(reply) => {
                    tried.replicas.push((r, "ok"));
                    return Ok((reply, r));
                }
                Err(f) => {
                    tried.replicas.push((r, f.outcome()));
                    let again = failover && f.replica_fault();
                    last = f;
                    if !again {
                        break;
                    }
                }
            }
        }
        Err(last)
    }

    /// One replica: the leg there (opened if it is elsewhere or gone), the message sent.
    async fn send_to(
        &mut self,
        server: &McpServer,
        r: usize,
        msg: &Value,
    ) -> Result<Reply, Failure> {
        for fresh_leg in [false, true] {
            let leg = match self.session.legs.get(&*server.name) {
                Some(l) if l.replica == r && !fresh_leg => l.clone(),
                _ => {
                    let o = self.open(server, r).await?;
                    Leg {
                        replica: r,
                        id: o.session,
                        version: o.version,
                    }
                }
            };
            let t = Target {
                server,
                replica: r,
                session: leg.id.as_deref(),
                version: &leg.version,
            };
            let started = Instant::now();
            let res = self.mcp.client.post(&t, msg).await;
            match res {
                // The server forgot the session: it did not act; open another and send again.
                Err(Failure::SessionGone) if !fresh_leg => continue,
                Ok((reply, _)) => {
                    self.judge(server, r, started, &Ok(()));
                    return Ok(reply);
                }
                Err(f) => {
                    self.judge(server, r, started, &Err(f.clone()));
                    return Err(f);
                }
            }
        }
        Err(Failure::SessionGone)
    }

    /// A notification or a response sent to the session's leg on `server` (if it has one).
    pub async fn tell(&mut self, server: &McpServer, msg: &Value) {
        let Some(leg) = self.session.legs.get(&*server.name).cloned() else {
            return;
        };
        let t = Target {
            server,
            replica: leg.replica,
            session: leg.id.as_deref(),
            version: &leg.version,
        };
        let _ = self.mcp.client.post(&t, msg).await;
    }

    /// The answer to a request sent with [`send`](Self::send), read through a stream.
    pub async fn request(
        &mut self,
        server: &McpServer,
        method: &str,
        params: Option<Value>,
        failover: bool,
    ) -> Result<Value, Failure> {
        let id = super::relay::fresh_id();
        let mut msg = json!({"jsonrpc": "2.0", "id": id, "method": method});
        if let Some(p) = params {
            msg["params"] = p;
        }
        let (reply, _) = self
            .send(server, &msg, failover, &mut Tried::default())
            .await?;
        reply.answer(&id, server.timeout).await
    }

    /// A server's whole list (every page), kept for its `list_ttl_seconds`. A server without
    /// the list (an error answer) has an empty one; a server that cannot be reached gives the
    /// list last read, however old, or the failure.
    pub async fn list(
        &mut self,
        server: &McpServer,
        kind: super::lists::Kind,
    ) -> Result<std::sync::Arc<Vec<Value>>, Failure> {
        if let Some(items) = self.mcp.lists.fresh(&server.name, kind, server.list_ttl) {
            return Ok(items);
        }
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..100 {
            let params = cursor.as_ref().map(|c| json!({"cursor": c}));
            let answer = match self.request(server, kind.method(), params, true).await {
                Ok(a) => a,
                Err(f) => {
                    return self
                        .mcp
                        .lists
                        .fresh(&server.name, kind, std::time::Duration::MAX)
                        .ok_or(f);
                }
            };
            let Some(result) = answer.get("result") else {
                break;
            };
            if let Some(list) = result.get(kind.field()).and_then(Value::as_array) {
                items.extend(list.iter().cloned());
            }
            cursor = result
                .get("nextCursor")
                .and_then(Value::as_str)
                .map(str::to_string);
            if cursor.is_none() {
                break;
            }
        }
        Ok(self.mcp.lists.keep(&server.name, kind, items))
    }
}
