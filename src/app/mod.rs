//! Process wiring shared by the binary and the tests: load a config, open the store and the
//! log, bind, serve, reload on SIGHUP.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

mod bridge;
pub mod demo;
mod probe;
mod watch;

use crate::clock::{Clock, SystemClock};
use crate::config::{self, ConfigError, Live, Snapshot};
use crate::health::Health;
use crate::provider::HttpClients;
use crate::server::{self, AppState, Running};
use crate::state::{Memory, Redis, State};
use crate::store::{Db, RequestLog, Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(
        "demo mode only listens on loopback (127.0.0.1 or ::1), not {0}; write a config file to listen elsewhere"
    )]
    DemoNotLoopback(SocketAddr),
    #[error(transparent)]
    State(#[from] crate::state::RedisConfigError),
    #[error(transparent)]
    Open(#[from] crate::store::OpenError),
    #[error(transparent)]
    Overlay(#[from] crate::store::OverlayError),
    #[error(transparent)]
    Reload(#[from] config::ReloadError),
    #[error("starting failed: {0}")]
    Task(String),
    #[error(transparent)]
    Traces(#[from] crate::telemetry::TraceSetupError),
}

/// Loads the config from a file, or the embedded demo when `path` is `None`.
pub fn load(path: Option<&Path>, clients: &HttpClients) -> Result<Snapshot, ConfigError> {
    match path {
        Some(p) => config::load_file(p, clients),
        None => config::demo(clients),
    }
}

/// Opens the log, binds (`listen` overrides the config's address) and starts serving.
pub async fn start(
    snapshot: Snapshot,
    clients: HttpClients,
    listen: Option<SocketAddr>,
) -> Result<Running, StartError> {
    start_with_clock(snapshot, clients, listen, Arc::new(SystemClock)).await
}

/// Where budgets and limits are counted, fixed at start: Redis when `[state] url` is set,
/// else a PostgreSQL store, else this process.
fn meter(redis: Option<&Arc<Redis>>, store: Option<&Store>) -> crate::spend::Meter {
    use crate::spend::{Backend, MemoryMeters, Meter, PostgresMeters, RedisMeters};
    Meter::new(match (redis, store.map(|s| &s.db)) {
        (Some(r), _) => Backend::Redis(RedisMeters::new(r.clone())),
        (None, Some(crate::store::Db::Postgres(pool))) => {
            Backend::Postgres(PostgresMeters::new(pool.clone()))
        }
        _ => Backend::Memory(MemoryMeters::default()),
    })
}

/// [`start`] with the clock health reads (tests drive cooldowns with a manual one).
pub async fn start_with_clock(
    snapshot: Snapshot,
    clients: HttpClients,
    listen: Option<SocketAddr>,
    clock: Arc<dyn Clock>,
) -> Result<Running, StartError> {
    let addr = listen.unwrap_or(snapshot.server.listen);
    if snapshot.is_demo() && !addr.ip().is_loopback() {
        return Err(StartError::DemoNotLoopback(addr));
    }
    // Where bindings live is fixed at start (a reload does not move them).
    let redis = match &snapshot.state.url {
        Some(url) => Some(Arc::new(Redis::new(
            url.expose(),
            &snapshot.state.prefix,
            clock.clone(),
        )?)),
        None => None,
    };
    // The store is opened (and migrated) before anything listens: a gateway that cannot reach
    // it does not start half-configured.
    let store = match &snapshot.store {
        Some(s) => {
            let env = crate::store::MasterEnv::from_env();
            Some(Arc::new(Store::open(s, env).await?))
        }
        None => None,
    };
    let log = Arc::new(open_log(&snapshot, store.as_deref())?);
    let (events, events_rx) = crate::webhook::Events::new(snapshot.events.queue_capacity);
    let meter =
        Arc::new(meter(redis.as_ref(), store.as_deref()).with_events(events.emitter.clone()));
    let health = Health::new(clock.clone()).with_events(events.emitter.clone());
    let retention = snapshot
        .store
        .as_ref()
        .map(|s| (s.retention, s.ledger_retention));
    let snapshot_telemetry = snapshot.telemetry.clone();
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { addr, source })?;
    let state = AppState {
        live: Arc::new(Live::new(snapshot, clients)),
        health: Arc::new(health),
        log: log.clone(),
        state: Arc::new(match &redis {
            Some(r) => State::Redis(r.clone()),
            None => State::Memory(Memory::new(clock.clone())),
        }),
        jwks: Arc::new(crate::auth::jwt::Jwks::new(clock)),
        semantic: Arc::new(crate::semantic::Semantic::default()),
        store,
        meter,
        events,
        telemetry: Arc::new(crate::telemetry::Telemetry::new(&snapshot_telemetry)?),
        cache: Arc::default(),
    };
    let mut background = Vec::new();
    if let Some(store) = &state.store {
        // The store's entries join the file's before the first request (a name in both is
        // refused here, like any invalid config).
        let ov = store.overlay().await?;
        let live = state.live.clone();
        tokio::task::spawn_blocking(move || live.reload_with(Some(ov)))
            .await
            .map_err(|e| StartError::Task(e.to_string()))??;
        let every = state
            .live
            .load()
            .store
            .as_ref()
            .map_or(Duration::from_millis(500), |s| s.poll_interval);
        background.push(tokio::spawn(watch::follow(
            state.clone(),
            store.clone(),
            every,
        )));
    }
    // After the store's entries joined: its webhooks are known before the first event.
    background.extend(crate::webhook::spawn(
        state.events.clone(),
        events_rx,
        state.live.clone(),
        state.store.clone(),
    ));
    background.push(probe::spawn_prober(
        state.live.clone(),
        state.health.clone(),
    ));
    // Without a store the log is kept as it always was: whole.
    if let Some(keep) = retention {
        background.push(log.keep_for(keep.0, keep.1, crate::store::PRUNE_EVERY));
    }
    // Local embedding models load now, not on the first request that needs one.
    let (semantic, live) = (state.semantic.clone(), state.live.clone());
    background.push(tokio::spawn(async move {
        semantic.warm(&live.load()).await;
    }));
    if let Some(r) = redis {
        background.extend(share_through(r, &state));
    }
    let side = server::Side {
        admin: bind_side(state.live.load().server.admin_listen).await?,
        metrics: bind_side(state.live.load().metrics.listen).await?,
    };
    let mcp = Arc::new(crate::mcp::Mcp::new(state.state.clone()));
    let operator = crate::admin::router(crate::admin::AdminState::new(state.clone(), mcp.clone()));
    let (mcp, prober) = crate::mcp::router(state.clone(), mcp);
    background.push(prober);
    let mut running = server::spawn(listener, side, state, operator, mcp)
        .map_err(|source| StartError::Bind { addr, source })?;
    running.background.extend(background);
    Ok(running)
}

/// A listener of its own, when the config gives an address.
async fn bind_side(addr: Option<SocketAddr>) -> Result<Option<TcpListener>, StartError> {
    match addr {
        Some(a) => Ok(Some(
            TcpListener::bind(a)
                .await
                .map_err(|source| StartError::Bind { addr: a, source })?,
        )),
        None => Ok(None),
    }
}

/// The tasks that keep Redis connected and carry health changes between replicas.
fn share_through(r: Arc<Redis>, state: &AppState) -> [tokio::task::JoinHandle<()>; 4] {
    [
        tokio::spawn(r.clone().supervise()),
        tokio::spawn(bridge::exchange_busy(
            r.clone(),
            state.health.clone(),
            state.live.clone(),
        )),
        tokio::spawn(bridge::publish(r.clone(), state.health.share())),
        tokio::spawn(bridge::subscribe(
            r,
            state.health.clone(),
            state.live.clone(),
        )),
    ]
}

/// The request log where the store says: with a PostgreSQL store, its database (no SQLite
/// file is made, said once); else its own SQLite file at `sqlite_path`. Either way with the
/// journal in `[log] journal_dir` unless it is off.
fn open_log(snapshot: &Snapshot, store: Option<&Store>) -> Result<RequestLog, StoreError> {
    let capacity = snapshot.log.queue_capacity;
    let journal = snapshot.log.journal_dir.as_deref();
    match store.map(|s| &s.db) {
        Some(Db::Postgres(pool)) => {
            tracing::warn!(
                sqlite_path = %snapshot.log.sqlite_path,
                "the request log is kept in the PostgreSQL store; [log] sqlite_path is ignored but for placing the journal"
            );
            RequestLog::postgres(pool.clone(), capacity, journal)
        }
        _ => RequestLog::open(Path::new(&snapshot.log.sqlite_path), capacity, journal),
    }
}

/// Reloads the config (the file, and the store's entries) on every SIGHUP, for as long as the
/// process runs.
#[cfg(unix)]
pub fn reload_on_sighup(state: AppState) -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            match crate::admin::reload(&state).await {
                Ok(s) => tracing::info!(channels = s.channels.len(), "config reloaded on SIGHUP"),
                Err(e) => {
                    tracing::error!(error = %e, "config reload refused; the running config stays")
                }
            }
        }
    });
    Ok(())
}
