//! The response cache: whole successful answers kept under a key made of who may read them (the
//! scope), the chain of models as resolved, and the canonical request without the fields that
//! cannot change the answer; served again to a later identical request in its own protocol.
//! `key.rs` makes the key and says which requests are never cached; `memory.rs` keeps the
//! entries in this process, bounded in bytes; `replay.rs` streams a kept answer again and
//! `collect.rs` makes a streamed one whole, to be kept.

mod collect;
mod key;
mod memory;
pub mod replay;

pub use collect::Collect;
pub use key::{Bypass, Key, key, refusal};
pub use memory::Memory;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::protocol::ChatResponse;

/// A kept answer.
#[derive(Debug)]
pub struct Entry {
    pub response: ChatResponse,
    pub stored: Instant,
    pub expires: Instant,
    /// What the answer cost when it was made: what a hit saves.
    pub cost_micros: u64,
    /// Its size as the memory bound counts it.
    pub bytes: u64,
    /// Who stored it and for which chain: what `DELETE /admin/cache` filters by.
    pub origin: Origin,
}

/// The gateway key that stored an entry and the chain of models it answered.
#[derive(Debug, Clone, Default)]
pub struct Origin {
    pub key: std::sync::Arc<str>,
    pub models: Vec<std::sync::Arc<str>>,
}

impl Entry {
    /// Seconds since it was stored (the `age` header).
    pub fn age(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.stored).as_secs()
    }
}

/// How an answer is kept: what it cost, for how long, the largest kept, and its origin.
pub struct Keeping {
    pub cost_micros: u64,
    pub ttl: Duration,
    pub max_entry_bytes: u64,
    pub origin: Origin,
}

/// What a lookup found.
pub enum Found {
    Hit(Arc<Entry>),
    Miss,
}

/// The cache of one gateway: its store and what it answered.
pub struct Cache {
    store: Memory,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl Cache {
    pub fn new(max_bytes: u64) -> Cache {
        Cache {
            store: Memory::new(max_bytes),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// The entry under `key`, if it has not expired.
    pub fn lookup(&self, key: &Key, now: Instant) -> Found {
        match self.store.get(key, now) {
            Some(e) => {
                self.hits.fetch_add(1, Ordering::Relaxed);
                Found::Hit(e)
            }
            None => {
                self.misses.fetch_add(1, Ordering::Relaxed);
                Found::Miss
            }
        }
    }

    /// Keeps `response` under `key` for `ttl`, unless it is larger than `max_entry_bytes`.
    /// Returns whether it was kept.
    /// Takes the answer: the caller's copy (or the collected stream) is the one kept.
    pub fn store(&self, key: Key, mut response: ChatResponse, keep: Keeping, now: Instant) -> bool {
        let Keeping {
            cost_micros,
            ttl,
            max_entry_bytes,
            origin,
        } = keep;
        let bytes = memory::size_of(&response);
        if bytes > max_entry_bytes {
            return false;
        }
        // The canonical answer is rendered for every client: the upstream's own bytes are not
        // kept (nor counted).
        response.raw = None;
        response.as_sent = None;
        self.store.insert(
            key,
            Arc::new(Entry {
                response,
                stored: now,
                expires: now + ttl,
                cost_micros,
                bytes,
                origin,
            }),
        );
        true
    }

    /// Forgets the entries `key` stored (by its name) or that answered `model`, or every one
    /// when neither is given; returns how many went.
    pub fn clear_matching(&self, key: Option<&str>, model: Option<&str>) -> u64 {
        let before = self.store.entries();
        self.store.retain(|e| {
            let by_key = key.is_some_and(|k| *e.origin.key == *k);
            let by_model = model.is_some_and(|m| e.origin.models.iter().any(|x| **x == *m));
            let all = key.is_none() && model.is_none();
            !(all || by_key || by_model)
        });
        before.saturating_sub(self.store.entries()) as u64
    }

    /// `{"entries", "bytes", "hits", "misses", "hit_rate"}`.
    pub fn stats(&self) -> serde_json::Value {
        let (hits, misses) = (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        );
        let lookups = hits + misses;
        serde_json::json!({
            "entries": self.store.entries(),
            "bytes": self.store.bytes(),
            "hits": hits,
            "misses": misses,
            "hit_rate": if lookups == 0 { serde_json::Value::Null } else { (hits as f64 / lookups as f64).into() },
        })
    }
}

#[cfg(test)]
mod tests;
