//! Metrics and traces, by the OpenTelemetry GenAI conventions where they name a thing:
//! `family.rs` (the series: atomics by label values from the config), `metrics.rs` (what a
//! finished request adds), `expose.rs` (`GET /metrics`, with the state read at the scrape),
//! `trace.rs` (a SERVER span per request, a CLIENT span per upstream call) and `otlp.rs` (their
//! export). A request is observed once, when it ends; nothing here waits on anything.

pub mod expose;
mod family;
pub mod metrics;
mod otlp;
mod series;
mod spans;
pub mod trace;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::http::HeaderMap;

pub use expose::Gauges;
pub use metrics::{Finished, Metrics};
pub use otlp::TraceSetupError;
pub use trace::{Answered, RequestTrace, Tracer};

use crate::config::telemetry::TelemetrySettings;

pub struct Telemetry {
    pub metrics: Arc<Metrics>,
    /// `None`: spans go nowhere (no endpoint configured), and requests pay nothing for them.
    pub tracer: Option<Tracer>,
}

impl Telemetry {
    /// Metrics always; a tracer when `[telemetry]` or the environment names an endpoint.
    pub fn new(s: &TelemetrySettings) -> Result<Telemetry, TraceSetupError> {
        Ok(Telemetry {
            metrics: Arc::default(),
            tracer: otlp::tracer(s)?,
        })
    }

    /// No tracer (tests and tools that only count).
    pub fn untraced() -> Telemetry {
        Telemetry {
            metrics: Arc::default(),
            tracer: None,
        }
    }

    /// A new request's trace, when spans go anywhere.
    pub fn start(&self, headers: &HeaderMap, endpoint: &str) -> Option<RequestTrace> {
        self.tracer.as_ref().map(|t| t.start(headers, endpoint))
    }

    /// Whether a request's spans will be recorded (what the answer's facts are read for).
    pub fn records(&self, trace: Option<&RequestTrace>) -> bool {
        self.tracer.is_some() && trace.is_some_and(|t| t.ctx.sampled)
    }

    /// Whether sampled requests carry their prompt and completion.
    pub fn captures_content(&self) -> bool {
        self.tracer.as_ref().is_some_and(|t| t.capture_content)
    }

    /// A request has ended: its series, and its spans if it is sampled.
    pub fn finish(&self, f: &Finished<'_>, trace: Option<&RequestTrace>, answer: Answered) {
        if f.snap.metrics.enabled {
            self.metrics.observe(f);
        }
        if let (Some(tracer), Some(t)) = (&self.tracer, trace) {
            tracer.finish(f, t, answer);
        }
    }

    /// Spans handed to the exporter, exports that failed, and requests whose spans were
    /// dropped.
    pub fn trace_counts(&self) -> [u64; 3] {
        self.tracer.as_ref().map_or([0; 3], |t| {
            let c = &t.counts;
            [&c.spans, &c.failed, &c.dropped].map(|n| n.load(Ordering::Relaxed))
        })
    }

    /// Builds and exports the spans still queued (at shutdown; tests), waiting at most 10 s.
    pub fn flush(&self) {
        if let Some(t) = &self.tracer {
            t.flush(std::time::Duration::from_secs(10));
        }
    }
}
