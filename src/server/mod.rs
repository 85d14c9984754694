//! HTTP (axum): the routes (`routes.rs`), one codec per client protocol (`ingress/`), the
//! pipeline every chat request follows (`pipeline.rs`), and the rest of the edge: the request
//! context and its log row (`ctx.rs`), bodies (`body.rs`), report headers (`headers.rs`),
//! streams (`sse.rs`), errors (`error.rs`), sessions (`affinity.rs`), semantic decisions
//! (`semantic.rs`), kept Responses (`continuation.rs`), the route preview (`explain.rs`), the
//! response cache's part (`cache.rs`). The operator side (admin API, console, sessions) is the
//! `admin` module, which builds on this one; its routes are handed in to be mounted. Handlers
//! hold no lock across an await.

mod admission;
mod affinity;
mod body;
mod cache;
mod continuation;
mod control;
pub(crate) mod ctx;
pub(crate) mod envelope;
mod error;
pub mod explain;
mod gather;
mod handlers;
mod headers;
pub(crate) mod ingress;
mod listen;
mod metrics;
mod pipeline;
mod routes;
mod semantic;
mod side;
mod sse;

pub use control::ControlError;
pub use ctx::bearer;
pub use error::ApiError;
pub use routes::{admin_router, metrics_router, router};

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::config::Live;
use crate::health::Health;
use crate::store::RequestLog;

/// Shared by every handler: the live config, channel health (which outlives config swaps) and
/// the request log.
#[derive(Clone)]
pub struct AppState {
    pub live: Arc<Live>,
    pub health: Arc<Health>,
    pub log: Arc<RequestLog>,
    /// Session bindings (in memory, or Redis shared by replicas).
    pub state: Arc<crate::state::State>,
    /// Semantic routers' reference embeddings, by config version.
    pub semantic: Arc<crate::semantic::Semantic>,
    /// The store channels and keys managed at run time live in (`[store]`), when there is one.
    pub store: Option<Arc<crate::store::Store>>,
    /// Where budgets and limits are counted: Redis, the PostgreSQL store, or this process.
    pub meter: Arc<crate::spend::Meter>,
    /// Routing events: where they are emitted, and the recent ones without a store.
    pub events: Arc<crate::webhook::Events>,
    /// The series behind `/metrics`, and where spans go.
    pub telemetry: Arc<crate::telemetry::Telemetry>,
    /// The response cache, made on first use (its tables are sized by `[cache] max_bytes`).
    pub cache: Arc<std::sync::OnceLock<crate::cache::Cache>>,
    /// The JWT issuers' keys, fetched as tokens need them.
    pub jwks: Arc<crate::auth::jwt::Jwks>,
}

impl AppState {
    /// The response cache, made on first use with `s`'s bound.
    pub fn cache(&self, s: &crate::config::cache::CacheSettings) -> &crate::cache::Cache {
        self.cache
            .get_or_init(|| crate::cache::Cache::new(s, &self.state))
    }
}

/// Every reader of a client's own headers (its key, hop count, trimming choice, session), for
/// the fuzz targets: what they refuse is the client's mistake (4xx), or a loop (508).
pub(crate) fn read_headers(headers: &axum::http::HeaderMap) {
    let _ = ctx::bearer(headers);
    if let Err(e) = ctx::hops(headers, 5) {
        let status = e.status();
        assert!(
            status.is_client_error() || status.as_u16() == 508,
            "{status}"
        );
    }
    if let Err(e) = body::trim_choice(headers) {
        assert!(e.status().is_client_error(), "{}", e.status());
    }
    let req = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    if let Ok(req) = crate::protocol::openai::request_from_value(req) {
        let _ = affinity::session(headers, &req, "k", crate::config::Implicit::On);
    }
}

/// A gateway serving on a bound listener, until shut down, dropped or aborted.
pub struct Running {
    pub addr: SocketAddr,
    /// `[admin] listen`'s address, when the admin API has its own.
    pub admin_addr: Option<SocketAddr>,
    /// `[metrics] listen`'s address, when `/metrics` has its own.
    pub metrics_addr: Option<SocketAddr>,
    pub state: AppState,
    task: tokio::task::JoinHandle<()>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// Tasks that live as long as the server (the prober).
    pub background: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    pub fn abort(&self) {
        self.task.abort();
        self.background.iter().for_each(|t| t.abort());
    }

    /// Stops accepting, lets requests in flight finish for up to `grace`, then writes every
    /// queued log row. Returns whether everything in flight finished within the grace period.
    pub async fn shutdown(mut self, grace: std::time::Duration) -> bool {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let finished = tokio::time::timeout(grace, &mut self.task).await.is_ok();
        self.abort();
        self.state.log.close().await;
        // The spans still queued go out now (the flush waits on the exporter's thread).
        let telemetry = self.state.telemetry.clone();
        let _ = tokio::task::spawn_blocking(move || telemetry.flush()).await;
        finished
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.abort();
    }
}

/// Listeners of their own, when the config gives them addresses.
#[derive(Default)]
pub struct Side {
    pub admin: Option<TcpListener>,
    pub metrics: Option<TcpListener>,
}

/// Serves `app` on `l` in the background; `what` names it if it stops.
fn serve_side(
    l: TcpListener,
    app: axum::Router,
    limits: crate::config::ConnLimits,
    background: &mut Vec<tokio::task::JoinHandle<()>>,
) -> std::io::Result<SocketAddr> {
    let a = l.local_addr()?;
    background.push(tokio::spawn(listen::serve(
        l,
        app,
        limits,
        std::future::pending(),
    )));
    Ok(a)
}

/// Starts serving on `listener` in a background task; the admin API and `/metrics` on their
/// own listeners when given, else beside the rest.
pub fn spawn(
    listener: TcpListener,
    side: Side,
    state: AppState,
    operator: axum::Router<AppState>,
    beside: axum::Router<AppState>,
) -> std::io::Result<Running> {
    let addr = listener.local_addr()?;
    let limits = state.live.load().server.connections;
    let mut background = Vec::new();
    let (admin_addr, operator) = match side.admin {
        Some(l) => (
            Some(serve_side(
                l,
                admin_router(state.clone(), operator),
                limits,
                &mut background,
            )?),
            None,
        ),
        None => (None, Some(operator)),
    };
    let metrics_addr = match side.metrics {
        Some(l) => Some(serve_side(
            l,
            metrics_router(state.clone()),
            limits,
            &mut background,
        )?),
        None => None,
    };
    let app = router(state.clone(), operator, beside, metrics_addr.is_none());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(listen::serve(listener, app, limits, async {
        let _ = stopped.await;
    }));
    Ok(Running {
        addr,
        admin_addr,
        metrics_addr,
        state,
        task,
        stop: Some(stop),
        background,
    })
}
