//! `GET /admin/stats`: how each channel serves each model over a window cut in steps, to
//! compare channels before changing weights: calls and errors (from every request's attempts,
//! so a channel that failed and was failed over from is counted), time to first byte p50/p95
//! and tokens per second (of the requests it served), and the gateway's own time from its
//! overhead histograms. Test traffic is left out. Read from the request log's newest
//! [`MAX_SAMPLES`] requests in the window; `sampled` says when the window held more.

use std::collections::BTreeMap;

use axum::extract::Query;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::Admin;
use crate::exec::OutcomeClass;
use crate::protocol::InvalidRequest;
use crate::server::ApiError;
use crate::store::Sample;

/// Requests read per answer at most: a busy hour is summarised from its newest ones.
const MAX_SAMPLES: u32 = 100_000;
/// Steps per series at most.
const MAX_POINTS: i64 = 360;

#[derive(Deserialize)]
pub struct StatsQuery {
    /// Seconds back from now (default 3600, at most 7 days).
    window: Option<String>,
    /// Seconds per point (default: the window in 60 steps).
    step: Option<String>,
}

/// One cell's figures while they are summed.
#[derive(Default)]
struct Acc {
    calls: u64,
    errors: u64,
    ttfb: Vec<i64>,
    tps_sum: f64,
    tps_n: u64,
}

impl Acc {
    fn json(mut self) -> Value {
        self.ttfb.sort_unstable();
        json!({
            "calls": self.calls,
            "errors": self.errors,
            "error_rate": (self.calls > 0).then(|| self.errors as f64 / self.calls as f64),
            "served": self.ttfb.len(),
            "ttfb_p50_ms": rank(&self.ttfb, 0.50),
            "ttfb_p95_ms": rank(&self.ttfb, 0.95),
            "tokens_per_s": (self.tps_n > 0).then(|| self.tps_sum / self.tps_n as f64),
        })
    }
}

/// The nearest-rank quantile of sorted values.
fn rank(sorted: &[i64], q: f64) -> Option<i64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let i = ((q * n as f64).ceil() as usize).clamp(1, n) - 1;
    sorted.get(i).copied()
}

/// One call of a request, as its attempts JSON names it.
#[derive(Deserialize)]
struct Call {
    channel: Option<String>,
    model: String,
    reason: String,
}

/// Whether a reason is a call's (a skip is not), and whether it was the channel's failure (a
/// client's own error or an overlong prompt is not).
fn judged(reason: &str) -> Option<bool> {
    if reason == "ok" {
        return Some(false);
    }
    let class = OutcomeClass::ALL
        .into_iter()
        .find(|c| c.as_str() == reason)?;
    Some(!matches!(
        class,
        OutcomeClass::ClientError | OutcomeClass::ContextWindow
    ))
}

type Cells = BTreeMap<(String, String), (Acc, BTreeMap<i64, Acc>)>;

/// Every sample into its channel and model's total and its step's cell.
fn sum(samples: &[Sample], from_ms: i64, step_ms: i64) -> Cells {
    let mut cells = Cells::new();
    for s in samples {
        let at = (s.ts_ms - from_ms).div_euclid(step_ms);
        let calls: Vec<Call> = serde_json::from_str(&s.attempts).unwrap_or_default();
        for c in calls {
            let (Some(channel), Some(failed)) = (c.channel, judged(&c.reason)) else {
                continue;
            };
            let (total, steps) = cells.entry((channel, c.model)).or_default();
            for acc in [total, steps.entry(at).or_default()] {
                acc.calls += 1;
                acc.errors += u64::from(failed);
            }
        }
        if let (Some(channel), Some(model)) = (&s.channel, &s.model) {
            let (total, steps) = cells.entry((channel.clone(), model.clone())).or_default();
            for acc in [total, steps.entry(at).or_default()] {
                if let Some(t) = s.ttfb_ms {
                    acc.ttfb.push(t);
                }
                if let Some(r) = s.tokens_per_s {
                    acc.tps_sum += r;
                    acc.tps_n += 1;
                }
            }
        }
    }
    cells
}

/// The overhead histogram's quantiles, in microseconds (the bucket's upper bound holding it).
fn overhead(admin: &Admin) -> Value {
    let m = &admin.state.telemetry.metrics;
    let mut out = serde_json::Map::new();
    for (name, h) in [("non_stream", &m.overhead[0]), ("stream", &m.overhead[1])] {
        let (sum, count, buckets) = h.read();
        if count == 0 {
            out.insert(name.into(), Value::Null);
            continue;
        }
        let at = |q: f64| {
            let want = (q * count as f64).ceil() as u64;
            let mut seen = 0;
            buckets.iter().find_map(|(le, n)| {
                seen += n;
                (seen >= want && le.is_finite()).then(|| (le * 1e6).round())
            })
        };
        out.insert(
            name.into(),
            json!({
                "count": count,
                "mean_us": (sum / count as f64 * 1e6 * 10.0).round() / 10.0,
                "p50_us": at(0.50),
                "p95_us": at(0.95),
                "p99_us": at(0.99),
            }),
        );
    }
    Value::Object(out)
}

fn seconds(v: Option<&str>, param: &'static str) -> Result<Option<i64>, ApiError> {
    v.filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<i64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| ApiError::Invalid(InvalidRequest::new(param, "expected seconds")))
        })
        .transpose()
}

pub async fn stats(
    admin: Admin,
    query: Result<Query<StatsQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let q = match query {
        Ok(Query(q)) => q,
        Err(r) => return super::error::unreadable_query(r),
    };
    let (window, step) = match (
        seconds(q.window.as_deref(), "window"),
        seconds(q.step.as_deref(), "step"),
    ) {
        (Ok(w), Ok(s)) => {
            let w = w.unwrap_or(3600).clamp(60, 7 * 86_400);
            (
                w,
                // At most the window: a larger step would overflow into milliseconds.
                s.unwrap_or(w / 60)
                    .min(w)
                    .max((w + MAX_POINTS - 1) / MAX_POINTS)
                    .max(1),
            )
        }
        (Err(e), _) | (_, Err(e)) => return e.into_response(),
    };
    let to_ms = crate::clock::unix_ms();
    let from_ms = to_ms - window * 1000;
    let samples = match admin.state.log.samples(from_ms, MAX_SAMPLES).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "reading the request log failed");
            return ApiError::LogUnavailable.into_response();
        }
    };
    let step_ms = step * 1000;
    let series: Vec<Value> = sum(&samples, from_ms, step_ms)
        .into_iter()
        .filter(|((channel, _), _)| admin.sees_channel_named(channel))
        .map(|((channel, model), (total, steps))| {
            let points: Vec<Value> = steps
                .into_iter()
                .map(|(at, acc)| {
                    let mut p = acc.json();
                    p["t_ms"] = json!(from_ms + at * step_ms);
                    p
                })
                .collect();
            json!({"channel": channel, "model": model, "total": total.json(), "points": points})
        })
        .collect();
    axum::Json(json!({
        "object": "stats",
        "from_ms": from_ms,
        "to_ms": to_ms,
        "step_ms": step_ms,
        "requests": samples.len(),
        "sampled": samples.len() as u32 >= MAX_SAMPLES,
        "series": series,
        "overhead": overhead(&admin),
    }))
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(ts_ms: i64, served: Option<&str>, ttfb: i64, attempts: &str) -> Sample {
        Sample {
            ts_ms,
            channel: served.map(str::to_string),
            model: served.map(|_| "m".to_string()),
            ttfb_ms: Some(ttfb),
            tokens_per_s: Some(10.0),
            attempts: attempts.to_string(),
        }
    }

    #[test]
    fn a_failed_over_request_counts_a_failed_call_on_one_channel_and_a_served_one_on_the_other() {
        let failover = r#"[{"channel":"a","model":"m","status":500,"reason":"server_error","latency_ms":3},
            {"channel":"b","model":"m","status":200,"reason":"ok","latency_ms":5}]"#;
        let skipped = r#"[{"channel":"a","model":"m","status":null,"reason":"circuit_open","latency_ms":0},
            {"channel":"b","model":"m","status":200,"reason":"ok","latency_ms":5}]"#;
        let cells = sum(
            &[
                sample(1_000, Some("b"), 40, failover),
                sample(61_000, Some("b"), 20, skipped),
            ],
            0,
            60_000,
        );
        let (a, a_steps) = &cells[&("a".to_string(), "m".to_string())];
        assert_eq!((a.calls, a.errors, a.ttfb.len()), (1, 1, 0));
        assert_eq!(a_steps.len(), 1, "a skip is not a call");
        let (b, b_steps) = &cells[&("b".to_string(), "m".to_string())];
        assert_eq!((b.calls, b.errors), (2, 0));
        assert_eq!(b_steps.keys().copied().collect::<Vec<_>>(), vec![0, 1]);
        let total = cells
            .into_iter()
            .find(|((c, _), _)| c == "b")
            .map(|(_, (t, _))| t.json())
            .unwrap();
        assert_eq!(total["ttfb_p50_ms"], 20);
        assert_eq!(total["ttfb_p95_ms"], 40);
        assert_eq!(total["error_rate"], 0.0);
    }

    #[test]
    fn nearest_rank_quantiles() {
        let v: Vec<i64> = (1..=100).collect();
        assert_eq!(rank(&v, 0.5), Some(50));
        assert_eq!(rank(&v, 0.95), Some(95));
        assert_eq!(rank(&[7], 0.95), Some(7));
        assert_eq!(rank(&[], 0.5), None);
    }
}
