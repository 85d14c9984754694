//! The OTLP/HTTP (protobuf) trace exporter: opentelemetry-otlp's, over the reqwest the gateway
//! already builds (no gRPC stack), driven by a runtime of its own on the batch processor's
//! thread, so exporting never takes a request's worker. Configured by `[telemetry]` and the
//! standard `OTEL_*` variables.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchSpanProcessor, SpanProcessor};

use super::trace::{TraceCounts, Tracer};
use crate::config::telemetry::TelemetrySettings;

#[derive(Debug, thiserror::Error)]
pub enum TraceSetupError {
    #[error("the OTLP trace exporter: {0}")]
    Exporter(String),
    #[error("the OTLP exporter's runtime: {0}")]
    Runtime(std::io::Error),
}

/// Posts export batches; counts the ones that fail.
struct Client {
    http: reqwest::Client,
    /// Always `Some` until dropped (taken to shut down without blocking).
    runtime: Option<tokio::runtime::Runtime>,
    counts: Arc<TraceCounts>,
}

impl Drop for Client {
    fn drop(&mut self) {
        // Dropped wherever the exporter goes; a plain drop would panic on a runtime thread.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("otlp::Client")
    }
}

/// Largest collector answer read (an OTLP answer is a few bytes).
const MAX_ANSWER: usize = 64 * 1024;

#[async_trait::async_trait]
impl HttpClient for Client {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        // Called on the batch processor's own thread, outside any tokio runtime: the post runs
        // to completion on this client's runtime there.
        let result = match &self.runtime {
            Some(rt) => rt.block_on(post(&self.http, request)),
            None => Err("the exporter is shutting down".into()),
        };
        let failed = match &result {
            Ok(r) => !r.status().is_success(),
            Err(_) => true,
        };
        if failed {
            self.counts.failed.fetch_add(1, Ordering::Relaxed);
        }
        result
    }
}

async fn post(
    http: &reqwest::Client,
    request: Request<Bytes>,
) -> Result<Response<Bytes>, HttpError> {
    let request = reqwest::Request::try_from(request)?;
    let resp = http.execute(request).await?;
    let mut out = Response::builder().status(resp.status());
    for (k, v) in resp.headers() {
        out = out.header(k, v);
    }
    let body = resp.bytes().await?;
    let body = body.slice(..body.len().min(MAX_ANSWER));
    Ok(out.body(body)?)
}

/// The export timeout: `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`, else `OTEL_EXPORTER_OTLP_TIMEOUT`
/// (milliseconds), else 10 s.
fn timeout() -> Duration {
    [
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok()?.trim().parse::<u64>().ok())
    .map_or(Duration::from_secs(10), Duration::from_millis)
}

/// Whether spans go anywhere: `[telemetry] otlp_endpoint`, or an OTLP endpoint in the
/// environment (`var` reads it); never with `OTEL_SDK_DISABLED=true` or
/// `OTEL_TRACES_EXPORTER=none`.
fn wanted(s: &TelemetrySettings, var: impl Fn(&str) -> Option<String>) -> bool {
    let env = |v: &str| var(v).filter(|x| !x.trim().is_empty());
    if env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
        || env("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"))
    {
        return false;
    }
    s.traces_url.is_some()
        || env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some()
        || env("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
}

/// `service.name`: `OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES` when they name it, else
/// `switchyard`.
fn resource() -> Resource {
    let named = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.trim().is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| v.contains("service.name="));
    let b = Resource::builder();
    if named {
        b
    } else {
        b.with_service_name("switchyard")
    }
    .build()
}

/// The tracer, when spans go anywhere.
pub fn tracer(s: &TelemetrySettings) -> Result<Option<Tracer>, TraceSetupError> {
    if !wanted(s, |v| std::env::var(v).ok()) {
        return Ok(None);
    }
    crate::provider::install_crypto_provider();
    let counts = Arc::new(TraceCounts::default());
    let http = reqwest::Client::builder()
        .timeout(timeout())
        .connect_timeout(Duration::from_secs(5))
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build()
        .map_err(|e| TraceSetupError::Exporter(e.to_string()))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name("switchyard-otlp")
        .build()
        .map_err(TraceSetupError::Runtime)?;
    let client = Client {
        http,
        runtime: Some(runtime),
        counts: counts.clone(),
    };
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(Protocol::HttpBinary);
    // A configured endpoint is a base URL; without one the exporter reads the OTEL_* variables.
    if let Some(url) = &s.traces_url {
        builder = builder.with_endpoint(url.clone());
    }
    let exporter = builder
        .build()
        .map_err(|e| TraceSetupError::Exporter(e.to_string()))?;
    let mut processor = BatchSpanProcessor::builder(exporter).build();
    processor.set_resource(&resource());
    let sampler = opentelemetry_sdk::trace::Config::default().sampler;
    Tracer::new(processor, sampler, s.capture_content, counts)
        .map(Some)
        .map_err(TraceSetupError::Runtime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_are_on_for_an_endpoint_and_off_when_the_standard_variables_say_so() {
        let configured = TelemetrySettings {
            traces_url: Some("http://127.0.0.1:4318/v1/traces".into()),
            capture_content: false,
        };
        let none = TelemetrySettings::default();
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |v: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == v)
                    .map(|(_, x)| x.to_string())
            }
        };
        type Vars = &'static [(&'static str, &'static str)];
        let cases: &[(&TelemetrySettings, Vars, bool)] = &[
            (&none, &[], false),
            (&configured, &[], true),
            (
                &none,
                &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")],
                true,
            ),
            (
                &none,
                &[(
                    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                    "http://c:4318/v1/traces",
                )],
                true,
            ),
            (&none, &[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")], false),
            (&configured, &[("OTEL_SDK_DISABLED", "TRUE")], false),
            (&configured, &[("OTEL_TRACES_EXPORTER", "none")], false),
            (&configured, &[("OTEL_SDK_DISABLED", "false")], true),
        ];
        for (settings, vars, on) in cases {
            assert_eq!(wanted(settings, env(vars)), *on, "{vars:?}");
        }
    }
}
