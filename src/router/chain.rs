//! What the caller wrote, resolved into a chain: the request's `models`, the key's
//! `failover_defaults`, or one model, through redirects and semantic routers' decisions.

use std::sync::Arc;
use std::time::Duration;

use super::RouteError;
use crate::config::{GatewayKey, Snapshot};
use crate::protocol::chain::{ChainEntry, ChainSpec, OnSet};
use crate::semantic::Decision;

/// One model of a resolved chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The model routed (after any redirect).
    pub model: Arc<str>,
    /// The name as the caller (or the key's defaults) wrote it.
    pub written: String,
    /// The redirect rule that rewrote it (`keys[0].redirects[1]`).
    pub redirect: Option<Arc<str>>,
    /// The caller's (or key's) attempt timeouts for this model; a channel's own may be tighter.
    pub timeout: Option<Duration>,
    pub first_token_timeout: Option<Duration>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainSource {
    /// `models` or `fallback_models`.
    Request,
    /// The key's `failover_defaults`, from the named model's position.
    KeyDefaults,
    /// One model.
    Single,
}

impl ChainSource {
    pub fn as_str(self) -> &'static str {
        match self {
            ChainSource::Request => "request",
            ChainSource::KeyDefaults => "key_defaults",
            ChainSource::Single => "single",
        }
    }
}

/// The models a request may be served by, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    /// The first model as the client sent it.
    pub requested_model: String,
    pub steps: Vec<Step>,
    /// The failure classes that move the chain on.
    pub on: OnSet,
    pub source: ChainSource,
}

/// Resolves what the caller wrote into a chain: the caller's `models` / `fallback_models`, else
/// (with `defaults`: chat, not embeddings, whose vectors must come from the model asked for)
/// the key's `failover_defaults` from `model`'s position, else `model` alone. Caller-written
/// names go through redirects (key rules first, first match wins); every model must be one the
/// key can reach. Duplicates after redirects collapse.
pub fn chain(
    snap: &Snapshot,
    key: &GatewayKey,
    spec: &ChainSpec,
    model: &str,
    defaults: bool,
    decisions: &[Decision],
) -> Result<Chain, RouteError> {
    let redirect = |name: &str| match snap.redirect(key, name) {
        Some((to, rule)) => (to, Some(rule.rule.clone())),
        None => (name.to_string(), None),
    };
    let defaults = key.defaults.as_ref().filter(|_| defaults);
    let mut written: Vec<(ChainEntry, bool)> = Vec::new();
    let source = if !spec.entries.is_empty() {
        written.extend(spec.entries.iter().cloned().map(|e| (e, true)));
        ChainSource::Request
    } else {
        let (first, _) = redirect(model);
        let at = defaults.and_then(|d| {
            d.models
                .iter()
                .position(|m| **m == *first)
                .or_else(|| d.models.iter().position(|m| **m == *model))
        });
        match (defaults, at) {
            (Some(d), Some(p)) if d.models.len() - p > 1 => {
                written.push((
                    ChainEntry {
                        model: model.to_string(),
                        ..ChainEntry::default()
                    },
                    true,
                ));
                written.extend(d.models[p + 1..].iter().map(|m| {
                    (
                        ChainEntry {
                            model: m.to_string(),
                            ..ChainEntry::default()
                        },
                        false,
                    )
                }));
                ChainSource::KeyDefaults
            }
            _ => {
                written.push((
                    ChainEntry {
                        model: model.to_string(),
                        ..ChainEntry::default()
                    },
                    true,
                ));
                ChainSource::Single
            }
        }
    };
    let ms = |v: Option<u64>| v.map(Duration::from_millis);
    let mut steps: Vec<Step> = Vec::with_capacity(written.len());
    for (e, by_caller) in written {
        let (routed, rule) = if by_caller {
            redirect(&e.model)
        } else {
            (e.model.clone(), None)
        };
        let timeout = ms(e
            .timeout_ms
            .or(spec.timeout_ms)
            .or(defaults.and_then(|d| d.timeout_ms)));
        let first_token_timeout = ms(e
            .first_token_timeout_ms
            .or(spec.first_token_timeout_ms)
            .or(defaults.and_then(|d| d.first_token_timeout_ms)));
        // A semantic router stands for its decision: the models it ranked, in order.
        if let Some(d) = decisions.iter().find(|d| *d.router == *routed) {
            let before = steps.len();
            for m in d.models.iter().filter(|m| snap.serves(key, m, false)) {
                if !steps.iter().any(|s| s.model == *m) {
                    steps.push(Step {
                        model: m.clone(),
                        written: e.model.clone(),
                        redirect: rule.clone(),
                        timeout,
                        first_token_timeout,
                    });
                }
            }
            if steps.len() == before && !steps.iter().any(|s| d.models.contains(&s.model)) {
                return Err(RouteError::ModelNotFound(routed));
            }
            continue;
        }
        if !snap.serves(key, &routed, false) {
            return Err(RouteError::ModelNotFound(routed));
        }
        if steps.iter().any(|s| *s.model == *routed) {
            continue;
        }
        steps.push(Step {
            model: routed.into(),
            written: e.model,
            redirect: rule,
            timeout,
            first_token_timeout,
        });
    }
    Ok(Chain {
        requested_model: steps
            .first()
            .map(|s| s.written.clone())
            .unwrap_or_else(|| model.to_string()),
        steps,
        on: spec
            .on
            .or(defaults.and_then(|d| d.on))
            .unwrap_or(OnSet::ALL),
        source,
    })
}
