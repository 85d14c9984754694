//! Entries in this process: `quick_cache`, weighted by each entry's bytes so the total stays
//! under `max_bytes` (its eviction, S3-FIFO, keeps entries that are asked for again and lets
//! one-off ones go first, where a plain LRU would let a scan of new keys flush them).

use std::sync::Arc;
use std::time::Instant;

use quick_cache::Weighter;
use quick_cache::sync::Cache;

use super::{Entry, Key};
use crate::protocol::{ChatResponse, Content};

#[derive(Clone)]
struct Bytes;

impl Weighter<Key, Arc<Entry>> for Bytes {
    fn weight(&self, _key: &Key, e: &Arc<Entry>) -> u64 {
        e.bytes.max(1)
    }
}

pub struct Memory {
    entries: Cache<Key, Arc<Entry>, Bytes>,
}

/// The bytes an answer takes, as the bound counts them: its texts and a fixed share for the
/// rest (the body as sent is not kept).
pub fn size_of(r: &ChatResponse) -> u64 {
    let texts: usize = r
        .choices
        .iter()
        .map(|c| {
            c.message.content.as_ref().map_or(0, Content::text_len)
                + c.message.reasoning.as_ref().map_or(0, String::len)
                + c.message.tool_calls.len() * 256
        })
        .sum();
    (texts + 512) as u64
}

impl Memory {
    pub fn new(max_bytes: u64) -> Memory {
        // The item estimate only sizes the tables: a 2 KiB answer is typical.
        let items = usize::try_from(max_bytes / 2048)
            .unwrap_or(usize::MAX)
            .max(16);
        Memory {
            entries: Cache::with_weighter(items, max_bytes, Bytes),
        }
    }

    /// The entry under `key`; an expired one is removed and not returned.
    pub fn get(&self, key: &Key, now: Instant) -> Option<Arc<Entry>> {
        let e = self.entries.get(key)?;
        if e.expires <= now {
            self.entries.remove(key);
            return None;
        }
        Some(e)
    }

    pub fn insert(&self, key: Key, e: Arc<Entry>) {
        self.entries.insert(key, e);
    }

    pub fn entries(&self) -> usize {
        self.entries.len()
    }

    pub fn bytes(&self) -> u64 {
        self.entries.weight()
    }

    /// Keeps only the entries `keep` says yes to.
    pub fn retain(&self, keep: impl Fn(&Entry) -> bool) {
        self.entries.retain(|_, e| keep(e));
    }
}
