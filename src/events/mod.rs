//! The gateway's routing events as one typed stream: failovers from the attempt loop,
//! circuits and credentials from health, budgets from the meters, admin changes from the admin
//! API. Emitting never blocks and never waits: an event goes into a bounded queue or, when the
//! queue is full, is counted as dropped (`/admin/health` and `/readyz` report the count).
//! What reads the queue (folding, the store's event table and outbox, webhooks) is `webhook`.

pub mod fold;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

/// Every event type, with its stable name (the payload's `type`).
pub const TYPES: [&str; 14] = [
    "model.failover",
    "circuit.opened",
    "circuit.closed",
    "credential.disabled",
    "credential.cooling",
    "budget.threshold",
    "budget.exhausted",
    "key.created",
    "key.revoked",
    "channel.changed",
    "webhook.disabled",
    "webhook.test",
    "cache.cleared",
    "mcp.refused",
];

/// One event: its id (a Standard Webhooks `webhook-id`, kept across redeliveries), its type,
/// when it happened (ms since the epoch) and its payload's `data`.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: String,
    pub kind: &'static str,
    pub at_ms: i64,
    pub data: Value,
    /// For an event folded into a later summary: that summary's id (it is listed, not sent).
    pub folded_into: Option<String>,
}

impl Event {
    pub fn new(kind: &'static str, data: Value) -> Event {
        Event::at(kind, data, crate::clock::unix_ms())
    }

    pub fn at(kind: &'static str, data: Value, at_ms: i64) -> Event {
        Event {
            id: new_id(at_ms),
            kind,
            at_ms,
            data,
            folded_into: None,
        }
    }

    /// The payload as delivered: `{"type", "timestamp", "data"}` (Standard Webhooks).
    pub fn payload(&self) -> Value {
        json!({"type": self.kind, "timestamp": rfc3339(self.at_ms), "data": self.data})
    }
}

/// `msg_` and 24 characters that sort by time: the ms as hex, then randomness.
pub fn new_id(at_ms: i64) -> String {
    let rand: String = std::iter::repeat_with(fastrand::alphanumeric)
        .take(12)
        .collect();
    format!("msg_{:012x}{rand}", at_ms.max(0))
}

/// Whether `pattern` (`model.failover`, `circuit.*`, `*`) takes events of `kind`.
pub fn matches(pattern: &str, kind: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some("") => true,
        Some(prefix) => kind.starts_with(prefix),
        None => pattern == kind,
    }
}

/// Whether `pattern` names at least one event type.
pub fn valid_pattern(pattern: &str) -> bool {
    TYPES.iter().any(|t| matches(pattern, t))
}

/// `pattern`, or why it is refused (what a webhook's `events` and `/admin/events?type` say).
pub fn check_pattern(pattern: &str) -> Result<(), String> {
    if valid_pattern(pattern) {
        return Ok(());
    }
    Err(format!(
        "{pattern:?} names no event type (types: {})",
        TYPES.join(", ")
    ))
}

/// `2026-12-02T17:27:03.123Z`.
pub fn rfc3339(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

struct Inner {
    tx: tokio::sync::mpsc::Sender<Event>,
    dropped: AtomicU64,
}

/// Where events are emitted: a cheap handle, cloned into health, the meters and each request.
/// A default emitter has no queue: it discards (a gateway, or a test, without events).
#[derive(Clone, Default)]
pub struct Emitter(Option<Arc<Inner>>);

impl std::fmt::Debug for Emitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emitter")
            .field("dropped", &self.dropped())
            .finish()
    }
}

impl Emitter {
    /// An emitter and the queue's other end, holding at most `capacity` events.
    pub fn bounded(capacity: usize) -> (Emitter, tokio::sync::mpsc::Receiver<Event>) {
        let (tx, rx) = tokio::sync::mpsc::channel(capacity.max(1));
        let inner = Inner {
            tx,
            dropped: AtomicU64::new(0),
        };
        (Emitter(Some(Arc::new(inner))), rx)
    }

    /// Queues an event of `kind` with `data`, or counts it dropped.
    pub fn emit(&self, kind: &'static str, data: Value) {
        let Some(inner) = &self.0 else {
            return;
        };
        if inner.tx.try_send(Event::new(kind, data)).is_err() {
            let n = inner.dropped.fetch_add(1, Ordering::Relaxed);
            if n.is_power_of_two() {
                tracing::warn!(dropped = n + 1, "the event queue is full: events dropped");
            }
        }
    }

    /// Whether anything reads the events (a default emitter discards).
    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// Events dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.0
            .as_ref()
            .map_or(0, |i| i.dropped.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_take_their_types_and_ids_sort_by_time() {
        assert!(matches("circuit.*", "circuit.opened"));
        assert!(!matches("circuit.*", "credential.cooling"));
        assert!(matches("*", "budget.exhausted"));
        assert!(matches("model.failover", "model.failover"));
        assert!(!matches("model.failover", "model.failovers"));
        assert!(valid_pattern("budget.*") && !valid_pattern("budgets.*"));
        let (a, b) = (new_id(1000), new_id(2000));
        assert!(a < b && a.len() == 28, "{a} {b}");
        assert_eq!(rfc3339(1_780_000_000_123), "2026-05-28T20:26:40.123Z");
    }

    #[tokio::test]
    async fn a_full_queue_drops_and_counts_never_waits() {
        let (em, mut rx) = Emitter::bounded(2);
        for _ in 0..5 {
            em.emit("model.failover", json!({}));
        }
        assert_eq!(em.dropped(), 3);
        assert_eq!(rx.recv().await.map(|e| e.kind), Some("model.failover"));
        // A default emitter discards: nothing queued, nothing counted as dropped.
        let off = Emitter::default();
        off.emit("circuit.opened", json!({}));
        assert!(!off.is_on() && off.dropped() == 0 && em.is_on());
    }
}
