//! `GET /admin/events` (every routing event, folded or not, newest first),
//! `GET /admin/webhooks/{name}/deliveries` (each delivery attempt), `POST
//! /admin/webhooks/{name}/test` (a `webhook.test` event to that webhook), and routing events
//! merged into the audit (`GET /admin/audit?include=events`).

use axum::extract::{Path, Query};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::apply::store;
use super::{Admin, ControlError};
use crate::server::ApiError;
use crate::store::Store;
use crate::store::events::StoredEvent;
use crate::store::objects::AuditRow;

#[derive(Deserialize)]
pub struct EventsQuery {
    /// An event type or `prefix.*`.
    #[serde(rename = "type")]
    kind: Option<String>,
    /// ms since the epoch, or an RFC 3339 time.
    since: Option<String>,
    limit: Option<i64>,
    /// An event id: the page after it.
    before: Option<String>,
}

fn invalid(field: &str, m: &str) -> Response {
    ApiError::from(ControlError::invalid(field, m)).into_response()
}

fn store_error(e: impl std::fmt::Display) -> ApiError {
    ControlError::Store(e.to_string()).into()
}

/// `since` as ms since the epoch.
fn since_ms(s: Option<&str>) -> Option<i64> {
    let Some(s) = s.filter(|s| !s.is_empty()) else {
        return Some(0);
    };
    if let Ok(ms) = s.parse::<i64>() {
        return Some(ms);
    }
    let t = humantime::parse_rfc3339_weak(s).ok()?;
    let d = t.duration_since(std::time::UNIX_EPOCH).ok()?;
    i64::try_from(d.as_millis()).ok()
}

fn shown(e: &StoredEvent) -> Value {
    let mut v = e.payload.clone();
    v["id"] = json!(e.id);
    if let Some(f) = &e.folded_into {
        v["folded_into"] = json!(f);
    }
    v
}

pub async fn list(
    admin: Admin,
    query: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let q = match query {
        Ok(Query(q)) => q,
        Err(r) => return super::error::unreadable_query(r),
    };
    if let Err(e) = admin.sees_everything() {
        return e.into_response();
    }
    let Some(since) = since_ms(q.since.as_deref()) else {
        return invalid("since", "ms since the epoch or an RFC 3339 time");
    };
    if let Some(Err(m)) = q.kind.as_deref().map(crate::events::check_pattern) {
        return invalid("type", &m);
    }
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    let events = match &admin.state.store {
        Some(store) => match store
            .db
            .events(
                q.kind.as_deref(),
                since,
                q.before.as_deref().filter(|b| !b.is_empty()),
                limit,
            )
            .await
        {
            Ok(rows) => rows,
            Err(e) => return store_error(e).into_response(),
        },
        None => admin
            .state
            .events
            .recent(q.kind.as_deref(), since, limit as usize),
    };
    let data: Vec<Value> = events.iter().map(shown).collect();
    axum::Json(json!({
        "object": "list",
        "data": data,
        "dropped": admin.state.events.emitter.dropped(),
    }))
    .into_response()
}

/// The store, once the caller may read everything and the webhook `name` exists (else 404).
fn webhook_store<'a>(admin: &'a Admin, name: &str) -> Result<&'a Store, ApiError> {
    admin.sees_everything()?;
    if !admin.snap.webhooks.iter().any(|w| *w.name == *name) {
        return Err(ControlError::Missing {
            section: "webhooks".into(),
            id: name.into(),
        }
        .into());
    }
    store(&admin.state)
}

#[derive(Deserialize)]
pub struct DeliveriesQuery {
    limit: Option<i64>,
}

pub async fn deliveries(
    admin: Admin,
    Path(name): Path<String>,
    query: Result<Query<DeliveriesQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let q = match query {
        Ok(Query(q)) => q,
        Err(r) => return super::error::unreadable_query(r),
    };
    let store = match webhook_store(&admin, &name) {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    match store.db.deliveries(&name, limit).await {
        Ok(rows) => {
            let disabled = admin.state.events.is_disabled(&name);
            axum::Json(
                json!({"object": "list", "webhook": name, "disabled": disabled, "data": rows}),
            )
            .into_response()
        }
        Err(e) => store_error(e).into_response(),
    }
}

pub async fn test(admin: Admin, Path(name): Path<String>) -> Response {
    let store = match webhook_store(&admin, &name) {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
    match crate::webhook::test(&admin.state.events, store, &name).await {
        Ok(v) => (StatusCode::ACCEPTED, axum::Json(v)).into_response(),
        Err(e) => store_error(e).into_response(),
    }
}

/// The audit's rows and the newest routing events, newest first, `limit` in all; each row says
/// which it is (`"entry": "admin"` or `"event"`).
pub async fn with_audit(
    store: &Store,
    rows: Vec<AuditRow>,
    limit: i64,
) -> Result<Vec<Value>, ApiError> {
    let events = store
        .db
        .events(None, 0, None, limit)
        .await
        .map_err(store_error)?;
    let mut all: Vec<(i64, Value)> = rows
        .iter()
        .map(|r| {
            let mut v = json!(r);
            v["entry"] = json!("admin");
            (r.ts_ms, v)
        })
        .chain(events.iter().map(|e| {
            let mut v = shown(e);
            v["entry"] = json!("event");
            v["ts_ms"] = json!(e.ts_ms);
            (e.ts_ms, v)
        }))
        .collect();
    all.sort_by_key(|b| std::cmp::Reverse(b.0));
    all.truncate(limit as usize);
    Ok(all.into_iter().map(|(_, v)| v).collect())
}
