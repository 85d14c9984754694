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
    /// The same per team (every team is a label: they are the config's).
    pub team_budgets: Vec<(String, u64, u64)>,
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

/// Every key's and team's budget that this scrape reads: keys with a label of their own only
/// (an `other` budget has no meaning), all within `timeout` of the shared counters (the rest
/// are left out).
pub async fn budgets(
    snap: &Snapshot,
    meter: &crate::spend::Meter,
    timeout: Duration,
) -> (Vec<(String, u64, u64)>, Vec<(String, u64, u64)>) {
    let deadline = tokio::time::Instant::now() + timeout;
    let keys = snap.keys.iter().enumerate().filter_map(|(i, k)| {
        let label = key_label(snap, Some(i));
        (label != OTHER).then_some((label, &*k.scope, k.tag(), &k.quota))
    });
    let teams = snap
        .teams
        .list
        .iter()
        .map(|t| (&*t.name, &*t.scope, Some(&*t.tag), &t.quota));
    let mut out = (Vec::new(), Vec::new());
    for (team, (label, scope, tag, quota)) in
        keys.map(|k| (false, k)).chain(teams.map(|t| (true, t)))
    {
        let Some(b) = quota.budget else { continue };
        let standing = tokio::time::timeout_at(deadline, meter.standing(scope, tag, quota));
        let Ok(standing) = standing.await else { break };
        if let Some(s) = standing {
            let row = (
                label.to_string(),
                b.micros,
                s.spent.saturating_add(s.reserved),
            );
            if team {
                out.1.push(row)
            } else {
                out.0.push(row)
            }
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
        budget_gauges(e, g)?;
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

/// Each key's and team's budget, used and headroom.
fn budget_gauges(e: &mut Enc, g: &Gauges) -> Res {
    // (the label, its budgets, the families' prefix, what the label names)
    let families = [
        ("key", &g.budgets, "switchyard_budget", "a key's"),
        (
            "team",
            &g.team_budgets,
            "switchyard_team_budget",
            "a team's",
        ),
    ];
    for (label, list, prefix, whose) in families {
        let rows = |pick: fn(&(String, u64, u64)) -> u64| {
            list.iter()
                .map(|b| (vec![(label, b.0.as_str())], pick(b) as f64))
                .collect::<Vec<_>>()
        };
        gauge(
            e,
            &format!("{prefix}_limit_micros"),
            &format!("The budget of {whose} current period, in micro-dollars."),
            None,
            &rows(|b| b.1),
        )?;
        gauge(
            e,
            &format!("{prefix}_used_micros"),
            &format!("Spent and held of {whose} budget this period."),
            None,
            &rows(|b| b.2),
        )?;
        gauge(
            e,
            &format!("{prefix}_headroom_micros"),
            &format!("What is left of {whose} budget this period."),
            None,
            &rows(|b| b.1.saturating_sub(b.2)),
        )?;
    }
    Ok(())
}

/// The OpenMetrics page as Prometheus text format 0.0.4, for scrapers that do not ask for
/// OpenMetrics: a counter's and an info's family is named as its samples are (`…_total`,
/// `…_info`, the info a gauge), and `# UNIT`, `# EOF` and exemplars, which 0.0.4 lacks, go.
pub fn classic(om: &str) -> String {
    let mut kinds = std::collections::HashMap::new();
    for l in om.lines() {
        if let Some((name, kind)) = l.strip_prefix("# TYPE ").and_then(|r| r.split_once(' ')) {
            kinds.insert(name, kind);
        }
    }
    let renamed = |name: &str| match kinds.get(name) {
        Some(&"counter") => (format!("{name}_total"), "counter"),
        Some(&"info") => (format!("{name}_info"), "gauge"),
        Some(kind) => (name.to_string(), *kind),
        None => (name.to_string(), "untyped"),
    };
    let mut out = String::with_capacity(om.len());
    for l in om.lines() {
        if l.starts_with("# UNIT ") || l == "# EOF" {
            continue;
        }
        if let Some((name, help)) = l.strip_prefix("# HELP ").and_then(|r| r.split_once(' ')) {
            out.push_str(&format!("# HELP {} {help}\n", renamed(name).0));
        } else if let Some((name, _)) = l.strip_prefix("# TYPE ").and_then(|r| r.split_once(' ')) {
            let (name, kind) = renamed(name);
            out.push_str(&format!("# TYPE {name} {kind}\n"));
        } else {
            // A sample, without its exemplar (` # {…} value`).
            out.push_str(l.split(" # ").next().unwrap_or(l));
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod classic_tests {
    #[test]
    fn counters_and_infos_are_named_as_their_samples_and_openmetrics_only_lines_go() {
        let om = "# HELP a_requests Requests.\n# TYPE a_requests counter\na_requests_total{m=\"x\"} 3\n\
                  # HELP a_wait Wait.\n# TYPE a_wait histogram\n# UNIT a_wait seconds\n\
                  a_wait_bucket{le=\"1.0\"} 1 # {trace_id=\"ab\"} 0.5\na_wait_sum 0.5\na_wait_count 1\n\
                  # HELP a_build Build.\n# TYPE a_build info\na_build_info{version=\"1\"} 1\n# EOF\n";
        let want = "# HELP a_requests_total Requests.\n# TYPE a_requests_total counter\na_requests_total{m=\"x\"} 3\n\
                    # HELP a_wait Wait.\n# TYPE a_wait histogram\n\
                    a_wait_bucket{le=\"1.0\"} 1\na_wait_sum 0.5\na_wait_count 1\n\
                    # HELP a_build_info Build.\n# TYPE a_build_info gauge\na_build_info{version=\"1\"} 1\n";
        assert_eq!(super::classic(om), want);
    }
}
