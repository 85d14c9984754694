//! The response cache from the operator's side: what it holds and answered
//! (`GET /admin/cache`), and forgetting entries (`DELETE /admin/cache`, all or by key or model;
//! a `cache.cleared` event, in the audit with `include=events`).

use axum::extract::Query;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::{Admin, ControlError};
use crate::server::ApiError;

/// `GET /admin/cache`: `{"enabled", "backend", "entries", "bytes", "hits", "semantic_hits",
/// "misses", "hit_rate"}` (with Redis, every replica's).
pub async fn stats(admin: Admin) -> Response {
    let mut v = match cache_of(&admin) {
        Some(c) => c.stats().await,
        None => {
            json!({"entries": 0, "bytes": 0, "hits": 0, "semantic_hits": 0, "misses": 0, "hit_rate": null})
        }
    };
    v["enabled"] = json!(admin.snap.cache.is_some());
    axum::Json(v).into_response()
}

/// The cache as configured, made now if no request has yet (with Redis, a replica that has
/// served nothing still sees and clears every replica's entries); else whatever one was made
/// before the cache was turned off.
fn cache_of(admin: &Admin) -> Option<&crate::cache::Cache> {
    match &admin.snap.cache {
        Some(s) => Some(admin.state.cache(s)),
        None => admin.state.cache.get(),
    }
}

#[derive(Deserialize, Default)]
pub struct ClearQuery {
    key: Option<String>,
    model: Option<String>,
}

/// `DELETE /admin/cache[?key=<key name>][&model=<model>]`: forgets the entries that key stored
/// or that answered that model (with neither, every entry); `{"removed": n}`.
pub async fn clear(
    admin: Admin,
    query: Result<Query<ClearQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let q = match query {
        Ok(Query(q)) => q,
        Err(r) => return super::error::unreadable_query(r),
    };
    if !admin.caller.groups.is_empty() {
        return ApiError::from(ControlError::OutOfScope(
            "an admin limited to groups cannot clear the response cache".into(),
        ))
        .into_response();
    }
    let removed = match cache_of(&admin) {
        Some(c) => c.clear_matching(q.key.as_deref(), q.model.as_deref()).await,
        None => 0,
    };
    admin.state.events.emitter.emit(
        "cache.cleared",
        json!({"admin": &*admin.caller.name, "key": q.key, "model": q.model, "removed": removed}),
    );
    axum::Json(json!({"removed": removed})).into_response()
}
