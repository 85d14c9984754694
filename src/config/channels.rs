//! The `[[channels]]` tables as written: an upstream, its credentials, its models and their
//! mapping, with documented defaults (the rest of the file is in `file.rs`).

use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};
use std::time::Duration;

use serde::Deserialize;

use super::settings::{BreakerSettings, ProbeKind, ProbeSettings};
use crate::provider::ProviderKind;
use crate::provider::mock::MockSpec;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AwsConfig {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

fn default_credential_cooldown() -> u64 {
    60
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
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

#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct MappedModel {
    name: String,
    upstream: String,
    publisher: Option<String>,
}

impl schemars::JsonSchema for ModelEntry {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ModelEntry".into()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let mapped = generator.subschema_for::<MappedModel>();
        schemars::json_schema!({
            "description": "A model name, or { name, upstream } (on a vertex channel also publisher).",
            "anyOf": [{"type": "string"}, mapped]
        })
    }
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

/// `[channels.circuit_breaker]`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Deserialize, schemars::JsonSchema)]
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

#[derive(Debug, Clone, Copy, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ProbeKindConfig {
    Completion,
    Models,
}

impl CircuitBreakerConfig {
    /// The breaker as health reads it.
    pub fn settings(&self) -> BreakerSettings {
        BreakerSettings {
            enabled: self.enabled,
            per_model: self.per_model,
            failure_threshold: self.failure_threshold.get(),
            window: Duration::from_secs(self.window_seconds.get()),
            cooldown: Duration::from_secs(self.cooldown_seconds.get()),
            rate_limit_cooldown: Duration::from_secs(self.rate_limit_cooldown_seconds),
            slow_start: Duration::from_secs(self.slow_start_seconds),
            probe: self.probe.enabled.then(|| ProbeSettings {
                kind: match self.probe.kind {
                    ProbeKindConfig::Completion => ProbeKind::Completion,
                    ProbeKindConfig::Models => ProbeKind::Models,
                },
                interval: Duration::from_secs(self.probe.interval_seconds.get()),
                success_threshold: self.probe.success_threshold.get(),
                unhealthy_below: self.probe.unhealthy_below,
            }),
        }
    }
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

// Constants that are not zero, for the defaults here and in `file.rs` (`new` is `None` only for 0).
pub(super) const fn nz64(n: u64) -> NonZeroU64 {
    match NonZeroU64::new(n) {
        Some(v) => v,
        None => NonZeroU64::MIN,
    }
}
pub(super) const fn nz32(n: u32) -> NonZeroU32 {
    match NonZeroU32::new(n) {
        Some(v) => v,
        None => NonZeroU32::MIN,
    }
}
pub(super) const fn nzusize(n: usize) -> NonZeroUsize {
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

impl<T: schemars::JsonSchema> schemars::JsonSchema for NonEmpty<T> {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> std::borrow::Cow<'static, str> {
        format!("NonEmpty_{}", T::schema_name()).into()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let items = generator.subschema_for::<T>();
        schemars::json_schema!({"type": "array", "items": items, "minItems": 1})
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
