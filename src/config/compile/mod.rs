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

/// With JWT issuers, each team's JWT key added to `keys` (the team's groups and levels, no
/// limits of its own, never presented as a secret); team name → its place there.
fn jwt_keys(
    jwt: &[std::sync::Arc<crate::config::auth::JwtIssuer>],
    teams: &crate::config::teams::Teams,
    keys: &mut Vec<super::snapshot::GatewayKey>,
) -> Result<std::collections::HashMap<String, usize>, FieldError> {
    let mut at = std::collections::HashMap::new();
    if jwt.is_empty() {
        return Ok(at);
    }
    for (i, t) in teams.list.iter().enumerate() {
        let mut k = keys::made(&crate::config::auth::key_name(&t.name));
        if let Some(j) = keys.iter().position(|o| o.name == k.name) {
            return Err((
                format!("keys[{j}].name"),
                format!("{:?} is the name of the team's JWT clients", k.name),
            ));
        }
        k.groups = teams.groups(i).to_vec();
        k.team = Some(std::sync::Arc::new(teams.membership(i)));
        at.insert(t.name.to_string(), keys.len());
        keys.push(k);
    }
    Ok(at)
}

/// Each team an admin is limited to must exist.
fn admin_teams(
    admins: &[super::file::AdminConfig],
    sso: Option<&crate::config::sso::SsoConfig>,
    teams: &crate::config::teams::Teams,
) -> Result<(), FieldError> {
    for (i, a) in admins.iter().enumerate() {
        if let Some(t) = a.teams.iter().find(|t| teams.find(t).is_none()) {
            return Err((format!("admins[{i}].teams"), format!("no team named {t:?}")));
        }
    }
    let mappings = sso.map_or(&[][..], |s| &s.mappings[..]);
    for (i, m) in mappings.iter().enumerate() {
        if let Some(t) = m.teams.iter().find(|t| teams.find(t).is_none()) {
            return Err((
                format!("sso.mappings[{i}].teams"),
                format!("no team named {t:?}"),
            ));
        }
    }
    Ok(())
}

/// Each group a team names must hold a channel, as a key's must.
fn teams_link(
    teams: &crate::config::teams::Teams,
    channels: &[super::snapshot::Channel],
) -> Result<(), FieldError> {
    for (i, t) in teams.list.iter().enumerate() {
        for (j, g) in t.groups.iter().enumerate() {
            if !channels.iter().any(|c| c.groups.contains(g)) {
                return Err((
                    format!("teams[{i}].groups[{j}]"),
                    format!("no channel is in group {g:?}"),
                ));
            }
        }
    }
    Ok(())
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
    let teams = crate::config::teams::compile(&cfg.teams).map_err(err)?;
    let mut keys = keys::compile(&cfg.keys, &source, &mcp, &teams).map_err(err)?;
    let hashed = keys::hashed(&cfg.keys);
    let request_timeout_ms = cfg.server.request_timeout_ms.get();
    let (channels, mut models) =
        channels::compile(&cfg.channels, request_timeout_ms, clients).map_err(err)?;
    let redirects = redirects::compile(&cfg.redirects, "redirects", &models).map_err(err)?;
    keys::link(&cfg.keys, &mut keys, &channels, &models).map_err(err)?;
    teams_link(&teams, &channels).map_err(err)?;
    admin_teams(&cfg.admins, cfg.sso.as_ref(), &teams).map_err(err)?;
    let jwt = crate::config::auth::compile(&cfg.auth).map_err(err)?;
    let jwt_keys = jwt_keys(&jwt, &teams, &mut keys).map_err(err)?;
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
        teams: std::sync::Arc::new(teams),
        jwt,
        jwt_keys,
    })
}
