//! `[metrics]` and `[telemetry]` as written, and compiled: where Prometheus scrapes the
//! gateway (and with what token), how many keys get a label of their own, and where traces go.

use std::net::SocketAddr;

use serde::Deserialize;

use crate::secret::Secret;

/// `[metrics]`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsSection {
    /// `GET /metrics` is served and requests are counted (off: neither).
    pub enabled: bool,
    /// When set, `/metrics` wants `Authorization: Bearer <token>`.
    pub token: Option<String>,
    /// Serve `/metrics` on this address of its own instead of the main listener.
    pub listen: Option<String>,
    /// Keys beyond this many (in config order) are counted under the key label `other`.
    pub max_key_labels: usize,
}

impl Default for MetricsSection {
    fn default() -> Self {
        MetricsSection {
            enabled: true,
            token: None,
            listen: None,
            max_key_labels: 100,
        }
    }
}

/// `[telemetry]`.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetrySection {
    /// OTLP/HTTP base URL (as `OTEL_EXPORTER_OTLP_ENDPOINT`): spans go to `<it>/v1/traces`.
    pub otlp_endpoint: Option<String>,
    /// Record prompts and completions on attempt spans (`gen_ai.input.messages`, ...).
    pub capture_content: bool,
}

/// `[metrics]`, compiled.
#[derive(Debug, Clone)]
pub struct MetricsSettings {
    pub enabled: bool,
    pub token: Option<Secret>,
    pub listen: Option<SocketAddr>,
    pub max_key_labels: usize,
}

/// `[telemetry]`, compiled. The exporter is built once, at start, from these.
#[derive(Debug, Clone, Default)]
pub struct TelemetrySettings {
    /// The traces endpoint: the base URL with `/v1/traces` appended.
    pub traces_url: Option<String>,
    pub capture_content: bool,
}

type FieldError = (String, String);

pub fn metrics(s: &MetricsSection) -> Result<MetricsSettings, FieldError> {
    let listen = match &s.listen {
        Some(a) => Some(a.parse::<SocketAddr>().map_err(|_| {
            (
                "metrics.listen".to_string(),
                format!("expected host:port with an IP address, got {a:?}"),
            )
        })?),
        None => None,
    };
    let token = match s.token.as_deref() {
        Some("") => {
            return Err((
                "metrics.token".into(),
                "must not be empty (leave it out for an open /metrics)".into(),
            ));
        }
        t => t.map(Secret::new),
    };
    Ok(MetricsSettings {
        enabled: s.enabled,
        token,
        listen,
        max_key_labels: s.max_key_labels,
    })
}

pub fn telemetry(s: &TelemetrySection) -> Result<TelemetrySettings, FieldError> {
    let traces_url = match s.otlp_endpoint.as_deref() {
        Some(base) => Some(traces_url(base).map_err(|m| ("telemetry.otlp_endpoint".into(), m))?),
        None => None,
    };
    Ok(TelemetrySettings {
        traces_url,
        capture_content: s.capture_content,
    })
}

/// `<base>/v1/traces`, as the OTLP spec builds a signal's URL from `OTEL_EXPORTER_OTLP_ENDPOINT`.
pub fn traces_url(base: &str) -> Result<String, String> {
    let url = reqwest::Url::parse(base)
        .map_err(|e| format!("expected an http:// or https:// base URL ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err("expected an http:// or https:// base URL".into());
    }
    if url.query().is_some() {
        return Err("a base URL takes no query: /v1/traces is appended to its path".into());
    }
    Ok(format!("{}/v1/traces", base.trim_end_matches('/')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_url_is_the_base_with_the_signal_path() {
        for (base, want) in [
            ("http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"),
            ("http://collector:4318/", "http://collector:4318/v1/traces"),
            (
                "https://otel.example/otlp",
                "https://otel.example/otlp/v1/traces",
            ),
        ] {
            assert_eq!(traces_url(base).as_deref(), Ok(want));
        }
        for bad in ["collector:4318", "ftp://x", "http://x/?a=1", ""] {
            assert!(traces_url(bad).is_err(), "{bad}");
        }
    }
}
