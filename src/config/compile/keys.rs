//! `[[keys]]`: the gateway keys, then what they refer to (groups, redirects, failover
//! defaults), checked once the channels and models are known.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use super::FieldError;
use super::redirects;
use crate::config::file::KeyConfig;
use crate::config::snapshot::{Channel, FailoverDefaults, GatewayKey, ModelRoute};
use crate::config::{DEMO_KEY, Source};
use crate::protocol::chain::{FIRST_TOKEN_MS, MAX_MODELS, OnSet, TIMEOUT_MS};
use crate::secret::Secret;

/// The keys themselves: names and values unique, values long enough, the demo key only in
/// demo mode.
pub fn compile(
    list: &[KeyConfig],
    source: &Source,
    mcp: &crate::config::mcp::McpSettings,
    teams: &crate::config::teams::Teams,
) -> Result<Vec<GatewayKey>, FieldError> {
    let mut names = HashSet::new();
    let mut values = HashSet::new();
    let mut keys = Vec::with_capacity(list.len());
    for (i, k) in list.iter().enumerate() {
        let at = |f: &str| format!("keys[{i}].{f}");
        if k.name.is_empty() {
            return Err((at("name"), "must not be empty".into()));
        }
        if !names.insert(k.name.as_str()) {
            return Err((at("name"), format!("duplicate key name {:?}", k.name)));
        }
        let key = match (&k.key, &k.key_hash) {
            (Some(key), None) => Some(plain(key, source, &mut values).map_err(|m| (at("key"), m))?),
            (None, Some(h)) => {
                if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err((at("key_hash"), "expected 64 hex characters".into()));
                }
                None
            }
            _ => {
                return Err((
                    at("key"),
                    "give the key (or, kept by the store, key_hash), not both".into(),
                ));
            }
        };
        let expires_at = match &k.expires_at {
            Some(t) => Some(humantime::parse_rfc3339_weak(t).map_err(|e| {
                (
                    at("expires_at"),
                    format!("expected an RFC 3339 time such as 2027-01-31T00:00:00Z: {e}"),
                )
            })?),
            None => None,
        };
        let quota = crate::config::quota::compile(crate::config::quota::QuotaFields {
            budget: k.budget.as_ref(),
            rpm: k.rpm,
            tpm: k.tpm,
            max_concurrency: k.max_concurrency,
            limits_fail: k.limits_fail,
            channel: false,
        })
        .map_err(|(f, m)| (format!("keys[{i}].{f}"), m))?;
        let mcp_quota = crate::config::quota::compile(crate::config::quota::QuotaFields {
            budget: None,
            rpm: k.mcp_rpm,
            tpm: None,
            max_concurrency: k.mcp_max_concurrency,
            limits_fail: k.limits_fail,
            channel: false,
        })
        .map_err(|(f, m)| (format!("keys[{i}].mcp_{f}"), m))?;
        let mut groups: Vec<Arc<str>> = k.groups.iter().map(|g| g.as_str().into()).collect();
        let team = match &k.team {
            None => None,
            Some(name) => {
                let t = teams
                    .find(name)
                    .ok_or_else(|| (at("team"), format!("no team named {name:?}")))?;
                groups = team_groups(groups, teams.groups(t)).map_err(|m| (at("groups"), m))?;
                Some(Arc::new(teams.membership(t)))
            }
        };
        keys.push(GatewayKey {
            name: k.name.as_str().into(),
            key,
            expires_at,
            groups,
            redirects: Vec::new(),
            defaults: None,
            trim: k.trim,
            expose_route: k.expose_route,
            quota,
            scope: format!("key:{}", k.name).into(),
            cache: k.cache.as_ref().map(crate::config::cache::Policy::of),
            mcp: crate::config::mcp::access(k.mcp.as_ref(), mcp, &at("mcp"))?,
            mcp_quota,
            mcp_scope: format!("mcp:{}", k.name).into(),
            team,
            require_user: k.require_user,
        });
    }
    Ok(keys)
}

/// A key the gateway makes itself (a JWT client's): no secret, no limits of its own.
pub fn made(name: &str) -> GatewayKey {
    GatewayKey {
        name: name.into(),
        key: None,
        expires_at: None,
        groups: Vec::new(),
        redirects: Vec::new(),
        defaults: None,
        trim: false,
        expose_route: false,
        quota: Default::default(),
        scope: format!("key:{name}").into(),
        cache: None,
        mcp: Default::default(),
        mcp_quota: Default::default(),
        mcp_scope: format!("mcp:{name}").into(),
        team: None,
        require_user: false,
    }
}

/// A team key's groups: its own, each one its team allows, or, naming none, the team's.
fn team_groups(own: Vec<Arc<str>>, team: &[Arc<str>]) -> Result<Vec<Arc<str>>, String> {
    if own.is_empty() {
        return Ok(team.to_vec());
    }
    match own.iter().find(|g| !team.is_empty() && !team.contains(g)) {
        Some(g) => Err(format!("{g:?} is not among its team's groups")),
        None => Ok(own),
    }
}

/// Why a gateway key given in plain is too short to take, if it is: the one rule for keys in the
/// file and keys given to the admin API (which hashes them before they reach the config).
pub fn short_key(key: &str) -> Result<(), &'static str> {
    if key.chars().count() < 8 {
        return Err("must be at least 8 characters");
    }
    Ok(())
}

/// A key given in plain: long enough, the demo key only in demo mode, not given twice.
fn plain<'a>(
    key: &'a str,
    source: &Source,
    values: &mut HashSet<&'a str>,
) -> Result<Secret, String> {
    short_key(key)?;
    if key == DEMO_KEY && !matches!(source, Source::Demo(_)) {
        return Err("the public demo key is only accepted in demo mode".into());
    }
    if !values.insert(key) {
        return Err("the same key is given twice".into());
    }
    Ok(Secret::new(key))
}

/// The hashed keys' index: hash → position in `keys`.
pub fn hashed(list: &[KeyConfig]) -> HashMap<String, usize> {
    list.iter()
        .enumerate()
        .filter_map(|(i, k)| Some((k.key_hash.clone()?.to_ascii_lowercase(), i)))
        .collect()
}

/// What each key refers to: its groups must hold a channel, its redirects and failover
/// defaults must name models it can reach.
pub fn link(
    list: &[KeyConfig],
    keys: &mut [GatewayKey],
    channels: &[Channel],
    models: &BTreeMap<Arc<str>, Vec<ModelRoute>>,
) -> Result<(), FieldError> {
    for (i, (k, key)) in list.iter().zip(keys.iter_mut()).enumerate() {
        for (j, g) in key.groups.iter().enumerate() {
            if !channels.iter().any(|c| c.groups.contains(g)) {
                return Err((
                    format!("keys[{i}].groups[{j}]"),
                    format!("no channel is in group {g:?}"),
                ));
            }
        }
        key.redirects = redirects::compile(&k.redirects, &format!("keys[{i}].redirects"), models)?;
        if let Some(d) = &k.failover_defaults {
            key.defaults = Some(defaults(d, i, key, channels, models)?);
        }
    }
    Ok(())
}

/// A key's chain for callers that name one model: models it can reach, at most
/// [`MAX_MODELS`] distinct; out-of-range timeouts are clamped, as the caller's ranges say.
fn defaults(
    d: &crate::config::file::FailoverDefaultsConfig,
    i: usize,
    key: &GatewayKey,
    channels: &[Channel],
    models: &BTreeMap<Arc<str>, Vec<ModelRoute>>,
) -> Result<FailoverDefaults, FieldError> {
    let at = format!("keys[{i}].failover_defaults");
    let mut list: Vec<Arc<str>> = Vec::new();
    for (j, m) in d.models.iter().enumerate() {
        let visible = models.get(m.as_str()).is_some_and(|routes| {
            routes
                .iter()
                .any(|r| key.group_rank(&channels[r.channel]).is_some())
        });
        if !visible {
            return Err((
                format!("{at}.models[{j}]"),
                format!("no channel this key can use serves {m:?}"),
            ));
        }
        if !list.iter().any(|x| **x == **m) {
            list.push(m.as_str().into());
        }
    }
    if list.len() > MAX_MODELS {
        return Err((
            format!("{at}.models"),
            format!("at most {MAX_MODELS} distinct models"),
        ));
    }
    let clamp = |v: Option<u64>, r: &std::ops::RangeInclusive<u64>| {
        v.map(|v| v.clamp(*r.start(), *r.end()))
    };
    Ok(FailoverDefaults {
        models: list,
        timeout_ms: clamp(d.timeout_ms, &TIMEOUT_MS),
        first_token_timeout_ms: clamp(d.first_token_timeout_ms, &FIRST_TOKEN_MS),
        on: d.on.as_deref().map(OnSet::of),
    })
}
