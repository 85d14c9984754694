//! Shared runtime state: session bindings and the consecutive failures of a bound channel.
//! One trait, [`StateStore`], with an in-memory implementation (the default: one process) and,
//! with `[state] url`, a Redis one that several replicas share.

mod busy;
mod memory;
pub mod redis;

pub use memory::Memory;
pub use redis::{Redis, RedisConfigError};

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// What state a session's binding lives in. Keys are already hashed: no raw session id is
/// stored or logged.
pub trait StateStore: Send + Sync {
    /// The channel the session is bound to, if the binding has not expired.
    fn binding(&self, session: &str) -> impl Future<Output = Option<Arc<str>>> + Send;
    /// Binds the session to `channel` (refreshing the TTL, clearing its failures) only if it is
    /// still bound to `expected` (`None`: not bound): a request that read an older binding never
    /// overwrites a newer one. Returns whether it did.
    fn bind(
        &self,
        session: &str,
        expected: Option<&str>,
        channel: &str,
        ttl: Duration,
    ) -> impl Future<Output = bool> + Send;
    /// Forgets the session's binding and failures.
    fn unbind(&self, session: &str) -> impl Future<Output = ()> + Send;
    /// Counts one more consecutive failure of the bound channel; returns the count.
    fn bound_failed(&self, session: &str, ttl: Duration) -> impl Future<Output = u32> + Send;
    /// The instance a semantic router chose on the session's first routed turn.
    fn instance(
        &self,
        session: &str,
        router: &str,
    ) -> impl Future<Output = Option<Arc<str>>> + Send;
    /// Records (refreshing its TTL) the instance a router chose for the session.
    fn keep_instance(
        &self,
        session: &str,
        router: &str,
        instance: &str,
        ttl: Duration,
    ) -> impl Future<Output = ()> + Send;
    /// A kept response (`id` already scoped to the gateway key and hashed).
    fn response(&self, id: &str) -> impl Future<Output = Option<StoredResponse>> + Send;
    fn keep_response(
        &self,
        id: &str,
        stored: &StoredResponse,
        ttl: Duration,
    ) -> impl Future<Output = ()> + Send;
    /// Forgets a kept response (the client deleted it).
    fn forget_response(&self, id: &str) -> impl Future<Output = ()> + Send;
}

/// A response served to a Responses client, kept so a request can continue it
/// (`previous_response_id`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StoredResponse {
    /// The channel that produced it: a continuation goes there first.
    pub channel: Arc<str>,
    /// That channel speaks the Responses API and keeps the conversation itself: only it can
    /// continue the response.
    #[serde(default)]
    pub upstream_keeps: bool,
    /// The conversation up to and including it, as Responses input items (JSON text), when the
    /// gateway may keep it (the client did not say `store: false`, it was translated, and it is
    /// within the size cap). Without them only that channel can continue it.
    pub items: Option<Arc<str>>,
    /// The Response object as it was answered (JSON text), for `GET /v1/responses/{id}`, kept
    /// with the items.
    #[serde(default)]
    pub response: Option<Arc<str>>,
}

impl StoredResponse {
    /// Bytes of what it keeps of the conversation.
    pub fn size(&self) -> usize {
        self.items.as_ref().map_or(0, |i| i.len()) + self.response.as_ref().map_or(0, |r| r.len())
    }
}

/// A change one replica shares with the others, as it travels between them: a circuit
/// opening, or a channel's or credential's cooldown, by name (never a key).
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub kind: ChangeKind,
    pub channel: Arc<str>,
    /// The credential's label, for a credential's cooldown.
    pub label: Option<Arc<str>>,
    /// For per-model circuits and cooldowns.
    pub model: Option<Arc<str>>,
    /// How long it holds (from now).
    pub cooldown: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    CircuitOpened,
    ChannelCooled,
    CredentialCooled,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::CircuitOpened => "circuit_opened",
            ChangeKind::ChannelCooled => "channel_cooled",
            ChangeKind::CredentialCooled => "credential_cooled",
        }
    }
}

/// The store the gateway runs on.
pub enum State {
    Memory(Memory),
    Redis(Arc<Redis>),
}

impl State {
    /// Takes one request from a credential's `rpm` bucket shared by every replica: `Err` with
    /// the time until a token is back when it is empty. In memory (or while Redis is down) the
    /// replica's own bucket, already checked, is the only one.
    pub async fn take_rate(&self, channel: &str, label: &str, rpm: u32) -> Result<(), Duration> {
        match self {
            State::Memory(_) => Ok(()),
            State::Redis(r) => r.take_rate(channel, label, rpm).await.unwrap_or(Ok(())),
        }
    }

    /// For `/readyz` and the health view: the kind of store, and whether Redis answers.
    pub fn describe(&self) -> serde_json::Value {
        match self {
            State::Memory(_) => serde_json::json!({"kind": "memory"}),
            State::Redis(r) => serde_json::json!({
                "kind": "redis",
                "connected": r.connected(),
                "events_subscribed": r.subscribed(),
            }),
        }
    }

    /// Session bindings now (for the metrics); `None` while Redis is unreachable.
    pub async fn bindings(&self) -> Option<u64> {
        match self {
            State::Memory(m) => Some(m.bindings()),
            State::Redis(r) => r.count_bindings().await,
        }
    }

    /// Whether shared state answers (always, in memory).
    pub fn connected(&self) -> bool {
        match self {
            State::Memory(_) => true,
            State::Redis(r) => r.connected(),
        }
    }

    pub async fn binding(&self, session: &str) -> Option<Arc<str>> {
        match self {
            State::Memory(m) => m.binding(session).await,
            State::Redis(r) => r.binding(session).await,
        }
    }

    pub async fn bind(
        &self,
        session: &str,
        expected: Option<&str>,
        channel: &str,
        ttl: Duration,
    ) -> bool {
        match self {
            State::Memory(m) => m.bind(session, expected, channel, ttl).await,
            State::Redis(r) => r.bind(session, expected, channel, ttl).await,
        }
    }

    pub async fn unbind(&self, session: &str) {
        match self {
            State::Memory(m) => m.unbind(session).await,
            State::Redis(r) => r.unbind(session).await,
        }
    }

    pub async fn instance(&self, session: &str, router: &str) -> Option<Arc<str>> {
        match self {
            State::Memory(m) => m.instance(session, router).await,
            State::Redis(r) => r.instance(session, router).await,
        }
    }

    pub async fn keep_instance(&self, session: &str, router: &str, instance: &str, ttl: Duration) {
        match self {
            State::Memory(m) => m.keep_instance(session, router, instance, ttl).await,
            State::Redis(r) => r.keep_instance(session, router, instance, ttl).await,
        }
    }

    pub async fn response(&self, id: &str) -> Option<StoredResponse> {
        match self {
            State::Memory(m) => m.response(id).await,
            State::Redis(r) => r.response(id).await,
        }
    }

    pub async fn keep_response(&self, id: &str, stored: &StoredResponse, ttl: Duration) {
        match self {
            State::Memory(m) => m.keep_response(id, stored, ttl).await,
            State::Redis(r) => r.keep_response(id, stored, ttl).await,
        }
    }

    pub async fn forget_response(&self, id: &str) {
        match self {
            State::Memory(m) => m.forget_response(id).await,
            State::Redis(r) => r.forget_response(id).await,
        }
    }

    pub async fn bound_failed(&self, session: &str, ttl: Duration) -> u32 {
        match self {
            State::Memory(m) => m.bound_failed(session, ttl).await,
            State::Redis(r) => r.bound_failed(session, ttl).await,
        }
    }
}
