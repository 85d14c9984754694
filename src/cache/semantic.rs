//! Semantic lookups: a kept question like a new one. Questions are grouped in buckets (the key of
//! everything but the question itself: scope, chain, system prompt, tools, sampling fields, the
//! turns before), so only questions asked in the same setting are compared; within a bucket the
//! candidates at or above the threshold are tried best first, and the first the guards accept
//! (`guard.rs`) is the hit. The index here serves the memory backend; with Redis the vectors
//! live beside the entries and the same choice runs over them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::Key;
use super::guard::same_question;

/// A request's question, ready to be compared or kept.
#[derive(Debug, Clone)]
pub struct Question {
    /// The key of everything about the request but the question.
    pub bucket: Key,
    pub text: Arc<str>,
    /// Unit length.
    pub vector: Arc<[f32]>,
}

/// A kept question: its entry's key, its vector and text, and when its entry expires.
#[derive(Debug, Clone)]
pub struct Kept {
    pub key: Key,
    pub vector: Arc<[f32]>,
    pub text: Arc<str>,
    pub expires: Instant,
}

/// Questions per bucket, at most: past it a new one is not indexed (its entry still serves
/// exact lookups).
pub const MAX_PER_BUCKET: usize = 1024;

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The best of `kept` for `q`: cosine ≥ `threshold` and the guards agree, tried best first.
pub fn best<'a>(
    q: &Question,
    kept: impl IntoIterator<Item = (&'a Key, &'a [f32], &'a str)>,
    threshold: f32,
) -> Option<(Key, f32)> {
    let mut over: Vec<(&Key, f32, &str)> = kept
        .into_iter()
        .filter(|(_, v, _)| v.len() == q.vector.len())
        .map(|(k, v, t)| (k, dot(v, &q.vector), t))
        .filter(|(_, c, _)| *c >= threshold)
        .collect();
    over.sort_by(|a, b| b.1.total_cmp(&a.1));
    over.into_iter()
        .find(|(_, _, t)| same_question(&q.text, t))
        .map(|(k, c, _)| (*k, c))
}

/// The questions of this process's entries, by bucket, and how many there are in all.
#[derive(Default)]
struct Buckets {
    by: HashMap<Key, Vec<Kept>>,
    total: usize,
}

/// The questions of this process's entries, by bucket, bounded in count.
pub struct Index {
    buckets: Mutex<Buckets>,
    max: usize,
}

impl Index {
    /// Sized like the entries: one question per 2 KiB of `max_bytes`.
    pub fn new(max_bytes: u64) -> Index {
        Index {
            buckets: Mutex::new(Buckets::default()),
            max: usize::try_from(max_bytes / 2048)
                .unwrap_or(usize::MAX)
                .max(16),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Buckets> {
        self.buckets.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn best(&self, q: &Question, threshold: f32, now: Instant) -> Option<(Key, f32)> {
        let b = self.lock();
        let kept = b.by.get(&q.bucket)?;
        best(
            q,
            kept.iter()
                .filter(|k| k.expires > now)
                .map(|k| (&k.key, &*k.vector, &*k.text)),
            threshold,
        )
    }

    /// Keeps `q` as the question of entry `key`. Past the bound, expired questions go first;
    /// if none has, the new one is not kept.
    pub fn add(&self, key: Key, q: Question, expires: Instant) {
        let now = Instant::now();
        let mut guard = self.lock();
        let b = &mut *guard;
        if b.total >= self.max {
            b.by.retain(|_, v| {
                v.retain(|k| k.expires > now);
                !v.is_empty()
            });
            b.total = b.by.values().map(Vec::len).sum();
            if b.total >= self.max {
                return;
            }
        }
        let v = b.by.entry(q.bucket).or_default();
        let before = v.len();
        v.retain(|k| k.key != key && k.expires > now);
        if v.len() < MAX_PER_BUCKET {
            v.push(Kept {
                key,
                vector: q.vector,
                text: q.text,
                expires,
            });
        }
        b.total = b.total + v.len() - before;
    }

    pub fn clear(&self) {
        *self.lock() = Buckets::default();
    }
}
