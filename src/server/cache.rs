//! The response cache at the edge: whether a request is looked up and its answer kept
//! (`[cache]`, `Cache-Control`, `x-switchyard-cache-ttl`), under which scope, and the kept
//! answer of a hit as a `Committed` stream for a client that streams.

use std::time::{Duration, Instant};

use axum::http::{HeaderMap, header};

use crate::cache::{self, Entry, Key};
use crate::config::cache::CacheScope;
use crate::config::{GatewayKey, Snapshot};
use crate::exec::Committed;
use crate::protocol::{ChatRequest, ChatResponse};
use crate::router::Chain;

/// The longest `x-switchyard-cache-ttl` taken: a week.
const MAX_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// What the cache does with one request.
pub enum Decision {
    /// No `[cache]`: nothing, and nothing said.
    Off,
    /// Neither looked up nor kept, and why (`x-switchyard-cache: bypass`).
    Bypass(&'static str),
    Use(Plan),
}

/// A cached request's key, and whether it is looked up (not with `no-cache`) and for how long
/// its answer is kept.
pub struct Plan {
    pub key: Key,
    pub lookup: bool,
    pub ttl: Duration,
    pub origin: cache::Origin,
}

impl Plan {
    /// How an answer of this plan that cost `cost_micros` is kept.
    pub fn keeping(
        self,
        s: &crate::config::cache::CacheSettings,
        cost_micros: u64,
    ) -> (Key, cache::Keeping) {
        (
            self.key,
            cache::Keeping {
                cost_micros,
                ttl: self.ttl,
                max_entry_bytes: s.max_entry_bytes,
                origin: self.origin,
            },
        )
    }
}

/// Who may read an entry this key makes: the key itself, the groups it reaches, or everyone.
fn scope(s: CacheScope, key: &GatewayKey) -> String {
    match s {
        CacheScope::Key => key.scope.to_string(),
        CacheScope::Group => {
            let mut g: Vec<&str> = key.groups.iter().map(|g| &**g).collect();
            g.sort_unstable();
            format!("groups:{}", g.join(","))
        }
        CacheScope::Global => "global".into(),
    }
}

/// What the cache does with `req`, as `key` sent it to `chain`.
pub fn decide(
    snap: &Snapshot,
    key: &GatewayKey,
    chain: &Chain,
    req: &ChatRequest,
    headers: &HeaderMap,
) -> Decision {
    let Some(s) = &snap.cache else {
        return Decision::Off;
    };
    let control = headers
        .get(header::CACHE_CONTROL)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let says = |d: &str| control.split(',').any(|p| p.trim() == d);
    if says("no-store") {
        return Decision::Bypass(cache::Bypass::NoStore.as_str());
    }
    if let Some(b) = cache::refusal(req, s.deterministic_only) {
        return Decision::Bypass(b.as_str());
    }
    let ttl = headers
        .get("x-switchyard-cache-ttl")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|s| *s > 0)
        .map_or(s.ttl, |s| Duration::from_secs(s).min(MAX_TTL));
    let models = chain.steps.iter().map(|st| &*st.model);
    Decision::Use(Plan {
        key: cache::key(&scope(s.scope, key), models, req),
        lookup: !says("no-cache"),
        ttl,
        origin: cache::Origin {
            key: key.name.clone(),
            models: chain.steps.iter().map(|st| st.model.clone()).collect(),
        },
    })
}

/// Whether an answer may be kept: every choice finished whole (`stop`, `length`,
/// `tool_calls`), and there is one.
pub fn keepable(r: &ChatResponse) -> bool {
    !r.choices.is_empty()
        && r.choices.iter().all(|c| {
            matches!(
                c.finish_reason.as_deref(),
                Some("stop" | "length" | "tool_calls" | "end_turn" | "STOP")
            )
        })
}

/// A hit's answer as a stream past its commit point: every chunk ready, nothing upstream.
pub fn committed(e: &Entry) -> Committed {
    Committed {
        head: cache::replay::chunks(&e.response),
        rest: Box::pin(futures_util::stream::empty()),
        slot: Default::default(),
        on_break: None,
    }
}

/// A cached request's streamed answer, collected as it goes and kept if the stream completes
/// whole.
pub struct KeepStream {
    pub collect: cache::Collect,
    pub cache: std::sync::Arc<std::sync::OnceLock<cache::Cache>>,
    pub plan: Plan,
    pub settings: crate::config::cache::CacheSettings,
}

impl KeepStream {
    /// Keeps the collected answer, when every choice finished whole.
    pub fn keep(self, cost_micros: u64) {
        let r = self.collect.finish();
        if let Some(c) = self.cache.get().filter(|_| keepable(&r)) {
            let (key, keeping) = self.plan.keeping(&self.settings, cost_micros);
            c.store(key, r, keeping, Instant::now());
        }
    }
}

/// The `age` of a hit, in seconds.
pub fn age(e: &Entry) -> u64 {
    e.age(Instant::now())
}
