//! Bindings in a map in this process, expiring by the injected clock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{StateStore, StoredResponse};
use crate::clock::Clock;

/// Sessions kept at most; past it, expired ones are swept and then new bindings are refused
/// (the request is served, just not bound) rather than growing without bound.
const MAX_SESSIONS: usize = 1_000_000;
/// Bytes of kept responses' items at most; past it, expired ones are swept and then new ones
/// keep only their channel.
const MAX_RESPONSE_BYTES: usize = 256 << 20;
/// Entries counted one by one for the metrics, at most.
const COUNT_EXACTLY: usize = 100_000;

struct Entry {
    channel: Option<Arc<str>>,
    failures: u32,
    expires: Instant,
}

#[derive(Default)]
struct Sessions {
    entries: HashMap<String, Entry>,
    /// (session, router) → the instance chosen, and until when.
    instances: HashMap<(String, Arc<str>), (Arc<str>, Instant)>,
    /// Kept responses, until when, and the bytes of their items.
    responses: HashMap<String, (StoredResponse, Instant)>,
    response_bytes: usize,
    swept: Option<Instant>,
}

const SWEEP_EVERY: Duration = Duration::from_secs(60);

pub struct Memory {
    clock: Arc<dyn Clock>,
    map: Mutex<Sessions>,
}

impl Memory {
    pub fn new(clock: Arc<dyn Clock>) -> Memory {
        Memory {
            clock,
            map: Mutex::new(Sessions::default()),
        }
    }

    /// Sessions bound to a channel now. Past [`COUNT_EXACTLY`] entries the map's size is
    /// given instead (expired entries included), so a scrape never walks a million under the lock.
    pub fn bindings(&self) -> u64 {
        let now = self.clock.now();
        let map = self.lock();
        if map.entries.len() > COUNT_EXACTLY {
            return map.entries.len() as u64;
        }
        map.entries
            .values()
            .filter(|e| e.channel.is_some() && e.expires > now)
            .count() as u64
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Sessions> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Room for one more session: when the map is full, expired entries are swept (at most
    /// once a minute, so a flood of new sessions cannot make every request sweep a million).
    fn room(map: &mut Sessions, now: Instant) -> bool {
        if map.entries.len() < MAX_SESSIONS {
            return true;
        }
        Self::sweep(map, now);
        map.entries.len() < MAX_SESSIONS
    }

    /// Drops expired bindings and instances, at most once a minute.
    fn sweep(map: &mut Sessions, now: Instant) {
        if map
            .swept
            .is_none_or(|t| now.duration_since(t) >= SWEEP_EVERY)
        {
            map.swept = Some(now);
            map.entries.retain(|_, e| e.expires > now);
            map.instances.retain(|_, (_, t)| *t > now);
            let mut freed = 0;
            map.responses.retain(|_, (r, t)| {
                let keep = *t > now;
                if !keep {
                    freed += r.size();
                }
                keep
            });
            map.response_bytes -= freed;
        }
    }

    /// Binds unconditionally (the Redis store mirrors its writes here, for outages).
    pub(super) fn set(&self, session: &str, channel: &str, ttl: Duration) {
        let now = self.clock.now();
        Self::put(&mut self.lock(), session, channel, ttl, now);
    }

    fn put(map: &mut Sessions, session: &str, channel: &str, ttl: Duration, now: Instant) -> bool {
        // A kept binding is refreshed in place, without an allocation.
        if let Some(e) = map.entries.get_mut(session) {
            if e.channel.as_deref() != Some(channel) {
                e.channel = Some(channel.into());
            }
            e.failures = 0;
            e.expires = now + ttl;
            return true;
        }
        if !Self::room(map, now) {
            tracing::warn!("in-memory session bindings are full; this session is not bound");
            return false;
        }
        map.entries.insert(
            session.to_string(),
            Entry {
                channel: Some(channel.into()),
                failures: 0,
                expires: now + ttl,
            },
        );
        true
    }
}

impl StateStore for Memory {
    async fn binding(&self, session: &str) -> Option<Arc<str>> {
        let now = self.clock.now();
        let mut map = self.lock();
        match map.entries.get(session) {
            Some(e) if e.expires > now => e.channel.clone(),
            Some(_) => {
                map.entries.remove(session);
                None
            }
            None => None,
        }
    }

    async fn bind(
        &self,
        session: &str,
        expected: Option<&str>,
        channel: &str,
        ttl: Duration,
    ) -> bool {
        let now = self.clock.now();
        let mut map = self.lock();
        let current = map
            .entries
            .get(session)
            .filter(|e| e.expires > now)
            .and_then(|e| e.channel.as_deref());
        if current != expected {
            return false;
        }
        Self::put(&mut map, session, channel, ttl, now)
    }

    async fn unbind(&self, session: &str) {
        self.lock().entries.remove(session);
    }

    async fn bound_failed(&self, session: &str, ttl: Duration) -> u32 {
        let now = self.clock.now();
        let mut map = self.lock();
        match map.entries.get_mut(session) {
            Some(e) if e.expires > now => {
                e.failures += 1;
                e.failures
            }
            _ => {
                if !Self::room(&mut map, now) {
                    return 1;
                }
                map.entries.insert(
                    session.to_string(),
                    Entry {
                        channel: None,
                        failures: 1,
                        expires: now + ttl,
                    },
                );
                1
            }
        }
    }

    async fn instance(&self, session: &str, router: &str) -> Option<Arc<str>> {
        let now = self.clock.now();
        let map = self.lock();
        map.instances
            .get(&(session.to_string(), router.into()))
            .filter(|(_, t)| *t > now)
            .map(|(i, _)| i.clone())
    }

    async fn keep_instance(&self, session: &str, router: &str, instance: &str, ttl: Duration) {
        let now = self.clock.now();
        let mut map = self.lock();
        if map.instances.len() >= MAX_SESSIONS {
            // Its own bound, swept like the bindings.
            Self::sweep(&mut map, now);
            if map.instances.len() >= MAX_SESSIONS {
                return;
            }
        }
        map.instances.insert(
            (session.to_string(), router.into()),
            (instance.into(), now + ttl),
        );
    }

    async fn response(&self, id: &str) -> Option<StoredResponse> {
        let now = self.clock.now();
        let map = self.lock();
        map.responses
            .get(id)
            .filter(|(_, t)| *t > now)
            .map(|(r, _)| r.clone())
    }

    async fn keep_response(&self, id: &str, stored: &StoredResponse, ttl: Duration) {
        let now = self.clock.now();
        let mut map = self.lock();
        // Expired ones go (at most once a minute) whether or not the caps are near.
        Self::sweep(&mut map, now);
        let size = stored.size();
        if map.response_bytes + size > MAX_RESPONSE_BYTES || map.responses.len() >= MAX_SESSIONS {
            // Not kept at all: a continuation gets a clear 404, never a half conversation.
            tracing::warn!("kept responses are at their cap; this one is not kept");
            return;
        }
        map.response_bytes += size;
        if let Some((old, _)) = map
            .responses
            .insert(id.to_string(), (stored.clone(), now + ttl))
        {
            map.response_bytes -= old.size();
        }
    }

    async fn forget_response(&self, id: &str) {
        let mut map = self.lock();
        if let Some((old, _)) = map.responses.remove(id) {
            map.response_bytes -= old.size();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[tokio::test]
    async fn bindings_expire_refresh_and_count_failures() {
        let clock = ManualClock::new();
        let m = Memory::new(clock.clone());
        let ttl = Duration::from_secs(60);
        assert_eq!(m.binding("s").await, None);
        assert!(m.bind("s", None, "a", ttl).await);
        assert_eq!(m.binding("s").await.as_deref(), Some("a"));
        // A request that read an older binding does not overwrite this one.
        assert!(!m.bind("s", None, "b", ttl).await);
        assert!(!m.bind("s", Some("b"), "c", ttl).await);
        assert_eq!(m.binding("s").await.as_deref(), Some("a"));
        assert_eq!(m.bound_failed("s", ttl).await, 1);
        assert_eq!(m.bound_failed("s", ttl).await, 2);
        // Re-binding refreshes the TTL and clears the failures.
        clock.advance(Duration::from_secs(50));
        assert!(m.bind("s", Some("a"), "a", ttl).await);
        clock.advance(Duration::from_secs(50));
        assert_eq!(m.binding("s").await.as_deref(), Some("a"));
        assert_eq!(m.bound_failed("s", ttl).await, 1);
        clock.advance(Duration::from_secs(61));
        assert_eq!(m.binding("s").await, None);
        assert!(m.bind("s", None, "b", ttl).await);
        m.unbind("s").await;
        assert_eq!(m.binding("s").await, None);
    }
}
