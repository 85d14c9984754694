//! Read-only views of health for the operator: `GET /admin/health`'s rows and the metrics'
//! gauges, read under the same lock as everything else, never on the request path.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Circuit, Health};
use crate::config::HealthSettings;

impl Health {
    /// Each (channel, model) entry's score and circuit (0 closed, 1 half open, 2 open), for
    /// the metrics: read at a scrape, never on the request path.
    pub fn gauges(&self, s: &HealthSettings) -> Vec<(Arc<str>, f64, u8)> {
        let now = self.clock.now();
        let map = self.lock();
        map.iter()
            .map(|(k, e)| {
                let circuit = match e.circuit {
                    Circuit::Closed => 0,
                    Circuit::HalfOpen { .. } => 1,
                    Circuit::Open { until } if now >= until => 1,
                    Circuit::Open { .. } => 2,
                };
                (k.channel.clone(), e.score(s), circuit)
            })
            .collect()
    }

    /// Everything health knows, for `GET /admin/health`.
    pub fn report(&self, s: &HealthSettings) -> Value {
        let now = self.clock.now();
        let map = self.lock();
        let mut rows: Vec<Value> = map
            .iter()
            .map(|(k, e)| {
                let total = e.window.len();
                let ok = e.window.successes();
                let (state, left) = match e.circuit {
                    Circuit::Closed => ("closed", None),
                    Circuit::Open { until } => ("open", Some(until.saturating_duration_since(now))),
                    Circuit::HalfOpen { .. } => ("half_open", None),
                };
                json!({
                    "channel": &*k.channel,
                    "model": k.model.as_deref(),
                    "score": (e.score(s) * 10.0).round() / 10.0,
                    "verdicts": total,
                    "success_rate": if total == 0 { Value::Null } else { json!(ok as f64 / total as f64) },
                    "circuit": state,
                    "circuit_seconds_left": left.map(|d| d.as_secs_f64()),
                    "rate_limited_seconds_left": e.cooling_until
                        .filter(|t| *t > now)
                        .map(|t| t.duration_since(now).as_secs_f64()),
                    "last_probe": e.last_probe.map(|(t, ok)| json!({
                        "seconds_ago": now.duration_since(t).as_secs_f64(),
                        "ok": ok,
                    })),
                })
            })
            .collect();
        rows.sort_by(|a, b| a["channel"].as_str().cmp(&b["channel"].as_str()));
        Value::Array(rows)
    }
}
