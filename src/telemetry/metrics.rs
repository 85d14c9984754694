//! What each finished request adds to the series: one call per request, on the request's own
//! task, after its answer is written (or its stream ends). Every label value is a name from the
//! config, a fixed word, or `other`. A request costs one lookup for itself, one per upstream
//! call (every per-call series of a route lives in one cell), and one for its spend.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::family::{
    Buckets, Counter, FIRST_TOKEN, Family, Histogram, OPERATION, OVERHEAD, PER_TOKEN, TOKENS,
};
use crate::config::Snapshot;
use crate::exec::{AttemptRecord, OutcomeClass};
use crate::provider::ProviderKind;
use crate::store::LogRow;

/// The label every value the config does not name is counted under.
pub const OTHER: &str = "other";

/// A call's outcome as an index: 0 for `ok`, then each class in `OutcomeClass::ALL` order.
pub const OUTCOMES: usize = OutcomeClass::ALL.len() + 1;

fn outcome_index(class: Option<OutcomeClass>) -> usize {
    class.map_or(0, |c| {
        OutcomeClass::ALL
            .iter()
            .position(|x| *x == c)
            .map_or(0, |i| i + 1)
    })
}

/// The label of outcome index `i` (`ok`, then the classes).
pub fn outcome_name(i: usize) -> &'static str {
    match i.checked_sub(1) {
        None => "ok",
        Some(c) => OutcomeClass::ALL.get(c).map_or(OTHER, |c| c.as_str()),
    }
}

/// A finished request, as the metrics and the trace read it.
pub struct Finished<'a> {
    pub snap: &'a std::sync::Arc<Snapshot>,
    pub row: &'a LogRow,
    pub attempts: &'a [AttemptRecord],
    /// The authenticated key's place in the config (`None`: not authenticated).
    pub key_idx: Option<usize>,
    /// A semantic router's pick: the router and the instance that served.
    pub semantic: Option<(&'a str, &'a str)>,
    /// When the request arrived, and when it ended (a stream: its last byte).
    pub started: Instant,
    pub ended: Instant,
    /// The gateway's own time (`None`: not measured, the client left).
    pub overhead: Option<Duration>,
}

/// A histogram made on first use: a route's series of a kind it never had cost nothing.
#[derive(Default)]
pub struct Lazy(OnceLock<Histogram>);

impl Lazy {
    fn observe(&self, b: &'static Buckets, v: u64) {
        self.0.get_or_init(|| Histogram::new(b)).observe(v);
    }

    pub fn get(&self) -> Option<&Histogram> {
        self.0.get()
    }
}

/// Everything counted of the calls on one route (operation, provider, channel, model, upstream
/// model): outcomes, failovers off it, durations by outcome, tokens, first token, per token.
#[derive(Default)]
pub struct Calls {
    pub outcomes: [Counter; OUTCOMES],
    pub failovers: [Counter; OUTCOMES],
    pub duration: [Lazy; OUTCOMES],
    pub input: Lazy,
    /// Of `input`, read from the provider's prompt cache, and written to it.
    pub cached_input: Lazy,
    pub cache_write: Lazy,
    pub output: Lazy,
    pub first_token: Lazy,
    pub per_token: Lazy,
}

pub struct Metrics {
    /// `ingress, model, outcome`.
    pub requests: Family<3, Counter>,
    /// `gen_ai_operation_name, gen_ai_provider_name, channel, model, upstream model`.
    pub calls: Family<5, Calls>,
    /// Failovers past a channel not called: `model, from_channel, reason`.
    pub skips: Family<3, Counter>,
    /// `router, instance`.
    pub semantic: Family<2, Counter>,
    /// `key, model`.
    pub cost: Family<2, Counter>,
    pub trimmed: Counter,
    /// What the response cache did: hits, misses, bypasses, semantic hits.
    pub cache: [Counter; 4],
    /// How long the response cache's lookups took (the embedding's too, in semantic mode).
    pub cache_lookup: Histogram,
    /// Non-stream requests, then streams.
    pub overhead: [Histogram; 2],
    /// MCP tool calls: `server, tool, outcome`.
    pub mcp_calls: Family<3, Counter>,
    /// MCP tool calls' durations: `server`.
    pub mcp_duration: Family<1, Histogram>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            requests: Family::new(["ingress", "model", "outcome"], Counter::default),
            calls: Family::new(
                [
                    "gen_ai_operation_name",
                    "gen_ai_provider_name",
                    "channel",
                    "model",
                    "gen_ai_response_model",
                ],
                Calls::default,
            ),
            skips: Family::new(["model", "from_channel", "reason"], Counter::default),
            semantic: Family::new(["router", "instance"], Counter::default),
            cost: Family::new(["key", "model"], Counter::default),
            trimmed: Counter::default(),
            cache: Default::default(),
            cache_lookup: Histogram::new(&OVERHEAD),
            overhead: [Histogram::new(&OVERHEAD), Histogram::new(&OVERHEAD)],
            mcp_calls: Family::new(["server", "tool", "outcome"], Counter::default),
            mcp_duration: Family::new(["server"], || Histogram::new(&OPERATION)),
        }
    }
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The client protocol a request came in by, from its log endpoint.
pub fn ingress(endpoint: &str) -> &'static str {
    match endpoint {
        "chat.completions" => "openai",
        "messages" => "anthropic",
        "generateContent" => "gemini",
        "responses" => "responses",
        "embeddings" => "embeddings",
        // The calls beside chat: each its own value, so they never inflate a protocol's.
        "messages.count_tokens" => "anthropic.count_tokens",
        "countTokens" => "gemini.count_tokens",
        "responses.input_tokens" => "responses.input_tokens",
        "models" => "models",
        "responses.retrieve" | "responses.delete" | "responses.input_items" => "responses.kept",
        _ => OTHER,
    }
}

/// `gen_ai.provider.name` for a channel's kind (the convention's well-known names).
pub fn provider_name(kind: Option<ProviderKind>) -> &'static str {
    match kind {
        Some(ProviderKind::Openai) => "openai",
        Some(ProviderKind::Azure) => "azure.ai.openai",
        Some(ProviderKind::Anthropic) => "anthropic",
        Some(ProviderKind::Gemini) => "gcp.gemini",
        Some(ProviderKind::Mock) => "switchyard.mock",
        Some(ProviderKind::Bedrock) => "aws.bedrock",
        Some(ProviderKind::Vertex) => "gcp.vertex_ai",
        Some(k) => k.preset().map_or(OTHER, |p| p.provider_name.as_str()),
        None => OTHER,
    }
}

/// `gen_ai.operation.name` of a call: embeddings, a token count, a kept response, Gemini's
/// `generate_content`, else `chat`.
pub fn operation(endpoint: &str, kind: Option<ProviderKind>) -> &'static str {
    match (endpoint, kind) {
        ("embeddings", _) => "embeddings",
        ("messages.count_tokens" | "countTokens" | "responses.input_tokens", _) => "count_tokens",
        ("responses.retrieve" | "responses.delete" | "responses.input_items", _) => "kept_response",
        (_, Some(ProviderKind::Gemini)) => "generate_content",
        _ => "chat",
    }
}

/// A model name as a label: itself when the config names it (a model, a router, an exact
/// redirect of the global rules or the key's), else `other`.
pub fn model_label<'a>(snap: &Snapshot, key: Option<usize>, model: Option<&'a str>) -> &'a str {
    let Some(m) = model else {
        return OTHER;
    };
    let exact = |r: &crate::config::Redirect| r.is_exact() && *r.from == *m;
    let named = snap.models.contains_key(m)
        || snap.router(m).is_some()
        || snap.redirects.iter().any(exact)
        || key
            .and_then(|i| snap.keys.get(i))
            .is_some_and(|k| k.redirects.iter().any(exact));
    if named { m } else { OTHER }
}

/// A key's label: its name among the first `max_key_labels` keys, else `other`.
pub fn key_label(snap: &Snapshot, idx: Option<usize>) -> &str {
    match idx.and_then(|i| snap.keys.get(i).map(|k| (i, k))) {
        Some((i, k)) if i < snap.metrics.max_key_labels => &k.name,
        _ => OTHER,
    }
}

impl Metrics {
    /// Counts a finished request: the request, each call and failover, the served call's
    /// tokens and times, its cost and the gateway's overhead.
    pub fn observe(&self, f: &Finished<'_>) {
        let row = f.row;
        let requested = model_label(f.snap, f.key_idx, row.requested_model.as_deref());
        self.requests
            .with([ingress(&row.endpoint), requested, &row.outcome], |c| {
                c.add(1)
            });
        for (i, a) in f.attempts.iter().enumerate() {
            self.attempt(f, a, f.attempts.get(i + 1));
        }
        if let (Some(cost), Some(_)) = (row.cost_micros.filter(|c| *c > 0), f.key_idx) {
            let model = row.served_model.as_deref().unwrap_or(requested);
            self.cost
                .with([key_label(f.snap, f.key_idx), model], |c| c.add(cost));
        }
        if let Some((router, instance)) = f.semantic {
            self.semantic.with([router, instance], |c| c.add(1));
        }
        match row.cache.as_deref() {
            Some("hit") => self.cache[0].add(1),
            Some("miss") => self.cache[1].add(1),
            Some("bypass") => self.cache[2].add(1),
            Some("semantic-hit") => self.cache[3].add(1),
            _ => {}
        }
        if row.trimmed_turns.is_some_and(|n| n > 0) {
            self.trimmed.add(1);
        }
        if let Some(d) = f.overhead {
            self.overhead[usize::from(row.stream)].observe(ns(d));
        }
    }

    /// One record of the failover report: a call (counted, timed) or a channel passed over,
    /// and a failover when the next record is another channel's.
    fn attempt(&self, f: &Finished<'_>, a: &AttemptRecord, next: Option<&AttemptRecord>) {
        if a.channel.is_empty() {
            return;
        }
        let moved_on = next.is_some_and(|n| n.channel != a.channel);
        let Some(t) = a.timing else {
            if let (true, Some(skip)) = (moved_on, a.skip) {
                self.skips
                    .with([&a.model, &a.channel, skip.as_str()], |c| c.add(1));
            }
            return;
        };
        let served = a.class.is_none();
        let outcome = outcome_index(a.class);
        // A served stream's call lasts until the stream ends; its first content came at `took`.
        let took = if served && f.row.stream {
            f.ended.saturating_duration_since(t.started)
        } else {
            t.took
        };
        let route = [
            operation(&f.row.endpoint, a.provider),
            provider_name(a.provider),
            &*a.channel,
            &*a.model,
            a.upstream_model.as_deref().unwrap_or(&a.model),
        ];
        self.calls.with(route, |c| {
            c.outcomes[outcome].add(1);
            c.duration[outcome].observe(&OPERATION, ns(took));
            if moved_on && !served {
                c.failovers[outcome].add(1);
            }
            if !served {
                return;
            }
            if let Some(n) = f.row.input_tokens {
                c.input.observe(&TOKENS, n);
                // The serving call's charge has the cache's share of that prompt.
                let t = f.row.charges.last().map(|ch| ch.tokens).unwrap_or_default();
                c.cached_input.observe(&TOKENS, t.cached_input);
                c.cache_write.observe(&TOKENS, t.cache_write);
            }
            if let Some(n) = f.row.output_tokens {
                c.output.observe(&TOKENS, n);
            }
            if f.row.stream {
                c.first_token.observe(&FIRST_TOKEN, ns(t.took));
                let out = f.row.output_tokens.unwrap_or(0);
                if out > 1 {
                    c.per_token
                        .observe(&PER_TOKEN, ns(took.saturating_sub(t.took)) / (out - 1));
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_indices_name_ok_and_every_class_once() {
        assert_eq!(outcome_name(outcome_index(None)), "ok");
        for c in OutcomeClass::ALL {
            assert_eq!(outcome_name(outcome_index(Some(c))), c.as_str());
        }
        let names: std::collections::BTreeSet<_> = (0..OUTCOMES).map(outcome_name).collect();
        assert_eq!(names.len(), OUTCOMES);
    }
}
