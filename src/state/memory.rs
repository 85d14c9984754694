//! Bindings in a map in this process, expiring by the injected clock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::StateStore;
use crate::health::Clock;

/// Sessions kept at most; past it, expired ones are swept and then new bindings are refused
/// (the request is served, just not bound) rather than growing without bound.
const MAX_SESSIONS: usize = 1_000_000;

struct Entry {
    channel: Option<Arc<str>>,
    failures: u32,
    expires: Instant,
}

pub struct Memory {
    clock: Arc<dyn Clock>,
    map: Mutex<HashMap<String, Entry>>,
}

impl Memory {
    pub fn new(clock: Arc<dyn Clock>) -> Memory {
        Memory {
            clock,
            map: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Room for one more session: expired entries swept when the map is full.
    fn room(map: &mut HashMap<String, Entry>, now: Instant) -> bool {
        if map.len() < MAX_SESSIONS {
            return true;
        }
        map.retain(|_, e| e.expires > now);
        map.len() < MAX_SESSIONS
    }
}

impl StateStore for Memory {
    async fn binding(&self, session: &str) -> Option<Arc<str>> {
        let now = self.clock.now();
        let mut map = self.lock();
        match map.get(session) {
            Some(e) if e.expires > now => e.channel.clone(),
            Some(_) => {
                map.remove(session);
                None
            }
            None => None,
        }
    }

    async fn bind(&self, session: &str, channel: &str, ttl: Duration) {
        let now = self.clock.now();
        let mut map = self.lock();
        // The common case, a kept binding: refreshed in place, no allocation.
        if let Some(e) = map.get_mut(session)
            && e.channel.as_deref() == Some(channel)
        {
            e.failures = 0;
            e.expires = now + ttl;
            return;
        }
        if !map.contains_key(session) && !Self::room(&mut map, now) {
            tracing::warn!("in-memory session bindings are full; this session is not bound");
            return;
        }
        map.insert(
            session.to_string(),
            Entry {
                channel: Some(channel.into()),
                failures: 0,
                expires: now + ttl,
            },
        );
    }

    async fn unbind(&self, session: &str) {
        self.lock().remove(session);
    }

    async fn bound_failed(&self, session: &str, ttl: Duration) -> u32 {
        let now = self.clock.now();
        let mut map = self.lock();
        match map.get_mut(session) {
            Some(e) if e.expires > now => {
                e.failures += 1;
                e.failures
            }
            _ => {
                if !Self::room(&mut map, now) {
                    return 1;
                }
                map.insert(
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::ManualClock;

    #[tokio::test]
    async fn bindings_expire_refresh_and_count_failures() {
        let clock = ManualClock::new();
        let m = Memory::new(clock.clone());
        let ttl = Duration::from_secs(60);
        assert_eq!(m.binding("s").await, None);
        m.bind("s", "a", ttl).await;
        assert_eq!(m.binding("s").await.as_deref(), Some("a"));
        assert_eq!(m.bound_failed("s", ttl).await, 1);
        assert_eq!(m.bound_failed("s", ttl).await, 2);
        // Re-binding refreshes the TTL and clears the failures.
        clock.advance(Duration::from_secs(50));
        m.bind("s", "a", ttl).await;
        clock.advance(Duration::from_secs(50));
        assert_eq!(m.binding("s").await.as_deref(), Some("a"));
        assert_eq!(m.bound_failed("s", ttl).await, 1);
        clock.advance(Duration::from_secs(61));
        assert_eq!(m.binding("s").await, None);
        m.bind("s", "b", ttl).await;
        m.unbind("s").await;
        assert_eq!(m.binding("s").await, None);
    }
}
