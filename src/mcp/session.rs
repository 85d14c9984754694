//! MCP sessions: what `Mcp-Session-Id` stands for. A session belongs to the key that opened it
//! and remembers the revision it speaks, the client's capabilities and, per server, the
//! session the gateway holds there (a leg: which replica, its id, its revision). Kept in
//! `[state]`'s Redis when there is one, so any replica continues it; else (or while Redis is
//! down) in this process. Stored under a hash of the id: the id itself is never written.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::AsyncCommands as _;
use ring::rand::SecureRandom as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::state::State;

/// The gateway's session with one server, for one client session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Leg {
    pub replica: usize,
    pub id: Option<String>,
    pub version: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// The gateway key's name.
    pub key: String,
    pub version: String,
    /// The client's capabilities (what may be relayed to it: sampling, elicitation, roots).
    #[serde(default)]
    pub client: Value,
    #[serde(default)]
    pub legs: BTreeMap<String, Leg>,
}

/// A new session id: 32 random bytes, base64url (visible ASCII, as the spec asks).
pub fn new_id() -> String {
    use base64::Engine as _;
    let mut b = [0u8; 32];
    let _ = ring::rand::SystemRandom::new().fill(&mut b);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

/// What the session is stored under.
fn stored_as(id: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, id.as_bytes());
    crate::secret::hex(&d.as_ref()[..16])
}

/// The sessions, wherever they are kept.
pub struct Sessions {
    state: Arc<State>,
    local: Mutex<HashMap<String, (Session, Instant)>>,
}

/// Sessions this process keeps at most (in memory); past it, expired ones are swept first.
const MAX_LOCAL: usize = 100_000;

impl Sessions {
    pub fn new(state: Arc<State>) -> Sessions {
        Sessions {
            state,
            local: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Session, Instant)>> {
        self.local.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The session, its life extended by `ttl`; `None` when unknown or expired.
    pub async fn get(&self, id: &str, ttl: Duration) -> Option<Session> {
        let h = stored_as(id);
        if let State::Redis(r) = &*self.state {
            let key = r.prefixed(&format!("mcp:session:{h}"));
            let secs = ttl.as_secs().max(1);
            let got = r
                .run(|mut c| async move {
                    redis::cmd("GETEX")
                        .arg(key)
                        .arg("EX")
                        .arg(secs)
                        .query_async::<Option<String>>(&mut c)
                        .await
                })
                .await;
            if let Some(v) = got {
                return v.and_then(|t| serde_json::from_str(&t).ok());
            }
        }
        let now = Instant::now();
        let mut map = self.lock();
        match map.get_mut(&h) {
            Some((s, until)) if *until > now => {
                *until = now + ttl;
                Some(s.clone())
            }
            Some(_) => {
                map.remove(&h);
                None
            }
            None => None,
        }
    }

    pub async fn put(&self, id: &str, s: &Session, ttl: Duration) {
        let h = stored_as(id);
        if let State::Redis(r) = &*self.state
            && let Ok(text) = serde_json::to_string(s)
        {
            let key = r.prefixed(&format!("mcp:session:{h}"));
            let secs = ttl.as_secs().max(1);
            let done = r
                .run(|mut c| async move { c.set_ex::<_, _, ()>(key, text, secs).await })
                .await;
            if done.is_some() {
                return;
            }
        }
        let now = Instant::now();
        let mut map = self.lock();
        if map.len() >= MAX_LOCAL {
            map.retain(|_, (_, until)| *until > now);
        }
        if map.len() < MAX_LOCAL || map.contains_key(&h) {
            map.insert(h, (s.clone(), now + ttl));
        }
    }

    pub async fn remove(&self, id: &str) {
        let h = stored_as(id);
        if let State::Redis(r) = &*self.state {
            let key = r.prefixed(&format!("mcp:session:{h}"));
            r.run(|mut c| async move { c.del::<_, ()>(key).await })
                .await;
        }
        self.lock().remove(&h);
    }
}
