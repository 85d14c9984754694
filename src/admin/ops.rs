//! The operations of before the store: the request log, a config reload, channel health.

use axum::extract::Query;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Admin, ControlError};
use crate::server::ApiError;
use crate::store::{Cursor, LogQuery};

/// `GET /admin/requests`'s query, as written: every value checked in [`log_query`].
#[derive(Deserialize, Default)]
pub struct RequestsQuery {
    limit: Option<String>,
    before: Option<String>,
    id: Option<String>,
    key: Option<String>,
    model: Option<String>,
    channel: Option<String>,
    endpoint: Option<String>,
    status: Option<String>,
    outcome: Option<String>,
    failed_over: Option<String>,
    since: Option<String>,
    until: Option<String>,
    hide_test: Option<String>,
}

fn invalid(param: &'static str, why: &'static str) -> ApiError {
    ApiError::Invalid(crate::protocol::InvalidRequest::new(param, why))
}

fn flag(v: Option<&str>, param: &'static str) -> Result<bool, ApiError> {
    match v {
        None | Some("" | "0" | "false") => Ok(false),
        Some("1" | "true") => Ok(true),
        Some(_) => Err(invalid(param, "expected true or false")),
    }
}

fn number<T: std::str::FromStr>(
    v: Option<&str>,
    param: &'static str,
) -> Result<Option<T>, ApiError> {
    v.filter(|s| !s.is_empty())
        .map(|s| {
            s.parse()
                .map_err(|_| invalid(param, "expected a non-negative integer"))
        })
        .transpose()
}

/// A time in ms since the epoch: never before it.
fn millis(v: Option<&str>, param: &'static str) -> Result<Option<i64>, ApiError> {
    Ok(number::<u64>(v, param)?.map(|n| i64::try_from(n).unwrap_or(i64::MAX)))
}

/// The page a query asks for; 400 naming the first parameter that is not what it should be.
fn log_query(q: RequestsQuery) -> Result<LogQuery, ApiError> {
    let text = |v: Option<String>| v.filter(|s| !s.is_empty());
    let before = match q.before.as_deref().filter(|s| !s.is_empty()) {
        Some(c) => Some(
            Cursor::parse(c).ok_or_else(|| invalid("before", "expected a cursor from `next`"))?,
        ),
        None => None,
    };
    Ok(LogQuery {
        limit: number::<u32>(q.limit.as_deref(), "limit")?
            .unwrap_or(50)
            .clamp(1, 1000),
        before,
        status: number(q.status.as_deref(), "status")?,
        failed_over: flag(q.failed_over.as_deref(), "failed_over")?,
        hide_test: flag(q.hide_test.as_deref(), "hide_test")?,
        since_ms: millis(q.since.as_deref(), "since")?,
        until_ms: millis(q.until.as_deref(), "until")?,
        id: text(q.id),
        key: text(q.key),
        model: text(q.model),
        channel: text(q.channel),
        endpoint: text(q.endpoint),
        outcome: text(q.outcome),
    })
}

/// A page of the request log, newest first, filtered; `next` is the cursor of the page after.
pub async fn requests(
    admin: Admin,
    query: Result<Query<RequestsQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let state = &admin.state;
    let q = match query {
        Ok(Query(q)) => q,
        Err(r) => return super::error::unreadable_query(r),
    };
    let q = match log_query(q) {
        Ok(q) => q,
        Err(e) => return e.into_response(),
    };
    match state.log.page(q).await {
        Ok((mut rows, next)) => {
            rows.retain(|r| admin.sees_key_named(r["key_name"].as_str()));
            axum::Json(json!({"object": "list", "data": rows, "next": next.map(Cursor::text)}))
                .into_response()
        }
        Err(e) => {
            tracing::error!(error = %e, "reading the request log failed");
            ApiError::LogUnavailable.into_response()
        }
    }
}

pub async fn reload(admin: Admin) -> Response {
    let state = &admin.state;
    if !admin.caller.groups.is_empty() {
        return ApiError::from(ControlError::OutOfScope(
            "an admin limited to groups cannot reload the config".into(),
        ))
        .into_response();
    }
    match super::reload(state).await {
        Ok(next) => {
            tracing::info!(channels = next.channels.len(), "config reloaded");
            axum::Json(json!({
                "reloaded": true,
                "channels": next.channels.len(),
                "models": next.models.len(),
            }))
            .into_response()
        }
        Err(e) => {
            tracing::error!(error = %e, "config reload refused; the running config stays");
            ApiError::Admin(e.to_string()).into_response()
        }
    }
}

/// A fetched credential's state as the health view shows it (never the credential).
fn token_json(st: &crate::provider::auth::AuthStatus) -> Value {
    let at = |t: Option<std::time::SystemTime>| {
        t.map(|t| humantime::format_rfc3339_seconds(t).to_string())
    };
    let left = st
        .expires
        .and_then(|e| e.duration_since(std::time::SystemTime::now()).ok())
        .map(|d| d.as_secs());
    json!({
        "source": st.source,
        "expires_at": at(st.expires),
        "expires_in_seconds": left,
        "refreshed_at": at(st.refreshed),
        "last_refresh_error": st.error,
        "fetches": st.fetches,
    })
}

/// Channel health as the router sees it: score, success rate, circuit and cooldowns.
pub async fn health(admin: Admin) -> Response {
    let (state, snap) = (&admin.state, &admin.snap);
    let known = state.health.report(&snap.health);
    // Channels health has no verdicts for yet are healthy by default: list them too.
    let mut rows: Vec<Value> = known.as_array().cloned().unwrap_or_default();
    for ch in &snap.channels {
        if !rows.iter().any(|r| r["channel"] == *ch.name) {
            rows.push(json!({
                "channel": &*ch.name, "model": null, "score": 100.0, "verdicts": 0,
                "success_rate": null, "circuit": "closed", "circuit_seconds_left": null,
                "rate_limited_seconds_left": null,
            }));
        }
    }
    for r in &mut rows {
        let enabled = snap
            .channels
            .iter()
            .find(|c| r["channel"] == *c.name)
            .map(|c| c.enabled && c.breaker.enabled);
        r["health_checked"] = json!(enabled);
        // Each configured credential by its label (never the key): in flight, cooling,
        // disabled; keys not used yet are listed idle.
        let name = r["channel"].as_str().unwrap_or("").to_string();
        let mut creds = state.health.pools.report(&name);
        if let (Some(list), Some(ch)) = (
            creds.as_array_mut(),
            snap.channels.iter().find(|c| *c.name == *name),
        ) {
            list.retain(|c| ch.credentials.iter().any(|(l, _)| c["label"] == **l));
            for (label, _) in &ch.credentials {
                if !list.iter().any(|c| c["label"] == **label) {
                    list.push(json!({"label": &**label, "in_flight": 0, "disabled": false,
                        "cooling_seconds_left": null, "models_forbidden": []}));
                }
            }
            // A fetched credential (AWS temporary credentials, a Google token): where it comes
            // from, when it expires, its last refresh and that refresh's error.
            if let Some(st) = ch.upstream.auth_status() {
                for c in list.iter_mut() {
                    c["token"] = token_json(&st);
                }
            }
        }
        r["credentials"] = creds;
        if let Some(ch) = snap.channels.iter().find(|c| *c.name == *name)
            && let Some(b) = ch.quota.budget
        {
            let at = state.meter.standing(&ch.scope, None, &ch.quota).await;
            r["budget"] = json!({
                "micros": b.micros,
                "period": b.period.as_str(),
                "spent_micros": at.map(|s| s.spent),
                "reserved_micros": at.map(|s| s.reserved),
            });
        }
    }
    // An admin limited to groups sees its groups' channels only.
    rows.retain(|r| admin.sees_channel_named(r["channel"].as_str().unwrap_or("")));
    let outbox_pending = match &state.store {
        Some(store) => store.db.outbox_pending().await.ok(),
        None => None,
    };
    let rb = &snap.server.retry_budget;
    let (requests, retries, limit) = state.health.retries.standing(rb);
    axum::Json(json!({
        "object": "list",
        "data": rows,
        "retry_budget": {
            "window_seconds": rb.window.as_secs(),
            "ratio": rb.ratio,
            "requests": requests,
            "retries": retries,
            "limit": limit,
        },
        "state": state.state.describe(),
        "budgets": state.meter.describe(),
        "events": {
            "dropped": state.events.emitter.dropped(),
            // Deliveries still owed (none without a store: no webhooks then).
            "outbox_pending": outbox_pending,
            "webhooks": snap.webhooks.iter().map(|w| json!({
                "name": &*w.name,
                "enabled": w.enabled,
                "disabled_by_failures": state.events.is_disabled(&w.name),
            })).collect::<Vec<_>>(),
        },
    }))
    .into_response()
}
