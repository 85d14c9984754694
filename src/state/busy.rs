//! Requests in flight per channel across replicas, for `least_busy` and `p2c`: each replica
//! publishes its own counts and reads the others' in one script call, at most every 100 ms,
//! from a background task: never a Redis call on the request path.

use std::sync::Arc;

use super::Redis;

/// A replica's counts live this long unless published again: a replica that stops (or loses
/// Redis) drops out of the others' sums within a second.
const TTL_MS: u64 = 1000;

/// Writes this replica's counts (a hash under its id, with the TTL), keeps the registry of
/// replicas current, and returns every other live replica's hash, flattened.
const EXCHANGE: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
local mine = ARGV[2] .. ARGV[1]
redis.call('DEL', mine)
if #ARGV > 3 then
  redis.call('HSET', mine, unpack(ARGV, 4))
  redis.call('PEXPIRE', mine, ttl)
end
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
redis.call('PEXPIRE', KEYS[1], ttl * 10)
local out = {}
for _, r in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if r ~= ARGV[1] then
    local h = redis.call('HGETALL', ARGV[2] .. r)
    for i = 1, #h, 2 do
      out[#out + 1] = h[i]
      out[#out + 1] = h[i + 1]
    end
  end
end
return out
"#;

impl Redis {
    /// Publishes `mine` (channel, requests in flight here) and returns the other replicas'
    /// counts summed per channel; `None` when Redis could not say.
    pub async fn exchange_busy(&self, mine: &[(Arc<str>, u32)]) -> Option<crate::health::Counts> {
        let mut args = vec![
            self.replica().to_string(),
            self.prefixed("busy:"),
            TTL_MS.to_string(),
        ];
        for (channel, n) in mine.iter().filter(|(_, n)| *n > 0) {
            args.push(channel.to_string());
            args.push(n.to_string());
        }
        let flat: Vec<String> = self
            .script(
                &redis::Script::new(EXCHANGE),
                &[self.prefixed("busy-replicas")],
                &args,
            )
            .await?;
        let mut sums = crate::health::Counts::new();
        for pair in flat.chunks_exact(2) {
            let n: u32 = pair[1].parse().unwrap_or(0);
            *sums.entry(pair[0].as_str().into()).or_default() += n;
        }
        Some(sums)
    }
}
