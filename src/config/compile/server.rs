//! The sections that stand alone: `[server]`, `[log]`, `[health]`, `[affinity]`, `[state]`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::FieldError;
use crate::config::file::{Balance, FileConfig, RoutingSection};
use crate::config::settings::{
    Admin, AffinitySettings, BudgetSettings, ConnLimits, HealthSettings, LogSettings, Role,
    RoutingSettings, ServerSettings, StateSettings, StoreSettings,
};
use crate::secret::Secret;

/// What these sections compile to.
pub struct Sections {
    pub server: ServerSettings,
    pub log: LogSettings,
    pub health: HealthSettings,
    pub balance: Balance,
    pub affinity: AffinitySettings,
    pub state: StateSettings,
    pub store: Option<StoreSettings>,
}

fn field(f: &str, m: impl Into<String>) -> FieldError {
    (f.to_string(), m.into())
}

pub fn compile(cfg: &FileConfig) -> Result<Sections, FieldError> {
    Ok(Sections {
        server: server(cfg)?,
        log: log(cfg)?,
        health: health(cfg)?,
        balance: cfg.health.balance,
        affinity: AffinitySettings {
            ttl: Duration::from_secs(cfg.affinity.ttl_seconds.get()),
            max_failures: cfg.affinity.max_failures.get(),
            implicit: cfg.affinity.implicit,
        },
        state: state(cfg)?,
        store: store(cfg)?,
    })
}

/// `[routing]`, with the strategies `[[models]]` entries name.
pub fn routing(
    r: &RoutingSection,
    strategies: std::collections::HashMap<Arc<str>, crate::config::Strategy>,
) -> Result<RoutingSettings, FieldError> {
    if !(0.0..=0.5).contains(&r.exploration) {
        return Err(field("routing.exploration", "must be between 0 and 0.5"));
    }
    if !(r.latency_half_life_seconds > 0.0 && r.latency_half_life_seconds <= 3600.0) {
        return Err(field(
            "routing.latency_half_life_seconds",
            "must be above 0 and at most 3600",
        ));
    }
    let measured = r.default_strategy != crate::config::Strategy::Weighted
        || strategies
            .values()
            .any(|s| *s != crate::config::Strategy::Weighted);
    Ok(RoutingSettings {
        measured,
        default_strategy: r.default_strategy,
        strategies,
        exploration: r.exploration,
        half_life: Duration::from_secs_f64(r.latency_half_life_seconds),
    })
}

fn store(cfg: &FileConfig) -> Result<Option<StoreSettings>, FieldError> {
    let Some(s) = &cfg.store else {
        return Ok(None);
    };
    let known = ["sqlite:", "postgres://", "postgresql://"];
    if !known.iter().any(|p| s.url.starts_with(p)) {
        return Err(field(
            "store.url",
            "expected sqlite://<file> or postgres://user:pass@host/db",
        ));
    }
    if s.ledger_retention_days.get() < 31 {
        return Err(field(
            "store.ledger_retention_days",
            "must be at least 31: the ledger is kept for the longest budget period, a month",
        ));
    }
    // Checked here too (the store checks it again as it opens), so that `check` refuses a
    // key that would stop the gateway at start, such as an empty `${VAR}`.
    if let Some(k) = &s.master_key
        && crate::secret::key_bytes(k).is_err()
    {
        return Err(field(
            "store.master_key",
            "must be 32 bytes, base64-encoded",
        ));
    }
    let days = |n: std::num::NonZeroU32| Duration::from_secs(u64::from(n.get()) * 86_400);
    Ok(Some(StoreSettings {
        url: Secret::new(s.url.as_str()),
        retention: days(s.retention_days),
        ledger_retention: days(s.ledger_retention_days),
        master_key: s.master_key.as_deref().map(Secret::new),
        poll_interval: Duration::from_millis(s.poll_interval_ms.get()),
    }))
}

/// `[[admins]]` and `server.admin_token` (an `admin` named "admin"): tokens of 16 characters
/// or more, names and tokens unique.
fn admins(cfg: &FileConfig) -> Result<Vec<Admin>, FieldError> {
    let mut out: Vec<Admin> = Vec::with_capacity(cfg.admins.len() + 1);
    if let Some(t) = &cfg.server.admin_token {
        if t.len() < 16 {
            return Err(field(
                "server.admin_token",
                "must be at least 16 characters",
            ));
        }
        out.push(Admin {
            name: "admin".into(),
            token: Secret::new(t.as_str()),
            role: Role::Admin,
            groups: Vec::new(),
            teams: Vec::new(),
            session_only: false,
        });
    }
    for (i, a) in cfg.admins.iter().enumerate() {
        let at = |f: &str| format!("admins[{i}].{f}");
        if a.name.is_empty() || out.iter().any(|o| *o.name == *a.name) {
            return Err((
                at("name"),
                format!("must be set and unique, got {:?}", a.name),
            ));
        }
        if a.token.len() < 16 {
            return Err((at("token"), "must be at least 16 characters".into()));
        }
        if out.iter().any(|o| o.token.matches(a.token.as_bytes())) {
            return Err((at("token"), "the same token is given twice".into()));
        }
        out.push(Admin {
            name: a.name.as_str().into(),
            token: Secret::new(a.token.as_str()),
            role: a.role,
            groups: a.groups.iter().map(|g| g.as_str().into()).collect(),
            teams: a.teams.iter().map(|t| t.as_str().into()).collect(),
            session_only: false,
        });
    }
    Ok(out)
}

fn server(cfg: &FileConfig) -> Result<ServerSettings, FieldError> {
    let s = &cfg.server;
    let listen: SocketAddr = s.listen.parse().map_err(|_| {
        field(
            "server.listen",
            format!("expected host:port with an IP address, got {:?}", s.listen),
        )
    })?;
    let mut admins = admins(cfg)?;
    let sso = match &cfg.sso {
        Some(s) => {
            let (sso, mapped) = crate::config::sso::compile(s, admins.len())?;
            admins.extend(mapped.into_iter().map(|m| Admin {
                name: m.name,
                token: m.token,
                role: m.role,
                groups: Vec::new(),
                teams: m.teams,
                session_only: true,
            }));
            Some(sso)
        }
        None => None,
    };
    let admin_listen = match &cfg.admin.listen {
        Some(a) => Some(a.parse::<SocketAddr>().map_err(|_| {
            field(
                "admin.listen",
                format!("expected host:port with an IP address, got {a:?}"),
            )
        })?),
        None => None,
    };
    let trusted_proxies = s
        .trusted_proxies
        .iter()
        .enumerate()
        .map(|(i, p)| {
            p.parse::<ipnet::IpNet>()
                .or_else(|_| p.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| {
                    field(
                        &format!("server.trusted_proxies[{i}]"),
                        format!("expected an IP address or a network (10.0.0.0/8), got {p:?}"),
                    )
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let rb = &s.retry_budget;
    if !(0.0..=10.0).contains(&rb.ratio) {
        return Err(field("server.retry_budget.ratio", "must be in [0, 10]"));
    }
    Ok(ServerSettings {
        listen,
        request_timeout: Duration::from_millis(s.request_timeout_ms.get()),
        stream_idle_timeout: Duration::from_millis(s.stream_idle_timeout_ms.get()),
        max_body_bytes: s.max_body_bytes.get(),
        max_attempts: s.max_attempts.get(),
        max_retry_after: Duration::from_millis(s.max_retry_after_ms),
        admins,
        drain_timeout: Duration::from_millis(s.drain_timeout_ms.get()),
        sso,
        admin_listen,
        admin_max_failures: cfg.admin.max_failed_attempts.map_or(10, |n| n.get()),
        max_hops: s.max_hops,
        hold_ttl: Duration::from_millis(s.hold_ttl_ms.get()),
        reserve_output_tokens: s.reserve_output_tokens.get(),
        trusted_proxies,
        connections: ConnLimits {
            max_connections: s.max_connections.get(),
            header_read_timeout: Duration::from_millis(s.header_read_timeout_ms.get()),
            idle_timeout: Duration::from_millis(s.idle_timeout_ms.get()),
            client_write_timeout: Duration::from_millis(s.client_write_timeout_ms.get()),
        },
        retry_budget: BudgetSettings {
            ratio: rb.ratio,
            min_per_second: rb.min_per_second,
            window: Duration::from_secs(rb.window_seconds.get()),
        },
    })
}

fn log(cfg: &FileConfig) -> Result<LogSettings, FieldError> {
    if cfg.log.sqlite_path.is_empty() {
        return Err(field("log.sqlite_path", "must not be empty"));
    }
    let l = &cfg.log;
    let journal_dir = l.journal.then(|| match l.journal_dir.as_str() {
        "" => format!("{}.journal", l.sqlite_path).into(),
        dir => dir.into(),
    });
    Ok(LogSettings {
        sqlite_path: l.sqlite_path.clone(),
        queue_capacity: l.queue_capacity.get(),
        journal_dir,
        mcp_bodies: l.mcp_bodies,
    })
}

fn health(cfg: &FileConfig) -> Result<HealthSettings, FieldError> {
    let h = &cfg.health;
    if h.latency_good_ms >= h.latency_bad_ms {
        return Err(field(
            "health.latency_good_ms",
            "must be below health.latency_bad_ms",
        ));
    }
    if !(h.min_weight_factor > 0.0 && h.min_weight_factor <= 1.0) {
        return Err(field("health.min_weight_factor", "must be in (0, 1]"));
    }
    Ok(HealthSettings {
        window: Duration::from_secs(h.window_seconds.get()),
        window_size: h.window_size.get(),
        latency_good: Duration::from_millis(h.latency_good_ms),
        latency_bad: Duration::from_millis(h.latency_bad_ms),
        min_factor: h.min_weight_factor,
    })
}

fn state(cfg: &FileConfig) -> Result<StateSettings, FieldError> {
    // `rediss://` is TLS (rustls, the system's roots; `#insecure` skips verification).
    if let Some(u) = &cfg.state.url
        && !(u.starts_with("redis://") || u.starts_with("rediss://"))
    {
        return Err(field(
            "state.url",
            "expected a redis:// or rediss:// (TLS) URL",
        ));
    }
    Ok(StateSettings {
        url: cfg.state.url.as_deref().map(Secret::new),
        prefix: Arc::from(cfg.state.prefix.as_deref().unwrap_or("switchyard")),
    })
}
