//! Entries in `[state]`'s Redis, shared by every replica: `{prefix}:cache:e:{key}` holds an
//! entry's compressed bytes with Redis's own TTL; `cache:k:{key name}` and `cache:m:{model}`
//! list the entries a key stored and a model answered (for `DELETE /admin/cache`);
//! `cache:q:{bucket}` holds the kept questions' vectors (semantic mode); `cache:stats` counts
//! every replica's lookups. Every call is bounded by the state store's 250 ms: Redis down or
//! slow is a miss, and an answer is kept in the background, never waited for.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use redis::AsyncCommands;

use super::semantic::{MAX_PER_BUCKET, Question, best};
use super::{Entry, Key, Outcome, wire};
use crate::state::Redis;

/// Adds a question to its bucket unless the bucket is full, and keeps the bucket as long as
/// its longest-lived entry.
const ADD_QUESTION: &str = r#"
if redis.call('HLEN', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
redis.call('PEXPIRE', KEYS[1], ARGV[4], 'NX')
redis.call('PEXPIRE', KEYS[1], ARGV[4], 'GT')
return 1
"#;

/// Every replica's counts, and what the entries take.
pub struct Stats {
    pub entries: u64,
    pub bytes: u64,
    pub hits: u64,
    pub semantic_hits: u64,
    pub misses: u64,
}

pub struct Shared {
    redis: Arc<Redis>,
}

fn hex(k: &Key) -> String {
    k.iter().map(|b| format!("{b:02x}")).collect()
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl Shared {
    pub fn new(redis: Arc<Redis>) -> Shared {
        Shared { redis }
    }

    fn entry_key(&self, k: &str) -> String {
        self.redis.prefixed(&format!("cache:e:{k}"))
    }

    pub async fn get(&self, key: &Key) -> Option<Arc<Entry>> {
        let name = self.entry_key(&hex(key));
        let (bytes, pttl): (Option<Vec<u8>>, i64) = self
            .redis
            .run(|mut c| async move {
                redis::pipe()
                    .get(&name)
                    .pttl(&name)
                    .query_async(&mut c)
                    .await
            })
            .await?;
        let left = Duration::from_millis(u64::try_from(pttl).unwrap_or(0));
        wire::decode(&bytes?, left).map(Arc::new)
    }

    /// Writes the entry (and its question) in the background.
    pub fn put(&self, key: Key, e: &Entry, ttl: Duration, question: Option<Question>) {
        let bytes = wire::encode(e);
        let h = hex(&key);
        let (entry, by_key) = (
            self.entry_key(&h),
            self.redis.prefixed(&format!("cache:k:{}", e.origin.key)),
        );
        let by_model: Vec<String> = e
            .origin
            .models
            .iter()
            .map(|m| self.redis.prefixed(&format!("cache:m:{m}")))
            .collect();
        let redis = self.redis.clone();
        let px = ms(ttl);
        tokio::spawn(async move {
            let (h2, entry2) = (h.clone(), entry.clone());
            redis
                .run(|mut c| async move {
                    let mut p = redis::pipe();
                    p.set(&entry2, bytes).arg("PX").arg(px).ignore();
                    for set in std::iter::once(&by_key).chain(&by_model) {
                        p.sadd(set, &h2).ignore();
                        p.cmd("PEXPIRE").arg(set).arg(px).arg("NX").ignore();
                        p.cmd("PEXPIRE").arg(set).arg(px).arg("GT").ignore();
                    }
                    p.query_async::<()>(&mut c).await
                })
                .await;
            if let Some(q) = question {
                let expires = SystemTime::now() + ttl;
                let v = wire::encode_question(&q.vector, &q.text, expires);
                let bucket = redis.prefixed(&format!("cache:q:{}", hex(&q.bucket)));
                redis
                    .run(|mut c| async move {
                        redis::Script::new(ADD_QUESTION)
                            .key(bucket)
                            .arg(h)
                            .arg(v)
                            .arg(MAX_PER_BUCKET)
                            .arg(px)
                            .invoke_async::<i64>(&mut c)
                            .await
                    })
                    .await;
            }
        });
    }

    /// The kept question most like `q` across every replica's entries.
    pub async fn similar(&self, q: &Question, threshold: f32) -> Option<(Key, f32)> {
        let bucket = self.redis.prefixed(&format!("cache:q:{}", hex(&q.bucket)));
        let all: Vec<(Vec<u8>, Vec<u8>)> = self
            .redis
            .run(|mut c| async move { c.hgetall(bucket).await })
            .await?;
        let now = SystemTime::now();
        let kept: Vec<(Key, Vec<f32>, String)> = all
            .into_iter()
            .filter_map(|(field, b)| {
                let key = unhex(&field)?;
                let (v, t) = wire::decode_question(&b, now)?;
                Some((key, v, t))
            })
            .collect();
        best(
            q,
            kept.iter().map(|(k, v, t)| (k, v.as_slice(), t.as_str())),
            threshold,
        )
    }

    /// Counts a lookup for every replica, in the background.
    pub fn count(&self, o: Outcome) {
        let field = match o {
            Outcome::Hit => "hits",
            Outcome::SemanticHit => "semantic_hits",
            Outcome::Miss => "misses",
        };
        let (redis, stats) = (self.redis.clone(), self.redis.prefixed("cache:stats"));
        tokio::spawn(async move {
            redis
                .run(|mut c| async move { c.hincr::<_, _, _, i64>(stats, field, 1).await })
                .await;
        });
    }

    /// Forgets the entries a key stored or a model answered, or all; how many went.
    pub async fn clear(&self, key: Option<&str>, model: Option<&str>) -> u64 {
        let mut sets = Vec::new();
        if let Some(k) = key {
            sets.push(self.redis.prefixed(&format!("cache:k:{k}")));
        }
        if let Some(m) = model {
            sets.push(self.redis.prefixed(&format!("cache:m:{m}")));
        }
        if sets.is_empty() {
            return self.clear_all().await;
        }
        let mut removed = 0;
        for set in sets {
            let members: Vec<String> = self
                .redis
                .run(|mut c| {
                    let set = set.clone();
                    async move { c.smembers(set).await }
                })
                .await
                .unwrap_or_default();
            let names: Vec<String> = members.iter().map(|m| self.entry_key(m)).collect();
            // Only the entries still there count; the list goes with them.
            let gone: u64 = self
                .redis
                .run(|mut c| async move {
                    let mut p = redis::pipe();
                    if !names.is_empty() {
                        p.del(names);
                    }
                    p.del(set).ignore();
                    let counts: Vec<u64> = p.query_async(&mut c).await?;
                    Ok(counts.first().copied().unwrap_or(0))
                })
                .await
                .unwrap_or(0);
            removed += gone;
        }
        removed
    }

    /// Every entry, its lists and its questions (not the counters).
    async fn clear_all(&self) -> u64 {
        let mut removed = 0;
        for pattern in ["cache:e:*", "cache:k:*", "cache:m:*", "cache:q:*"] {
            let keys = self.scan(&self.redis.prefixed(pattern)).await;
            for chunk in keys.chunks(500) {
                let chunk = chunk.to_vec();
                let gone: u64 = self
                    .redis
                    .run(|mut c| async move { c.del(chunk).await })
                    .await
                    .unwrap_or(0);
                if pattern == "cache:e:*" {
                    removed += gone;
                }
            }
        }
        removed
    }

    /// Keys matching `pattern`, a SCAN page at a time (at most a million).
    async fn scan(&self, pattern: &str) -> Vec<String> {
        let (mut cursor, mut out) = (0u64, Vec::new());
        loop {
            let p = pattern.to_string();
            let Some((next, keys)): Option<(u64, Vec<String>)> = self
                .redis
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
                .await
            else {
                return out;
            };
            out.extend(keys);
            if next == 0 || out.len() >= 1_000_000 {
                return out;
            }
            cursor = next;
        }
    }

    /// The entries and their bytes (compressed, as Redis holds them), and the counters.
    pub async fn stats(&self) -> Option<Stats> {
        let counts: std::collections::HashMap<String, u64> = self
            .redis
            .run(|mut c| {
                let k = self.redis.prefixed("cache:stats");
                async move { c.hgetall(k).await }
            })
            .await?;
        let keys = self.scan(&self.redis.prefixed("cache:e:*")).await;
        let mut bytes = 0u64;
        for chunk in keys.chunks(500) {
            let chunk = chunk.to_vec();
            let lens: Vec<u64> = self
                .redis
                .run(|mut c| async move {
                    let mut p = redis::pipe();
                    for k in &chunk {
                        p.strlen(k);
                    }
                    p.query_async(&mut c).await
                })
                .await
                .unwrap_or_default();
            bytes += lens.iter().sum::<u64>();
        }
        let n = |f: &str| counts.get(f).copied().unwrap_or(0);
        Some(Stats {
            entries: keys.len() as u64,
            bytes,
            hits: n("hits"),
            semantic_hits: n("semantic_hits"),
            misses: n("misses"),
        })
    }
}

fn unhex(b: &[u8]) -> Option<Key> {
    crate::secret::unhex(std::str::from_utf8(b).ok()?)?
        .try_into()
        .ok()
}
