//! `[cache]` as written, and compiled: whether answers are kept and served again, for how
//! long, where, and who may read an entry (the scope).

use std::num::NonZeroU64;
use std::time::Duration;

use serde::Deserialize;

/// `[cache]`.
#[derive(Debug, Deserialize)]
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
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheMode {
    Exact,
    Semantic,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheBackend {
    Memory,
    Redis,
}

/// Who may read an entry: the gateway key that stored it (`key`), any key sharing one of its
/// groups (`group`), or every key (`global`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheScope {
    Key,
    Group,
    Global,
}

/// `[cache]`, validated.
#[derive(Debug, Clone)]
pub struct CacheSettings {
    pub ttl: Duration,
    pub max_bytes: u64,
    pub max_entry_bytes: u64,
    pub scope: CacheScope,
    pub deterministic_only: bool,
    pub charge_hits: bool,
}

/// The settings of an enabled cache (`None`: off). What this build does not serve yet is
/// refused naming its field, never accepted and ignored.
pub fn compile(c: &CacheSection) -> Result<Option<CacheSettings>, (String, String)> {
    if !c.enabled {
        return Ok(None);
    }
    if c.mode == CacheMode::Semantic {
        return Err((
            "cache.mode".into(),
            "\"semantic\" is not available yet: use \"exact\"".into(),
        ));
    }
    if c.backend == CacheBackend::Redis {
        return Err((
            "cache.backend".into(),
            "\"redis\" is not available yet: use \"memory\"".into(),
        ));
    }
    if c.charge_hits {
        return Err((
            "cache.charge_hits".into(),
            "true is not available yet: hits are never charged to budgets".into(),
        ));
    }
    if c.max_entry_bytes > c.max_bytes {
        return Err((
            "cache.max_entry_bytes".into(),
            "must not be above cache.max_bytes".into(),
        ));
    }
    Ok(Some(CacheSettings {
        ttl: Duration::from_secs(c.ttl_seconds.get()),
        max_bytes: c.max_bytes.get(),
        max_entry_bytes: c.max_entry_bytes.get(),
        scope: c.scope,
        deterministic_only: c.deterministic_only,
        charge_hits: c.charge_hits,
    }))
}
