//! The config file as written: serde structs with `deny_unknown_fields` and documented defaults.

use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};

use serde::Deserialize;

pub use super::channels::{ChannelConfig, ModelEntry, NonEmpty, Timeouts};
use super::channels::{nz32, nz64, nzusize};
pub use super::routers::{EmbedderConfig, InstanceConfig, RouterConfig, RouterFailover};

/// The embedded demo: two mock channels for model `demo` on tiers 1 and 2, the demo key.
pub(crate) const DEMO_TOML: &str = include_str!("demo.toml");

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    #[serde(default)]
    pub server: ServerSection,
    #[serde(default)]
    pub log: LogSection,
    #[serde(default)]
    pub health: HealthSection,
    #[serde(default)]
    pub keys: Vec<KeyConfig>,
    /// At least one, unless a store may add them at run time.
    #[serde(default)]
    pub channels: Vec<ChannelConfig>,
    /// Global model-name rewrites, after each key's own.
    #[serde(default)]
    pub redirects: Vec<RedirectConfig>,
    #[serde(default)]
    pub affinity: AffinitySection,
    #[serde(default)]
    pub routing: RoutingSection,
    #[serde(default)]
    pub state: StateSection,
    /// Where channels and keys managed at run time are kept (absent: the file is everything).
    pub store: Option<StoreSection>,
    /// Virtual models (`model: "auto"`) routed by what the prompt means.
    #[serde(default)]
    pub routers: Vec<RouterConfig>,
    /// The model catalog: context windows, output budgets, trimming and context fallbacks.
    #[serde(default)]
    pub models: Vec<ModelConfig>,
    /// Admin API tokens, each with a role (`server.admin_token` is one more `admin`).
    #[serde(default)]
    pub admins: Vec<AdminConfig>,
    #[serde(default)]
    pub admin: AdminSection,
    #[serde(default)]
    pub events: crate::config::webhooks::EventsSection,
    /// Where routing events are delivered, signed.
    #[serde(default)]
    pub webhooks: Vec<crate::config::webhooks::WebhookConfig>,
    /// `GET /metrics` (Prometheus).
    #[serde(default)]
    pub metrics: crate::config::telemetry::MetricsSection,
    /// OpenTelemetry traces.
    #[serde(default)]
    pub telemetry: crate::config::telemetry::TelemetrySection,
    /// The response cache.
    #[serde(default)]
    pub cache: crate::config::cache::CacheSection,
    /// The MCP gateway: how `/mcp` names, pages and keeps its sessions.
    #[serde(default)]
    pub mcp: crate::config::mcp::McpSection,
    /// The MCP servers behind `/mcp`.
    #[serde(default)]
    pub mcp_servers: Vec<crate::config::mcp::McpServerConfig>,
    /// Organisations, teams and sub-teams, with budgets and limits at each level.
    #[serde(default)]
    pub teams: Vec<crate::config::teams::TeamConfig>,
    /// `[[auth.jwt]]`: issuers whose signed tokens are clients.
    #[serde(default)]
    pub auth: crate::config::auth::AuthSection,
    /// Single sign-on for the console and the admin API.
    pub sso: Option<crate::config::sso::SsoConfig>,
}

/// `[[admins]]`: who may use the admin API, and how far.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    pub name: String,
    pub token: String,
    pub role: crate::config::settings::Role,
    /// Only keys, channels and logs of these groups (none = everything).
    #[serde(default)]
    pub groups: Vec<String>,
    /// Only these teams and their sub-teams: their keys, members and spend (none = every team).
    #[serde(default)]
    pub teams: Vec<String>,
}

/// `[admin]`: an address of its own for the admin API, off the public listener.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AdminSection {
    pub listen: Option<String>,
    /// Failed sign-ins (a wrong or missing admin token) one address may make in a minute
    /// before it is refused with 429 until the minute ends.
    pub max_failed_attempts: Option<NonZeroU32>,
}

/// `[[models]]`: a model's limits and its route's context settings. `name` is an exact name or
/// a glob; the window and output budget default to the built-in family's.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub name: String,
    pub context_window: Option<NonZeroU64>,
    pub max_output_tokens: Option<u64>,
    /// Trim every request routed to this model to fit its window.
    #[serde(default)]
    pub trim: bool,
    /// When trimming, down to this share of the window (default 0.8).
    pub trim_to: Option<f64>,
    /// Larger models for a request that does not fit this one, first that fits wins.
    #[serde(default)]
    pub context_fallbacks: Vec<String>,
    /// USD per 1M tokens, over the built-in family's price.
    pub price: Option<crate::pricing::PriceConfig>,
    /// How the first try inside a tier is chosen for this model (over `[routing]`'s default).
    pub strategy: Option<crate::config::Strategy>,
    /// The response cache for this model (over `[cache]`'s mode and TTL).
    pub cache: Option<crate::config::cache::CachePolicyConfig>,
}

/// `[routing]`: the strategy models use unless their `[[models]]` entry names one, and what
/// the measured strategies read.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RoutingSection {
    pub default_strategy: crate::config::Strategy,
    /// The share of `latency`'s first tries spread over the other channels, in [0, 0.5].
    pub exploration: f64,
    /// How fast a faster sample brings a latency figure down (a slower one raises it at once).
    pub latency_half_life_seconds: f64,
}

impl Default for RoutingSection {
    fn default() -> Self {
        RoutingSection {
            default_strategy: crate::config::Strategy::Weighted,
            exploration: 0.05,
            latency_half_life_seconds: 10.0,
        }
    }
}

/// `[affinity]`: keeping a conversation on the channel that served its first turn.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct AffinitySection {
    /// A binding lives this long after its last use.
    pub ttl_seconds: NonZeroU64,
    /// Consecutive failures of the bound channel that clear the binding.
    pub max_failures: NonZeroU32,
    /// Bind requests without a session id by a hash of system prompt + tools + first user
    /// message: `"auto"` (those a provider caches), `true` (all), `false` (none).
    pub implicit: Implicit,
}

impl Default for AffinitySection {
    fn default() -> Self {
        AffinitySection {
            ttl_seconds: nz64(86_400),
            max_failures: nz32(3),
            implicit: Implicit::Auto,
        }
    }
}

/// Which requests without a session id are bound by their conversation's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Implicit {
    /// Requests with tools or a system prompt of more than 1,024 tokens: what providers'
    /// prompt caches keep.
    #[default]
    Auto,
    On,
    Off,
}

impl schemars::JsonSchema for Implicit {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Implicit".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "\"auto\" (requests a provider caches), true (all) or false (none).",
            "anyOf": [{"type": "boolean"}, {"const": "auto"}]
        })
    }
}

/// As written: what the schema shows as the default.
impl serde::Serialize for Implicit {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Implicit::Auto => s.serialize_str("auto"),
            Implicit::On => s.serialize_bool(true),
            Implicit::Off => s.serialize_bool(false),
        }
    }
}

impl<'de> Deserialize<'de> for Implicit {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Flag(bool),
            Word(String),
        }
        match Written::deserialize(d)? {
            Written::Flag(true) => Ok(Implicit::On),
            Written::Flag(false) => Ok(Implicit::Off),
            Written::Word(w) if w == "auto" => Ok(Implicit::Auto),
            Written::Word(w) => Err(serde::de::Error::custom(format!(
                "expected \"auto\", true or false, not {w:?}"
            ))),
        }
    }
}

/// `[store]`: the database the admin API writes to, `sqlite://<file>` or `postgres://...`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StoreSection {
    pub url: String,
    /// Request-log rows older than this are pruned.
    #[serde(default = "default_retention")]
    pub retention_days: NonZeroU32,
    /// Ledger rows older than this are pruned; at least 31 (a month's budget period).
    #[serde(default = "default_ledger_retention")]
    pub ledger_retention_days: NonZeroU32,
    /// The master key sealing upstream keys at rest (32 bytes, base64); usually `${VAR}`.
    /// Without it, `SWITCHYARD_MASTER_KEY` is read.
    pub master_key: Option<String>,
    /// How often each replica reads the store's config version (PostgreSQL also notifies).
    #[serde(default = "default_poll")]
    pub poll_interval_ms: NonZeroU64,
}

fn default_poll() -> NonZeroU64 {
    nz64(500)
}

fn default_ledger_retention() -> NonZeroU32 {
    nz32(400)
}

fn default_retention() -> NonZeroU32 {
    nz32(30)
}

/// `[state]`: where shared runtime state lives (absent: in this process).
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StateSection {
    /// `redis://host:port[/db]`, or `rediss://` for TLS: shared by every replica that names it.
    pub url: Option<String>,
    /// Prefix of every Redis key (replicas sharing state share it).
    pub prefix: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ServerSection {
    pub listen: String,
    /// Deadline for everything before the response commits, all attempts together.
    pub request_timeout_ms: NonZeroU64,
    /// After commit: the longest gap allowed between two stream chunks.
    pub stream_idle_timeout_ms: NonZeroU64,
    pub max_body_bytes: NonZeroUsize,
    /// Cap on upstream attempts for one request, over all channels and retries.
    pub max_attempts: NonZeroU32,
    /// Longest upstream `Retry-After` honoured before an in-channel retry.
    pub max_retry_after_ms: u64,
    /// Guards `/admin/*`; none = admin routes off.
    pub admin_token: Option<String>,
    /// A request arriving with more `x-switchyard-hops` than this is a loop: 508.
    pub max_hops: u32,
    pub retry_budget: RetryBudgetConfig,
    /// How long a budget or limit hold lasts when its request never settles it (a crashed
    /// replica's holds expire by then).
    pub hold_ttl_ms: NonZeroU64,
    /// The reply tokens a budget reserves for a request that sets no `max_tokens`.
    pub reserve_output_tokens: NonZeroU64,
    /// Addresses or networks (`10.0.0.0/8`) of proxies whose `X-Forwarded-Proto` is believed
    /// (the console's cookie is `Secure` when the client's scheme is https).
    pub trusted_proxies: Vec<String>,
    /// Open client connections per listener; past it the gateway stops accepting until one
    /// closes (the kernel's backlog holds the rest).
    pub max_connections: NonZeroUsize,
    /// A request's head must arrive within this time of its first byte.
    pub header_read_timeout_ms: NonZeroU64,
    /// A connection with no request in progress is closed after this long.
    pub idle_timeout_ms: NonZeroU64,
    /// A client that takes no bytes for this long is cut off, and its upstream call cancelled.
    pub client_write_timeout_ms: NonZeroU64,
    /// On SIGTERM or SIGINT, how long requests and streams in flight may take to finish.
    pub drain_timeout_ms: NonZeroU64,
}

/// `[server.retry_budget]`: calls to a channel a request already called (retries, its next
/// key) stay under `ratio` × requests over the window, with a floor of `min_per_second`, so a
/// failing upstream never sees its load multiplied (Linkerd's budget, same defaults). A
/// failover to a channel not yet called is not counted.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RetryBudgetConfig {
    pub ratio: f64,
    pub min_per_second: u32,
    pub window_seconds: NonZeroU64,
}

impl Default for RetryBudgetConfig {
    fn default() -> Self {
        RetryBudgetConfig {
            ratio: 0.2,
            min_per_second: 10,
            window_seconds: nz64(10),
        }
    }
}

impl Default for ServerSection {
    fn default() -> Self {
        ServerSection {
            listen: "127.0.0.1:8080".into(),
            request_timeout_ms: nz64(300_000),
            stream_idle_timeout_ms: nz64(60_000),
            max_body_bytes: nzusize(32 * 1024 * 1024),
            max_attempts: nz32(10),
            max_retry_after_ms: 10_000,
            admin_token: None,
            max_hops: 5,
            retry_budget: RetryBudgetConfig::default(),
            hold_ttl_ms: nz64(600_000),
            reserve_output_tokens: nz64(4_096),
            trusted_proxies: Vec::new(),
            max_connections: nzusize(16_384),
            header_read_timeout_ms: nz64(10_000),
            idle_timeout_ms: nz64(75_000),
            client_write_timeout_ms: nz64(60_000),
            drain_timeout_ms: nz64(30_000),
        }
    }
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct LogSection {
    pub sqlite_path: String,
    /// Rows waiting to be written; when full, rows are dropped and counted, never waited for.
    pub queue_capacity: NonZeroUsize,
    /// Each row appended to a local file before its answer ends, so a killed process loses
    /// no row it answered.
    pub journal: bool,
    /// Where the journal's files live; empty: `<sqlite_path>.journal` (not `-journal`: SQLite's own rollback journal).
    pub journal_dir: String,
    /// MCP tool calls' arguments and results kept in their log rows (`bodies`).
    pub mcp_bodies: bool,
}

impl Default for LogSection {
    fn default() -> Self {
        LogSection {
            sqlite_path: "switchyard.db".into(),
            queue_capacity: nzusize(8192),
            journal: true,
            journal_dir: String::new(),
            mcp_bodies: false,
        }
    }
}

/// How channel health is scored (`[health]`).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct HealthSection {
    /// Verdicts older than this leave a channel's window.
    pub window_seconds: NonZeroU64,
    /// At most this many verdicts per channel.
    pub window_size: NonZeroUsize,
    /// Latency score 100 at or below this...
    pub latency_good_ms: u64,
    /// ...and 0 at or above this, linear between.
    pub latency_bad_ms: u64,
    /// A channel's weight is scaled by its score, never below this share of it.
    pub min_weight_factor: f64,
    /// How the first try inside a tier is chosen: `random` (P = w·h / Σ w·h) or
    /// `round_robin` (smooth weighted round robin over the same weights: deterministic).
    pub balance: Balance,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Balance {
    Random,
    RoundRobin,
}

impl Default for HealthSection {
    fn default() -> Self {
        HealthSection {
            window_seconds: nz64(300),
            window_size: nzusize(100),
            latency_good_ms: 1000,
            latency_bad_ms: 10_000,
            min_weight_factor: 0.05,
            balance: Balance::Random,
        }
    }
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KeyConfig {
    pub name: String,
    /// The key itself (at least 8 characters); or, for keys the admin API made, `key_hash`.
    pub key: Option<String>,
    /// The key's HMAC-SHA-256 under the store's pepper, hex: how the store keeps a key.
    pub key_hash: Option<String>,
    /// RFC 3339: from then on the key is refused.
    pub expires_at: Option<String>,
    /// The channel groups this key may use, in order of preference (none = every channel).
    #[serde(default)]
    pub groups: Vec<String>,
    /// This key's model-name rewrites, tried before the global ones.
    #[serde(default)]
    pub redirects: Vec<RedirectConfig>,
    pub failover_defaults: Option<FailoverDefaultsConfig>,
    /// Trim every request of this key to fit the serving model's window.
    #[serde(default)]
    pub trim: bool,
    /// Answers carry `x-switchyard-route`: the channel that served and why it was chosen.
    #[serde(default)]
    pub expose_route: bool,
    /// `{ usd, period, on_exhausted, soft, fail }`: what may be spent per period.
    pub budget: Option<super::quota::BudgetConfig>,
    /// Requests in any 60 s window, across every replica.
    pub rpm: Option<NonZeroU32>,
    pub tpm: Option<NonZeroU64>,
    pub max_concurrency: Option<NonZeroU32>,
    /// What `rpm`, `tpm` and `max_concurrency` do when the shared counter is unreachable.
    pub limits_fail: Option<super::quota::Fail>,
    /// The response cache for this key's requests (over the model's and `[cache]`'s).
    pub cache: Option<super::cache::CachePolicyConfig>,
    /// The MCP servers and tools this key may reach (none: no MCP server).
    pub mcp: Option<super::mcp::KeyMcpConfig>,
    /// Tool calls in any 60 s window, across every replica.
    pub mcp_rpm: Option<NonZeroU32>,
    /// Tool calls in flight at once, across every replica.
    pub mcp_max_concurrency: Option<NonZeroU32>,
    /// The team the key belongs to: its requests must fit every level up to the root.
    pub team: Option<String>,
    /// Requests must name an end user (`user`, `metadata.user_id`, `x-switchyard-user`...).
    #[serde(default)]
    pub require_user: bool,
}

/// `{ from = "gpt-4*", to = "gpt-4o" }`: `from` is an exact name, or a glob when it holds `*`
/// or `?`; `kind = "regex"` makes it a regular expression matched against the whole name
/// (`to` may then use `$1`).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RedirectConfig {
    /// Given by the admin API on creation.
    pub id: Option<String>,
    pub from: String,
    pub to: String,
    pub kind: Option<RedirectKind>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RedirectKind {
    Exact,
    Glob,
    Regex,
}

/// A key's chain when the caller names one model: `{ models, timeout_ms, first_token_timeout_ms, on }`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FailoverDefaultsConfig {
    #[serde(default)]
    pub models: Vec<String>,
    pub timeout_ms: Option<u64>,
    pub first_token_timeout_ms: Option<u64>,
    pub on: Option<NonEmpty<crate::protocol::chain::FailOn>>,
}
