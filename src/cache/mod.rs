//! The response cache: whole successful answers kept under a key made of who may read them (the
//! scope), the chain of models as resolved, and the canonical request without the fields that
//! cannot change the answer; served again to a later identical request in its own protocol.
//! `key.rs` makes the key and says which requests are never cached; `memory.rs` keeps the
//! entries in this process, bounded in bytes, and `redis.rs` in `[state]`'s Redis for every
//! replica (`wire.rs` is their compressed form there); `semantic.rs` finds a kept question like
//! a new one and `guard.rs` says whether they ask the same; `replay.rs` streams a kept answer
//! again and `collect.rs` makes a streamed one whole, to be kept.

mod collect;
pub mod eval;
pub mod guard;
mod key;
mod memory;
mod redis;
pub mod replay;
pub mod semantic;
mod wire;

pub use collect::Collect;
pub use key::{Bypass, Key, bucket, key, refusal};
pub use memory::Memory;
pub use semantic::Question;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use crate::config::cache::{CacheBackend, CacheSettings};
use crate::protocol::ChatResponse;

/// A kept answer.
#[derive(Debug)]
pub struct Entry {
    pub response: ChatResponse,
    /// When it was stored (wall clock: another replica may read it).
    pub stored: SystemTime,
    /// When this process stops serving it (Redis's own TTL bounds a shared entry).
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
    pub key: Arc<str>,
    pub models: Vec<Arc<str>>,
}

impl Entry {
    /// Seconds since it was stored (the `age` header).
    pub fn age(&self, now: SystemTime) -> u64 {
        now.duration_since(self.stored).map_or(0, |d| d.as_secs())
    }
}

/// How an answer is kept: what it cost, for how long, the largest kept, and its origin.
pub struct Keeping {
    pub cost_micros: u64,
    pub ttl: Duration,
    pub max_entry_bytes: u64,
    pub origin: Origin,
}

/// What a lookup found, for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Hit,
    SemanticHit,
    Miss,
}

/// Where entries live: this process, or `[state]`'s Redis shared by every replica.
enum Backend {
    Memory(Memory),
    Redis(redis::Shared),
}

/// The cache of one gateway: its entries, the questions' vectors (semantic mode), and what it
/// answered.
pub struct Cache {
    backend: Backend,
    index: semantic::Index,
    hits: AtomicU64,
    semantic_hits: AtomicU64,
    misses: AtomicU64,
}

impl Cache {
    /// A cache as `s` says, its entries in `state`'s Redis when `backend = "redis"` (and
    /// `[state]` is Redis: the config refuses it otherwise).
    pub fn new(s: &CacheSettings, state: &crate::state::State) -> Cache {
        match (s.backend, state) {
            (CacheBackend::Redis, crate::state::State::Redis(r)) => {
                Cache::with(Backend::Redis(redis::Shared::new(r.clone())), s.max_bytes)
            }
            _ => Cache::in_memory(s.max_bytes),
        }
    }

    /// A cache in this process bounded by `max_bytes` (also tests, benchmarks).
    pub fn in_memory(max_bytes: u64) -> Cache {
        Cache::with(Backend::Memory(Memory::new(max_bytes)), max_bytes)
    }

    fn with(backend: Backend, max_bytes: u64) -> Cache {
        Cache {
            backend,
            index: semantic::Index::new(max_bytes),
            hits: AtomicU64::new(0),
            semantic_hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// The entry under `key`, if it has not expired. Redis unreachable or slow: `None` within
    /// its 250 ms bound (a miss, never a refusal).
    pub async fn get(&self, key: &Key) -> Option<Arc<Entry>> {
        match &self.backend {
            Backend::Memory(m) => m.get(key, Instant::now()),
            Backend::Redis(r) => r.get(key).await,
        }
    }

    /// The kept question most like `q` that the guards accept, and its cosine.
    pub async fn similar(&self, q: &Question, threshold: f32) -> Option<(Key, f32)> {
        match &self.backend {
            Backend::Memory(_) => self.index.best(q, threshold, Instant::now()),
            Backend::Redis(r) => r.similar(q, threshold).await,
        }
    }

    /// Counts what a request's lookup found.
    pub fn count(&self, o: Outcome) {
        let c = match o {
            Outcome::Hit => &self.hits,
            Outcome::SemanticHit => &self.semantic_hits,
            Outcome::Miss => &self.misses,
        };
        c.fetch_add(1, Ordering::Relaxed);
        if let Backend::Redis(r) = &self.backend {
            r.count(o);
        }
    }

    /// Keeps `response` under `key` for its TTL (and its question's vector, in semantic mode),
    /// unless it is larger than `max_entry_bytes`. Returns whether it was kept. A shared entry
    /// is written in the background: the answer does not wait for Redis.
    /// Takes the answer: the caller's copy (or the collected stream) is the one kept.
    pub fn store(
        &self,
        key: Key,
        mut response: ChatResponse,
        keep: Keeping,
        question: Option<Question>,
    ) -> bool {
        let bytes = memory::size_of(&response);
        if bytes > keep.max_entry_bytes {
            return false;
        }
        // The canonical answer is rendered for every client: the upstream's own bytes are not
        // kept (nor counted).
        response.raw = None;
        response.as_sent = None;
        let now = Instant::now();
        let ttl = keep.ttl;
        let entry = Entry {
            response,
            stored: SystemTime::now(),
            expires: now + ttl,
            cost_micros: keep.cost_micros,
            bytes,
            origin: keep.origin,
        };
        match &self.backend {
            Backend::Memory(m) => {
                m.insert(key, Arc::new(entry));
                if let Some(q) = question {
                    self.index.add(key, q, now + ttl);
                }
            }
            Backend::Redis(r) => r.put(key, &entry, ttl, question),
        }
        true
    }

    /// Forgets the entries `key` stored (by its name) or that answered `model`, or every one
    /// when neither is given; returns how many went.
    pub async fn clear_matching(&self, key: Option<&str>, model: Option<&str>) -> u64 {
        match &self.backend {
            Backend::Memory(m) => {
                let before = m.entries();
                m.retain(|e| {
                    let by_key = key.is_some_and(|k| *e.origin.key == *k);
                    let by_model = model.is_some_and(|m| e.origin.models.iter().any(|x| **x == *m));
                    let all = key.is_none() && model.is_none();
                    !(all || by_key || by_model)
                });
                if key.is_none() && model.is_none() {
                    self.index.clear();
                }
                before.saturating_sub(m.entries()) as u64
            }
            Backend::Redis(r) => r.clear(key, model).await,
        }
    }

    /// `{"backend", "entries", "bytes", "hits", "semantic_hits", "misses", "hit_rate"}`: with
    /// Redis, every replica's.
    pub async fn stats(&self) -> serde_json::Value {
        let (mut hits, mut semantic, mut misses) = (
            self.hits.load(Ordering::Relaxed),
            self.semantic_hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        );
        let (backend, entries, bytes) = match &self.backend {
            Backend::Memory(m) => ("memory", m.entries() as u64, m.bytes()),
            Backend::Redis(r) => {
                let s = r.stats().await;
                if let Some(s) = &s {
                    (hits, semantic, misses) = (s.hits, s.semantic_hits, s.misses);
                }
                let (e, b) = s.map_or((0, 0), |s| (s.entries, s.bytes));
                ("redis", e, b)
            }
        };
        let lookups = hits + semantic + misses;
        serde_json::json!({
            "backend": backend,
            "entries": entries,
            "bytes": bytes,
            "hits": hits,
            "semantic_hits": semantic,
            "misses": misses,
            "hit_rate": if lookups == 0 { serde_json::Value::Null } else { ((hits + semantic) as f64 / lookups as f64).into() },
        })
    }
}

#[cfg(test)]
mod tests;
