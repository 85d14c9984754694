//! Compiling the file as written into the [`Snapshot`]: one function per section, each
//! returning its error with the field's path; a section that refers to others (keys to
//! channels and models, routers and the catalog to models) comes after what it refers to.

mod catalog;
mod channels;
pub(super) mod keys;
mod redirects;
mod routers;
mod server;

#[cfg(test)]
mod tests;

use std::sync::atomic::Ordering;

use super::file::FileConfig;
use super::overlay::View;
use super::snapshot::{Snapshot, VERSION, price_of};
use super::{ConfigError, Source};
use crate::provider::HttpClients;
use crate::secret::Pepper;

/// A field's path and what is wrong with it.
type FieldError = (String, String);

pub(crate) use redirects::glob_regex;
pub(crate) use routers::embedder_spec;

/// `[cache]` with the keys' and models' policies over it; a policy without `[cache]` enabled
/// is refused (it would do nothing).
fn cache_settings(
    cfg: &FileConfig,
    channels: &[super::snapshot::Channel],
    models: &std::collections::BTreeMap<std::sync::Arc<str>, Vec<super::snapshot::ModelRoute>>,
    shared_state: bool,
) -> Result<Option<super::cache::CacheSettings>, FieldError> {
    use super::cache::PolicyMode;
    let policies = cfg
        .keys
        .iter()
        .enumerate()
        .filter_map(|(i, k)| Some((format!("keys[{i}].cache"), k.cache.as_ref()?)))
        .chain(
            cfg.models
                .iter()
                .enumerate()
                .filter_map(|(i, m)| Some((format!("models[{i}].cache"), m.cache.as_ref()?))),
        );
    let mut semantic_wanted = false;
    for (field, p) in policies {
        if !cfg.cache.enabled {
            return Err((field, "needs [cache] enabled = true".into()));
        }
        semantic_wanted |= p.mode == Some(PolicyMode::Semantic);
    }
    let cx = super::cache::Context {
        channels,
        shared_state,
        semantic_wanted,
        models: catalog::cache_policies(&cfg.models, models)?,
    };
    super::cache::compile(&cfg.cache, cx)
}

pub(crate) fn compile(
    cfg: FileConfig,
    shown: &str,
    source: Source,
    clients: &HttpClients,
    view: View,
    pepper: Option<Pepper>,
) -> Result<Snapshot, ConfigError> {
    let err = |(field, message): FieldError| ConfigError::field(shown, field, message);
    let sections = server::compile(&cfg).map_err(err)?;
    if cfg.channels.is_empty() && cfg.store.is_none() {
        return Err(err((
            "channels".into(),
            "must have at least one entry (or configure [store] and add channels through the admin API)".into(),
        )));
    }
    let mcp = crate::config::mcp::compile(&cfg.mcp, &cfg.mcp_servers).map_err(err)?;
    let mut keys = keys::compile(&cfg.keys, &source, &mcp).map_err(err)?;
    let hashed = keys::hashed(&cfg.keys);
    let request_timeout_ms = cfg.server.request_timeout_ms.get();
    let (channels, mut models) =
        channels::compile(&cfg.channels, request_timeout_ms, clients).map_err(err)?;
    let redirects = redirects::compile(&cfg.redirects, "redirects", &models).map_err(err)?;
    keys::link(&cfg.keys, &mut keys, &channels, &models).map_err(err)?;
    let routers = routers::compile(&cfg.routers, &models, &channels).map_err(err)?;
    let catalog = catalog::compile(&cfg.models, &models).map_err(err)?;
    let routing = server::routing(
        &cfg.routing,
        catalog::strategies(&cfg.models, &models).map_err(err)?,
    )
    .map_err(err)?;
    let events = crate::config::webhooks::settings(&cfg.events);
    let webhooks = crate::config::webhooks::compile(&cfg.webhooks, &events, cfg.store.is_some())
        .map_err(err)?;
    let metrics = crate::config::telemetry::metrics(&cfg.metrics).map_err(err)?;
    let telemetry = crate::config::telemetry::telemetry(&cfg.telemetry).map_err(err)?;
    let cache =
        cache_settings(&cfg, &channels, &models, sections.state.url.is_some()).map_err(err)?;
    // Each route's price, once: attempts read it instead of looking it up.
    for (model, routes) in &mut models {
        for r in routes {
            r.price = channels
                .get(r.channel)
                .and_then(|c| price_of(c, &catalog, model, &r.upstream_model))
                .cloned();
        }
    }
    Ok(Snapshot {
        server: sections.server,
        log: sections.log,
        health: sections.health,
        balance: sections.balance,
        routing,
        keys,
        channels,
        models,
        redirects,
        affinity: sections.affinity,
        state: sections.state,
        store: sections.store,
        routers,
        catalog,
        version: VERSION.fetch_add(1, Ordering::Relaxed),
        source,
        view: std::sync::Arc::new(view),
        pepper,
        hashed,
        events,
        webhooks,
        metrics,
        telemetry,
        cache,
        mcp: std::sync::Arc::new(mcp),
    })
}
