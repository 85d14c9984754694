//! The config file as written: serde structs with `deny_unknown_fields` and documented defaults.

use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};

use serde::Deserialize;

pub use super::routers::{EmbedderConfig, InstanceConfig, RouterConfig, RouterFailover};
use crate::provider::ProviderKind;
use crate::provider::mock::MockSpec;

/// The embedded demo: two mock channels for model `demo` on tiers 1 and 2, the demo key.
pub(crate) const DEMO_TOML: &str = include_str!("demo.toml");

#[derive(Debug, Deserialize)]
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
}

/// `[[admins]]`: who may use the admin API, and how far.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    pub name: String,
    pub token: String,
    pub role: crate::config::settings::Role,
    /// Only keys, channels and logs of these groups (none = everything).
    #[serde(default)]
    pub groups: Vec<String>,
}

/// `[admin]`: an address of its own for the admin API, off the public listener.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminSection {
    pub listen: Option<String>,
    /// Failed sign-ins (a wrong or missing admin token) one address may make in a minute
    /// before it is refused with 429 until the minute ends.
    pub max_failed_attempts: Option<NonZeroU32>,
}

/// `[[models]]`: a model's limits and its route's context settings. `name` is an exact name or
/// a glob; the window and output budget default to the built-in family's.
#[derive(Debug, Deserialize)]
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
}

/// `[affinity]`: keeping a conversation on the channel that served its first turn.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AffinitySection {
    /// A binding lives this long after its last use.
    pub ttl_seconds: NonZeroU64,
    /// Consecutive failures of the bound channel that clear the binding.
    pub max_failures: NonZeroU32,
    /// Bind requests without a session id by a hash of system prompt + tools + first user
    /// message.
    pub implicit: bool,
}

impl Default for AffinitySection {
    fn default() -> Self {
        AffinitySection {
            ttl_seconds: nz64(86_400),
            max_failures: nz32(3),
            implicit: false,
        }
    }
}

/// `[store]`: the database the admin API writes to, `sqlite://<file>` or `postgres://...`.
#[derive(Debug, Deserialize)]
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
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateSection {
    /// `redis://host:port[/db]`, or `rediss://` for TLS: shared by every replica that names it.
    pub url: Option<String>,
    /// Prefix of every Redis key (replicas sharing state share it).
    pub prefix: Option<String>,
}

#[derive(Debug, Deserialize)]
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
}

/// `[server.retry_budget]`: calls to a channel a request already called (retries, its next
/// key) stay under `ratio` × requests over the window, with a floor of `min_per_second`, so a
/// failing upstream never sees its load multiplied (Linkerd's budget, same defaults). A
/// failover to a channel not yet called is not counted.
#[derive(Debug, Deserialize)]
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
        }
    }
}

#[derive(Debug, Deserialize)]
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
}

impl Default for LogSection {
    fn default() -> Self {
        LogSection {
            sqlite_path: "switchyard.db".into(),
            queue_capacity: nzusize(8192),
            journal: true,
            journal_dir: String::new(),
        }
    }
}

/// How channel health is scored (`[health]`).
#[derive(Debug, Deserialize)]
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
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

/// `[channels.circuit_breaker]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CircuitBreakerConfig {
    /// `false` ignores health for this channel entirely.
    pub enabled: bool,
    /// Keep health and the circuit per channel + model.
    pub per_model: bool,
    /// Retryable failures within `window_seconds` that open the circuit.
    pub failure_threshold: NonZeroU32,
    pub window_seconds: NonZeroU64,
    /// How long an open circuit is skipped (doubles on a failed trial, up to 5×).
    pub cooldown_seconds: NonZeroU64,
    /// How long a 429 cools the channel when the upstream gives no Retry-After.
    pub rate_limit_cooldown_seconds: u64,
    /// After recovery the channel's share ramps up over this long (0 = at once).
    pub slow_start_seconds: u64,
    pub probe: ProbeConfig,
}

/// `probe = { ... }` inside `[channels.circuit_breaker]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbeConfig {
    /// Off: a half-open circuit is tested by one live client request instead.
    pub enabled: bool,
    /// How often a closed channel scoring below `unhealthy_below` is probed.
    pub interval_seconds: NonZeroU64,
    /// Probe successes that close an open circuit.
    pub success_threshold: NonZeroU32,
    pub kind: ProbeKindConfig,
    pub unhealthy_below: f64,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig {
            enabled: true,
            interval_seconds: nz64(300),
            success_threshold: NonZeroU32::MIN,
            kind: ProbeKindConfig::Completion,
            unhealthy_below: 50.0,
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProbeKindConfig {
    Completion,
    Models,
}

impl Default for CircuitBreakerConfig {
    fn default() -> Self {
        CircuitBreakerConfig {
            enabled: true,
            per_model: false,
            failure_threshold: nz32(3),
            window_seconds: nz64(30),
            cooldown_seconds: nz64(60),
            rate_limit_cooldown_seconds: 15,
            slow_start_seconds: 30,
            probe: ProbeConfig::default(),
        }
    }
}

#[derive(Debug, Deserialize)]
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
    /// `{ usd, period, on_exhausted, soft, fail }`: what may be spent per period.
    pub budget: Option<super::quota::BudgetConfig>,
    /// Requests in any 60 s window, across every replica.
    pub rpm: Option<NonZeroU32>,
    pub tpm: Option<NonZeroU64>,
    pub max_concurrency: Option<NonZeroU32>,
    /// What `rpm`, `tpm` and `max_concurrency` do when the shared counter is unreachable.
    pub limits_fail: Option<super::quota::Fail>,
}

/// `{ from = "gpt-4*", to = "gpt-4o" }`: `from` is an exact name, or a glob when it holds `*`
/// or `?`; `kind = "regex"` makes it a regular expression matched against the whole name
/// (`to` may then use `$1`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedirectConfig {
    /// Given by the admin API on creation.
    pub id: Option<String>,
    pub from: String,
    pub to: String,
    pub kind: Option<RedirectKind>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RedirectKind {
    Exact,
    Glob,
    Regex,
}

/// A key's chain when the caller names one model: `{ models, timeout_ms, first_token_timeout_ms, on }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailoverDefaultsConfig {
    #[serde(default)]
    pub models: Vec<String>,
    pub timeout_ms: Option<u64>,
    pub first_token_timeout_ms: Option<u64>,
    pub on: Option<NonEmpty<crate::protocol::chain::FailOn>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelConfig {
    pub name: String,
    pub provider: ProviderKind,
    pub base_url: Option<String>,
    /// Azure OpenAI's `api-version` (e.g. "2024-10-21"); only for provider = "azure".
    pub api_version: Option<String>,
    #[serde(default)]
    pub api_keys: Vec<String>,
    /// Keys with limits: `[{ key, label, rpm, max_concurrency }]` (instead of `api_keys`).
    #[serde(default)]
    pub credentials: Vec<CredentialConfig>,
    /// How long a 429 (without Retry-After) or a 403 cools one credential.
    #[serde(default = "default_credential_cooldown")]
    pub credential_cooldown_seconds: u64,
    pub models: NonEmpty<ModelEntry>,
    #[serde(default = "one")]
    pub priority: u32,
    /// Share of traffic inside the tier (set `enabled = false` to take a channel out).
    #[serde(default = "nonzero_one")]
    pub weight: NonZeroU32,
    #[serde(default = "default_true")]
    pub enabled: bool,
    #[serde(default)]
    pub max_retries: u32,
    #[serde(default = "default_retry_interval")]
    pub retry_interval_ms: u64,
    /// Default 2000, or the attempt timeout if that is shorter.
    pub connect_timeout_ms: Option<NonZeroU64>,
    /// One non-streaming attempt, to the complete response. Default 120000, or the request
    /// deadline if that is shorter.
    pub timeout_ms: Option<NonZeroU64>,
    /// Streaming: to the first content token. Default 60000, or the request deadline if shorter.
    pub first_token_timeout_ms: Option<NonZeroU64>,
    /// Opt-in HTTP/2: a multiplexed connection can silently queue long streams.
    #[serde(default)]
    pub http2: bool,
    /// Ask this upstream for a usage chunk on streams (`stream_options.include_usage`), for the
    /// request log. Turn off for servers that reject `stream_options`.
    #[serde(default = "default_true")]
    pub stream_usage: bool,
    #[serde(default)]
    pub circuit_breaker: CircuitBreakerConfig,
    /// Groups this channel belongs to (none = `["default"]`); keys see channels by group.
    #[serde(default)]
    pub groups: Vec<String>,
    /// `false`: sessions are never bound to this channel.
    #[serde(default = "default_true")]
    pub affinity: bool,
    /// `openai` channels: the upstream serves the Responses API (`{base_url}/responses`), so a
    /// Responses client's request goes to it as sent, not translated to Chat Completions.
    #[serde(default)]
    pub responses: bool,
    pub mock: Option<MockSpec>,
    /// `bedrock` channels: the AWS region (its endpoint, and what SigV4 signs for).
    pub region: Option<String>,
    /// `bedrock` channels: AWS credentials (else `credentials` as Bedrock API keys, else the
    /// standard AWS chain).
    pub aws: Option<AwsConfig>,
    /// OpenAI-compatible channels: headers every call carries (OpenRouter's attribution...);
    /// not for credentials, which go in `api_keys` or `credentials`.
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
    /// `vertex` channels: the Google Cloud project.
    pub project: Option<String>,
    /// `vertex` channels: `global` or a region (`us-east5`).
    pub location: Option<String>,
    /// `vertex` channels: a service account's key, as JSON (a secret).
    pub credentials_json: Option<String>,
    /// `vertex` channels: a file holding a service account's key.
    pub credentials_file: Option<String>,
    /// The channel's own rates (a reseller's), over the model's price: USD per 1M tokens.
    pub price: Option<crate::pricing::PriceConfig>,
    /// `{ usd, period, on_exhausted, soft, fail }`: what may be spent per period.
    pub budget: Option<super::quota::BudgetConfig>,
    /// Requests in any 60 s window to this channel, across every replica (all its keys).
    pub rpm: Option<NonZeroU32>,
    pub tpm: Option<NonZeroU64>,
    pub max_concurrency: Option<NonZeroU32>,
    /// What `rpm`, `tpm` and `max_concurrency` do when the shared counter is unreachable.
    pub limits_fail: Option<super::quota::Fail>,
}

/// `aws = { access_key_id, secret_access_key, session_token }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AwsConfig {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

fn default_credential_cooldown() -> u64 {
    60
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CredentialConfig {
    pub key: String,
    /// Shown in logs and `/admin/health` instead of the key (default `key-N`).
    pub label: Option<String>,
    /// Requests per minute this key may send.
    pub rpm: Option<NonZeroU32>,
    /// Attempts in flight at once on this key.
    pub max_concurrency: Option<NonZeroU32>,
    /// Tokens per minute this key may use (prompt + completion).
    pub tpm: Option<NonZeroU32>,
}

fn one() -> u32 {
    1
}
fn nonzero_one() -> NonZeroU32 {
    NonZeroU32::MIN
}
fn default_true() -> bool {
    true
}
fn default_retry_interval() -> u64 {
    100
}

/// The three attempt timeouts, defaults filled in so that they fit inside the request deadline.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub connect_ms: u64,
    pub attempt_ms: u64,
    pub first_token_ms: u64,
}

impl ChannelConfig {
    pub fn timeouts(&self, request_timeout_ms: u64) -> Timeouts {
        let attempt_ms = self
            .timeout_ms
            .map_or(120_000.min(request_timeout_ms), NonZeroU64::get);
        let first_token_ms = self
            .first_token_timeout_ms
            .map_or(60_000.min(request_timeout_ms), NonZeroU64::get);
        let connect_ms = self
            .connect_timeout_ms
            .map_or(2_000.min(attempt_ms).min(first_token_ms), NonZeroU64::get);
        Timeouts {
            connect_ms,
            attempt_ms,
            first_token_ms,
        }
    }
}

/// `"gpt-4o"` or `{ name = "gpt-4o", upstream = "gpt-4o-2024-08-06" }` (on a `vertex`
/// channel also `publisher = "anthropic" | "google" | "openapi"`).
#[derive(Debug)]
pub enum ModelEntry {
    Name(String),
    Mapped {
        name: String,
        upstream: String,
        publisher: Option<String>,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MappedModel {
    name: String,
    upstream: String,
    publisher: Option<String>,
}

/// By hand rather than `untagged`, so a table keeps `deny_unknown_fields` and its error names
/// the unknown key instead of "did not match any variant".
impl<'de> Deserialize<'de> for ModelEntry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = ModelEntry;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a model name or { name, upstream }")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ModelEntry, E> {
                Ok(ModelEntry::Name(v.to_string()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<ModelEntry, A::Error> {
                let m =
                    MappedModel::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(ModelEntry::Mapped {
                    name: m.name,
                    upstream: m.upstream,
                    publisher: m.publisher,
                })
            }
        }
        d.deserialize_any(V)
    }
}

impl ModelEntry {
    pub fn name(&self) -> &str {
        match self {
            ModelEntry::Name(n) | ModelEntry::Mapped { name: n, .. } => n,
        }
    }
    pub fn upstream(&self) -> &str {
        match self {
            ModelEntry::Name(n) => n,
            ModelEntry::Mapped { upstream, .. } => upstream,
        }
    }
    /// The Vertex publisher named for it, if any.
    pub fn publisher(&self) -> Option<&str> {
        match self {
            ModelEntry::Name(_) => None,
            ModelEntry::Mapped { publisher, .. } => publisher.as_deref(),
        }
    }
}

// Constants that are not zero, for the defaults above (`new` is `None` only for 0).
const fn nz64(n: u64) -> NonZeroU64 {
    match NonZeroU64::new(n) {
        Some(v) => v,
        None => NonZeroU64::MIN,
    }
}
const fn nz32(n: u32) -> NonZeroU32 {
    match NonZeroU32::new(n) {
        Some(v) => v,
        None => NonZeroU32::MIN,
    }
}
const fn nzusize(n: usize) -> NonZeroUsize {
    match NonZeroUsize::new(n) {
        Some(v) => v,
        None => NonZeroUsize::MIN,
    }
}

/// A list that must have at least one entry: an empty one is refused when the file is read,
/// with its path, like any other wrong value.
#[derive(Debug, Clone)]
pub struct NonEmpty<T>(Vec<T>);

impl<T> std::ops::Deref for NonEmpty<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.0
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for NonEmpty<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Vec::<T>::deserialize(d)?;
        if v.is_empty() {
            return Err(serde::de::Error::custom("must have at least one entry"));
        }
        Ok(NonEmpty(v))
    }
}
