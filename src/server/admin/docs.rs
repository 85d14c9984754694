//! What the admin API says about itself and its changes: the effective config as TOML (secrets
//! masked, with its store version), the audit chain, the OpenAPI document, and the answers kept
//! for Idempotency-Keys (sealed when the store has a master key: one may hold a new gateway key).

use axum::extract::Query;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::apply::store;
use super::{Admin, ControlError, mask};
use crate::server::ApiError;
use crate::store::Store;

/// `GET /admin/config`: the file and the store's entries as one TOML document.
pub async fn config(admin: Admin) -> Response {
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
}

/// `GET /admin/audit?limit&before`: admin changes, newest first.
pub async fn audit(
    admin: Admin,
    query: Result<Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(q)) = query else {
        return ApiError::from(ControlError::invalid(
            "limit",
            "limit and before are integers",
        ))
        .into_response();
    };
    let store = match store(&admin.state) {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
    let limit = q.limit.unwrap_or(50).clamp(1, 1000);
    match store.db.audit(limit, q.before).await {
        Ok(rows) => axum::Json(json!({"object": "list", "data": rows})).into_response(),
        Err(e) => ApiError::from(ControlError::Store(e.to_string())).into_response(),
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

fn aad(admin: &str, key: &str) -> String {
    format!("idempotency/{admin}/{key}")
}

/// The answer to keep for an Idempotency-Key, sealed when the store can.
pub fn keep(
    store: &Store,
    admin: &str,
    key: Option<&str>,
    answer: &str,
) -> Result<Option<String>, ApiError> {
    let Some(key) = key else {
        return Ok(None);
    };
    match store.keys() {
        Some(k) => k
            .seal(answer.as_bytes(), &aad(admin, key))
            .map(Some)
            .map_err(|e| ControlError::Store(e.to_string()).into()),
        None => Ok(Some(answer.to_string())),
    }
}

/// The answer kept for an earlier POST with this Idempotency-Key.
pub async fn replay(store: &Store, admin: &str, key: &str) -> Result<Option<Response>, ApiError> {
    let kept = store
        .db
        .replay(admin, key)
        .await
        .map_err(|e| ControlError::Store(e.to_string()))?;
    let Some((status, body)) = kept else {
        return Ok(None);
    };
    let text = if body.starts_with('{') {
        body
    } else {
        let keys = store.keys().ok_or(ControlError::NoMasterKey)?;
        let opened = keys
            .open(&body, &aad(admin, key))
            .map_err(|e| ControlError::Store(e.to_string()))?;
        opened.expose().to_string()
    };
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    let mut resp = (status, text).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert("idempotent-replayed", HeaderValue::from_static("true"));
    Ok(Some(resp))
}
