//! Meters in Redis: one Lua script checks and takes every limit of every level of one
//! admission atomically. A scope's keys share its hash tag (`{key:alice}`), and a team's
//! levels (its end user, key, teams and organisation) the organisation's, so each script
//! touches one Redis Cluster slot; a request's key and channel are two scripts, the key's first. Time is Redis's
//! (`TIME`), so every replica's holds expire by the same clock.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use super::{Answer, Ask, Hold, Levels, MemoryMeters, PeriodAt, Refusal, Standing, Verdict};
use crate::config::quota::Quota;
use crate::state::redis::Redis;

/// Every level of one admission at once. KEYS: six per level (1 meta: reserved, wtok; 2
/// holds: id → micros; 3 expiry: id by deadline; 4 window: id by admission time; 5 spent: this
/// period's; 6 window tokens: id → tokens), then, when end users are counted, the team's set
/// of them. ARGV: 1 levels, 2 id, 3 ask micros, 4 ask tokens, 5 hold ms, 6 end users counted
/// at most (0: none), 7 this end user's scope, 8 the prefix of an end user's keys, 9 the end
/// user's budget period; then per level: budget, max concurrency, rpm, tpm (-1: none).
/// Returns {0, used per level} when every level took it; else {the refusing level (from 1),
/// its limit (1 budget, 2 rpm, 3 tpm, 4 concurrency), the limit's value, used, retry ms}.
const ADMIT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = tonumber(ARGV[1])
local id, ask, tokens, hold = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local reserved, wtok, spent, lim = {}, {}, {}, {}
-- Drops the ids zset `z` scores up to `upto` (at most `most`) with their amounts in hash `h`:
-- what they held, summed.
local function expire(z, h, upto, most)
  local sum = 0
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', z, '-inf', upto, 'LIMIT', 0, most)) do
    local v = redis.call('HGET', h, id)
    if v then
      sum = sum + tonumber(v)
      redis.call('HDEL', h, id)
    end
    redis.call('ZREM', z, id)
  end
  return sum
end
for i = 1, n do
  local k, a = (i - 1) * 6, 9 + (i - 1) * 4
  local r = tonumber(redis.call('HGET', KEYS[k + 1], 'reserved') or '0')
  r = math.max(0, r - expire(KEYS[k + 3], KEYS[k + 2], '(' .. now, 256))
  local w = tonumber(redis.call('HGET', KEYS[k + 1], 'wtok') or '0')
  w = math.max(0, w - expire(KEYS[k + 4], KEYS[k + 6], now - 60000, 1024))
  redis.call('HSET', KEYS[k + 1], 'reserved', r, 'wtok', w)
  reserved[i], wtok[i] = r, w
  lim[i] = {tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])}
  spent[i] = 0
  if lim[i][1] >= 0 then spent[i] = tonumber(redis.call('GET', KEYS[k + 5]) or '0') end
end
local need = ask
if need < 1 then need = 1 end
for i = 1, n do
  local k = (i - 1) * 6
  local budget, conc, rpm, tpm = lim[i][1], lim[i][2], lim[i][3], lim[i][4]
  if budget >= 0 and spent[i] + reserved[i] + need > budget then
    return {i, 1, budget, spent[i] + reserved[i], 0}
  end
  local inflight = redis.call('HLEN', KEYS[k + 2])
  if conc >= 0 and inflight >= conc then return {i, 4, conc, inflight, 1000} end
  local count = redis.call('ZCARD', KEYS[k + 4])
  local function next_slot()
    local first = redis.call('ZRANGE', KEYS[k + 4], 0, 0, 'WITHSCORES')
    if first[2] then return tonumber(first[2]) + 60000 - now end
    return 1000
  end
  if rpm >= 0 and count >= rpm then return {i, 2, rpm, count, next_slot()} end
  if tpm >= 0 and count > 0 and wtok[i] + tokens > tpm then return {i, 3, tpm, wtok[i], next_slot()} end
end
local out = {0}
for i = 1, n do
  local k = (i - 1) * 6
  redis.call('HSET', KEYS[k + 2], id, ask)
  redis.call('ZADD', KEYS[k + 3], now + hold, id)
  redis.call('HINCRBY', KEYS[k + 1], 'reserved', ask)
  if lim[i][3] >= 0 or lim[i][4] >= 0 then
    redis.call('ZADD', KEYS[k + 4], now, id)
    redis.call('HSET', KEYS[k + 6], id, tokens)
    redis.call('HINCRBY', KEYS[k + 1], 'wtok', tokens)
  end
  for _, j in ipairs({1, 2, 3, 4, 6}) do
    redis.call('PEXPIRE', KEYS[k + j], hold + 120000)
  end
  local used = 0
  if lim[i][1] >= 0 then used = spent[i] + reserved[i] + ask end
  out[i + 1] = used
end
local max = tonumber(ARGV[6])
if max > 0 then
  local set, user = KEYS[n * 6 + 1], ARGV[7]
  if not redis.call('ZSCORE', set, user) then
    local over = redis.call('ZCARD', set) - max + 1
    if over > 0 then
      local gone = redis.call('ZPOPMIN', set, over)
      for j = 1, #gone, 2 do
        local b = ARGV[8] .. gone[j]
        redis.call('DEL', b .. ':meta', b .. ':holds', b .. ':expiry', b .. ':window',
          b .. ':wtokens', b .. ':spent:' .. ARGV[9])
      end
    end
  end
  redis.call('ZADD', set, now, user)
end
return out
"#;

/// Every level of one admission settled at once. KEYS as [`ADMIT`]'s. ARGV: levels, id, real
/// tokens, then per level: cost, when the period's spend may be forgotten (ms since the
/// epoch; 0: never). Returns each level's period spend after the charge (-1: none charged).
const SETTLE: &str = r#"
local n, id, tokens = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local out = {}
for i = 1, n do
  local k, a = (i - 1) * 6, 3 + (i - 1) * 2
  local m = redis.call('HGET', KEYS[k + 2], id)
  if m then
    redis.call('HDEL', KEYS[k + 2], id)
    redis.call('ZREM', KEYS[k + 3], id)
    local r = tonumber(redis.call('HGET', KEYS[k + 1], 'reserved') or '0') - tonumber(m)
    if r < 0 then r = 0 end
    redis.call('HSET', KEYS[k + 1], 'reserved', r)
  end
  local cost = tonumber(ARGV[a + 1])
  local spent = -1
  if cost > 0 then
    spent = redis.call('INCRBY', KEYS[k + 5], cost)
    if tonumber(ARGV[a + 2]) > 0 then redis.call('PEXPIREAT', KEYS[k + 5], ARGV[a + 2]) end
  end
  local tk = redis.call('HGET', KEYS[k + 6], id)
  if tk then
    redis.call('HSET', KEYS[k + 6], id, tokens)
    redis.call('HINCRBY', KEYS[k + 1], 'wtok', tokens - tonumber(tk))
  end
  out[i] = spent
end
return out
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

/// The start of a scope's keys: under its own hash tag, or under `tag` (the organisation's,
/// for a level of a team's chain) so that every level's keys are on one Cluster slot.
fn base(redis: &Redis, tag: Option<&str>, scope: &str) -> String {
    match tag {
        Some(t) => redis.prefixed(&format!("{{{t}}}:{scope}")),
        None => redis.prefixed(&format!("{{{scope}}}")),
    }
}

/// The six keys of one scope, as the scripts take them.
fn push_keys(keys: &mut Vec<String>, base: &str, period: Option<&str>) {
    for part in ["meta", "holds", "expiry", "window"] {
        keys.push(format!("{base}:{part}"));
    }
    keys.push(format!("{base}:spent:{}", period.unwrap_or("none")));
    keys.push(format!("{base}:wtokens"));
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or("-1".into(), |v| v.to_string())
}

/// A level's limits as [`ADMIT`] takes them.
fn limits(args: &mut Vec<String>, q: &Quota) {
    args.push(opt(q.budget.map(|b| b.micros)));
    args.push(opt(q.max_concurrency));
    args.push(opt(q.rpm));
    args.push(opt(q.tpm));
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
        let mut keys = Vec::with_capacity(6);
        let base = base(&self.redis, None, scope);
        push_keys(&mut keys, &base, period.as_ref().map(|p| &*p.id));
        let mut args = head(1, id, ask, ttl, None);
        limits(&mut args, q);
        let r: Vec<i64> = self.redis.script(&ADMIT_SCRIPT, &keys, &args).await?;
        let answer = match r.as_slice() {
            [0, used] => Answer {
                refused: 0,
                cap: 0,
                used: *used,
                wait_ms: 0,
            },
            [_, refused, cap, used, wait_ms] => Answer {
                refused: *refused,
                cap: *cap,
                used: *used,
                wait_ms: *wait_ms,
            },
            _ => return None,
        };
        Some(answer.verdict(scope, id, period, ask, now))
    }

    /// Every level in one script. `None`: Redis did not answer.
    pub async fn admit_levels(
        &self,
        l: &Levels<'_>,
        ask: Ask,
        ttl: Duration,
    ) -> Option<Result<Vec<Hold>, Refusal>> {
        let now = crate::clock::unix_ms();
        let id = fastrand::u64(..);
        let n = l.levels.len();
        let periods: Vec<Option<PeriodAt>> = l
            .levels
            .iter()
            .map(|(_, q)| q.budget.map(|b| PeriodAt::of(&b, now)))
            .collect();
        let mut keys = Vec::with_capacity(n * 6 + 1);
        for ((scope, _), p) in l.levels.iter().zip(&periods) {
            let base = base(&self.redis, Some(&l.tag), scope);
            push_keys(&mut keys, &base, p.as_ref().map(|p| &*p.id));
        }
        let user = match (l.user, l.levels.first()) {
            (Some((team, max)), Some((scope, _))) => {
                let set = base(&self.redis, Some(&l.tag), &format!("users:{team}"));
                keys.push(set);
                let period = periods[0].as_ref().map_or("none", |p| &*p.id);
                let prefix = self.redis.prefixed(&format!("{{{}}}:", l.tag));
                Some((max, scope.to_string(), prefix, period.to_string()))
            }
            _ => None,
        };
        let mut args = head(n, id, ask, ttl, user);
        for (_, q) in &l.levels {
            limits(&mut args, q);
        }
        let r: Vec<i64> = self.redis.script(&ADMIT_SCRIPT, &keys, &args).await?;
        Some(match r.as_slice() {
            [0, used @ ..] if used.len() == n => Ok(l
                .levels
                .iter()
                .zip(periods)
                .zip(used)
                .map(|(((scope, _), period), &used)| Hold {
                    scope: scope.clone(),
                    tag: Some(l.tag.clone()),
                    id,
                    used: if period.is_some() {
                        used.max(0) as u64
                    } else {
                        0
                    },
                    period,
                    ask,
                    cap: 0,
                    local: false,
                })
                .collect()),
            &[level, refused, cap, used, wait_ms] if level >= 1 && level as usize <= n => {
                let i = level as usize - 1;
                let answer = Answer {
                    refused,
                    cap,
                    used,
                    wait_ms,
                };
                match answer.verdict(&l.levels[i].0, id, periods[i].clone(), ask, now) {
                    super::Verdict::Refused(r) => Err(r),
                    _ => return None,
                }
            }
            _ => return None,
        })
    }

    /// Settles `h`; the period's spend after it, when it charged anything.
    pub async fn settle(&self, h: &Hold, cost: u64, tokens: u64) -> Option<u64> {
        self.settle_levels(std::slice::from_ref(h), cost, tokens)
            .await
            .pop()
            .flatten()
    }

    /// Settles one admission's holds in one script; each level's period spend after it, when
    /// it charged anything.
    pub async fn settle_levels(&self, holds: &[Hold], cost: u64, tokens: u64) -> Vec<Option<u64>> {
        let mut keys = Vec::with_capacity(holds.len() * 6);
        let mut args = vec![
            holds.len().to_string(),
            holds.first().map_or(0, |h| h.id).to_string(),
            tokens.to_string(),
        ];
        for h in holds {
            let base = base(&self.redis, h.tag.as_deref(), &h.scope);
            push_keys(&mut keys, &base, h.period.as_ref().map(|p| &*p.id));
            // A `total` period never ends, and its spend is never forgotten.
            let forget = match &h.period {
                Some(p) if p.ends < i64::MAX => p.ends.saturating_add(SPENT_KEPT_MS),
                _ => 0,
            };
            args.push(if h.period.is_some() { cost } else { 0 }.to_string());
            args.push(forget.to_string());
        }
        match self
            .redis
            .script::<Vec<i64>>(&SETTLE_SCRIPT, &keys, &args)
            .await
        {
            Some(spent) => spent.into_iter().map(|s| u64::try_from(s).ok()).collect(),
            None => {
                tracing::error!(
                    scope = holds.first().map(|h| &*h.scope),
                    cost,
                    "could not settle a hold in Redis: its reservation expires by its deadline, its spend is not counted there"
                );
                vec![None; holds.len()]
            }
        }
    }

    pub async fn standing(&self, scope: &str, tag: Option<&str>, period: &str) -> Option<Standing> {
        let mut keys = Vec::with_capacity(6);
        push_keys(&mut keys, &base(&self.redis, tag, scope), Some(period));
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

/// [`ADMIT`]'s first nine arguments: the levels, the admission, and the end user counted.
fn head(
    n: usize,
    id: u64,
    ask: Ask,
    ttl: Duration,
    user: Option<(u64, String, String, String)>,
) -> Vec<String> {
    let (max, scope, prefix, period) =
        user.unwrap_or((0, String::new(), String::new(), String::new()));
    let mut args = Vec::with_capacity(9 + n * 4);
    args.extend([
        n.to_string(),
        id.to_string(),
        ask.micros.to_string(),
        ask.tokens.to_string(),
        ttl.as_millis().to_string(),
        max.to_string(),
        scope,
        prefix,
        period,
    ]);
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The script deletes an evicted end user's keys by their suffixes, written out in Lua: they
    /// must be every key admission writes for a scope, or an eviction leaves counters behind.
    #[test]
    fn an_evicted_end_users_keys_are_every_key_admission_writes() {
        let mut keys = Vec::new();
        push_keys(&mut keys, "B", Some("P"));
        for key in &keys {
            let suffix = key.strip_prefix('B').unwrap_or(key);
            let written = match suffix.strip_suffix('P') {
                Some(spent) => format!("b .. '{spent}' .. ARGV[9]"),
                None => format!("b .. '{suffix}'"),
            };
            assert!(ADMIT.contains(&written), "{written} is not deleted");
        }
        assert_eq!(keys.len(), 6);
    }
}
