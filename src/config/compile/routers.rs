//! `[[routers]]`: virtual models routed by meaning; each error names its field.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::FieldError;
use crate::config::file::{EmbedderConfig, InstanceConfig, RouterConfig};
use crate::config::routers::Threshold;
use crate::config::snapshot::{Channel, EmbedderSpec, Instance, Level, ModelRoute, SemanticRouter};

/// A level as compiled, or the field's error when its number is outside [`low`, 1].
fn level(t: Threshold, low: f64, field: String) -> Result<Level, FieldError> {
    match t {
        Threshold::Auto => Ok(Level::Auto),
        Threshold::Fixed(n) if (low..=1.0).contains(&n) => Ok(Level::Fixed(n as f32)),
        Threshold::Fixed(_) => Err((field, format!("must be within [{low}, 1]"))),
    }
}

pub fn compile(
    list: &[RouterConfig],
    models: &BTreeMap<Arc<str>, Vec<ModelRoute>>,
    channels: &[Channel],
) -> Result<Vec<SemanticRouter>, FieldError> {
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
        let threshold = level(r.threshold, -1.0, at("threshold"))?;
        let margin = level(r.margin, 0.0, at("margin"))?;
        let (instances, catchall) = instances(&r.instances, i, models)?;
        out.push(SemanticRouter {
            model: r.model.as_str().into(),
            threshold,
            margin,
            expose_scores: r.expose_scores,
            failover: r.failover,
            embedder: embedder(r, i, channels)?,
            timeout: Duration::from_millis(r.timeout_ms.get()),
            instances,
            catchall: catchall.unwrap_or(0),
        });
    }
    Ok(out)
}

/// A router's instances, and which one is the catchall (at most one).
fn instances(
    list: &[InstanceConfig],
    i: usize,
    models: &BTreeMap<Arc<str>, Vec<ModelRoute>>,
) -> Result<(Vec<Instance>, Option<usize>), FieldError> {
    let mut out = Vec::with_capacity(list.len());
    let mut catchall = None;
    for (j, inst) in list.iter().enumerate() {
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
        if list[..j].iter().any(|o| o.name == inst.name) {
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
        let threshold = inst
            .threshold
            .map(|t| level(t, -1.0, at("threshold")))
            .transpose()?;
        if inst.catchall {
            if catchall.is_some() {
                return Err((
                    at("catchall"),
                    "only one instance may be the catchall".into(),
                ));
            }
            catchall = Some(j);
        }
        out.push(Instance {
            name: inst.name.as_str().into(),
            model: inst.model.as_str().into(),
            examples: inst.examples.clone(),
            threshold,
        });
    }
    Ok((out, catchall))
}

fn embedder(r: &RouterConfig, i: usize, channels: &[Channel]) -> Result<EmbedderSpec, FieldError> {
    if r.embedder.is_none() {
        tracing::warn!(
            router = r.model.as_str(),
            "no embedder configured: using hashed character n-grams, a weak fallback that matches spelling, not meaning"
        );
    }
    embedder_spec(
        r.embedder.as_ref(),
        &format!("routers[{i}].embedder"),
        channels,
    )
}

/// An embedder as written (`None`: the hashed fallback), with its channel named in `field`'s
/// error when no channel has that name. Shared by routers and the response cache.
pub fn embedder_spec(
    e: Option<&EmbedderConfig>,
    field: &str,
    channels: &[Channel],
) -> Result<EmbedderSpec, FieldError> {
    Ok(match e {
        None | Some(EmbedderConfig::Hashed) => EmbedderSpec::Hashed,
        Some(EmbedderConfig::Channel { channel, model }) => {
            let idx = channels
                .iter()
                .position(|c| &*c.name == channel.as_str())
                .ok_or_else(|| {
                    (
                        format!("{field}.channel"),
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
                    field,
                    "this build has no local embedder (built without the local-embedder feature): it fails open"
                );
            }
            EmbedderSpec::Local {
                model_dir: model_dir.clone(),
            }
        }
    })
}
