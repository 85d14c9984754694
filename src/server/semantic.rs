//! The semantic step of the pipeline: the decisions of the routers a request names (one
//! embedding each, or the instance its session chose before), and, after a served turn, the
//! instance the session keeps.

use super::AppState;
use super::affinity::Session;
use super::ctx::Ctx;
use crate::config::Snapshot;
use crate::protocol::ChatRequest;
use crate::protocol::chain::ChainSpec;
use crate::semantic::Decision;

/// The decisions of the semantic routers the request names (as `model` or in its chain, after
/// redirects). None when the config has no routers.
pub async fn decide(
    state: &AppState,
    ctx: &Ctx,
    snap: &Snapshot,
    spec: &ChainSpec,
    req: &ChatRequest,
    session: Option<&Session>,
) -> Vec<Decision> {
    if snap.routers.is_empty() {
        return Vec::new();
    }
    let key = ctx.gateway_key(snap);
    let mut out: Vec<Decision> = Vec::new();
    let names =
        std::iter::once(req.model.as_str()).chain(spec.entries.iter().map(|e| e.model.as_str()));
    for name in names {
        let routed = key
            .and_then(|k| snap.redirect(k, name))
            .map_or_else(|| name.to_string(), |(to, _)| to);
        if let Some((i, r)) = snap.router(&routed)
            && !out.iter().any(|d| d.router == r.model)
        {
            // A session keeps the instance its first routed turn chose.
            let earlier = match session {
                Some(s) => Box::pin(state.state.instance(&s.key, &r.model)).await,
                None => None,
            };
            if let Some(d) = earlier.and_then(|inst| Decision::kept(r, &inst)) {
                out.push(d);
                continue;
            }
            let d = Box::pin(state.semantic.decide(snap, &state.health, i, req)).await;
            out.push(d);
        }
    }
    out
}

/// After a served turn, the session remembers (or keeps fresh) the instance its semantic router
/// chose, so later turns stay on it. A failed turn remembers nothing.
pub async fn remember(state: &AppState, snap: &Snapshot, session: &Session, ctx: &Ctx) {
    let (Some(d), Some(_)) = (&ctx.semantic, &ctx.report.served) else {
        return;
    };
    let Some((_, router)) = snap.router(&d.router) else {
        return;
    };
    let instance = if d.kept {
        d.winner.as_deref()
    } else {
        d.chosen(router)
    };
    if let Some(inst) = instance {
        Box::pin(
            state
                .state
                .keep_instance(&session.key, &router.model, inst, snap.affinity.ttl),
        )
        .await;
    }
}
