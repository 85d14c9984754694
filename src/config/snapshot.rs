//! The compiled, immutable routing snapshot, validated once at load.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::Source;
use super::file::RouterFailover;
use super::settings::{
    AffinitySettings, BreakerSettings, HealthSettings, Limits, LogSettings, ServerSettings,
    StateSettings, StoreSettings,
};
use crate::protocol::chain::OnSet;
use crate::provider::{ProviderKind, Upstream};
use crate::secret::Secret;

#[derive(Debug)]
pub struct GatewayKey {
    pub name: Arc<str>,
    /// The key, or none for a key kept as a hash (made through the admin API).
    pub key: Option<Secret>,
    /// Refused from then on.
    pub expires_at: Option<std::time::SystemTime>,
    /// Channel groups this key may use, in order of preference; empty = every channel.
    pub groups: Vec<Arc<str>>,
    pub redirects: Vec<Redirect>,
    pub defaults: Option<FailoverDefaults>,
    /// Trim this key's requests to fit the serving model's window.
    pub trim: bool,
    /// Answers carry `x-switchyard-route`.
    pub expose_route: bool,
    /// Its budget and rate limits.
    pub quota: super::quota::Quota,
    /// Its meters' scope: `key:<name>`.
    pub scope: Arc<str>,
    /// Its `cache = { mode, ttl_seconds }`.
    pub cache: Option<super::cache::Policy>,
    /// The MCP servers and tools it may reach.
    pub mcp: super::mcp::Access,
    /// Its `mcp_rpm` and `mcp_max_concurrency`, counted under `mcp_scope` (`mcp:<name>`).
    pub mcp_quota: super::quota::Quota,
    pub mcp_scope: Arc<str>,
    /// Its team, and what that asks of its requests (none: the key stands alone).
    pub team: Option<Arc<super::teams::Membership>>,
    /// Requests without an end user are refused (400 `user_required`).
    pub require_user: bool,
}

impl GatewayKey {
    /// Its counters' hash tag when not its own scope's: its organisation's.
    pub fn tag(&self) -> Option<&str> {
        self.team.as_deref().map(|m| &*m.tag)
    }

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
    pub(crate) matcher: Matcher,
}

#[derive(Debug)]
pub(crate) enum Matcher {
    Exact,
    Pattern(regex_lite::Regex),
}

impl Redirect {
    /// Whether the rule names one model (not a pattern).
    pub fn is_exact(&self) -> bool {
        matches!(self.matcher, Matcher::Exact)
    }

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
    /// The channel's own rates, over the model's.
    pub price: Option<Arc<crate::pricing::Price>>,
    /// The channel's own budget and limits (across all its keys and every replica).
    pub quota: super::quota::Quota,
    /// Its meters' scope: `channel:<name>`.
    pub scope: Arc<str>,
}

/// One way to serve a model: a channel and the name the upstream knows the model by.
#[derive(Debug, Clone)]
pub struct ModelRoute {
    pub channel: usize,
    pub upstream_model: Arc<str>,
    /// What an attempt on this route costs (`Snapshot::price`, looked up once at load).
    pub price: Option<Arc<crate::pricing::Price>>,
}

#[derive(Debug)]
pub struct Snapshot {
    pub server: ServerSettings,
    pub log: LogSettings,
    pub health: HealthSettings,
    pub balance: super::Balance,
    /// `[routing]` and each model's strategy.
    pub routing: super::settings::RoutingSettings,
    pub keys: Vec<GatewayKey>,
    pub channels: Vec<Channel>,
    /// Model name → the channels that list it, in config order. Sorted by name for listing.
    pub models: BTreeMap<Arc<str>, Vec<ModelRoute>>,
    /// Global redirects, tried after the key's own.
    pub redirects: Vec<Redirect>,
    pub affinity: AffinitySettings,
    pub state: StateSettings,
    /// The store, when the config names one.
    pub store: Option<StoreSettings>,
    /// Virtual models routed by meaning.
    pub routers: Vec<SemanticRouter>,
    /// Context windows and the context settings of each model's route.
    pub catalog: crate::context::catalog::Catalog,
    /// Unique per compiled config: caches of anything derived from it (reference embeddings)
    /// are keyed by it.
    pub version: u64,
    pub source: Source,
    /// The file and the store's entries as the admin API shows them.
    pub view: Arc<super::View>,
    /// What the store hashes gateway keys under, when it has one.
    pub pepper: Option<crate::secret::Pepper>,
    /// Hashed keys: the hex hash → the key's index in `keys`.
    pub hashed: std::collections::HashMap<String, usize>,
    /// `[events]`, and the webhooks events are delivered to.
    pub events: super::webhooks::EventSettings,
    pub webhooks: Vec<super::webhooks::Webhook>,
    /// `[metrics]` and `[telemetry]`.
    pub metrics: super::telemetry::MetricsSettings,
    pub telemetry: super::telemetry::TelemetrySettings,
    /// `[cache]`, when it is on.
    pub cache: Option<super::cache::CacheSettings>,
    /// `[mcp]` and `[[mcp_servers]]`.
    pub mcp: Arc<super::mcp::McpSettings>,
    /// `[[teams]]`, compiled.
    pub teams: Arc<super::teams::Teams>,
    /// `[[auth.jwt]]`: issuers whose tokens are clients.
    pub jwt: Vec<Arc<super::auth::JwtIssuer>>,
    /// A team's name → its JWT clients' key in `keys`.
    pub jwt_keys: std::collections::HashMap<String, usize>,
}

/// A `[[routers]]` entry, validated.
#[derive(Debug)]
pub struct SemanticRouter {
    pub model: Arc<str>,
    /// The instances' threshold unless their own is set.
    pub threshold: Level,
    /// The lead that wins below a threshold, and under which two instances are too close.
    pub margin: Level,
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
    /// `None`: the router's.
    pub threshold: Option<Level>,
}

/// A similarity level: fixed in the config, or derived from the examples when they are
/// embedded (`semantic::rule`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Level {
    Auto,
    Fixed(f32),
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

/// [`Snapshot::price`] before there is a snapshot (each route's price is set from it at load).
pub fn price_of<'a>(
    channel: &'a Channel,
    catalog: &'a crate::context::catalog::Catalog,
    model: &str,
    upstream: &str,
) -> Option<&'a Arc<crate::pricing::Price>> {
    channel
        .price
        .as_ref()
        .or_else(|| catalog.price(model))
        .or_else(|| catalog.price(upstream))
}

pub(crate) static VERSION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Snapshot {
    /// What an attempt on `channel` serving `model` (as the client named it; `upstream` as the
    /// upstream knows it) costs: the channel's own rates, else the model's `[[models]]` or
    /// built-in price, else the upstream name's family.
    pub fn price<'s>(
        &'s self,
        channel: &'s Channel,
        model: &str,
        upstream: &str,
    ) -> Option<&'s Arc<crate::pricing::Price>> {
        price_of(channel, &self.catalog, model, upstream)
    }

    pub fn is_demo(&self) -> bool {
        matches!(self.source, Source::Demo(_))
    }

    /// The key a client presented, compared against every key without an early exit; then,
    /// when the store keeps hashed keys, its hash looked up (one HMAC). An expired key is none.
    pub fn authenticate(&self, presented: &str) -> Option<&GatewayKey> {
        let mut found = None;
        for k in &self.keys {
            if k.key
                .as_ref()
                .is_some_and(|s| s.matches(presented.as_bytes()))
            {
                found = Some(k);
            }
        }
        if found.is_none()
            && !self.hashed.is_empty()
            && let Some(p) = &self.pepper
        {
            found = self.hashed.get(&p.hash(presented)).map(|&i| &self.keys[i]);
        }
        found.filter(|k| {
            k.expires_at
                .is_none_or(|at| std::time::SystemTime::now() < at)
        })
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
        let store = match &self.store {
            Some(s) if s.url.expose().starts_with("sqlite:") => "sqlite",
            Some(_) => "postgres",
            None => "none (the file is everything)",
        };
        let log = if store == "postgres" {
            "in the store"
        } else {
            self.log.sqlite_path.as_str()
        };
        let _ = writeln!(
            out,
            "listen {}  ·  {} key(s)  ·  {} channel(s)  ·  request log {log}  ·  store {store}",
            self.server.listen,
            self.keys.len(),
            self.channels.len(),
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
        // Where each channel's calls go, as built: a base URL written another way than
        // expected shows here, not as 404s at run time.
        for c in &self.channels {
            let _ = writeln!(out, "channel {} calls {}", c.name, c.upstream.endpoint());
        }
        out
    }
}

/// Channels configured without groups are in this one.
pub const DEFAULT_GROUP: &str = "default";
