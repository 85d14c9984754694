//! The compiled, immutable routing snapshot, validated once at load.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use subtle::ConstantTimeEq;

use super::file::{
    ChannelConfig, EmbedderConfig, FileConfig, ProbeKindConfig, ProviderKind, RedirectConfig,
    RedirectKind, RouterConfig, RouterFailover, Timeouts,
};
use super::{ConfigError, DEMO_KEY, Source};
use crate::health::{BreakerSettings, HealthSettings, Limits, ProbeKind, ProbeSettings};
use crate::protocol::chain::{FIRST_TOKEN_MS, MAX_MODELS, OnSet, TIMEOUT_MS};
use crate::provider::{HttpClients, Upstream};

/// A secret string: compared in constant time, never printed.
#[derive(Clone)]
pub struct Secret(Arc<str>);

impl Secret {
    pub fn new(s: impl Into<Arc<str>>) -> Self {
        Secret(s.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
    /// Constant-time equality (the length may leak; the content does not).
    pub fn matches(&self, presented: &[u8]) -> bool {
        self.0.as_bytes().ct_eq(presented).into()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

#[derive(Debug)]
pub struct ServerSettings {
    pub listen: SocketAddr,
    pub request_timeout: Duration,
    pub stream_idle_timeout: Duration,
    pub max_body_bytes: usize,
    pub max_attempts: u32,
    pub max_retry_after: Duration,
    pub admin_token: Option<Secret>,
    pub max_hops: u32,
    pub retry_budget: crate::health::BudgetSettings,
}

#[derive(Debug)]
pub struct LogSettings {
    pub sqlite_path: String,
    pub queue_capacity: usize,
}

#[derive(Debug)]
pub struct GatewayKey {
    pub name: Arc<str>,
    pub key: Secret,
    /// Channel groups this key may use, in order of preference; empty = every channel.
    pub groups: Vec<Arc<str>>,
    pub redirects: Vec<Redirect>,
    pub defaults: Option<FailoverDefaults>,
    /// Trim this key's requests to fit the serving model's window.
    pub trim: bool,
}

impl GatewayKey {
    /// Where a channel stands in this key's group preference: `None` = not visible to the key.
    pub fn group_rank(&self, channel: &Channel) -> Option<usize> {
        if self.groups.is_empty() {
            return Some(0);
        }
        self.groups
            .iter()
            .position(|g| channel.groups.iter().any(|cg| cg == g))
    }
}

/// A key's chain for callers that name one model, validated at load.
#[derive(Debug, Clone)]
pub struct FailoverDefaults {
    pub models: Vec<Arc<str>>,
    pub timeout_ms: Option<u64>,
    pub first_token_timeout_ms: Option<u64>,
    pub on: Option<OnSet>,
}

/// A model-name rewrite. `rule` says where it was configured (`keys[0].redirects[1]`).
#[derive(Debug)]
pub struct Redirect {
    pub rule: Arc<str>,
    pub from: Arc<str>,
    pub to: Arc<str>,
    matcher: Matcher,
}

#[derive(Debug)]
enum Matcher {
    Exact,
    Pattern(regex_lite::Regex),
}

impl Redirect {
    /// The rewritten name, if this rule matches `model`.
    pub fn apply(&self, model: &str) -> Option<String> {
        match &self.matcher {
            Matcher::Exact => (*self.from == *model).then(|| self.to.to_string()),
            Matcher::Pattern(re) => re
                .is_match(model)
                .then(|| re.replace(model, &*self.to).into_owned()),
        }
    }
}

/// One upstream endpoint, ready to call.
#[derive(Debug)]
pub struct Channel {
    pub name: Arc<str>,
    pub kind: ProviderKind,
    pub priority: u32,
    pub weight: u32,
    pub enabled: bool,
    pub max_retries: u32,
    pub retry_interval: Duration,
    pub timeout: Duration,
    pub first_token_timeout: Duration,
    pub breaker: BreakerSettings,
    /// The channel's credentials by label, in the provider's key order (empty = no key).
    pub credentials: Vec<(Arc<str>, Limits)>,
    pub credential_cooldown: Duration,
    /// Never empty: a channel configured without groups is in `default`.
    pub groups: Vec<Arc<str>>,
    /// Sessions may be bound to this channel.
    pub affinity: bool,
    /// The upstream serves the Responses API: Responses requests reach it as sent.
    pub responses: bool,
    pub upstream: Upstream,
}

/// One way to serve a model: a channel and the name the upstream knows the model by.
#[derive(Debug, Clone)]
pub struct ModelRoute {
    pub channel: usize,
    pub upstream_model: Arc<str>,
}

#[derive(Debug)]
pub struct Snapshot {
    pub server: ServerSettings,
    pub log: LogSettings,
    pub health: HealthSettings,
    pub balance: super::Balance,
    pub keys: Vec<GatewayKey>,
    pub channels: Vec<Channel>,
    /// Model name → the channels that list it, in config order. Sorted by name for listing.
    pub models: BTreeMap<Arc<str>, Vec<ModelRoute>>,
    /// Global redirects, tried after the key's own.
    pub redirects: Vec<Redirect>,
    pub affinity: AffinitySettings,
    pub state: StateSettings,
    /// Virtual models routed by meaning.
    pub routers: Vec<SemanticRouter>,
    /// Context windows and the context settings of each model's route.
    pub catalog: crate::context::catalog::Catalog,
    /// Unique per compiled config: caches of anything derived from it (reference embeddings)
    /// are keyed by it.
    pub version: u64,
    pub source: Source,
}

/// A `[[routers]]` entry, validated.
#[derive(Debug)]
pub struct SemanticRouter {
    pub model: Arc<str>,
    pub threshold: f32,
    pub expose_scores: bool,
    pub failover: RouterFailover,
    pub embedder: EmbedderSpec,
    /// For one embedding (the examples' batch gets ten times this).
    pub timeout: Duration,
    pub instances: Vec<Instance>,
    /// The instance that serves when no other clears its threshold.
    pub catchall: usize,
}

#[derive(Debug)]
pub struct Instance {
    pub name: Arc<str>,
    pub model: Arc<str>,
    pub examples: Vec<String>,
    pub threshold: Option<f32>,
}

#[derive(Debug, Clone)]
pub enum EmbedderSpec {
    Hashed,
    /// A channel (index) that serves OpenAI `/v1/embeddings`, and the model to ask it for.
    Channel {
        channel: usize,
        model: Arc<str>,
    },
    /// Not in this build yet: the router fails open to its catchall.
    Local {
        model_dir: String,
    },
}

impl Snapshot {
    pub fn router(&self, model: &str) -> Option<(usize, &SemanticRouter)> {
        self.routers
            .iter()
            .enumerate()
            .find(|(_, r)| &*r.model == model)
    }
}

static VERSION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

#[derive(Debug, Clone, Copy)]
pub struct AffinitySettings {
    pub ttl: Duration,
    pub max_failures: u32,
    pub implicit: bool,
}

#[derive(Debug, Clone)]
pub struct StateSettings {
    /// Redis URL (credentials inside it are never printed); `None` = in memory.
    pub url: Option<Secret>,
    pub prefix: Arc<str>,
}

impl Snapshot {
    pub fn is_demo(&self) -> bool {
        matches!(self.source, Source::Demo)
    }

    /// The key a client presented, compared against every key without an early exit.
    pub fn authenticate(&self, presented: &str) -> Option<&GatewayKey> {
        let mut found = None;
        for k in &self.keys {
            if k.key.matches(presented.as_bytes()) {
                found = Some(k);
            }
        }
        found
    }

    /// A key by its name (the CLI's `explain --key`).
    pub fn key_named(&self, name: &str) -> Option<&GatewayKey> {
        self.keys.iter().find(|k| &*k.name == name)
    }

    /// The first redirect that matches `model`: the key's rules, then the global ones.
    pub fn redirect<'a>(
        &'a self,
        key: &'a GatewayKey,
        model: &str,
    ) -> Option<(String, &'a Redirect)> {
        key.redirects
            .iter()
            .chain(&self.redirects)
            .find_map(|r| Some((r.apply(model)?, r)))
    }

    /// Some channel of the key's groups lists `model`; with `enabled_only`, an enabled one (what
    /// `/v1/models` lists). A model only disabled channels serve is a 503 for the key, not a 404.
    pub fn serves(&self, key: &GatewayKey, model: &str, enabled_only: bool) -> bool {
        self.models.get(model).is_some_and(|routes| {
            routes.iter().any(|r| {
                self.channels
                    .get(r.channel)
                    .is_some_and(|c| (c.enabled || !enabled_only) && key.group_rank(c).is_some())
            })
        })
    }

    /// Human-readable plan of what would be served: models → channels by tier.
    pub fn describe(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "listen {}  ·  {} key(s)  ·  {} channel(s)  ·  request log {}",
            self.server.listen,
            self.keys.len(),
            self.channels.len(),
            self.log.sqlite_path
        );
        for (model, routes) in &self.models {
            let _ = writeln!(out, "model {model}");
            let mut tiers: BTreeMap<u32, Vec<&ModelRoute>> = BTreeMap::new();
            for r in routes {
                tiers
                    .entry(self.channels[r.channel].priority)
                    .or_default()
                    .push(r);
            }
            for (prio, rs) in tiers {
                let list: Vec<String> = rs
                    .iter()
                    .map(|r| {
                        let c = &self.channels[r.channel];
                        let mut s = format!("{} ({}, weight {}", c.name, c.kind.as_str(), c.weight);
                        if *r.upstream_model != **model {
                            let _ = write!(s, ", upstream model {}", r.upstream_model);
                        }
                        if !c.enabled {
                            s.push_str(", disabled");
                        }
                        s.push(')');
                        s
                    })
                    .collect();
                let _ = writeln!(out, "  tier {prio}: {}", list.join(", "));
            }
        }
        out
    }
}

pub(crate) fn compile(
    cfg: FileConfig,
    shown: &str,
    source: Source,
    clients: &HttpClients,
) -> Result<Snapshot, ConfigError> {
    let err = |field: String, msg: String| ConfigError::field(shown, field, msg);
    let s = &cfg.server;
    let listen: SocketAddr = s.listen.parse().map_err(|_| {
        err(
            "server.listen".into(),
            format!("expected host:port with an IP address, got {:?}", s.listen),
        )
    })?;
    if s.request_timeout_ms == 0 {
        return Err(err(
            "server.request_timeout_ms".into(),
            "must be > 0".into(),
        ));
    }
    if s.stream_idle_timeout_ms == 0 {
        return Err(err(
            "server.stream_idle_timeout_ms".into(),
            "must be > 0".into(),
        ));
    }
    if s.max_body_bytes == 0 {
        return Err(err("server.max_body_bytes".into(), "must be > 0".into()));
    }
    if s.max_attempts == 0 {
        return Err(err("server.max_attempts".into(), "must be >= 1".into()));
    }
    let admin_token = match &s.admin_token {
        Some(t) if t.len() < 16 => {
            return Err(err(
                "server.admin_token".into(),
                "must be at least 16 characters".into(),
            ));
        }
        Some(t) => Some(Secret::new(t.as_str())),
        None => None,
    };
    if cfg.log.sqlite_path.is_empty() {
        return Err(err("log.sqlite_path".into(), "must not be empty".into()));
    }
    if cfg.log.queue_capacity == 0 {
        return Err(err("log.queue_capacity".into(), "must be > 0".into()));
    }
    let h = &cfg.health;
    if h.window_seconds == 0 || h.window_size == 0 {
        return Err(err(
            "health.window_seconds".into(),
            "the window needs a length and a size > 0".into(),
        ));
    }
    if h.latency_good_ms >= h.latency_bad_ms {
        return Err(err(
            "health.latency_good_ms".into(),
            "must be below health.latency_bad_ms".into(),
        ));
    }
    if !(h.min_weight_factor > 0.0 && h.min_weight_factor <= 1.0) {
        return Err(err(
            "health.min_weight_factor".into(),
            "must be in (0, 1]".into(),
        ));
    }

    let mut key_names = HashSet::new();
    let mut key_values = HashSet::new();
    let mut keys = Vec::with_capacity(cfg.keys.len());
    for (i, k) in cfg.keys.iter().enumerate() {
        if k.name.is_empty() {
            return Err(err(format!("keys[{i}].name"), "must not be empty".into()));
        }
        if !key_names.insert(k.name.as_str()) {
            return Err(err(
                format!("keys[{i}].name"),
                format!("duplicate key name {:?}", k.name),
            ));
        }
        if k.key.len() < 8 {
            return Err(err(
                format!("keys[{i}].key"),
                "must be at least 8 characters".into(),
            ));
        }
        if k.key == DEMO_KEY && !matches!(source, Source::Demo) {
            return Err(err(
                format!("keys[{i}].key"),
                "the public demo key is only accepted in demo mode".into(),
            ));
        }
        if !key_values.insert(k.key.as_str()) {
            return Err(err(
                format!("keys[{i}].key"),
                "the same key is given twice".into(),
            ));
        }
        keys.push(GatewayKey {
            name: k.name.as_str().into(),
            key: Secret::new(k.key.as_str()),
            groups: k.groups.iter().map(|g| g.as_str().into()).collect(),
            redirects: Vec::new(),
            defaults: None,
            trim: k.trim,
        });
    }

    if cfg.channels.is_empty() {
        return Err(err(
            "channels".into(),
            "at least one [[channels]] entry is required".into(),
        ));
    }
    let mut channel_names = HashSet::new();
    let mut channels = Vec::with_capacity(cfg.channels.len());
    let mut models: BTreeMap<Arc<str>, Vec<ModelRoute>> = BTreeMap::new();
    for (i, c) in cfg.channels.iter().enumerate() {
        let at = |f: &str| format!("channels[{i}].{f}");
        if c.name.is_empty() {
            return Err(err(at("name"), "must not be empty".into()));
        }
        if !channel_names.insert(c.name.as_str()) {
            return Err(err(
                at("name"),
                format!("duplicate channel name {:?}", c.name),
            ));
        }
        if !c.api_keys.is_empty() && !c.credentials.is_empty() {
            return Err(err(
                at("credentials"),
                "give either api_keys or credentials, not both".into(),
            ));
        }
        let mut labels: Vec<(Arc<str>, Limits)> = Vec::new();
        for k in &c.api_keys {
            labels.push((fingerprint(k).into(), Limits::default()));
        }
        for (j, cr) in c.credentials.iter().enumerate() {
            if cr.rpm == Some(0) || cr.max_concurrency == Some(0) || cr.tpm == Some(0) {
                return Err(err(
                    format!("channels[{i}].credentials[{j}]"),
                    "rpm, tpm and max_concurrency must be >= 1".into(),
                ));
            }
            let label = cr.label.clone().unwrap_or_else(|| fingerprint(&cr.key));
            if labels.iter().any(|(l, _)| **l == *label) {
                return Err(err(
                    format!("channels[{i}].credentials[{j}].label"),
                    format!("duplicate label {label:?}"),
                ));
            }
            labels.push((
                label.into(),
                Limits {
                    rpm: cr.rpm,
                    max_concurrency: cr.max_concurrency,
                    tpm: cr.tpm,
                },
            ));
        }
        let t = c.timeouts(s.request_timeout_ms);
        validate_channel(c, t, s.request_timeout_ms).map_err(|(f, m)| err(at(f), m))?;
        let upstream = Upstream::build(c, t.connect_ms, clients).map_err(|(f, m)| err(at(f), m))?;
        let mut seen = HashMap::new();
        for (j, m) in c.models.iter().enumerate() {
            if m.name().is_empty() || m.upstream().is_empty() {
                return Err(err(
                    format!("channels[{i}].models[{j}]"),
                    "model names must not be empty".into(),
                ));
            }
            if seen.insert(m.name(), j).is_some() {
                return Err(err(
                    format!("channels[{i}].models[{j}]"),
                    format!("model {:?} is listed twice", m.name()),
                ));
            }
            models.entry(m.name().into()).or_default().push(ModelRoute {
                channel: i,
                upstream_model: m.upstream().into(),
            });
        }
        channels.push(Channel {
            name: c.name.as_str().into(),
            kind: c.provider,
            priority: c.priority,
            weight: c.weight,
            enabled: c.enabled,
            max_retries: c.max_retries,
            retry_interval: Duration::from_millis(c.retry_interval_ms),
            timeout: Duration::from_millis(t.attempt_ms),
            first_token_timeout: Duration::from_millis(t.first_token_ms),
            breaker: BreakerSettings {
                enabled: c.circuit_breaker.enabled,
                per_model: c.circuit_breaker.per_model,
                failure_threshold: c.circuit_breaker.failure_threshold,
                window: Duration::from_secs(c.circuit_breaker.window_seconds),
                cooldown: Duration::from_secs(c.circuit_breaker.cooldown_seconds),
                rate_limit_cooldown: Duration::from_secs(
                    c.circuit_breaker.rate_limit_cooldown_seconds,
                ),
                slow_start: Duration::from_secs(c.circuit_breaker.slow_start_seconds),
                probe: c.circuit_breaker.probe.enabled.then(|| {
                    let p = &c.circuit_breaker.probe;
                    ProbeSettings {
                        kind: match p.kind {
                            ProbeKindConfig::Completion => ProbeKind::Completion,
                            ProbeKindConfig::Models => ProbeKind::Models,
                        },
                        interval: Duration::from_secs(p.interval_seconds),
                        success_threshold: p.success_threshold,
                        unhealthy_below: p.unhealthy_below,
                    }
                }),
            },
            credentials: labels,
            credential_cooldown: Duration::from_secs(c.credential_cooldown_seconds),
            groups: if c.groups.is_empty() {
                vec![DEFAULT_GROUP.into()]
            } else {
                c.groups.iter().map(|g| g.as_str().into()).collect()
            },
            affinity: c.affinity,
            responses: c.responses,
            upstream,
        });
    }

    // Groups, redirects and failover defaults refer to channels and models: checked last.
    for (i, c) in cfg.channels.iter().enumerate() {
        if let Some(j) = c.groups.iter().position(|g| g.is_empty()) {
            return Err(err(
                format!("channels[{i}].groups[{j}]"),
                "must not be empty".into(),
            ));
        }
    }
    let redirects =
        compile_redirects(&cfg.redirects, "redirects", &models).map_err(|(f, m)| err(f, m))?;
    for (i, (k, key)) in cfg.keys.iter().zip(keys.iter_mut()).enumerate() {
        for (j, g) in key.groups.iter().enumerate() {
            if !channels.iter().any(|c| c.groups.contains(g)) {
                return Err(err(
                    format!("keys[{i}].groups[{j}]"),
                    format!("no channel is in group {g:?}"),
                ));
            }
        }
        key.redirects = compile_redirects(&k.redirects, &format!("keys[{i}].redirects"), &models)
            .map_err(|(f, m)| err(f, m))?;
        if let Some(d) = &k.failover_defaults {
            let at = format!("keys[{i}].failover_defaults");
            let mut list: Vec<Arc<str>> = Vec::new();
            for (j, m) in d.models.iter().enumerate() {
                let visible = models.get(m.as_str()).is_some_and(|routes| {
                    routes
                        .iter()
                        .any(|r| key.group_rank(&channels[r.channel]).is_some())
                });
                if !visible {
                    return Err(err(
                        format!("{at}.models[{j}]"),
                        format!("no channel this key can use serves {m:?}"),
                    ));
                }
                if !list.iter().any(|x| **x == **m) {
                    list.push(m.as_str().into());
                }
            }
            if list.len() > MAX_MODELS {
                return Err(err(
                    format!("{at}.models"),
                    format!("at most {MAX_MODELS} distinct models"),
                ));
            }
            if d.on.as_ref().is_some_and(Vec::is_empty) {
                return Err(err(
                    format!("{at}.on"),
                    "name at least one failure class, or leave it out for all four".into(),
                ));
            }
            // Out-of-range timeouts are clamped, as the caller's ranges say.
            let clamp = |v: Option<u64>, r: &std::ops::RangeInclusive<u64>| {
                v.map(|v| v.clamp(*r.start(), *r.end()))
            };
            key.defaults = Some(FailoverDefaults {
                models: list,
                timeout_ms: clamp(d.timeout_ms, &TIMEOUT_MS),
                first_token_timeout_ms: clamp(d.first_token_timeout_ms, &FIRST_TOKEN_MS),
                on: d.on.as_deref().map(OnSet::of),
            });
        }
    }
    if cfg.affinity.ttl_seconds == 0 || cfg.affinity.max_failures == 0 {
        return Err(err(
            "affinity".into(),
            "ttl_seconds and max_failures must be > 0".into(),
        ));
    }
    // `rediss://` is TLS (rustls, the system's roots; `#insecure` skips verification).
    if let Some(u) = &cfg.state.url
        && !(u.starts_with("redis://") || u.starts_with("rediss://"))
    {
        return Err(err(
            "state.url".into(),
            "expected a redis:// or rediss:// (TLS) URL".into(),
        ));
    }
    let routers = compile_routers(&cfg.routers, &models, &channels).map_err(|(f, m)| err(f, m))?;
    let catalog = compile_catalog(&cfg.models, &models).map_err(|(f, m)| err(f, m))?;
    let rb = &s.retry_budget;
    if !(0.0..=10.0).contains(&rb.ratio) || rb.window_seconds == 0 {
        return Err(err(
            "server.retry_budget".into(),
            "ratio must be in [0, 10] and window_seconds > 0".into(),
        ));
    }

    Ok(Snapshot {
        server: ServerSettings {
            listen,
            request_timeout: Duration::from_millis(s.request_timeout_ms),
            stream_idle_timeout: Duration::from_millis(s.stream_idle_timeout_ms),
            max_body_bytes: s.max_body_bytes,
            max_attempts: s.max_attempts,
            max_retry_after: Duration::from_millis(s.max_retry_after_ms),
            admin_token,
            max_hops: s.max_hops,
            retry_budget: crate::health::BudgetSettings {
                ratio: rb.ratio,
                min_per_second: rb.min_per_second,
                window: Duration::from_secs(rb.window_seconds),
            },
        },
        log: LogSettings {
            sqlite_path: cfg.log.sqlite_path.clone(),
            queue_capacity: cfg.log.queue_capacity,
        },
        balance: h.balance,
        health: HealthSettings {
            window: Duration::from_secs(h.window_seconds),
            window_size: h.window_size,
            latency_good: Duration::from_millis(h.latency_good_ms),
            latency_bad: Duration::from_millis(h.latency_bad_ms),
            min_factor: h.min_weight_factor,
        },
        keys,
        channels,
        models,
        redirects,
        affinity: AffinitySettings {
            ttl: Duration::from_secs(cfg.affinity.ttl_seconds),
            max_failures: cfg.affinity.max_failures,
            implicit: cfg.affinity.implicit,
        },
        state: StateSettings {
            url: cfg.state.url.as_deref().map(Secret::new),
            prefix: cfg.state.prefix.as_deref().unwrap_or("switchyard").into(),
        },
        routers,
        catalog,
        version: VERSION.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        source,
    })
}

/// `[[routers]]`: each error names its field.
fn compile_routers(
    list: &[RouterConfig],
    models: &BTreeMap<Arc<str>, Vec<ModelRoute>>,
    channels: &[Channel],
) -> Result<Vec<SemanticRouter>, (String, String)> {
    let in_range = |t: f64| (-1.0..=1.0).contains(&t);
    let mut out: Vec<SemanticRouter> = Vec::with_capacity(list.len());
    for (i, r) in list.iter().enumerate() {
        let at = |f: &str| format!("routers[{i}].{f}");
        if r.model.is_empty() {
            return Err((at("model"), "must not be empty".into()));
        }
        if models.contains_key(r.model.as_str()) {
            return Err((
                at("model"),
                format!(
                    "{:?} is also a model a channel serves; a router needs a name of its own",
                    r.model
                ),
            ));
        }
        if out.iter().any(|o| *o.model == *r.model) {
            return Err((at("model"), format!("two routers are named {:?}", r.model)));
        }
        if !in_range(r.threshold) {
            return Err((at("threshold"), "must be within [-1, 1]".into()));
        }
        if r.instances.is_empty() {
            return Err((at("instances"), "at least one instance is required".into()));
        }
        if r.timeout_ms == 0 {
            return Err((at("timeout_ms"), "must be > 0".into()));
        }
        let mut instances = Vec::with_capacity(r.instances.len());
        let mut catchall = None;
        for (j, inst) in r.instances.iter().enumerate() {
            let at = |f: &str| format!("routers[{i}].instances[{j}].{f}");
            if inst.name.is_empty() {
                return Err((at("name"), "must not be empty".into()));
            }
            if !models.contains_key(inst.model.as_str()) {
                return Err((
                    at("model"),
                    format!("no channel serves the model {:?}", inst.model),
                ));
            }
            if inst.examples.is_empty() && !inst.catchall {
                return Err((
                    at("examples"),
                    "an instance that is not the catchall needs examples".into(),
                ));
            }
            if r.instances[..j].iter().any(|o| o.name == inst.name) {
                return Err((
                    at("name"),
                    format!("two instances are named {:?}", inst.name),
                ));
            }
            if let Some(k) = inst.examples.iter().position(|e| e.trim().is_empty()) {
                return Err((
                    format!("routers[{i}].instances[{j}].examples[{k}]"),
                    "must not be empty".into(),
                ));
            }
            if inst.examples.len() > 64 {
                return Err((
                    at("examples"),
                    format!("at most 64 examples, got {}", inst.examples.len()),
                ));
            }
            if inst.threshold.is_some_and(|t| !in_range(t)) {
                return Err((at("threshold"), "must be within [-1, 1]".into()));
            }
            if inst.catchall {
                if catchall.is_some() {
                    return Err((
                        at("catchall"),
                        "only one instance may be the catchall".into(),
                    ));
                }
                catchall = Some(j);
            }
            instances.push(Instance {
                name: inst.name.as_str().into(),
                model: inst.model.as_str().into(),
                examples: inst.examples.clone(),
                threshold: inst.threshold.map(|t| t as f32),
            });
        }
        let embedder = match &r.embedder {
            None | Some(EmbedderConfig::Hashed) => {
                if r.embedder.is_none() {
                    tracing::warn!(
                        router = r.model.as_str(),
                        "no embedder configured: using hashed character n-grams, a weak fallback that matches spelling, not meaning"
                    );
                }
                EmbedderSpec::Hashed
            }
            Some(EmbedderConfig::Channel { channel, model }) => {
                let idx = channels
                    .iter()
                    .position(|c| &*c.name == channel.as_str())
                    .ok_or_else(|| {
                        (
                            at("embedder.channel"),
                            format!("no channel is named {channel:?}"),
                        )
                    })?;
                EmbedderSpec::Channel {
                    channel: idx,
                    model: model.as_str().into(),
                }
            }
            Some(EmbedderConfig::Local { model_dir }) => {
                if !cfg!(feature = "local-embedder") {
                    tracing::warn!(
                        router = r.model.as_str(),
                        "this build has no local embedder (built without the local-embedder feature): this router sends every request to its catchall"
                    );
                }
                EmbedderSpec::Local {
                    model_dir: model_dir.clone(),
                }
            }
        };
        out.push(SemanticRouter {
            model: r.model.as_str().into(),
            threshold: r.threshold as f32,
            expose_scores: r.expose_scores,
            failover: r.failover,
            embedder,
            timeout: Duration::from_millis(r.timeout_ms),
            instances,
            catchall: catchall.unwrap_or(0),
        });
    }
    Ok(out)
}

/// Channels configured without groups are in this one.
pub const DEFAULT_GROUP: &str = "default";

/// A glob (`*`, `?`) as an unanchored regex pattern.
fn glob_regex(glob: &str) -> String {
    glob.split_inclusive(['*', '?'])
        .map(|part| match part.strip_suffix('*') {
            Some(lit) => format!("{}.*", regex_lite::escape(lit)),
            None => match part.strip_suffix('?') {
                Some(lit) => format!("{}.", regex_lite::escape(lit)),
                None => regex_lite::escape(part),
            },
        })
        .collect()
}

/// `[[models]]`: each entry's window (its own or its built-in family's) and fallbacks checked.
fn compile_catalog(
    list: &[super::file::ModelConfig],
    models: &BTreeMap<Arc<str>, Vec<ModelRoute>>,
) -> Result<crate::context::catalog::Catalog, (String, String)> {
    use crate::context::catalog::{Catalog, DEFAULT_TRIM_TO, ModelInfo, NameMatch};
    let mut catalog = Catalog::builtin();
    for (i, m) in list.iter().enumerate() {
        let at = |f: &str| format!("models[{i}].{f}");
        if m.name.is_empty() {
            return Err((at("name"), "must not be empty".into()));
        }
        let glob = m.name.contains(['*', '?']);
        let family = (!glob).then(|| catalog.family(&m.name)).flatten();
        let context_window = match (m.context_window, family) {
            (Some(0), _) => return Err((at("context_window"), "must be > 0".into())),
            (Some(w), _) => w,
            (None, Some(f)) => f.context_window,
            (None, None) => {
                return Err((
                    at("context_window"),
                    format!("is required: no built-in default for {:?}", m.name),
                ));
            }
        };
        let max_output_tokens = m
            .max_output_tokens
            .or(family.map(|f| f.max_output_tokens))
            .unwrap_or(context_window / 4);
        if max_output_tokens >= context_window {
            return Err((
                at("max_output_tokens"),
                format!("must be below the context window ({context_window})"),
            ));
        }
        let trim_to = m.trim_to.unwrap_or(DEFAULT_TRIM_TO);
        if !(trim_to > 0.0 && trim_to <= 1.0) {
            return Err((at("trim_to"), "must be in (0, 1]".into()));
        }
        for (j, f) in m.context_fallbacks.iter().enumerate() {
            if !models.contains_key(f.as_str()) {
                return Err((
                    format!("models[{i}].context_fallbacks[{j}]"),
                    format!("no channel serves the model {f:?}"),
                ));
            }
        }
        let matcher = if glob {
            let re = regex_lite::Regex::new(&format!("^(?:{})$", glob_regex(&m.name)))
                .map_err(|e| (at("name"), format!("invalid pattern: {e}")))?;
            NameMatch::Pattern(re)
        } else {
            NameMatch::Exact
        };
        catalog.push(
            matcher,
            ModelInfo {
                name: m.name.as_str().into(),
                context_window,
                max_output_tokens,
                trim: m.trim,
                trim_to,
                context_fallbacks: m
                    .context_fallbacks
                    .iter()
                    .map(|f| f.as_str().into())
                    .collect(),
            },
        );
    }
    // A fallback must be larger, so its window must be known.
    for (i, m) in list.iter().enumerate() {
        for (j, f) in m.context_fallbacks.iter().enumerate() {
            if catalog.lookup(f).is_none() {
                return Err((
                    format!("models[{i}].context_fallbacks[{j}]"),
                    format!("the context window of {f:?} is not known: give it a [[models]] entry"),
                ));
            }
        }
    }
    Ok(catalog)
}

/// Redirect rules: exact names, globs (`*`, `?`) and anchored regexes; a target must be a model
/// some channel serves (unless a regex target substitutes a capture).
fn compile_redirects(
    list: &[RedirectConfig],
    at: &str,
    models: &BTreeMap<Arc<str>, Vec<ModelRoute>>,
) -> Result<Vec<Redirect>, (String, String)> {
    let mut out = Vec::with_capacity(list.len());
    for (j, r) in list.iter().enumerate() {
        let here = format!("{at}[{j}]");
        if r.from.is_empty() || r.to.is_empty() {
            return Err((here, "from and to must not be empty".into()));
        }
        let kind = r.kind.unwrap_or(if r.from.contains(['*', '?']) {
            RedirectKind::Glob
        } else {
            RedirectKind::Exact
        });
        let pattern = match kind {
            RedirectKind::Exact => None,
            RedirectKind::Glob => Some(glob_regex(&r.from)),
            RedirectKind::Regex => Some(r.from.clone()),
        };
        let matcher = match pattern {
            None => Matcher::Exact,
            Some(p) => Matcher::Pattern(
                regex_lite::Regex::new(&format!("^(?:{p})$"))
                    .map_err(|e| (format!("{here}.from"), format!("invalid pattern: {e}")))?,
            ),
        };
        let dynamic = kind == RedirectKind::Regex && r.to.contains('$');
        if !dynamic && !models.contains_key(r.to.as_str()) {
            return Err((
                format!("{here}.to"),
                format!("no channel serves the model {:?}", r.to),
            ));
        }
        out.push(Redirect {
            rule: here.into(),
            from: r.from.as_str().into(),
            to: r.to.as_str().into(),
            matcher,
        });
    }
    Ok(out)
}

/// A credential's default label: a short hash of the key, so it follows the key through
/// reorders and reloads and shows nothing of it.
fn fingerprint(key: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    format!("key-{:06x}", h.finish() & 0xff_ffff)
}

/// Field-local checks and the timeout taxonomy: connect < attempt ≤ request deadline.
fn validate_channel(
    c: &ChannelConfig,
    t: Timeouts,
    request_timeout_ms: u64,
) -> Result<(), (&'static str, String)> {
    if c.models.is_empty() {
        return Err(("models", "at least one model is required".into()));
    }
    let cb = &c.circuit_breaker;
    if cb.probe.interval_seconds == 0 || cb.probe.success_threshold == 0 {
        return Err((
            "circuit_breaker.probe",
            "interval_seconds and success_threshold must be > 0".into(),
        ));
    }
    if cb.failure_threshold == 0 || cb.window_seconds == 0 || cb.cooldown_seconds == 0 {
        return Err((
            "circuit_breaker",
            "failure_threshold, window_seconds and cooldown_seconds must be > 0".into(),
        ));
    }
    if c.weight == 0 {
        return Err((
            "weight",
            "must be >= 1 (set enabled = false to take a channel out)".into(),
        ));
    }
    for (field, v) in [
        ("connect_timeout_ms", t.connect_ms),
        ("timeout_ms", t.attempt_ms),
        ("first_token_timeout_ms", t.first_token_ms),
    ] {
        if v == 0 {
            return Err((field, "must be > 0".into()));
        }
    }
    if t.attempt_ms > request_timeout_ms {
        return Err((
            "timeout_ms",
            format!(
                "{} ms is longer than server.request_timeout_ms ({request_timeout_ms} ms); the attempt could never time out",
                t.attempt_ms
            ),
        ));
    }
    if t.first_token_ms > request_timeout_ms {
        return Err((
            "first_token_timeout_ms",
            format!(
                "{} ms is longer than server.request_timeout_ms ({request_timeout_ms} ms)",
                t.first_token_ms
            ),
        ));
    }
    if t.connect_ms > t.attempt_ms.min(t.first_token_ms) {
        return Err((
            "connect_timeout_ms",
            "must not be longer than timeout_ms or first_token_timeout_ms".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::load_str;
    use crate::provider::HttpClients;

    fn load(text: &str) -> Result<super::Snapshot, String> {
        load_str(text, "t.toml", &|_| None, &HttpClients::default()).map_err(|e| e.to_string())
    }

    const BASE: &str = r#"
        [[channels]]
        name = "a"
        provider = "mock"
        models = ["m", { name = "big", upstream = "big-2024" }]
        priority = 1
        [[channels]]
        name = "b"
        provider = "openai"
        base_url = "http://127.0.0.1:9/v1"
        api_keys = ["k1"]
        models = ["m"]
        priority = 2
    "#;

    #[test]
    fn compiles_models_to_channels() {
        let s = load(BASE).unwrap();
        assert_eq!(s.models["m"].len(), 2);
        assert_eq!(&*s.models["big"][0].upstream_model, "big-2024");
        let d = s.describe();
        assert!(d.contains("tier 1: a (mock"), "{d}");
        assert!(d.contains("tier 2: b (openai"), "{d}");
        assert!(d.contains("upstream model big-2024"), "{d}");
    }

    #[test]
    fn attempt_timeout_longer_than_deadline_is_an_error() {
        let text = format!(
            "[server]\nrequest_timeout_ms = 1000\n{}",
            BASE.replace("priority = 2", "priority = 2\ntimeout_ms = 5000")
        );
        let err = load(&text).unwrap_err();
        assert!(err.contains("channels[1].timeout_ms"), "{err}");
        // Defaults shrink to fit a short deadline instead of failing.
        let text = format!("[server]\nrequest_timeout_ms = 1000\n{BASE}");
        let s = load(&text).unwrap();
        assert_eq!(s.channels[0].timeout.as_millis(), 1000);
    }

    #[test]
    fn duplicate_channel_names_and_bad_urls_are_errors() {
        let err = load(&BASE.replace("name = \"b\"", "name = \"a\"")).unwrap_err();
        assert!(err.contains("channels[1].name"), "{err}");
        let err = load(&BASE.replace("http://127.0.0.1:9/v1", "not a url")).unwrap_err();
        assert!(err.contains("channels[1].base_url"), "{err}");
    }

    #[test]
    fn openai_channel_needs_base_url_and_weight_must_be_positive() {
        let err = load(&BASE.replace("base_url = \"http://127.0.0.1:9/v1\"", "")).unwrap_err();
        assert!(err.contains("channels[1].base_url"), "{err}");
        let err = load(&BASE.replace("priority = 1", "priority = 1\nweight = 0")).unwrap_err();
        assert!(err.contains("channels[0].weight"), "{err}");
    }

    #[test]
    fn demo_key_is_refused_outside_demo_mode() {
        let text = format!("[[keys]]\nname = \"x\"\nkey = \"sk-switchyard-demo\"\n{BASE}");
        let err = load_str(&text, "t.toml", &|_| None, &HttpClients::default());
        // load_str compiles as demo (no file), so it is accepted there...
        assert!(err.is_ok());
        // ...but never from a real file.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, &text).unwrap();
        let err = super::super::load_file(&path, &HttpClients::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("keys[0].key"), "{err}");
    }

    #[test]
    fn short_secrets_and_misplaced_fields_are_refused_by_name() {
        let cases = [
            (
                format!("[server]\nadmin_token = \"short\"\n{BASE}"),
                "server.admin_token",
            ),
            (
                format!("[[keys]]\nname = \"k\"\nkey = \"sk-1\"\n{BASE}"),
                "keys[0].key",
            ),
            (
                BASE.replace(
                    "models = [\"m\", {",
                    "api_keys = [\"x\"]\nmodels = [\"m\", {",
                ),
                "channels[0].api_keys",
            ),
            (
                format!("[server]\nlisten = \"localhost:80\"\n{BASE}"),
                "server.listen",
            ),
            (
                BASE.replace(
                    "priority = 2",
                    "priority = 2\nconnect_timeout_ms = 5000\ntimeout_ms = 1000",
                ),
                "channels[1].connect_timeout_ms",
            ),
        ];
        for (text, field) in cases {
            let err = load(&text).unwrap_err();
            assert!(err.contains(field), "{field}: {err}");
        }
    }

    #[test]
    fn authenticate_finds_the_matching_key() {
        let text = format!(
            "[[keys]]\nname = \"x\"\nkey = \"sk-xxxxxxxx1\"\n[[keys]]\nname = \"y\"\nkey = \"sk-yyyyyyyy2\"\n{BASE}"
        );
        let s = load(&text).unwrap();
        assert_eq!(&*s.authenticate("sk-yyyyyyyy2").unwrap().name, "y");
        assert!(s.authenticate("sk-yyyyyyyy").is_none());
        assert!(s.authenticate("").is_none());
    }
}
