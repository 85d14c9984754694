//! The request series written out for a scrape: the GenAI metrics and the gateway's counters,
//! merged from the per-route cells into the label sets each metric names (two channels serving
//! one model are one `gen_ai_*` series, as the conventions have no channel attribute).

use std::collections::BTreeMap;

use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

use super::family::{Counter, Family, Histogram};
use super::metrics::{Calls, Lazy, Metrics, OUTCOMES, outcome_name};

pub type Enc<'a> = DescriptorEncoder<'a>;
pub type Res = Result<(), std::fmt::Error>;

/// Label pairs, in the metric's label order.
pub type Set<'a> = Vec<(&'static str, &'a str)>;

/// A histogram merged over cells: sum, count and per-bucket counts.
#[derive(Default)]
struct Merged {
    sum: f64,
    count: u64,
    buckets: Vec<(f64, u64)>,
}

impl Merged {
    fn add(&mut self, h: &Histogram) {
        let (sum, count, buckets) = h.read();
        self.sum += sum;
        self.count += count;
        if self.buckets.is_empty() {
            self.buckets = buckets;
        } else {
            for (mine, (_, n)) in self.buckets.iter_mut().zip(buckets) {
                mine.1 += n;
            }
        }
    }
}

pub fn counters(e: &mut Enc, name: &str, help: &str, rows: &BTreeMap<Set, u64>) -> Res {
    let mut m = e.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (set, n) in rows {
        m.encode_family(set)?
            .encode_counter::<NoLabelSet, _, u64>(n, None)?;
    }
    Ok(())
}

fn histograms(
    e: &mut Enc,
    (name, help, unit): (&str, &str, Option<&Unit>),
    rows: &BTreeMap<Set, Merged>,
) -> Res {
    let mut m = e.encode_descriptor(name, help, unit, MetricType::Histogram)?;
    for (set, h) in rows {
        m.encode_family(set)?
            .encode_histogram::<NoLabelSet>(h.sum, h.count, &h.buckets, None)?;
    }
    Ok(())
}

pub fn counter(e: &mut Enc, name: &str, help: &str, v: u64) -> Res {
    e.encode_descriptor(name, help, None, MetricType::Counter)?
        .encode_counter::<NoLabelSet, _, u64>(&v, None)
}

/// A family of plain counters, owned (so label sets can borrow from it).
fn owned<const N: usize>(f: &Family<N, Counter>) -> Vec<([String; N], u64)> {
    f.series()
        .into_iter()
        .map(|(labels, c)| (labels.0.map(|v| v.to_string()), c.get()))
        .collect()
}

/// Those counters as rows under `names`.
fn table<'a, const N: usize>(
    names: [&'static str; N],
    rows: &'a [([String; N], u64)],
) -> BTreeMap<Set<'a>, u64> {
    rows.iter()
        .map(|(values, n)| {
            let set = names.iter().copied().zip(values.iter().map(String::as_str));
            (set.collect(), *n)
        })
        .collect()
}

/// Every request series, in a fixed order.
pub fn write(e: &mut Enc, m: &Metrics) -> Res {
    let calls: Vec<([String; 5], std::sync::Arc<Calls>)> = m
        .calls
        .series()
        .into_iter()
        .map(|(l, c)| (l.0.map(|v| v.to_string()), c))
        .collect();
    gen_ai(e, &calls)?;
    gateway(e, m, &calls)?;
    mcp(e, m)
}

/// The MCP gateway's tool calls: counted by server, tool and outcome; timed by server.
fn mcp(e: &mut Enc, m: &Metrics) -> Res {
    let calls: Vec<([String; 3], u64)> = m
        .mcp_calls
        .series()
        .into_iter()
        .map(|(l, c)| (l.0.map(|v| v.to_string()), c.get()))
        .collect();
    counters(
        e,
        "switchyard_mcp_calls",
        "MCP tool calls by server, tool and outcome.",
        &table(["server", "tool", "outcome"], &calls),
    )?;
    let servers: Vec<(String, std::sync::Arc<Histogram>)> = m
        .mcp_duration
        .series()
        .into_iter()
        .map(|(l, h)| (l.0[0].to_string(), h))
        .collect();
    let mut rows = BTreeMap::new();
    for (server, h) in &servers {
        let mut merged = Merged::default();
        merged.add(h);
        rows.insert(vec![("server", server.as_str())], merged);
    }
    histograms(
        e,
        (
            "switchyard_mcp_call_duration",
            "How long MCP tool calls took, by server (the gateway's time included).",
            Some(&Unit::Seconds),
        ),
        &rows,
    )
}

/// The GenAI client metrics, keyed by operation, provider, request and response model.
fn gen_ai(e: &mut Enc, calls: &[([String; 5], std::sync::Arc<Calls>)]) -> Res {
    fn gen_ai(l: &[String; 5]) -> Set<'_> {
        vec![
            ("gen_ai_operation_name", &l[0]),
            ("gen_ai_provider_name", &l[1]),
            ("gen_ai_request_model", &l[3]),
            ("gen_ai_response_model", &l[4]),
        ]
    }
    let mut duration: BTreeMap<Set, Merged> = BTreeMap::new();
    let mut tokens: BTreeMap<Set, Merged> = BTreeMap::new();
    let mut first: BTreeMap<Set, Merged> = BTreeMap::new();
    let mut per: BTreeMap<Set, Merged> = BTreeMap::new();
    fn merge<'a>(rows: &mut BTreeMap<Set<'a>, Merged>, key: Set<'a>, h: &Lazy) {
        if let Some(h) = h.get() {
            rows.entry(key).or_default().add(h);
        }
    }
    for (l, c) in calls {
        for i in 0..OUTCOMES {
            // `error_type` is left out on a success, as the conventions have it.
            let mut key = gen_ai(l);
            if i > 0 {
                key.push(("error_type", outcome_name(i)));
            }
            merge(&mut duration, key, &c.duration[i]);
        }
        for (kind, h) in [
            ("input", &c.input),
            ("cached_input", &c.cached_input),
            ("cache_write", &c.cache_write),
            ("output", &c.output),
        ] {
            let mut key = gen_ai(l);
            key.push(("gen_ai_token_type", kind));
            merge(&mut tokens, key, h);
        }
        merge(&mut first, gen_ai(l), &c.first_token);
        merge(&mut per, gen_ai(l), &c.per_token);
    }
    let s = Some(&Unit::Seconds);
    histograms(
        e,
        (
            "gen_ai_client_operation_duration",
            "GenAI operation duration: each upstream call, until its answer (a stream: its end).",
            s,
        ),
        &duration,
    )?;
    histograms(
        e,
        (
            "gen_ai_client_token_usage",
            "Tokens used by each served call, by gen_ai_token_type (input; of it cached_input and cache_write; output).",
            None,
        ),
        &tokens,
    )?;
    histograms(
        e,
        (
            "gen_ai_server_time_to_first_token",
            "Time from a streamed call's start to its first content.",
            s,
        ),
        &first,
    )?;
    histograms(
        e,
        (
            "gen_ai_server_time_per_output_token",
            "Time per output token after the first, for streamed calls.",
            s,
        ),
        &per,
    )
}

/// The gateway's own request counters and its overhead.
fn gateway(e: &mut Enc, m: &Metrics, calls: &[([String; 5], std::sync::Arc<Calls>)]) -> Res {
    let (requests, skips) = (owned(&m.requests), owned(&m.skips));
    let (semantic, cost) = (owned(&m.semantic), owned(&m.cost));
    let mut attempts: BTreeMap<Set, u64> = BTreeMap::new();
    let mut failovers = table(["model", "from_channel", "reason"], &skips);
    for (l, c) in calls {
        for i in 0..OUTCOMES {
            let (n, f) = (c.outcomes[i].get(), c.failovers[i].get());
            let names = [("channel", l[2].as_str()), ("model", l[3].as_str())];
            if n > 0 {
                let key = vec![names[0], names[1], ("outcome_class", outcome_name(i))];
                *attempts.entry(key).or_default() += n;
            }
            if f > 0 {
                let key = vec![
                    ("model", names[1].1),
                    ("from_channel", names[0].1),
                    ("reason", outcome_name(i)),
                ];
                *failovers.entry(key).or_default() += f;
            }
        }
    }
    counters(
        e,
        "switchyard_requests",
        "Requests by client protocol, model and outcome.",
        &table(["ingress", "model", "outcome"], &requests),
    )?;
    counters(
        e,
        "switchyard_attempts",
        "Upstream calls by channel, model and outcome class.",
        &attempts,
    )?;
    counters(
        e,
        "switchyard_failovers",
        "Requests moved off a channel to another, by the reason.",
        &failovers,
    )?;
    counters(
        e,
        "switchyard_semantic_decisions",
        "Semantic routing decisions by router and the instance that served.",
        &table(["router", "instance"], &semantic),
    )?;
    counter(
        e,
        "switchyard_trimmed_requests",
        "Requests whose history was trimmed to fit a context window.",
        m.trimmed.get(),
    )?;
    let cache: BTreeMap<Set, u64> = ["hit", "miss", "bypass", "semantic-hit"]
        .iter()
        .zip(&m.cache)
        .map(|(r, c)| (vec![("result", *r)], c.get()))
        .collect();
    counters(
        e,
        "switchyard_cache_requests",
        "Chat requests by what the response cache did: hit, miss, bypass, semantic-hit.",
        &cache,
    )?;
    let mut lookup = Merged::default();
    lookup.add(&m.cache_lookup);
    let lookups = match lookup.count {
        0 => BTreeMap::new(),
        _ => BTreeMap::from([(Vec::new(), lookup)]),
    };
    histograms(
        e,
        (
            "switchyard_cache_lookup",
            "Time the response cache's lookups took, the question's embedding included.",
            Some(&Unit::Seconds),
        ),
        &lookups,
    )?;
    counters(
        e,
        "switchyard_cost_micros",
        "Spend in micro-dollars by key and served model.",
        &table(["key", "model"], &cost),
    )?;
    let mut overhead = BTreeMap::new();
    for (stream, h) in ["false", "true"].into_iter().zip(&m.overhead) {
        let mut merged = Merged::default();
        merged.add(h);
        if merged.count > 0 {
            overhead.insert(vec![("stream", stream)], merged);
        }
    }
    histograms(
        e,
        (
            "switchyard_overhead",
            "Time the gateway itself spent on a request: total minus waiting on upstreams and the client.",
            Some(&Unit::Seconds),
        ),
        &overhead,
    )
}
