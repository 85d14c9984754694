//! `[cache]` as written, and compiled: whether answers are kept and served again, for how
//! long, where, and who may read an entry (the scope).

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::file::EmbedderConfig;
use super::snapshot::EmbedderSpec;

/// `[cache]`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct CacheSection {
    pub enabled: bool,
    pub mode: CacheMode,
    pub ttl_seconds: NonZeroU64,
    pub backend: CacheBackend,
    /// Memory: the entries' bytes, at most.
    pub max_bytes: NonZeroU64,
    /// An answer larger than this is not kept.
    pub max_entry_bytes: NonZeroU64,
    pub scope: CacheScope,
    /// Only requests that ask for the same answer again are kept: no `temperature > 0`
    /// without a `seed`.
    pub deterministic_only: bool,
    /// A hit is charged to budgets as the answer it replays (for resellers).
    pub charge_hits: bool,
    /// Semantic mode's embedder (the form a router's takes).
    pub embedder: Option<EmbedderConfig>,
    /// Semantic mode: the cosine at or above which a question may be answered by another's
    /// entry (the guards must agree too).
    pub similarity: f64,
    /// Semantic mode also for conversations (the turns before the last must match exactly).
    pub semantic_multi_turn: bool,
    /// The longest a lookup waits for the question's embedding before it is a miss.
    pub embed_timeout_ms: NonZeroU64,
}

/// `cache = { mode, ttl_seconds }` on a gateway key or a `[[models]]` entry: over `[cache]`'s.
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CachePolicyConfig {
    pub mode: Option<PolicyMode>,
    pub ttl_seconds: Option<NonZeroU64>,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum PolicyMode {
    Exact,
    Semantic,
    Off,
}

/// A key's or a model's cache policy, compiled: its mode (`None`: `[cache]`'s) and TTL.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    pub mode: Option<PolicyMode>,
    pub ttl: Option<Duration>,
}

impl Policy {
    pub fn of(c: &CachePolicyConfig) -> Policy {
        Policy {
            mode: c.mode,
            ttl: c.ttl_seconds.map(|s| Duration::from_secs(s.get())),
        }
    }
}

impl Default for CacheSection {
    fn default() -> Self {
        CacheSection {
            enabled: false,
            mode: CacheMode::Exact,
            ttl_seconds: NonZeroU64::new(3600).unwrap_or(NonZeroU64::MIN),
            backend: CacheBackend::Memory,
            max_bytes: NonZeroU64::new(256 << 20).unwrap_or(NonZeroU64::MIN),
            max_entry_bytes: NonZeroU64::new(1 << 20).unwrap_or(NonZeroU64::MIN),
            scope: CacheScope::Key,
            deterministic_only: false,
            charge_hits: false,
            embedder: None,
            similarity: DEFAULT_SIMILARITY,
            semantic_multi_turn: false,
            embed_timeout_ms: NonZeroU64::new(500).unwrap_or(NonZeroU64::MIN),
        }
    }
}

/// The default `similarity`, set from `switchyard cache eval` on `tests/fixtures/cache/pairs.jsonl`
/// with MiniLM (docs/cache.md).
pub const DEFAULT_SIMILARITY: f64 = 0.9;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CacheMode {
    Exact,
    Semantic,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CacheBackend {
    Memory,
    Redis,
}

/// Who may read an entry: the gateway key that stored it (`key`), any key sharing one of its
/// groups (`group`), or every key (`global`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CacheScope {
    Key,
    Group,
    Global,
}

/// `[cache]`, validated.
#[derive(Debug, Clone)]
pub struct CacheSettings {
    pub mode: CacheMode,
    pub ttl: Duration,
    pub backend: CacheBackend,
    pub max_bytes: u64,
    pub max_entry_bytes: u64,
    pub scope: CacheScope,
    pub deterministic_only: bool,
    pub charge_hits: bool,
    /// Semantic mode's embedder: set when `[cache]` or any key or model asks for semantic.
    pub embedder: Option<EmbedderSpec>,
    pub similarity: f32,
    pub semantic_multi_turn: bool,
    pub embed_timeout: Duration,
    /// Each served model's `[[models]] cache`, where an entry sets one.
    pub models: HashMap<Arc<str>, Policy>,
}

/// What compiling `[cache]` needs from the rest of the config.
pub struct Context<'a> {
    pub channels: &'a [super::snapshot::Channel],
    /// Whether `[state] url` names a Redis.
    pub shared_state: bool,
    /// Whether a key or a model asks for semantic mode.
    pub semantic_wanted: bool,
    pub models: HashMap<Arc<str>, Policy>,
}

/// The settings of an enabled cache (`None`: off). What cannot work is refused naming its
/// field, never accepted and ignored.
pub fn compile(
    c: &CacheSection,
    cx: Context<'_>,
) -> Result<Option<CacheSettings>, (String, String)> {
    if !c.enabled {
        return Ok(None);
    }
    if c.backend == CacheBackend::Redis && !cx.shared_state {
        return Err((
            "cache.backend".into(),
            "\"redis\" keeps entries in [state]'s Redis: set [state] url".into(),
        ));
    }
    if c.max_entry_bytes > c.max_bytes {
        return Err((
            "cache.max_entry_bytes".into(),
            "must not be above cache.max_bytes".into(),
        ));
    }
    if !(0.0..=1.0).contains(&c.similarity) {
        return Err(("cache.similarity".into(), "must be in [0, 1]".into()));
    }
    let semantic = c.mode == CacheMode::Semantic || cx.semantic_wanted;
    let embedder = match (&c.embedder, semantic) {
        (None, true) => {
            return Err((
                "cache.embedder".into(),
                "semantic mode needs an embedder: { kind = \"local\", model_dir } or { kind = \"channel\", channel, model }".into(),
            ));
        }
        (Some(EmbedderConfig::Hashed), true) => {
            return Err((
                "cache.embedder".into(),
                "\"hashed\" matches spelling, not meaning: a cache would answer the wrong question"
                    .into(),
            ));
        }
        (Some(e), true) => Some(super::compile::embedder_spec(
            Some(e),
            "cache.embedder",
            cx.channels,
        )?),
        (_, false) => None,
    };
    Ok(Some(CacheSettings {
        mode: c.mode,
        ttl: Duration::from_secs(c.ttl_seconds.get()),
        backend: c.backend,
        max_bytes: c.max_bytes.get(),
        max_entry_bytes: c.max_entry_bytes.get(),
        scope: c.scope,
        deterministic_only: c.deterministic_only,
        charge_hits: c.charge_hits,
        embedder,
        similarity: c.similarity as f32,
        semantic_multi_turn: c.semantic_multi_turn,
        embed_timeout: Duration::from_millis(c.embed_timeout_ms.get()),
        models: cx.models,
    }))
}
