//! The console's static files, compiled into the binary: its stylesheet, its scripts (one
//! shared, one per page) and the vendored chart library (uPlot 1.6.32, MIT, `uPlot.LICENSE`).

use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// Name, content type, bytes.
const FILES: [(&str, &str, &[u8]); 16] = [
    (
        "console.css",
        "text/css",
        include_bytes!("assets/console.css"),
    ),
    (
        "console.js",
        "text/javascript",
        include_bytes!("assets/console.js"),
    ),
    (
        "channels.js",
        "text/javascript",
        include_bytes!("assets/channels.js"),
    ),
    (
        "keys.js",
        "text/javascript",
        include_bytes!("assets/keys.js"),
    ),
    (
        "logs.js",
        "text/javascript",
        include_bytes!("assets/logs.js"),
    ),
    (
        "performance.js",
        "text/javascript",
        include_bytes!("assets/performance.js"),
    ),
    (
        "health.js",
        "text/javascript",
        include_bytes!("assets/health.js"),
    ),
    (
        "usage.js",
        "text/javascript",
        include_bytes!("assets/usage.js"),
    ),
    (
        "playground.js",
        "text/javascript",
        include_bytes!("assets/playground.js"),
    ),
    ("mcp.js", "text/javascript", include_bytes!("assets/mcp.js")),
    (
        "audit.js",
        "text/javascript",
        include_bytes!("assets/audit.js"),
    ),
    (
        "signin.js",
        "text/javascript",
        include_bytes!("assets/signin.js"),
    ),
    (
        "uPlot.iife.min.js",
        "text/javascript",
        include_bytes!("assets/uPlot.iife.min.js"),
    ),
    (
        "uPlot.min.css",
        "text/css",
        include_bytes!("assets/uPlot.min.css"),
    ),
    (
        "uPlot.LICENSE",
        "text/plain",
        include_bytes!("assets/uPlot.LICENSE"),
    ),
    (
        "favicon.svg",
        "image/svg+xml",
        include_bytes!("assets/favicon.svg"),
    ),
];

pub async fn serve(Path(file): Path<String>) -> Response {
    let Some((_, kind, bytes)) = FILES.iter().find(|(n, _, _)| *n == file) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let mut r = (*bytes).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // Short: a new build's pages must not run an older script for long.
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, max-age=300"),
    );
    r
}
