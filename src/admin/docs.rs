//! What the admin API says about itself and its changes: the effective config as TOML (secrets
//! masked, with its store version), the audit chain, the OpenAPI document, and the answers kept
//! for Idempotency-Keys (never holding a secret: a generated key is shown once, not kept).

use axum::extract::Query;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::apply::store;
use super::{Admin, ControlError, mask};
use crate::server::ApiError;
use crate::store::objects::Kept;

/// `GET /admin/config`: the file and the store's entries as one TOML document.
pub async fn config(admin: Admin) -> Response {
    if let Err(e) = admin.sees_everything() {
        return e.into_response();
    }
    let view = &admin.snap.view;
    let mut doc = mask::document(&view.raw);
    drop_nulls(&mut doc);
    match toml::to_string(&doc) {
        Ok(text) => {
            let body = format!(
                "# Switchyard effective config, store version {}\n{text}",
                view.store_version
            );
            let mut resp = (StatusCode::OK, body).into_response();
            let h = resp.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/toml; charset=utf-8"),
            );
            h.insert(
                "x-switchyard-config-version",
                HeaderValue::from(view.store_version),
            );
            resp
        }
        Err(e) => ApiError::from(ControlError::Store(format!(
            "the config does not render as TOML: {e}"
        )))
        .into_response(),
    }
}

/// TOML has no null: a member set to null is a member not set.
fn drop_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            m.values_mut().for_each(drop_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

#[derive(Deserialize)]
pub struct AuditQuery {
    limit: Option<i64>,
    before: Option<i64>,
    /// `events`: routing events merged in by time (the hash chain covers admin rows only).
    include: Option<String>,
}

/// `GET /admin/audit?limit&before`: admin changes, newest first.
pub async fn audit(
    admin: Admin,
    query: Result<Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let q = match query {
        Ok(Query(q)) => q,
        Err(r) => return super::error::unreadable_query(r),
    };
    if let Err(e) = admin.sees_everything() {
        return e.into_response();
    }
    let store = match store(&admin.state) {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
    let limit = q.limit.unwrap_or(50).clamp(1, 1000);
    let rows = match store.db.audit(limit, q.before).await {
        Ok(rows) => rows,
        Err(e) => return ApiError::from(ControlError::Store(e.to_string())).into_response(),
    };
    match q.include.as_deref() {
        None | Some("") => axum::Json(json!({"object": "list", "data": rows})).into_response(),
        Some("events") => match super::events::with_audit(store, rows, limit).await {
            Ok(data) => axum::Json(json!({"object": "list", "data": data})).into_response(),
            Err(e) => e.into_response(),
        },
        Some(_) => ApiError::from(ControlError::invalid(
            "include",
            "the one value is `events`",
        ))
        .into_response(),
    }
}

/// The OpenAPI document of the admin API.
pub const OPENAPI: &str = include_str!("openapi.json");

pub async fn openapi(_admin: Admin) -> Response {
    let mut resp = OPENAPI.into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// The answer kept for an earlier POST with this Idempotency-Key (422 when that POST was
/// another request).
pub fn replay(kept: &Kept, fingerprint: &str) -> Response {
    if kept.fingerprint != fingerprint {
        return ApiError::from(ControlError::KeyReused).into_response();
    }
    let status = StatusCode::from_u16(kept.status).unwrap_or(StatusCode::OK);
    let mut resp = (status, kept.body.clone()).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert("idempotent-replayed", HeaderValue::from_static("true"));
    resp
}
