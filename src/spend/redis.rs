//! Meters in Redis: one Lua script checks and takes every limit of one scope atomically. A
//! scope's keys share its hash tag (`{key:alice}`), so each script touches one Redis Cluster
//! slot; a request's key and channel are two scripts, the key's first. Time is Redis's
//! (`TIME`), so every replica's holds expire by the same clock.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use super::{Answer, Ask, Hold, MemoryMeters, PeriodAt, Standing, Verdict};
use crate::config::quota::Quota;
use crate::state::redis::Redis;

/// KEYS: 1 meta (reserved, wtok), 2 holds (id → micros), 3 expiry (id by deadline), 4 window
/// (id by admission time), 5 spent (this period's), 6 window tokens (id → tokens).
/// ARGV: id, ask micros, ask tokens, hold ms, budget, max concurrency, rpm, tpm (-1: none).
/// Returns {refused (0: admitted; 1 budget, 2 rpm, 3 tpm, 4 concurrency), cap, used, retry ms},
/// as `switchyard_admit` does.
const ADMIT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local reserved = tonumber(redis.call('HGET', KEYS[1], 'reserved') or '0')
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. now, 'LIMIT', 0, 256)) do
  local m = redis.call('HGET', KEYS[2], id)
  if m then
    reserved = reserved - tonumber(m)
    redis.call('HDEL', KEYS[2], id)
  end
  redis.call('ZREM', KEYS[3], id)
end
if reserved < 0 then reserved = 0 end
local wtok = tonumber(redis.call('HGET', KEYS[1], 'wtok') or '0')
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now - 60000, 'LIMIT', 0, 1024)) do
  local tk = redis.call('HGET', KEYS[6], id)
  if tk then
    wtok = wtok - tonumber(tk)
    redis.call('HDEL', KEYS[6], id)
  end
  redis.call('ZREM', KEYS[4], id)
end
if wtok < 0 then wtok = 0 end
redis.call('HSET', KEYS[1], 'reserved', reserved, 'wtok', wtok)
local ask, tokens = tonumber(ARGV[2]), tonumber(ARGV[3])
local budget, conc = tonumber(ARGV[5]), tonumber(ARGV[6])
local rpm, tpm = tonumber(ARGV[7]), tonumber(ARGV[8])
if budget >= 0 then
  local spent = tonumber(redis.call('GET', KEYS[5]) or '0')
  local need = ask
  if need < 1 then need = 1 end
  if spent + reserved + need > budget then
    return {1, budget, spent + reserved, 0}
  end
end
local inflight = redis.call('HLEN', KEYS[2])
if conc >= 0 and inflight >= conc then return {4, conc, inflight, 1000} end
local count = redis.call('ZCARD', KEYS[4])
local function next_slot()
  local first = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
  if first[2] then return tonumber(first[2]) + 60000 - now end
  return 1000
end
if rpm >= 0 and count >= rpm then return {2, rpm, count, next_slot()} end
if tpm >= 0 and count > 0 and wtok + tokens > tpm then return {3, tpm, wtok, next_slot()} end
local id, hold = ARGV[1], tonumber(ARGV[4])
redis.call('HSET', KEYS[2], id, ask)
redis.call('ZADD', KEYS[3], now + hold, id)
redis.call('HINCRBY', KEYS[1], 'reserved', ask)
if rpm >= 0 or tpm >= 0 then
  redis.call('ZADD', KEYS[4], now, id)
  redis.call('HSET', KEYS[6], id, tokens)
  redis.call('HINCRBY', KEYS[1], 'wtok', tokens)
end
for _, k in ipairs({KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6]}) do
  redis.call('PEXPIRE', k, hold + 120000)
end
local used = 0
if budget >= 0 then used = tonumber(redis.call('GET', KEYS[5]) or '0') + reserved + ask end
return {0, budget, used, 0}
"#;

/// KEYS as [`ADMIT`]'s. ARGV: id, cost, real tokens, when the period's spend may be forgotten
/// (ms since the epoch; 0: never). Returns the period's spend after the charge (-1: none).
const SETTLE: &str = r#"
local m = redis.call('HGET', KEYS[2], ARGV[1])
if m then
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.call('ZREM', KEYS[3], ARGV[1])
  local r = tonumber(redis.call('HGET', KEYS[1], 'reserved') or '0') - tonumber(m)
  if r < 0 then r = 0 end
  redis.call('HSET', KEYS[1], 'reserved', r)
end
local cost = tonumber(ARGV[2])
local spent = -1
if cost > 0 then
  spent = redis.call('INCRBY', KEYS[5], cost)
  if tonumber(ARGV[4]) > 0 then redis.call('PEXPIREAT', KEYS[5], ARGV[4]) end
end
local tk = redis.call('HGET', KEYS[6], ARGV[1])
if tk then
  redis.call('HSET', KEYS[6], ARGV[1], ARGV[3])
  redis.call('HINCRBY', KEYS[1], 'wtok', tonumber(ARGV[3]) - tonumber(tk))
end
return spent
"#;

/// KEYS as [`ADMIT`]'s. Returns {spent, reserved}.
const STANDING: &str = r#"
return {tonumber(redis.call('GET', KEYS[5]) or '0'), tonumber(redis.call('HGET', KEYS[1], 'reserved') or '0')}
"#;

static ADMIT_SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(ADMIT));
static SETTLE_SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(SETTLE));
static STANDING_SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(STANDING));

/// A period's spend is kept a day past its end (for a late settle), then forgotten.
const SPENT_KEPT_MS: i64 = 86_400_000;

pub struct Meters {
    redis: Arc<Redis>,
    local: MemoryMeters,
}

/// The keys of one scope, every one under the scope's hash tag.
pub fn keys(redis: &Redis, scope: &str, period: Option<&str>) -> Vec<String> {
    let base = redis.prefixed(&format!("{{{scope}}}"));
    vec![
        format!("{base}:meta"),
        format!("{base}:holds"),
        format!("{base}:expiry"),
        format!("{base}:window"),
        format!("{base}:spent:{}", period.unwrap_or("none")),
        format!("{base}:wtokens"),
    ]
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or("-1".into(), |v| v.to_string())
}

impl Meters {
    pub fn new(redis: Arc<Redis>) -> Meters {
        Meters {
            redis,
            local: MemoryMeters::default(),
        }
    }

    pub fn local(&self) -> &MemoryMeters {
        &self.local
    }

    pub fn connected(&self) -> bool {
        self.redis.connected()
    }

    /// `None`: Redis did not answer.
    pub async fn admit(
        &self,
        scope: &Arc<str>,
        q: &Quota,
        ask: Ask,
        ttl: Duration,
    ) -> Option<Verdict> {
        let now = crate::clock::unix_ms();
        let period = q.budget.map(|b| PeriodAt::of(&b, now));
        let id = fastrand::u64(..);
        let keys = keys(&self.redis, scope, period.as_ref().map(|p| p.id.as_str()));
        let args = [
            id.to_string(),
            ask.micros.to_string(),
            ask.tokens.to_string(),
            ttl.as_millis().to_string(),
            opt(q.budget.map(|b| b.micros)),
            opt(q.max_concurrency),
            opt(q.rpm),
            opt(q.tpm),
        ];
        let r: Vec<i64> = self.redis.script(&ADMIT_SCRIPT, &keys, &args).await?;
        let &[refused, cap, used, wait_ms] = r.as_slice() else {
            return None;
        };
        let answer = Answer {
            refused,
            cap,
            used,
            wait_ms,
        };
        Some(answer.verdict(scope, id, period, ask, now))
    }

    /// Settles `h`; the period's spend after it, when it charged anything.
    pub async fn settle(&self, h: &Hold, cost: u64, tokens: u64) -> Option<u64> {
        let keys = keys(
            &self.redis,
            &h.scope,
            h.period.as_ref().map(|p| p.id.as_str()),
        );
        // A `total` period never ends, and its spend is never forgotten.
        let forget = match &h.period {
            Some(p) if p.ends < i64::MAX => p.ends.saturating_add(SPENT_KEPT_MS),
            _ => 0,
        };
        let cost = if h.period.is_some() { cost } else { 0 };
        let args = [
            h.id.to_string(),
            cost.to_string(),
            tokens.to_string(),
            forget.to_string(),
        ];
        match self.redis.script::<i64>(&SETTLE_SCRIPT, &keys, &args).await {
            Some(spent) => u64::try_from(spent).ok(),
            None => {
                tracing::error!(
                    scope = &*h.scope,
                    cost,
                    "could not settle a hold in Redis: its reservation expires by its deadline, its spend is not counted there"
                );
                None
            }
        }
    }

    pub async fn standing(&self, scope: &str, period: &str) -> Option<Standing> {
        let keys = keys(&self.redis, scope, Some(period));
        let r: Vec<i64> = self.redis.script(&STANDING_SCRIPT, &keys, &[]).await?;
        let &[spent, reserved] = r.as_slice() else {
            return None;
        };
        Some(Standing {
            spent: spent.max(0) as u64,
            reserved: reserved.max(0) as u64,
        })
    }
}
