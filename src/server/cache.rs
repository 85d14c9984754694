//! The response cache at the edge: whether a request is looked up and its answer kept
//! (`[cache]`, `Cache-Control`, `x-switchyard-cache-ttl`), under which scope, and the kept
//! answer of a hit as a `Committed` stream for a client that streams.

use std::time::{Duration, Instant};

use axum::http::{HeaderMap, header};

use std::sync::Arc;

use crate::cache::{self, Entry, Key, Outcome, Question};
use crate::config::cache::{CacheMode, CacheScope, PolicyMode};
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
    Use(Box<Plan>),
}

/// A cached request's key, and whether it is looked up (not with `no-cache`) and for how long
/// its answer is kept; in semantic mode its bucket and question, and once embedded the question
/// kept with the answer.
pub struct Plan {
    pub key: Key,
    pub lookup: bool,
    pub ttl: Duration,
    pub origin: cache::Origin,
    pub semantic: Option<(Key, String)>,
    pub question: Option<Question>,
    /// `[cache] max_entry_bytes`, read when the plan was made.
    pub max_entry_bytes: u64,
}

/// An answer of a plan, ready to be kept: its key, how, and its question.
pub struct Keep(pub Key, pub cache::Keeping, pub Option<Question>);

impl Plan {
    /// How an answer of this plan that cost `cost_micros` is kept.
    pub fn keeping(self, cost_micros: u64) -> Keep {
        Keep(
            self.key,
            cache::Keeping {
                cost_micros,
                ttl: self.ttl,
                max_entry_bytes: self.max_entry_bytes,
                origin: self.origin,
            },
            self.question,
        )
    }
}

/// What a lookup found.
pub enum Looked {
    Hit(Arc<Entry>),
    /// Another question's answer, and the two questions' cosine.
    Similar(Arc<Entry>, f32),
    Miss,
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
    // The key's policy over the model's over `[cache]`'s.
    let model = chain.steps.first().and_then(|st| s.models.get(&st.model));
    let policies = [key.cache.as_ref(), model];
    let mode = match policies.iter().flatten().find_map(|p| p.mode) {
        Some(PolicyMode::Off) => return Decision::Bypass("cache_off"),
        Some(PolicyMode::Semantic) => CacheMode::Semantic,
        Some(PolicyMode::Exact) => CacheMode::Exact,
        None => s.mode,
    };
    if let Some(b) = cache::refusal(req, s.deterministic_only, s.max_entry_bytes) {
        return Decision::Bypass(b.as_str());
    }
    let ttl = headers
        .get("x-switchyard-cache-ttl")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|s| *s > 0)
        .map(|s| Duration::from_secs(s).min(MAX_TTL))
        .or_else(|| policies.iter().flatten().find_map(|p| p.ttl))
        .unwrap_or(s.ttl);
    let scope = scope(s.scope, key);
    let models = || chain.steps.iter().map(|st| &*st.model);
    let semantic = (mode == CacheMode::Semantic)
        .then(|| cache::bucket(&scope, models(), req, s.semantic_multi_turn))
        .flatten();
    Decision::Use(Box::new(Plan {
        key: cache::key(&scope, models(), req),
        lookup: !says("no-cache"),
        ttl,
        origin: cache::Origin {
            key: key.name.clone(),
            models: chain.steps.iter().map(|st| st.model.clone()).collect(),
        },
        semantic,
        question: None,
        max_entry_bytes: s.max_entry_bytes,
    }))
}

/// What the cache did before admission: a hit to answer, or the plan to keep the answer by.
pub enum Consulted {
    Hit(Arc<Entry>),
    Go(Option<Box<Plan>>),
}

/// The cache before admission: decides (a request its protocol keeps, `kept`, is never
/// replayed), looks up, and admits a hit: a request (the key's `rpm` counts it) that costs
/// nothing, unless a reseller charges it as the answer it replays, when that cost must fit.
#[allow(clippy::too_many_arguments)] // the request's parts, as the pipeline holds them
pub async fn consult(
    state: &super::AppState,
    ctx: &mut super::ctx::Ctx,
    snap: &Snapshot,
    key: &GatewayKey,
    chain: &Chain,
    req: &ChatRequest,
    headers: &HeaderMap,
    kept: bool,
) -> Result<Consulted, super::ApiError> {
    let decision = match snap.cache {
        Some(_) if kept => Decision::Bypass(cache::Bypass::Kept.as_str()),
        _ => decide(snap, key, chain, req, headers),
    };
    let mut plan = match decision {
        Decision::Off => return Ok(Consulted::Go(None)),
        Decision::Bypass(why) => {
            ctx.cache = Some("bypass");
            ctx.cache_bypass = Some(why);
            return Ok(Consulted::Go(None));
        }
        Decision::Use(plan) => plan,
    };
    ctx.cache = Some("miss");
    // Boxed: the lookup (an embedding, the store's futures) would make every request's
    // future this large, cache or not, and be copied with it.
    let hit = match Box::pin(lookup(state, snap, &mut plan)).await {
        Looked::Hit(e) => e,
        Looked::Similar(e, similarity) => {
            ctx.cache_similarity = Some(similarity);
            e
        }
        Looked::Miss => return Ok(Consulted::Go(Some(plan))),
    };
    if snap.cache.as_ref().is_some_and(|s| s.charge_hits) {
        let ask = crate::spend::Ask {
            micros: hit.cost_micros,
            tokens: 0,
        };
        super::admission::admit(&state.meter, snap, key, ask, ctx).await?;
    } else {
        super::admission::admit_request(&state.meter, snap, key, ctx).await?;
    }
    Ok(Consulted::Hit(hit))
}

/// Looks `plan` up: its exact key, then (semantic mode) a kept question like its own, which it
/// embeds, and keeps in the plan to be indexed with the answer. Counts what it found and how
/// long it took. An embedder that fails or is slow is a miss.
pub async fn lookup(state: &super::AppState, snap: &Snapshot, plan: &mut Plan) -> Looked {
    let Some(s) = &snap.cache else {
        return Looked::Miss;
    };
    let c = state.cache(s);
    let t0 = Instant::now();
    let found = lookup_in(state, snap, s, c, plan).await;
    if plan.lookup {
        c.count(match &found {
            Looked::Hit(_) => Outcome::Hit,
            Looked::Similar(..) => Outcome::SemanticHit,
            Looked::Miss => Outcome::Miss,
        });
        state
            .telemetry
            .metrics
            .cache_lookup
            .observe(u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX));
    }
    found
}

async fn lookup_in(
    state: &super::AppState,
    snap: &Snapshot,
    s: &crate::config::cache::CacheSettings,
    c: &cache::Cache,
    plan: &mut Plan,
) -> Looked {
    if plan.lookup
        && let Some(e) = c.get(&plan.key).await
    {
        return Looked::Hit(e);
    }
    let (Some((bucket, text)), Some(spec)) = (plan.semantic.take(), &s.embedder) else {
        return Looked::Miss;
    };
    let vector = match state
        .semantic
        .embed_one(snap, &state.health, spec, &text, s.embed_timeout)
        .await
    {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(error = %e, "the cache's embedder failed: a miss, and the answer is kept for exact lookups only");
            return Looked::Miss;
        }
    };
    let q = Question {
        bucket,
        text: text.into(),
        vector: vector.into(),
    };
    if plan.lookup
        && let Some((key, similarity)) = c.similar(&q, s.similarity).await
        && let Some(e) = c.get(&key).await
    {
        return Looked::Similar(e, similarity);
    }
    plan.question = Some(q);
    Looked::Miss
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
}

impl KeepStream {
    /// Keeps the collected answer, when every choice finished whole.
    pub fn keep(self, cost_micros: u64) {
        let r = self.collect.finish();
        if let Some(c) = self.cache.get().filter(|_| keepable(&r)) {
            let Keep(key, keeping, question) = self.plan.keeping(cost_micros);
            c.store(key, r, keeping, question);
        }
    }
}

/// The `age` of a hit, in seconds.
pub fn age(e: &Entry) -> u64 {
    e.age(std::time::SystemTime::now())
}
