//! `/admin/tokens`: personal admin tokens. An admin (signed in to the console, through SSO or
//! with a token) mints one with its own role and scope (groups, teams) and an expiry; the token
//! is answered once and kept only as its keyed hash in the store (an object of kind
//! `admin_tokens`, written with an audit row like every admin change); it is listed without it
//! and revoked by its id, on every replica at once (each call looks it up in the store).

use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use ring::rand::SecureRandom;
use serde::Deserialize;
use serde_json::{Value, json};

use super::auth::Caller;
use super::{Admin, ControlError, apply::store};
use crate::config::Role;
use crate::server::ApiError;
use crate::store::objects::{Action, Write, WriteError};

/// Every personal admin token starts so: a bearer token shaped otherwise is never looked up.
pub const PREFIX: &str = "sy-adm-";
/// The store's kind for them (not a config section: they never reach the config).
const KIND: &str = "admin_tokens";
const DAY_MS: i64 = 86_400_000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mint {
    name: String,
    /// Days it is good for: 1 to 365 (default 30); a JSON number with no fraction.
    expires_in_days: Option<serde_json::Number>,
}

/// What a token allows, as its store entry keeps it.
fn body(caller: &Caller, name: &str, hash: &str, now: i64, days: u32, id: &str) -> Value {
    json!({
        "id": id, "name": name, "owner": &*caller.name, "role": caller.role,
        "groups": caller.groups.iter().map(|g| &**g).collect::<Vec<_>>(),
        "teams": caller.teams.iter().map(|t| &**t).collect::<Vec<_>>(),
        "hash": hash, "created_ms": now, "expires_ms": now + i64::from(days) * DAY_MS,
    })
}

/// A token as listed: never its hash.
fn shown(v: &Value) -> Value {
    let mut out = v.clone();
    if let Some(o) = out.as_object_mut() {
        o.remove("hash");
    }
    out
}

/// `POST /admin/tokens`: a token with the caller's role and scope.
pub async fn mint(admin: Admin, body: axum::body::Bytes) -> Response {
    match mint_token(&admin, &body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn mint_token(admin: &Admin, raw: &[u8]) -> Result<Response, ApiError> {
    let m: Mint = serde_json::from_slice(raw).map_err(|e| {
        ControlError::invalid("body", format!("expected {{name, expires_in_days}}: {e}"))
    })?;
    let name = m.name.trim();
    if name.is_empty() || m.name.chars().count() > 100 || name.chars().any(char::is_control) {
        return Err(
            ControlError::invalid("name", "1 to 100 characters, no control characters").into(),
        );
    }
    let days = match &m.expires_in_days {
        None => Some(30),
        Some(n) => n
            .as_f64()
            .filter(|d| d.fract() == 0.0 && (1.0..=365.0).contains(d))
            .map(|d| d as u32),
    };
    let Some(days) = days else {
        return Err(
            ControlError::invalid("expires_in_days", "a whole number from 1 to 365").into(),
        );
    };
    let store = store(&admin.state)?;
    let pepper = store.pepper().ok_or_else(|| {
        ControlError::ReadOnly("the store has no master key to hash tokens with".into())
    })?;
    let mut secret = [0u8; 32];
    let mut id = [0u8; 8];
    let rng = ring::rand::SystemRandom::new();
    if rng.fill(&mut secret).is_err() || rng.fill(&mut id).is_err() {
        return Err(ControlError::Store("no randomness for a token".into()).into());
    }
    let token = format!(
        "{PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret)
    );
    let id = format!("tok_{}", crate::secret::hex(&id));
    let now = crate::clock::unix_ms();
    let entry = body(&admin.caller, name, &pepper.hash(&token), now, days, &id);
    let diff = json!({"name": name, "role": admin.caller.role, "expires_ms": entry["expires_ms"]});
    write(admin, Action::Create, &id, Some(&entry), &diff).await?;
    let mut answer = shown(&entry);
    answer["token"] = json!(token);
    Ok((StatusCode::CREATED, axum::Json(answer)).into_response())
}

async fn write(
    admin: &Admin,
    action: Action,
    id: &str,
    entry: Option<&Value>,
    diff: &Value,
) -> Result<(), ApiError> {
    let store = store(&admin.state)?;
    let w = Write {
        action,
        kind: KIND,
        name: id,
        body: entry,
        admin: &admin.caller.name,
        diff,
        now_ms: crate::clock::unix_ms(),
        idem: None,
        expect_version: None,
    };
    store.db.write(&w).await.map(|_| ()).map_err(|e| match e {
        WriteError::Missing { .. } => ControlError::Missing {
            section: KIND.into(),
            id: id.into(),
        }
        .into(),
        other => ControlError::Store(other.to_string()).into(),
    })
}

/// Whether the caller may see and revoke `t`: its own, or any for an admin of everything.
fn theirs(admin: &Admin, t: &Value) -> bool {
    let everything = admin.caller.groups.is_empty() && admin.caller.teams.is_empty();
    (everything && admin.caller.role == Role::Admin) || t["owner"] == *admin.caller.name
}

/// `GET /admin/tokens`: the caller's tokens (every token, for an admin of everything).
pub async fn list(admin: Admin) -> Response {
    let store = match store(&admin.state) {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
    match store.db.objects(KIND).await {
        Ok(all) => {
            let data: Vec<Value> = all
                .iter()
                .map(|o| &o.body)
                .filter(|t| theirs(&admin, t))
                .map(shown)
                .collect();
            axum::Json(json!({"object": "list", "data": data})).into_response()
        }
        Err(e) => ApiError::from(ControlError::Store(e.to_string())).into_response(),
    }
}

/// `DELETE /admin/tokens/{id}`: revoked at once on every replica.
pub async fn revoke(admin: Admin, Path(id): Path<String>) -> Response {
    let found = match store(&admin.state) {
        Ok(s) => s.db.object(KIND, &id).await.ok().flatten(),
        Err(e) => return e.into_response(),
    };
    let missing = || {
        ApiError::from(ControlError::Missing {
            section: KIND.into(),
            id: id.clone(),
        })
    };
    let Some(t) = found.filter(|o| theirs(&admin, &o.body)) else {
        return missing().into_response();
    };
    let diff = json!({"name": t.body["name"]});
    match write(&admin, Action::Delete, &id, None, &diff).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => e.into_response(),
    }
}

/// The caller a presented personal token is, if it is one the store holds and has not expired.
pub async fn caller(state: &crate::server::AppState, presented: &str) -> Option<Caller> {
    if !presented.starts_with(PREFIX) {
        return None;
    }
    let store = state.store.as_deref()?;
    let hash = store.pepper()?.hash(presented);
    let all = store.db.objects(KIND).await.ok()?;
    let now = crate::clock::unix_ms();
    let t = all.iter().map(|o| &o.body).find(|t| {
        t["hash"]
            .as_str()
            .is_some_and(|h| crate::secret::same(h.as_bytes(), hash.as_bytes()))
    })?;
    if t["expires_ms"].as_i64().is_none_or(|e| e <= now) {
        return None;
    }
    let list = |f: &str| -> Vec<std::sync::Arc<str>> {
        t[f].as_array()
            .map(|a| a.iter().filter_map(Value::as_str).map(Into::into).collect())
            .unwrap_or_default()
    };
    let role = serde_json::from_value::<Role>(t["role"].clone()).ok()?;
    Some(Caller {
        name: format!(
            "{} (token {})",
            t["owner"].as_str().unwrap_or(""),
            t["id"].as_str().unwrap_or("")
        )
        .into(),
        groups: list("groups"),
        teams: list("teams"),
        role,
    })
}
