//! `[[models]]`: the catalog of context windows and output budgets (each entry its own, or its
//! built-in family's), with the route's trimming and context fallbacks checked.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::FieldError;
use super::redirects::glob_regex;
use crate::config::Strategy;
use crate::config::file::ModelConfig;
use crate::config::snapshot::ModelRoute;
use crate::context::catalog::{Catalog, DEFAULT_TRIM_TO, ModelInfo, NameMatch};

pub fn compile(
    list: &[ModelConfig],
    models: &BTreeMap<Arc<str>, Vec<ModelRoute>>,
) -> Result<Catalog, FieldError> {
    let mut catalog = Catalog::builtin();
    for (i, m) in list.iter().enumerate() {
        let at = |f: &str| format!("models[{i}].{f}");
        if m.name.is_empty() {
            return Err((at("name"), "must not be empty".into()));
        }
        let glob = m.name.contains(['*', '?']);
        let family = (!glob).then(|| catalog.family(&m.name)).flatten();
        let price = match &m.price {
            Some(p) => Some(Arc::new(p.compile(&at("price."))?)),
            None => family.and_then(|f| f.price.clone()),
        };
        let matcher = matcher(&m.name, glob).map_err(|e| (at("name"), e))?;
        let trim_to = m.trim_to.unwrap_or(DEFAULT_TRIM_TO);
        if !(trim_to > 0.0 && trim_to <= 1.0) {
            return Err((at("trim_to"), "must be in (0, 1]".into()));
        }
        let context_window = match (m.context_window, family) {
            (Some(w), _) => w.get(),
            (None, Some(f)) => f.context_window,
            // A price, a strategy or a cache policy alone (a model with no built-in family):
            // nothing about its window is asked.
            (None, None)
                if (price.is_some() || m.strategy.is_some() || m.cache.is_some())
                    && !m.trim
                    && m.trim_to.is_none()
                    && m.max_output_tokens.is_none()
                    && m.context_fallbacks.is_empty() =>
            {
                if let Some(p) = price {
                    catalog.push_price(matcher, m.name.as_str().into(), p);
                }
                continue;
            }
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
        for (j, f) in m.context_fallbacks.iter().enumerate() {
            if !models.contains_key(f.as_str()) {
                return Err((
                    format!("models[{i}].context_fallbacks[{j}]"),
                    format!("no channel serves the model {f:?}"),
                ));
            }
        }
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
                price,
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

/// An entry's name as a matcher: exact, or a glob as an anchored regex.
/// Each served model's strategy, where a `[[models]]` entry names one: the first entry that
/// matches the model and sets `strategy` decides.
pub fn strategies(
    list: &[ModelConfig],
    models: &BTreeMap<Arc<str>, Vec<ModelRoute>>,
) -> Result<HashMap<Arc<str>, Strategy>, FieldError> {
    let mut out = HashMap::new();
    for (i, m) in list.iter().enumerate() {
        let Some(s) = m.strategy else {
            continue;
        };
        let glob = m.name.contains(['*', '?']);
        let matcher = matcher(&m.name, glob).map_err(|e| (format!("models[{i}].name"), e))?;
        for name in models.keys() {
            if matcher.matches(&m.name, name) {
                out.entry(name.clone()).or_insert(s);
            }
        }
    }
    Ok(out)
}

/// Each served model's cache policy, where a `[[models]]` entry sets `cache`: the first entry
/// that matches the model and sets it decides.
pub fn cache_policies(
    list: &[ModelConfig],
    models: &BTreeMap<Arc<str>, Vec<ModelRoute>>,
) -> Result<HashMap<Arc<str>, crate::config::cache::Policy>, FieldError> {
    let mut out = HashMap::new();
    for (i, m) in list.iter().enumerate() {
        let Some(c) = &m.cache else {
            continue;
        };
        let glob = m.name.contains(['*', '?']);
        let matcher = matcher(&m.name, glob).map_err(|e| (format!("models[{i}].name"), e))?;
        for name in models.keys() {
            if matcher.matches(&m.name, name) {
                out.entry(name.clone())
                    .or_insert(crate::config::cache::Policy::of(c));
            }
        }
    }
    Ok(out)
}

fn matcher(name: &str, glob: bool) -> Result<NameMatch, String> {
    if !glob {
        return Ok(NameMatch::Exact);
    }
    regex_lite::Regex::new(&format!("^(?:{})$", glob_regex(name)))
        .map(NameMatch::Pattern)
        .map_err(|e| format!("invalid pattern: {e}"))
}
