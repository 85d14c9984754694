//! `[[keys]]`: the gateway keys, then what they refer to (groups, redirects, failover
//! defaults), checked once the channels and models are known.

use std::collections::{BTreeMap, HashSet};
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
pub fn compile(list: &[KeyConfig], source: &Source) -> Result<Vec<GatewayKey>, FieldError> {
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
        if k.key.len() < 8 {
            return Err((at("key"), "must be at least 8 characters".into()));
        }
        if k.key == DEMO_KEY && !matches!(source, Source::Demo) {
            return Err((
                at("key"),
                "the public demo key is only accepted in demo mode".into(),
            ));
        }
        if !values.insert(k.key.as_str()) {
            return Err((at("key"), "the same key is given twice".into()));
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
    Ok(keys)
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
