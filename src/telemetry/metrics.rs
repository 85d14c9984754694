//! What each finished request adds to the series: one call per request, on the request's own
//! task, after its answer is written (or its stream ends). Every label value is a name from the
//! config, a fixed word, or `other`.

use std::time::{Duration, Instant};

use super::family::{
    Counter, FIRST_TOKEN, Family, Histogram, OPERATION, OVERHEAD, PER_TOKEN, TOKENS,
};
use crate::config::Snapshot;
use crate::exec::AttemptRecord;
use crate::provider::ProviderKind;
use crate::store::LogRow;

/// The label every value the config does not name is counted under.
pub const OTHER: &str = "other";

/// A finished request, as the metrics and the trace read it.
pub struct Finished<'a> {
    pub snap: &'a Snapshot,
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

pub struct Metrics {
    /// `ingress, model, outcome`.
    pub requests: Family<3, Counter>,
    /// `channel, model, outcome_class`.
    pub attempts: Family<3, Counter>,
    /// `model, from_channel, reason`.
    pub failovers: Family<3, Counter>,
    /// `gen_ai_operation_name, gen_ai_provider_name, gen_ai_request_model,
    /// gen_ai_response_model, error_type`.
    pub duration: Family<5, Histogram>,
    /// The same four, then `gen_ai_token_type`.
    pub tokens: Family<5, Histogram>,
    /// The first four of `duration`'s labels.
    pub first_token: Family<4, Histogram>,
    pub per_token: Family<4, Histogram>,
    /// `router, instance`.
    pub semantic: Family<2, Counter>,
    /// `key, model`.
    pub cost: Family<2, Counter>,
    pub trimmed: Counter,
    /// `stream`: `true` or `false`.
    pub overhead: Family<1, Histogram>,
}

impl Default for Metrics {
    fn default() -> Self {
        let gen_ai = [
            "gen_ai_operation_name",
            "gen_ai_provider_name",
            "gen_ai_request_model",
            "gen_ai_response_model",
        ];
        let [op, provider, req, resp] = gen_ai;
        Metrics {
            requests: Family::new(["ingress", "model", "outcome"], Counter::default),
            attempts: Family::new(["channel", "model", "outcome_class"], Counter::default),
            failovers: Family::new(["model", "from_channel", "reason"], Counter::default),
            duration: Family::new([op, provider, req, resp, "error_type"], || {
                Histogram::new(&OPERATION)
            }),
            tokens: Family::new([op, provider, req, resp, "gen_ai_token_type"], || {
                Histogram::new(&TOKENS)
            }),
            first_token: Family::new(gen_ai, || Histogram::new(&FIRST_TOKEN)),
            per_token: Family::new(gen_ai, || Histogram::new(&PER_TOKEN)),
            semantic: Family::new(["router", "instance"], Counter::default),
            cost: Family::new(["key", "model"], Counter::default),
            trimmed: Counter::default(),
            overhead: Family::new(["stream"], || Histogram::new(&OVERHEAD)),
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
        None => OTHER,
    }
}

/// `gen_ai.operation.name` of a call: embeddings, Gemini's `generate_content`, else `chat`.
pub fn operation(endpoint: &str, kind: Option<ProviderKind>) -> &'static str {
    match (endpoint, kind) {
        ("embeddings", _) => "embeddings",
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
            .with([ingress(row.endpoint), requested, &row.outcome], |c| {
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
        if row.trimmed_turns.is_some_and(|n| n > 0) {
            self.trimmed.add(1);
        }
        if let Some(d) = f.overhead {
            let stream = if row.stream { "true" } else { "false" };
            self.overhead.with([stream], |h| h.observe(ns(d)));
        }
    }

    /// One record of the failover report: a call (counted, timed) or a channel passed over,
    /// and a failover when the next record is another channel's.
    fn attempt(&self, f: &Finished<'_>, a: &AttemptRecord, next: Option<&AttemptRecord>) {
        if a.channel.is_empty() {
            return;
        }
        let moved_on = next.is_some_and(|n| n.channel != a.channel);
        let served = a.skip.is_none() && a.class.is_none();
        if moved_on && !served {
            let reason = a
                .skip
                .map_or_else(|| a.class.map_or("unknown", |c| c.as_str()), |s| s.as_str());
            self.failovers
                .with([&a.model, &a.channel, reason], |c| c.add(1));
        }
        let Some(t) = a.timing else {
            return;
        };
        let class = a.class.map_or("ok", |c| c.as_str());
        self.attempts
            .with([&a.channel, &a.model, class], |c| c.add(1));
        let gen_ai = [
            operation(f.row.endpoint, a.provider),
            provider_name(a.provider),
            &*a.model,
            a.upstream_model.as_deref().unwrap_or(&a.model),
        ];
        let [op, provider, req, resp] = gen_ai;
        // A served stream's call lasts until the stream ends; its first content came at `took`.
        let took = if served && f.row.stream {
            f.ended.saturating_duration_since(t.started)
        } else {
            t.took
        };
        let error = a.class.map_or("", |c| c.as_str());
        self.duration
            .with([op, provider, req, resp, error], |h| h.observe(ns(took)));
        if !served {
            return;
        }
        for (kind, n) in [
            ("input", f.row.input_tokens),
            ("output", f.row.output_tokens),
        ] {
            if let Some(n) = n {
                self.tokens
                    .with([op, provider, req, resp, kind], |h| h.observe(n));
            }
        }
        if f.row.stream {
            self.first_token.with(gen_ai, |h| h.observe(ns(t.took)));
            let out = f.row.output_tokens.unwrap_or(0);
            if out > 1 {
                let after = ns(took.saturating_sub(t.took)) / (out - 1);
                self.per_token.with(gen_ai, |h| h.observe(after));
            }
        }
    }
}
