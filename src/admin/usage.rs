//! `/admin/usage`: the ledger summed by key, model, channel or day over a window, and one
//! request's charge explained attempt by attempt.

use axum::extract::{Path, Query};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::{Admin, ControlError};
use crate::server::ApiError;
use crate::store::{GroupBy, Window, ledger};

const DAY_MS: i64 = 86_400_000;

#[derive(Deserialize)]
pub struct UsageQuery {
    group_by: Option<String>,
    from: Option<String>,
    to: Option<String>,
    /// Only this team's spend (and its sub-teams').
    team: Option<String>,
}

/// `2026-12-01` (that day's start; as `to`, the next day's), an RFC 3339 time, or ms since the
/// epoch.
fn instant(field: &str, text: &str, end_of_day: bool) -> Result<i64, ControlError> {
    let bad = || {
        ControlError::invalid(
            field,
            "expected a date (2026-12-01), an RFC 3339 time or milliseconds since the epoch",
        )
    };
    if let Ok(ms) = text.parse::<i64>() {
        return Ok(ms);
    }
    let (t, day) = if text.len() == 10 {
        (format!("{text}T00:00:00Z"), true)
    } else {
        (text.to_string(), false)
    };
    let at = humantime::parse_rfc3339_weak(&t).map_err(|_| bad())?;
    let ms = at
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| bad())?
        .as_millis() as i64;
    Ok(if day && end_of_day { ms + DAY_MS } else { ms })
}

fn window(q: &UsageQuery) -> Result<Window, ControlError> {
    let now = crate::clock::unix_ms();
    let from_ms = match &q.from {
        Some(t) => instant("from", t, false)?,
        None => now - 30 * DAY_MS,
    };
    let to_ms = match &q.to {
        Some(t) => instant("to", t, true)?,
        None => now + 1,
    };
    if to_ms <= from_ms {
        return Err(ControlError::invalid("to", "must be after from"));
    }
    Ok(Window { from_ms, to_ms })
}

fn group_by(q: &UsageQuery) -> Result<GroupBy, ControlError> {
    GroupBy::named(q.group_by.as_deref().unwrap_or("key")).ok_or_else(|| {
        ControlError::invalid(
            "group_by",
            "expected key, model, channel, team, user or day",
        )
    })
}

pub async fn usage(
    admin: Admin,
    query: Result<Query<UsageQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let q = match query {
        Ok(Query(q)) => q,
        Err(r) => return super::error::unreadable_query(r),
    };
    let (by, w) = match group_by(&q).and_then(|by| Ok((by, window(&q)?))) {
        Ok(v) => v,
        Err(e) => return ApiError::from(e).into_response(),
    };
    let teams = &admin.snap.teams;
    if let Some(t) = q.team.as_deref()
        && teams.find(t).is_none()
    {
        return ApiError::from(ControlError::invalid(
            "team",
            format!("no team named {t:?}"),
        ))
        .into_response();
    }
    // Within the team asked for (or below it), by the team each row was written under.
    let in_team = |row: Option<&str>| match (q.team.as_deref(), row.and_then(|r| teams.find(r))) {
        (None, _) => true,
        (Some(t), Some(i)) => teams.chain(i).any(|x| *x.name == *t),
        (Some(_), None) => false,
    };
    match admin.state.log.usage(by, w).await {
        Ok(sums) => {
            let mut v = ledger::report(by, sums, |s| {
                admin.sees_key_named(s.key.as_deref()) && in_team(s.team.as_deref())
            });
            v["from_ms"] = json!(w.from_ms);
            v["to_ms"] = json!(w.to_ms);
            axum::Json(v).into_response()
        }
        Err(e) => {
            tracing::error!(error = %e, "reading the ledger failed");
            ApiError::LogUnavailable.into_response()
        }
    }
}

/// One request's charge, attempt by attempt: tokens, the rates and their version, and what
/// the failover cost against the first choice.
pub async fn request(admin: Admin, Path(id): Path<String>) -> Response {
    let rows = match admin.state.log.charges(&id).await {
        Ok(rows) => rows,
        Err(e) => {
            tracing::error!(error = %e, "reading the ledger failed");
            return ApiError::LogUnavailable.into_response();
        }
    };
    let key = rows.first().and_then(|r| r["key"].as_str());
    if rows.is_empty() || !admin.sees_key_named(key) {
        return ApiError::from(ControlError::Missing {
            section: "usage".into(),
            id,
        })
        .into_response();
    }
    let cost: i64 = rows.iter().filter_map(|r| r["cost_micros"].as_i64()).sum();
    let served = rows
        .iter()
        .rev()
        .find(|r| r["first_choice_micros"].is_i64());
    let failover = served.map(|r| {
        let first = r["first_choice_micros"].as_i64().unwrap_or(0);
        let paid = r["cost_micros"].as_i64().unwrap_or(0);
        json!({
            "first_choice": {"channel": rows[0]["channel"], "model": rows[0]["model"]},
            "served": {"channel": r["channel"], "model": r["model"]},
            "first_choice_micros": first,
            "served_micros": paid,
            "extra_micros": paid - first,
        })
    });
    axum::Json(json!({
        "request_id": id,
        "key": key,
        "cost_micros": cost,
        "cost_usd": ledger::usd(cost),
        "attempts": rows,
        "failover": failover,
    }))
    .into_response()
}

/// Every budget the caller sees, keys', teams' and channels', with what is spent and held of it in
/// its current period and the headroom left.
pub async fn budgets(admin: Admin) -> Response {
    let snap = admin.snap.clone();
    let meter = &admin.state.meter;
    let mut rows = Vec::new();
    let keys = snap.keys.iter().filter(|k| admin.sees_key(k));
    let channels = snap.channels.iter().filter(|c| admin.sees_channel(c));
    let teams = snap.teams.list.iter().filter(|t| admin.sees_team(t));
    let scopes = keys
        .map(|k| ("key", &k.name, &k.scope, k.tag(), &k.quota))
        .chain(teams.map(|t| ("team", &t.name, &t.scope, Some(&*t.tag), &t.quota)))
        .chain(channels.map(|c| ("channel", &c.name, &c.scope, None, &c.quota)));
    for (kind, name, scope, tag, quota) in scopes {
        let Some(b) = quota.budget else {
            continue;
        };
        let at = meter.standing(scope, tag, quota).await;
        let used = at.map(|s| s.spent + s.reserved);
        rows.push(json!({
            "scope": kind,
            "name": &**name,
            "period": b.period.as_str(),
            "budget_micros": b.micros,
            "spent_micros": at.map(|s| s.spent),
            "reserved_micros": at.map(|s| s.reserved),
            "headroom_micros": used.map(|u| b.micros.saturating_sub(u)),
        }));
    }
    axum::Json(json!({"object": "list", "data": rows})).into_response()
}
