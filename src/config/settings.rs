//! The compiled settings of each config section, as the parts that read them take them
//! (health, the retry budget, credential pools, the server): validated values, with units.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::secret::Secret;

#[derive(Debug)]
pub struct ServerSettings {
    pub listen: SocketAddr,
    pub request_timeout: Duration,
    pub stream_idle_timeout: Duration,
    pub max_body_bytes: usize,
    pub max_attempts: u32,
    pub max_retry_after: Duration,
    /// Who may use the admin API: `[[admins]]`, and `server.admin_token` as one `admin`
    /// (and `[sso]`'s mappings, by session only).
    pub admins: Vec<Admin>,
    /// On SIGTERM or SIGINT, how long requests and streams in flight may take to finish.
    pub drain_timeout: Duration,
    /// `[sso]`: single sign-on for the console.
    pub sso: Option<std::sync::Arc<crate::config::sso::SsoSettings>>,
    /// `[admin] listen`: the admin API on an address of its own, not on `listen`.
    pub admin_listen: Option<SocketAddr>,
    /// `[admin] max_failed_attempts`: failed sign-ins an address may make in a minute.
    pub admin_max_failures: u32,
    pub max_hops: u32,
    pub retry_budget: BudgetSettings,
    pub hold_ttl: Duration,
    pub reserve_output_tokens: u64,
    /// Proxies whose `X-Forwarded-Proto` is believed.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// What a client connection may hold (read at start, not on reload).
    pub connections: ConnLimits,
}

/// `[server]`'s limits on client connections.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub client_write_timeout: Duration,
}

pub use super::role::Role;

#[derive(Debug)]
pub struct Admin {
    pub name: Arc<str>,
    pub token: Secret,
    pub role: Role,
    /// Only keys, channels and logs of these groups; empty = everything.
    pub groups: Vec<Arc<str>>,
    /// Only these teams (and their sub-teams), their keys and spend; empty = every team.
    pub teams: Vec<Arc<str>>,
    /// An SSO mapping's admin: only a signed-in session acts as it, never its token.
    pub session_only: bool,
}

#[derive(Debug)]
pub struct LogSettings {
    pub sqlite_path: String,
    pub queue_capacity: usize,
    /// The journal's directory (`None`: no journal).
    pub journal_dir: Option<std::path::PathBuf>,
    /// MCP tool calls' arguments and results kept in their rows.
    pub mcp_bodies: bool,
}

/// `[routing]` and each model's `strategy`, validated.
#[derive(Debug, Clone, Default)]
pub struct RoutingSettings {
    pub default_strategy: Strategy,
    /// Models whose `[[models]]` entry names a strategy (served names, resolved at load).
    pub strategies: std::collections::HashMap<Arc<str>, Strategy>,
    pub exploration: f64,
    pub half_life: Duration,
    /// Some model routes by a measured strategy: latency and load are recorded.
    pub measured: bool,
}

impl RoutingSettings {
    /// The strategy that orders `model`'s tiers.
    pub fn strategy(&self, model: &str) -> Strategy {
        if self.strategies.is_empty() {
            return self.default_strategy;
        }
        self.strategies
            .get(model)
            .copied()
            .unwrap_or(self.default_strategy)
    }
}

#[derive(Debug, Clone, Copy)]
pub struct AffinitySettings {
    pub ttl: Duration,
    pub max_failures: u32,
    pub implicit: super::file::Implicit,
}

/// `[store]`, validated: the URL (a secret: it may carry a password) and the retention.
#[derive(Debug, Clone)]
pub struct StoreSettings {
    pub url: Secret,
    pub retention: Duration,
    pub ledger_retention: Duration,
    /// As configured (`[store] master_key`), else none: the environment is read at start.
    pub master_key: Option<Secret>,
    /// How often replicas read the store's config version.
    pub poll_interval: Duration,
}

#[derive(Debug, Clone)]
pub struct StateSettings {
    /// Redis URL (credentials inside it are never printed); `None` = in memory.
    pub url: Option<Secret>,
    pub prefix: Arc<str>,
}

/// Global scoring settings (`[health]`).
#[derive(Debug, Clone, Copy)]
pub struct HealthSettings {
    /// Verdicts older than this leave the window.
    pub window: Duration,
    /// At most this many verdicts are kept per channel.
    pub window_size: usize,
    pub latency_good: Duration,
    pub latency_bad: Duration,
    /// Weight factor floor, so a low-scoring channel still gets a trickle.
    pub min_factor: f64,
}

impl Default for HealthSettings {
    fn default() -> Self {
        HealthSettings {
            window: Duration::from_secs(300),
            window_size: 100,
            latency_good: Duration::from_millis(1000),
            latency_bad: Duration::from_millis(10_000),
            min_factor: 0.05,
        }
    }
}

/// Per-channel breaker settings (`[channels.circuit_breaker]`).
#[derive(Debug, Clone, Copy)]
pub struct BreakerSettings {
    pub enabled: bool,
    pub per_model: bool,
    pub failure_threshold: u32,
    pub window: Duration,
    pub cooldown: Duration,
    pub rate_limit_cooldown: Duration,
    /// After recovery the channel's share ramps from the floor to full over this long.
    pub slow_start: Duration,
    /// Active probing; `None` = a half-open circuit is tested by one live request.
    pub probe: Option<ProbeSettings>,
}

/// What a probe sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeKind {
    /// A 1-token completion: exercises the real path.
    Completion,
    /// `GET /models`: free, but blind to a broken completion path.
    Models,
}

#[derive(Debug, Clone, Copy)]
pub struct ProbeSettings {
    pub kind: ProbeKind,
    /// How often a closed channel scoring below `unhealthy_below` is probed.
    pub interval: Duration,
    /// Probe successes that close an open circuit.
    pub success_threshold: u32,
    pub unhealthy_below: f64,
}

impl Default for ProbeSettings {
    fn default() -> Self {
        ProbeSettings {
            kind: ProbeKind::Completion,
            interval: Duration::from_secs(300),
            success_threshold: 1,
            unhealthy_below: 50.0,
        }
    }
}

impl Default for BreakerSettings {
    fn default() -> Self {
        BreakerSettings {
            enabled: true,
            per_model: false,
            failure_threshold: 3,
            window: Duration::from_secs(30),
            cooldown: Duration::from_secs(60),
            rate_limit_cooldown: Duration::from_secs(15),
            slow_start: Duration::from_secs(30),
            probe: Some(ProbeSettings::default()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetSettings {
    pub ratio: f64,
    pub min_per_second: u32,
    pub window: Duration,
}

/// One credential's limits, from the config.
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    /// Requests per minute (a token bucket refilled continuously).
    pub rpm: Option<u32>,
    /// Attempts in flight at once.
    pub max_concurrency: Option<u32>,
    /// Tokens per minute (prompt + completion): charged an estimate when reserved, settled
    /// to the real usage when the attempt ends. May overdraw once; then it waits to refill.
    pub tpm: Option<u32>,
}

/// How the first try inside a tier is chosen (`strategy` on a `[[models]]` entry,
/// `[routing] default_strategy`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Deserialize,
    serde::Serialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// P = w·h / Σ w·h.
    #[default]
    Weighted,
    /// Lowest expected time to first token (streams) or to the whole answer.
    Latency,
    /// Fewest requests in flight.
    LeastBusy,
    /// Lowest expected price of this request.
    Cost,
    /// Two drawn by weight, the one with the lower in-flight × latency.
    P2c,
}

impl Strategy {
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Weighted => "weighted",
            Strategy::Latency => "latency",
            Strategy::LeastBusy => "least_busy",
            Strategy::Cost => "cost",
            Strategy::P2c => "p2c",
        }
    }
}
