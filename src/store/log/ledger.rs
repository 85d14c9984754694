//! The ledger: one row per upstream attempt, written with its request's log row (same batch,
//! same transaction), append only. Sums are integer micro-dollars on both backends. The
//! queries' shapes live here; `sqlite.rs` and `postgres.rs` run them.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::pricing::{Price, Tokens};

/// One upstream attempt's charge.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Charge {
    /// 1 for the request's first upstream call, then 2, 3...
    pub attempt: u32,
    pub channel: Arc<str>,
    /// The credential's label (never the key).
    pub credential: Option<Arc<str>>,
    /// As the client named it (after redirects), and as the upstream knows it.
    pub model: Arc<str>,
    pub upstream_model: Arc<str>,
    pub tokens: Tokens,
    pub cost_micros: u64,
    /// What priced it (`None`: no price known, charged 0).
    pub price: Option<Arc<Price>>,
    /// `ok`, the failure's class, or `stream_<class>` for a stream that broke after commit
    /// (borrowed but for the last: no allocation per attempt).
    pub outcome: std::borrow::Cow<'static, str>,
    /// The tokens were counted by the gateway, not reported by the upstream.
    pub estimated: bool,
    /// On the serving attempt of a request that failed over: what its tokens would have cost
    /// at the first choice's price.
    pub first_choice_micros: Option<u64>,
    /// What the provider's prompt cache saved: the cost with every prompt token at the input
    /// rate, less the cost charged (negative when cache writes cost more than they saved).
    pub cache_saved_micros: i64,
}

/// What `/admin/usage` sums by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupBy {
    Key,
    Model,
    Channel,
    Team,
    User,
    Day,
}

impl GroupBy {
    const ALL: [GroupBy; 6] = [
        GroupBy::Key,
        GroupBy::Model,
        GroupBy::Channel,
        GroupBy::Team,
        GroupBy::User,
        GroupBy::Day,
    ];

    /// `key`, `model`, `channel`, `team`, `user` or `day`.
    pub fn named(name: &str) -> Option<GroupBy> {
        GroupBy::ALL.into_iter().find(|g| g.as_str() == name)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            GroupBy::Key => "key",
            GroupBy::Model => "model",
            GroupBy::Channel => "channel",
            GroupBy::Team => "team",
            GroupBy::User => "user",
            GroupBy::Day => "day",
        }
    }
}

/// A window of the ledger: `[from_ms, to_ms)`.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub from_ms: i64,
    pub to_ms: i64,
}

/// One `(key, team, group)` sum as a backend returns it.
#[derive(Debug, Clone, Default)]
pub struct Sum {
    pub key: Option<String>,
    /// The key's team when the rows were written.
    pub team: Option<String>,
    pub group: Option<String>,
    /// Requests whose first attempt is in the group (so that the groups' requests add up).
    pub requests: i64,
    pub attempts: i64,
    pub input_tokens: i64,
    pub cached_input_tokens: i64,
    pub output_tokens: i64,
    pub reasoning_tokens: i64,
    pub cost_micros: i64,
    pub cache_write_tokens: i64,
    pub cache_saved_micros: i64,
}

impl Sum {
    fn add(&mut self, o: &Sum) {
        self.requests += o.requests;
        self.attempts += o.attempts;
        self.input_tokens += o.input_tokens;
        self.cached_input_tokens += o.cached_input_tokens;
        self.output_tokens += o.output_tokens;
        self.reasoning_tokens += o.reasoning_tokens;
        self.cost_micros += o.cost_micros;
        self.cache_write_tokens += o.cache_write_tokens;
        self.cache_saved_micros += o.cache_saved_micros;
    }

    fn json(&self, name: &str, group: Option<&str>) -> Value {
        let mut v = json!({
            "requests": self.requests,
            "attempts": self.attempts,
            "input_tokens": self.input_tokens,
            "cached_input_tokens": self.cached_input_tokens,
            "output_tokens": self.output_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "cost_micros": self.cost_micros,
            "cost_usd": usd(self.cost_micros),
            "cache_write_tokens": self.cache_write_tokens,
            // The share of prompt tokens the providers' caches served.
            "cache_hit_ratio": if self.input_tokens > 0 {
                json!((self.cached_input_tokens as f64 / self.input_tokens as f64 * 10_000.0).round() / 10_000.0)
            } else {
                Value::Null
            },
            "cache_saved_micros": self.cache_saved_micros,
            "cache_saved_usd": usd(self.cache_saved_micros),
        });
        if !name.is_empty() {
            v[name] = json!(group);
        }
        v
    }
}

/// Micro-dollars as a USD amount for display (sums stay integers).
pub fn usd(micros: i64) -> String {
    let sign = if micros < 0 { "-" } else { "" };
    let m = micros.unsigned_abs();
    format!("{sign}{}.{:06}", m / 1_000_000, m % 1_000_000)
}

/// The grouped sums `visible` lets the caller see (by key and team), merged by group, largest
/// cost first, and their total.
pub fn report(by: GroupBy, sums: Vec<Sum>, visible: impl Fn(&Sum) -> bool) -> Value {
    let mut groups: BTreeMap<Option<String>, Sum> = BTreeMap::new();
    let mut total = Sum::default();
    for s in sums.iter().filter(|s| visible(s)) {
        groups.entry(s.group.clone()).or_default().add(s);
        total.add(s);
    }
    let mut rows: Vec<(Option<String>, Sum)> = groups.into_iter().collect();
    if by != GroupBy::Day {
        rows.sort_by(|a, b| b.1.cost_micros.cmp(&a.1.cost_micros).then(a.0.cmp(&b.0)));
    }
    json!({
        "group_by": by.as_str(),
        "rows": rows.iter().map(|(g, s)| s.json(by.as_str(), g.as_deref())).collect::<Vec<_>>(),
        "total": total.json("", None),
    })
}

/// The ledger's columns as `charges` reads them (aliased `l`), in [`ChargeRow`]'s order.
pub const COLUMNS: &str = "l.attempt, l.ts_ms, l.key_name, l.channel, l.credential, l.model,
    l.upstream_model, l.input_tokens, l.cached_input_tokens, l.cache_write_tokens,
    l.output_tokens, l.reasoning_tokens, l.cost_micros, l.price_version, l.outcome, l.estimated,
    l.first_choice_micros";

/// One ledger row as read back.
pub struct ChargeRow {
    pub attempt: i64,
    pub ts_ms: i64,
    pub key_name: Option<String>,
    pub channel: String,
    pub credential: Option<String>,
    pub model: String,
    pub upstream_model: String,
    /// input, cached input, cache write, output, reasoning.
    pub tokens: [i64; 5],
    pub cost_micros: i64,
    pub price_version: Option<String>,
    pub outcome: String,
    pub estimated: bool,
    pub first_choice_micros: Option<i64>,
    /// The price version's rates (USD per 1M tokens).
    pub rates: Option<Value>,
}

pub fn charge_json(r: ChargeRow) -> Value {
    let [input, cached, written, output, reasoning] = r.tokens;
    json!({
        "attempt": r.attempt,
        "ts_ms": r.ts_ms,
        "key": r.key_name,
        "channel": r.channel,
        "credential": r.credential,
        "model": r.model,
        "upstream_model": r.upstream_model,
        "tokens": {
            "input": input,
            "cached_input": cached,
            "cache_write": written,
            "output": output,
            "reasoning": reasoning,
        },
        "cost_micros": r.cost_micros,
        "cost_usd": usd(r.cost_micros),
        "price_version": r.price_version,
        "price": r.rates,
        "outcome": r.outcome,
        "estimated": r.estimated,
        "first_choice_micros": r.first_choice_micros,
    })
}

/// A price's rates as the ledger's `prices` table keeps them: USD per 1M tokens.
pub fn rates_json(p: &Price) -> Value {
    let r = |r: &crate::pricing::Rates| {
        let f = |m: u64| m as f64 / 1_000_000.0;
        json!({
            "input": f(r.input),
            "output": f(r.output),
            "cached_input": f(r.cached_input),
            "cache_write": f(r.cache_write),
            "reasoning": f(r.reasoning),
        })
    };
    let mut v = r(&p.base);
    if !p.tiers.is_empty() {
        v["tiers"] = p
            .tiers
            .iter()
            .map(|(above, t)| {
                let mut t = r(t);
                t["above"] = json!(above);
                t
            })
            .collect();
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_merge_by_group_for_the_keys_the_caller_sees() {
        let s = |key: &str, group: &str, cost| Sum {
            key: Some(key.into()),
            group: Some(group.into()),
            requests: 1,
            attempts: 1,
            cost_micros: cost,
            ..Sum::default()
        };
        let sums = vec![
            s("a", "m1", 10),
            s("b", "m1", 5),
            s("a", "m2", 30),
            s("c", "m2", 99),
        ];
        let v = report(GroupBy::Model, sums, |s| s.key.as_deref() != Some("c"));
        assert_eq!(v["rows"][0]["model"], "m2");
        assert_eq!(v["rows"][0]["cost_micros"], 30);
        assert_eq!(v["rows"][1]["requests"], 2);
        assert_eq!(v["total"]["cost_micros"], 45);
        assert_eq!(v["total"]["cost_usd"], "0.000045");
        assert_eq!(usd(-1_500_000), "-1.500000");
    }
}
