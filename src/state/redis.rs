//! Shared state in Redis, for several replicas behind one load balancer: session bindings and
//! their failure counters (single atomic commands and MULTI pipelines), credentials' `rpm`
//! buckets (a Lua script on Redis's clock), and circuit openings,
//! channel and credential cooldowns published to every replica. Every operation is async on a pooled connection manager, bounded
//! by [`OP_TIMEOUT`]; when Redis is unreachable the replica serves on its own in-memory state,
//! says so, and goes back to Redis when it answers again.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use futures_util::StreamExt;
use redis::AsyncCommands;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use serde_json::{Value, json};

use super::{Change, ChangeKind, Memory, StateStore, StoredResponse};
use crate::clock::Clock;

/// The longest a request waits on Redis before it goes on with local state.
const OP_TIMEOUT: Duration = Duration::from_millis(250);

/// Bindings counted for the metrics, at most (past it the gauge says "at least").
const MAX_COUNTED: u64 = 1_000_000;
/// How often the supervisor checks Redis (and retries it while it is down), and publishes the
/// heartbeat every subscriber hears.
const CHECK_EVERY: Duration = Duration::from_millis(500);
/// A subscription that heard nothing, not even a heartbeat, for this long is presumed dead
/// (a half-open connection) and made again.
const SILENT_AFTER: Duration = Duration::from_secs(3);
/// The longest cooldown taken from another replica's message.
const MAX_REMOTE_COOLDOWN: Duration = Duration::from_secs(24 * 3600);

#[derive(Debug, thiserror::Error)]
#[error("state.url: {0}")]
pub struct RedisConfigError(String);

pub struct Redis {
    client: redis::Client,
    conn: ArcSwapOption<ConnectionManager>,
    up: AtomicBool,
    /// The events subscription is live (and heard something within [`SILENT_AFTER`]).
    subscribed: AtomicBool,
    prefix: Arc<str>,
    /// Serves while Redis cannot.
    local: Memory,
    /// This process's id on the events channel: its own messages are not applied twice.
    replica: String,
}

impl Redis {
    /// Parses the URL; connecting is the supervisor's job, so a gateway starts (on local
    /// state) even while Redis is down.
    pub fn new(url: &str, prefix: &str, clock: Arc<dyn Clock>) -> Result<Redis, RedisConfigError> {
        let client = redis::Client::open(url).map_err(|e| RedisConfigError(e.to_string()))?;
        Ok(Redis {
            client,
            conn: ArcSwapOption::empty(),
            up: AtomicBool::new(false),
            subscribed: AtomicBool::new(false),
            prefix: prefix.into(),
            local: Memory::new(clock),
            replica: format!("{:016x}", fastrand::u64(..)),
        })
    }

    pub fn connected(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// This process's id among the replicas.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    pub fn subscribed(&self) -> bool {
        self.subscribed.load(Ordering::Relaxed)
    }

    /// Session bindings under this prefix (every replica's), counted by SCAN a page at a time,
    /// at most [`MAX_COUNTED`]; `None` while Redis is down. For the metrics, at a scrape.
    pub async fn count_bindings(&self) -> Option<u64> {
        let pattern = format!("{}:bind:*", self.prefix);
        let (mut cursor, mut n) = (0u64, 0u64);
        loop {
            let p = pattern.clone();
            let (next, keys): (u64, Vec<String>) = self
                .run(|mut c| async move {
                    redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(p)
                        .arg("COUNT")
                        .arg(1000)
                        .query_async(&mut c)
                        .await
                })
                .await?;
            n += keys.len() as u64;
            if next == 0 || n >= MAX_COUNTED {
                return Some(n);
            }
            cursor = next;
        }
    }

    fn key(&self, kind: &str, session: &str) -> String {
        format!("{}:{kind}:{session}", self.prefix)
    }

    fn events(&self) -> String {
        format!("{}:events", self.prefix)
    }

    /// Runs one operation on Redis, or says it could not (the caller uses local state).
    pub(crate) async fn run<T, F, Fut>(&self, op: F) -> Option<T>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        if !self.connected() {
            return None;
        }
        let conn = self.conn.load_full()?;
        match tokio::time::timeout(OP_TIMEOUT, op((*conn).clone())).await {
            Ok(Ok(v)) => Some(v),
            Ok(Err(e)) => {
                self.lost(&e.to_string());
                None
            }
            Err(_) => {
                self.lost("timed out");
                None
            }
        }
    }

    fn lost(&self, why: &str) {
        if self.up.swap(false, Ordering::Relaxed) {
            tracing::error!(
                error = why,
                "Redis unavailable: serving on this replica's own state until it returns"
            );
        }
    }

    /// Connects, and keeps checking: marks Redis down when it stops answering and up again
    /// when it does. Runs for the life of the gateway.
    pub async fn supervise(self: Arc<Self>) {
        loop {
            let ok = match self.conn.load_full() {
                Some(c) => {
                    let mut c = (*c).clone();
                    matches!(
                        tokio::time::timeout(
                            OP_TIMEOUT * 2,
                            redis::cmd("PING").query_async::<String>(&mut c)
                        )
                        .await,
                        Ok(Ok(_))
                    )
                }
                None => {
                    let cfg = ConnectionManagerConfig::new()
                        .set_connection_timeout(Some(OP_TIMEOUT * 2))
                        .set_response_timeout(Some(OP_TIMEOUT))
                        .set_number_of_retries(1)
                        .set_max_delay(CHECK_EVERY);
                    match tokio::time::timeout(
                        OP_TIMEOUT * 4,
                        ConnectionManager::new_with_config(self.client.clone(), cfg),
                    )
                    .await
                    {
                        Ok(Ok(c)) => {
                            self.conn.store(Some(Arc::new(c)));
                            true
                        }
                        _ => false,
                    }
                }
            };
            if ok {
                if !self.up.swap(true, Ordering::Relaxed) {
                    tracing::info!("Redis connected: state is shared with the other replicas");
                }
                // The heartbeat that tells every subscriber (this one too) its subscription lives.
                let (channel, msg) = (self.events(), json!({"kind": "ping"}).to_string());
                let _ = self
                    .run(|mut c| async move { c.publish::<_, _, i64>(channel, msg).await })
                    .await;
            } else {
                self.lost("no answer to PING");
            }
            tokio::time::sleep(CHECK_EVERY).await;
        }
    }

    /// Publishes one of this replica's changes (a circuit opening, a cooldown) to the others.
    pub async fn share(&self, change: &Change) {
        let kind = change.kind.as_str();
        let msg = json!({
            "replica": self.replica,
            "kind": kind,
            "channel": &*change.channel,
            "label": change.label.as_deref(),
            "model": change.model.as_deref(),
            "cooldown_ms": change.cooldown.as_millis() as u64,
        })
        .to_string();
        let channel = self.events();
        // Kept as a key for as long as it holds, so a replica that (re)subscribes later
        // still honours it; published for those listening now.
        let kept = format!(
            "{}:shared:{kind}:{}:{}:{}",
            self.prefix,
            change.channel,
            change.label.as_deref().unwrap_or(""),
            change.model.as_deref().unwrap_or("")
        );
        let ms = (change.cooldown.as_millis() as u64).max(1);
        if self
            .run(|mut c| async move {
                redis::pipe()
                    .atomic()
                    .set(&kept, &msg)
                    .arg("PX")
                    .arg(ms)
                    .ignore()
                    .publish(channel, &msg)
                    .ignore()
                    .query_async::<()>(&mut c)
                    .await
            })
            .await
            .is_none()
        {
            tracing::warn!(
                channel = &*change.channel,
                kind,
                "change not shared: Redis is unavailable"
            );
        }
    }

    /// Hands the other replicas' changes to `apply` (first those shared before this
    /// subscription that still hold, with the time they have left), resubscribing whenever the
    /// connection drops. Runs for the life of the gateway.
    pub async fn subscribe(self: Arc<Self>, apply: impl Fn(Change) + Send + Sync) {
        loop {
            // After the supervisor has a connection: loading what is shared needs it.
            if !self.connected() {
                tokio::time::sleep(CHECK_EVERY / 5).await;
                continue;
            }
            let pubsub = tokio::time::timeout(OP_TIMEOUT * 4, self.client.get_async_pubsub()).await;
            if let Ok(Ok(mut ps)) = pubsub
                && matches!(
                    tokio::time::timeout(OP_TIMEOUT * 4, ps.subscribe(self.events())).await,
                    Ok(Ok(()))
                )
            {
                self.load_shared(&apply).await;
                self.subscribed.store(true, Ordering::Relaxed);
                let mut stream = ps.on_message();
                while let Ok(Some(msg)) = tokio::time::timeout(SILENT_AFTER, stream.next()).await {
                    let Ok(text) = msg.get_payload::<String>() else {
                        continue;
                    };
                    if let Some(change) = self.read(&text, None) {
                        apply(change);
                    }
                }
                self.subscribed.store(false, Ordering::Relaxed);
                tracing::warn!("Redis events subscription lost: resubscribing");
            }
            tokio::time::sleep(CHECK_EVERY).await;
        }
    }

    /// Every shared change still in force, with the time it has left.
    async fn load_shared(&self, apply: &(impl Fn(Change) + Send + Sync)) {
        let pattern = format!("{}:shared:*", self.prefix);
        let Some(keys) = self
            .run(|mut c| async move {
                let mut it = c.scan_match::<_, String>(pattern).await?;
                let mut keys = Vec::new();
                while let Some(k) = it.next_item().await {
                    keys.push(k?);
                    if keys.len() >= 10_000 {
                        break;
                    }
                }
                Ok(keys)
            })
            .await
        else {
            return;
        };
        for k in keys {
            let key = k.clone();
            let got = self
                .run(|mut c| async move {
                    redis::pipe()
                        .get(&key)
                        .pttl(&key)
                        .query_async::<(Option<String>, i64)>(&mut c)
                        .await
                })
                .await;
            if let Some((Some(text), left)) = got
                && left > 0
                && let Some(change) = self.read(&text, Some(Duration::from_millis(left as u64)))
            {
                apply(change);
            }
        }
    }

    /// One shared change as another replica sent it (`left`: the time it still holds, for one
    /// loaded from its key; else its full cooldown). This replica's own messages and
    /// heartbeats are nothing.
    fn read(&self, text: &str, left: Option<Duration>) -> Option<Change> {
        let v = serde_json::from_str::<Value>(text).ok()?;
        if v["replica"] == *self.replica {
            return None;
        }
        let kind = match v["kind"].as_str()? {
            "circuit_opened" => ChangeKind::CircuitOpened,
            "channel_cooled" => ChangeKind::ChannelCooled,
            "credential_cooled" => ChangeKind::CredentialCooled,
            _ => return None,
        };
        let ms = v["cooldown_ms"].as_u64()?;
        Some(Change {
            kind,
            channel: v["channel"].as_str()?.into(),
            label: v["label"].as_str().map(Into::into),
            model: v["model"].as_str().map(Into::into),
            cooldown: left
                .unwrap_or(Duration::from_millis(ms))
                .min(MAX_REMOTE_COOLDOWN),
        })
    }
}

/// Binds KEYS[1] to ARGV[2] for ARGV[3] seconds (and clears the failure count KEYS[2]) only if
/// it is bound to ARGV[1] now ('' = not bound): one atomic compare-and-set.
const BIND_IF: &str = r#"
local cur = redis.call('GET', KEYS[1])
if (cur == false and ARGV[1] == '') or cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'EX', tonumber(ARGV[3]))
  redis.call('DEL', KEYS[2])
  return 1
end
return 0
"#;

/// One token from a shared per-minute bucket: refilled continuously at `rpm`/60 s, capped at
/// `rpm`, on Redis's own clock (replicas' clocks never matter). Returns {taken, ms to wait}.
const TAKE_TOKEN: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cap = tonumber(ARGV[1])
local rate = cap / 60000
local b = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(b[1]) or cap
local ts = tonumber(b[2]) or now
tokens = math.min(cap, tokens + math.max(0, now - ts) * rate)
local taken, wait = 0, 0
if tokens >= 1 then
  tokens = tokens - 1
  taken = 1
else
  wait = math.ceil((1 - tokens) / rate)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', now)
redis.call('PEXPIRE', KEYS[1], 120000)
return {taken, wait}
"#;

impl Redis {
    /// Runs `script` with `keys` and `args` (`None`: Redis could not say). Budgets' scripts
    /// run here, on the same connection and timeout as every other operation.
    pub async fn script<T: redis::FromRedisValue + Send>(
        &self,
        script: &redis::Script,
        keys: &[String],
        args: &[String],
    ) -> Option<T> {
        self.run(|mut c| async move {
            let mut inv = script.prepare_invoke();
            for k in keys {
                inv.key(k);
            }
            for a in args {
                inv.arg(a);
            }
            inv.invoke_async(&mut c).await
        })
        .await
    }

    /// Keys of this gateway's, under its prefix: `{prefix}:{rest}`.
    pub fn prefixed(&self, rest: &str) -> String {
        format!("{}:{rest}", self.prefix)
    }

    /// Takes one request from a credential's shared `rpm` bucket. `None`: Redis could not say
    /// (the replica's own bucket, already passed, decides).
    pub async fn take_rate(
        &self,
        channel: &str,
        label: &str,
        rpm: u32,
    ) -> Option<Result<(), Duration>> {
        let key = format!("{}:rpm:{channel}:{label}", self.prefix);
        let (taken, wait): (i64, i64) = self
            .run(|mut c| async move {
                redis::Script::new(TAKE_TOKEN)
                    .key(key)
                    .arg(rpm)
                    .invoke_async(&mut c)
                    .await
            })
            .await?;
        Some(if taken == 1 {
            Ok(())
        } else {
            Err(Duration::from_millis(wait.max(1) as u64))
        })
    }
}

impl StateStore for Redis {
    async fn binding(&self, session: &str) -> Option<Arc<str>> {
        let key = self.key("bind", session);
        match self
            .run(|mut c| async move { c.get::<_, Option<String>>(key).await })
            .await
        {
            Some(v) => v.map(Into::into),
            None => self.local.binding(session).await,
        }
    }

    async fn bind(
        &self,
        session: &str,
        expected: Option<&str>,
        channel: &str,
        ttl: Duration,
    ) -> bool {
        let (bind, fail) = (self.key("bind", session), self.key("fail", session));
        let secs = ttl.as_secs().max(1);
        let (ch, exp) = (channel.to_string(), expected.unwrap_or("").to_string());
        let done = self
            .run(|mut c| async move {
                redis::Script::new(BIND_IF)
                    .key(bind)
                    .key(fail)
                    .arg(exp)
                    .arg(ch)
                    .arg(secs)
                    .invoke_async::<i64>(&mut c)
                    .await
            })
            .await;
        match done {
            Some(1) => {
                // Mirrored, so that an outage keeps what this replica knew.
                self.local.set(session, channel, ttl);
                true
            }
            Some(_) => false,
            None => self.local.bind(session, expected, channel, ttl).await,
        }
    }

    async fn unbind(&self, session: &str) {
        let keys = [self.key("bind", session), self.key("fail", session)];
        let _ = self
            .run(|mut c| async move { c.del::<_, ()>(&keys).await })
            .await;
        self.local.unbind(session).await;
    }

    async fn bound_failed(&self, session: &str, ttl: Duration) -> u32 {
        let fail = self.key("fail", session);
        let secs = ttl.as_secs().max(1) as i64;
        let counted = self
            .run(|mut c| async move {
                redis::pipe()
                    .atomic()
                    .incr(&fail, 1)
                    .expire(&fail, secs)
                    .ignore()
                    .query_async::<(u32,)>(&mut c)
                    .await
            })
            .await;
        let local = self.local.bound_failed(session, ttl).await;
        counted.map_or(local, |(n,)| n)
    }

    async fn instance(&self, session: &str, router: &str) -> Option<Arc<str>> {
        let key = self.key("route", &format!("{session}:{router}"));
        match self
            .run(|mut c| async move { c.get::<_, Option<String>>(key).await })
            .await
        {
            Some(v) => v.map(Into::into),
            None => self.local.instance(session, router).await,
        }
    }

    async fn keep_instance(&self, session: &str, router: &str, instance: &str, ttl: Duration) {
        let key = self.key("route", &format!("{session}:{router}"));
        let (inst, secs) = (instance.to_string(), ttl.as_secs().max(1));
        let _ = self
            .run(|mut c| async move { c.set_ex::<_, _, ()>(key, inst, secs).await })
            .await;
        self.local
            .keep_instance(session, router, instance, ttl)
            .await;
    }

    async fn response(&self, id: &str) -> Option<StoredResponse> {
        let key = self.key("resp", id);
        match self
            .run(|mut c| async move { c.get::<_, Option<String>>(key).await })
            .await
        {
            Some(v) => v.and_then(|t| serde_json::from_str(&t).ok()),
            None => self.local.response(id).await,
        }
    }

    async fn keep_response(&self, id: &str, stored: &StoredResponse, ttl: Duration) {
        let key = self.key("resp", id);
        let Ok(text) = serde_json::to_string(stored) else {
            return;
        };
        let secs = ttl.as_secs().max(1);
        let done = self
            .run(|mut c| async move { c.set_ex::<_, _, ()>(key, text, secs).await })
            .await;
        // Kept here only while Redis cannot take it: items can be large.
        if done.is_none() {
            self.local.keep_response(id, stored, ttl).await;
        }
    }

    async fn forget_response(&self, id: &str) {
        let key = self.key("resp", id);
        self.run(|mut c| async move { c.del::<_, ()>(key).await })
            .await;
        // It may have been kept here during an outage.
        self.local.forget_response(id).await;
    }
}
