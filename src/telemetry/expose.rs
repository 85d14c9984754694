//! `GET /metrics`: the request series and the state read at the scrape (health, circuits,
//! credentials, bindings, budgets, queues), written by prometheus-client's OpenMetrics text
//! encoder. Nothing here runs on the request path.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use super::Telemetry;
use super::metrics::{Metrics, OTHER, key_label};
use super::series::{self, Enc, Res, counter};
use crate::config::Snapshot;
use crate::health::Health;

/// What the scrape reads besides the series: the state of the gateway now.
#[derive(Debug, Default)]
pub struct Gauges {
    pub channels: Vec<ChannelGauge>,
    pub bindings: Option<u64>,
    pub state_connected: bool,
    pub log_dropped: u64,
    pub events_dropped: u64,
    /// Per key label: its budget (micro-dollars) and what is spent or held of it.
    pub budgets: Vec<(String, u64, u64)>,
}

/// A channel's state at the scrape.
#[derive(Debug)]
pub struct ChannelGauge {
    pub name: Arc<str>,
    /// 0-100: the worst of its (channel, model) entries.
    pub score: f64,
    /// 0 closed, 1 half open, 2 open: the worst of its entries.
    pub circuit: u8,
    /// Credentials that can take a call now, of how many.
    pub available: usize,
    pub credentials: usize,
}

/// Per channel of `snap`: its worst score and circuit over its (channel, model) entries, and
/// its credentials' availability.
pub fn channel_gauges(snap: &Snapshot, health: &Health) -> Vec<ChannelGauge> {
    let mut worst: std::collections::HashMap<Arc<str>, (f64, u8)> = Default::default();
    for (channel, score, circuit) in health.gauges(&snap.health) {
        let w = worst.entry(channel).or_insert((100.0, 0));
        *w = (w.0.min(score), w.1.max(circuit));
    }
    snap.channels
        .iter()
        .map(|ch| {
            let (score, circuit) = worst.get(&ch.name).copied().unwrap_or((100.0, 0));
            let creds = ch.credentials.len();
            let available = if creds == 0 {
                0
            } else {
                health.pools.available(&ch.name, &ch.credentials)
            };
            ChannelGauge {
                name: ch.name.clone(),
                score,
                circuit,
                available,
                credentials: creds,
            }
        })
        .collect()
}

/// Every key's budget that this scrape reads: keys with a label of their own only (an `other`
/// budget has no meaning), all within `timeout` of the shared counters (the rest are left out).
pub async fn budgets(
    snap: &Snapshot,
    meter: &crate::spend::Meter,
    timeout: Duration,
) -> Vec<(String, u64, u64)> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut out = Vec::new();
    for (i, k) in snap.keys.iter().enumerate() {
        let Some(b) = k.quota.budget else { continue };
        let label = key_label(snap, Some(i));
        if label == OTHER {
            continue;
        }
        let standing = tokio::time::timeout_at(deadline, meter.standing(&k.scope, &k.quota));
        let Ok(standing) = standing.await else { break };
        if let Some(s) = standing {
            out.push((
                label.to_string(),
                b.micros,
                s.spent.saturating_add(s.reserved),
            ));
        }
    }
    out
}

/// The whole exposition, `# EOF` included.
pub fn encode(t: &Telemetry, g: Gauges) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape {
        metrics: t.metrics.clone(),
        trace: t.trace_counts(),
        gauges: g,
    }));
    let mut out = String::with_capacity(16 * 1024);
    // Writing to a String cannot fail; an encoder error would be ours, shown as an empty page.
    if prometheus_client::encoding::text::encode(&mut out, &registry).is_err() {
        out.clear();
    }
    out
}

#[derive(Debug)]
struct Scrape {
    metrics: Arc<Metrics>,
    /// Spans handed to the exporter, exports that failed, requests whose spans were dropped.
    trace: [u64; 3],
    gauges: Gauges,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

fn gauge(
    e: &mut Enc,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    rows: &[(Vec<(&str, &str)>, f64)],
) -> Res {
    let mut m = e.encode_descriptor(name, help, unit, MetricType::Gauge)?;
    for (labels, v) in rows {
        m.encode_family(labels)?.encode_gauge(v)?;
    }
    Ok(())
}

impl Collector for Scrape {
    fn encode(&self, mut e: DescriptorEncoder) -> Res {
        series::write(&mut e, &self.metrics)?;
        self.state(&mut e)
    }
}

impl Scrape {
    /// State read at the scrape.
    fn state(&self, e: &mut Enc) -> Res {
        let g = &self.gauges;
        let per_channel = |pick: fn(&ChannelGauge) -> f64| {
            g.channels
                .iter()
                .map(|c| (vec![("channel", &*c.name)], pick(c)))
                .collect::<Vec<_>>()
        };
        gauge(
            e,
            "switchyard_channel_health_score",
            "Health score, 0-100 (the worst of the channel's models).",
            None,
            &per_channel(|c| c.score),
        )?;
        gauge(
            e,
            "switchyard_circuit_state",
            "Circuit breaker: 0 closed, 1 half open, 2 open.",
            None,
            &per_channel(|c| f64::from(c.circuit)),
        )?;
        gauge(
            e,
            "switchyard_credential_available",
            "Credentials that can take a call now (not refused, not cooling).",
            None,
            &per_channel(|c| c.available as f64),
        )?;
        gauge(
            e,
            "switchyard_credentials",
            "Credentials configured.",
            None,
            &per_channel(|c| c.credentials as f64),
        )?;
        if let Some(n) = g.bindings {
            gauge(
                e,
                "switchyard_session_bindings",
                "Sessions bound to a channel.",
                None,
                &[(vec![], n as f64)],
            )?;
        }
        gauge(
            e,
            "switchyard_state_connected",
            "Shared state answers (1; in memory, always).",
            None,
            &[(vec![], f64::from(u8::from(g.state_connected)))],
        )?;
        let budgets = |pick: fn(&(String, u64, u64)) -> u64| {
            g.budgets
                .iter()
                .map(|b| (vec![("key", b.0.as_str())], pick(b) as f64))
                .collect::<Vec<_>>()
        };
        gauge(
            e,
            "switchyard_budget_limit_micros",
            "A key's budget for its current period, in micro-dollars.",
            None,
            &budgets(|b| b.1),
        )?;
        gauge(
            e,
            "switchyard_budget_used_micros",
            "Spent and held of a key's budget this period.",
            None,
            &budgets(|b| b.2),
        )?;
        gauge(
            e,
            "switchyard_budget_headroom_micros",
            "What is left of a key's budget this period.",
            None,
            &budgets(|b| b.1.saturating_sub(b.2)),
        )?;
        counter(
            e,
            "switchyard_log_dropped",
            "Request log rows dropped from the queue (it was full); the journal writes them later.",
            g.log_dropped,
        )?;
        counter(
            e,
            "switchyard_events_dropped",
            "Events dropped (the queue was full).",
            g.events_dropped,
        )?;
        let [spans, failed, dropped] = self.trace;
        counter(
            e,
            "switchyard_trace_spans",
            "Spans handed to the OTLP exporter.",
            spans,
        )?;
        counter(
            e,
            "switchyard_trace_export_failures",
            "OTLP exports that failed (the collector refused or was unreachable).",
            failed,
        )?;
        counter(
            e,
            "switchyard_trace_dropped",
            "Sampled requests whose spans were dropped (the span queue was full).",
            dropped,
        )?;
        let version = [("version", env!("CARGO_PKG_VERSION"))];
        e.encode_descriptor(
            "switchyard_build",
            "The build that runs.",
            None,
            MetricType::Info,
        )?
        .encode_info(&version)
    }
}
