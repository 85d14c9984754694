//! `GET /metrics`: Prometheus's scrape, on the main listener or `[metrics] listen`, open unless
//! `[metrics] token` is set. The state it reports is read now, off the request path.

use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::ctx::bearer;
use crate::telemetry::{Gauges, expose};

/// How long a scrape waits on the shared counters for the budgets' standing.
const BUDGETS_WITHIN: Duration = Duration::from_secs(2);

/// OpenMetrics text: what prometheus-client writes, and what Prometheus asks for first.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Prometheus text 0.0.4: for every scraper that does not ask for OpenMetrics.
const CLASSIC: &str = "text/plain; version=0.0.4; charset=utf-8";

pub async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let snap = state.live.load();
    if !snap.metrics.enabled {
        return StatusCode::NOT_FOUND.into_response();
    }
    if let Some(token) = &snap.metrics.token
        && !bearer(&headers).is_some_and(|p| token.matches(p.as_bytes()))
    {
        let mut r = (StatusCode::UNAUTHORIZED, "a bearer token is required\n").into_response();
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"metrics\""),
        );
        return r;
    }
    let (budgets, team_budgets) = expose::budgets(&snap, &state.meter, BUDGETS_WITHIN).await;
    let gauges = Gauges {
        channels: expose::channel_gauges(&snap, &state.health),
        bindings: state.state.bindings().await,
        state_connected: state.state.connected(),
        log_dropped: state.log.dropped(),
        events_dropped: state.events.emitter.dropped(),
        budgets,
        team_budgets,
    };
    let body = expose::encode(&state.telemetry, gauges);
    let openmetrics = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/openmetrics-text"));
    let (body, kind) = if openmetrics {
        (body, OPENMETRICS)
    } else {
        (expose::classic(&body), CLASSIC)
    };
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    r
}
