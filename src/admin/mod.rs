//! The admin API (`/admin/*`): the objects the store manages (channels, keys, redirects,
//! routers, models: `objects.rs`, each change validated and applied by `apply.rs`), the
//! effective config and the audit (`docs.rs`), and the operations of before (`ops.rs`: the
//! request log, a reload, channel health). Who may call it is `auth.rs`; what it masks,
//! `mask.rs`; the console is `console/`, its sessions `session.rs`. It exists only when an admin
//! is configured: without one every path is 404. The operator side builds on the client side
//! (`crate::server`: its state, errors and request context), never the other way: `router`
//! hands the routes to the listeners with their own state ([`AdminState`]).

mod apply;
mod auth;
mod cache;
mod console;
mod docs;
mod error;
mod events;
pub mod mask;
mod objects;
mod ops;
mod preview;
pub mod session;
mod stats;
mod tokens;
mod usage;

pub use apply::{refresh, reload};
pub use auth::{Failures, Refused, sign_in};
pub use error::ControlError;
pub use session::SignedOut;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use axum::Router;
use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};

use axum::extract::FromRef;

use crate::config::Snapshot;
use crate::server::{ApiError, AppState};

/// What the operator side serves from: the gateway's state, and what only it keeps (failed
/// attempts by address, console sessions signed out on this replica).
#[derive(Clone)]
pub struct AdminState {
    pub app: AppState,
    pub failures: Arc<Failures>,
    pub signed_out: Arc<SignedOut>,
    /// The MCP gateway's runtime: what its servers last listed.
    pub mcp: Arc<crate::mcp::Mcp>,
    /// `[sso]`'s provider: its discovery document, kept.
    pub oidc: Arc<crate::auth::oidc::Oidc>,
}

impl AdminState {
    pub fn new(app: AppState, mcp: Arc<crate::mcp::Mcp>) -> AdminState {
        AdminState {
            oidc: Arc::new(crate::auth::oidc::Oidc::new(app.jwks.clone())),
            app,
            failures: Arc::default(),
            signed_out: Arc::default(),
            mcp,
        }
    }

    /// The console session a cookie carries: signed, current, and signed out on no replica.
    pub async fn session(
        &self,
        snap: &Snapshot,
        value: &str,
        now: u64,
    ) -> Option<session::Session> {
        let s = session::open(snap, value, now, &self.signed_out)?;
        if session::revoked_elsewhere(&self.app.state, &s.nonce).await {
            return None;
        }
        Some(s)
    }
}

impl FromRef<AdminState> for AppState {
    fn from_ref(s: &AdminState) -> AppState {
        s.app.clone()
    }
}

/// The operator's routes (the admin API and the console) with their state, to be merged
/// into a listener's router: the public one's, or `[admin] listen`'s own.
pub fn router(state: AdminState) -> Router<AppState> {
    routes().with_state(state)
}

/// Every admin route: its method, path and handler. The OpenAPI document is checked against
/// this table, so a route added here and not there fails a test.
fn table() -> Vec<(&'static str, &'static str, MethodRouter<AdminState>)> {
    vec![
        ("get", "/admin/requests", get(ops::requests)),
        ("post", "/admin/reload", post(ops::reload)),
        ("get", "/admin/health", get(ops::health)),
        ("get", "/admin/stats", get(stats::stats)),
        ("post", "/admin/route/explain", post(preview::explain)),
        ("get", "/admin/usage", get(usage::usage)),
        ("get", "/admin/budgets", get(usage::budgets)),
        ("get", "/admin/cache", get(cache::stats)),
        (
            "delete",
            "/admin/cache",
            axum::routing::delete(cache::clear),
        ),
        ("get", "/admin/usage/requests/{id}", get(usage::request)),
        ("get", "/admin/config", get(docs::config)),
        ("get", "/admin/audit", get(docs::audit)),
        ("get", "/admin/openapi.json", get(docs::openapi)),
        ("get", "/admin/events", get(events::list)),
        (
            "get",
            "/admin/webhooks/{name}/deliveries",
            get(events::deliveries),
        ),
        ("post", "/admin/webhooks/{name}/test", post(events::test)),
        ("get", "/admin/tokens", get(tokens::list)),
        ("post", "/admin/tokens", post(tokens::mint)),
        (
            "delete",
            "/admin/tokens/{id}",
            axum::routing::delete(tokens::revoke),
        ),
        ("get", "/admin/{section}", get(objects::list)),
        ("post", "/admin/{section}", post(objects::create)),
        ("get", "/admin/{section}/{id}", get(objects::read)),
        (
            "patch",
            "/admin/{section}/{id}",
            axum::routing::patch(objects::update),
        ),
        (
            "delete",
            "/admin/{section}/{id}",
            axum::routing::delete(objects::remove),
        ),
    ]
}

/// The `(method, path)` of every admin route.
#[cfg(test)]
pub fn route_list() -> Vec<(&'static str, &'static str)> {
    table().into_iter().map(|(m, p, _)| (m, p)).collect()
}

/// The admin API and the console, which is its web face.
fn routes() -> Router<AdminState> {
    let mut r = Router::new();
    for (_, path, handler) in table() {
        r = r.route(path, handler);
    }
    r.merge(console::routes())
}

/// An authenticated admin request: the caller, the snapshot it was checked against, the state.
pub struct Admin {
    pub caller: auth::Caller,
    pub snap: Arc<Snapshot>,
    pub state: AppState,
    pub mcp: Arc<crate::mcp::Mcp>,
}

impl Admin {
    /// The whole config and the audit cover every group and team: an admin limited to some
    /// may not read them.
    pub fn sees_everything(&self) -> Result<(), ApiError> {
        if self.caller.groups.is_empty() && self.caller.teams.is_empty() {
            return Ok(());
        }
        Err(ControlError::OutOfScope(format!(
            "admin {:?} is limited to groups or teams: the whole config and the audit are not its to read",
            &*self.caller.name
        ))
        .into())
    }

    /// Whether the caller sees what the key named `key` did: every admin not limited to
    /// groups or teams does; one limited, only for keys within its scope that still exist.
    pub fn sees_key_named(&self, key: Option<&str>) -> bool {
        if self.caller.groups.is_empty() && self.caller.teams.is_empty() {
            return true;
        }
        key.and_then(|k| self.snap.key_named(k))
            .is_some_and(|k| self.sees_key(k))
    }

    /// Whether the team named `name` is one of the caller's teams or below one (every team
    /// is, for an admin not limited to teams).
    pub fn sees_team_named(&self, name: Option<&str>) -> bool {
        if self.caller.teams.is_empty() {
            return true;
        }
        let Some(i) = name.and_then(|n| self.snap.teams.find(n)) else {
            return false;
        };
        self.snap
            .teams
            .chain(i)
            .any(|t| self.caller.teams.contains(&t.name))
    }

    /// Whether `team` is the caller's: within its teams, and as a key of the team's groups
    /// would be.
    pub fn sees_team(&self, team: &crate::config::teams::Team) -> bool {
        let groups: Vec<&str> = team.groups.iter().map(|g| &**g).collect();
        self.caller.sees_key(&groups) && self.sees_team_named(Some(&team.name))
    }

    /// Whether `key` is the caller's (see [`auth::Caller::sees_key`]), and, for an admin
    /// limited to teams, of one of them.
    pub fn sees_key(&self, key: &crate::config::GatewayKey) -> bool {
        let groups: Vec<&str> = key.groups.iter().map(|g| &**g).collect();
        self.caller.sees_key(&groups) && self.sees_team_named(key.team.as_deref().map(|m| &*m.team))
    }

    /// Whether `channel` is in the caller's groups (an admin limited to teams sees none).
    pub fn sees_channel(&self, channel: &crate::config::Channel) -> bool {
        let groups: Vec<&str> = channel.groups.iter().map(|g| &**g).collect();
        self.caller.teams.is_empty() && self.caller.sees(&groups)
    }

    /// Whether the caller sees the channel named `name`: every admin not limited to groups
    /// or teams does (a channel gone from the config too); one limited to groups, only its
    /// groups'; one limited to teams, none.
    pub fn sees_channel_named(&self, name: &str) -> bool {
        if !self.caller.teams.is_empty() {
            return false;
        }
        self.caller.groups.is_empty()
            || self
                .snap
                .channels
                .iter()
                .find(|c| *c.name == *name)
                .is_some_and(|c| self.sees_channel(c))
    }
}

impl FromRequestParts<AdminState> for Admin {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, ops: &AdminState) -> Result<Self, Response> {
        let state = &ops.app;
        let snap = state.live.load();
        // No token but a console session: the session names the caller.
        if crate::server::ctx::bearer(&parts.headers).is_none()
            && let Some(value) = session::cookie(&parts.headers)
        {
            let now = crate::clock::unix_ms().max(0) as u64 / 1000;
            let Some(s) = ops.session(&snap, value, now).await else {
                return Err(ApiError::Unauthorized.into_response());
            };
            let path = parts.uri.path();
            let caller = auth::session_caller(&snap, &s, &parts.headers, &parts.method, path)
                .map_err(IntoResponse::into_response)?;
            return Ok(Admin {
                caller,
                snap,
                state: state.clone(),
                mcp: ops.mcp.clone(),
            });
        }
        // A personal token (`sy-adm-…`): looked up in the store, so a revocation holds at once.
        if let Some(presented) = crate::server::ctx::bearer(&parts.headers)
            && let Some(caller) = tokens::caller(state, presented).await
        {
            auth::permitted(caller.role, &parts.method, parts.uri.path())
                .map_err(IntoResponse::into_response)?;
            return Ok(Admin {
                caller,
                snap,
                state: state.clone(),
                mcp: ops.mcp.clone(),
            });
        }
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip());
        let caller = auth::guard(
            &snap,
            &ops.failures,
            &parts.headers,
            &parts.method,
            parts.uri.path(),
            peer,
        )
        .map_err(IntoResponse::into_response)?;
        Ok(Admin {
            caller,
            snap,
            state: state.clone(),
            mcp: ops.mcp.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    /// Every route of the table is in the OpenAPI document (a `{section}` route once per
    /// section), and the document has no route the table lacks.
    #[test]
    fn the_openapi_document_lists_every_admin_route() {
        let doc: Value = serde_json::from_str(super::docs::OPENAPI).unwrap();
        let paths = doc["paths"].as_object().unwrap();
        let mut listed = 0;
        for (method, path) in super::route_list() {
            let concrete: Vec<String> = if path.contains("{section}") {
                crate::config::overlay::SECTIONS
                    .iter()
                    .map(|(s, id)| {
                        path.replace("{section}", s)
                            .replace("{id}", &format!("{{{id}}}"))
                    })
                    .collect()
            } else {
                vec![path.to_string()]
            };
            for p in concrete {
                assert!(
                    paths.get(&p).and_then(|o| o.get(method)).is_some(),
                    "{method} {p} missing"
                );
                listed += 1;
            }
        }
        let documented: usize = paths.values().map(|o| o.as_object().unwrap().len()).sum();
        assert_eq!(
            documented, listed,
            "the document lists a route the table does not have"
        );
    }
}
