//! One admin change, applied the way every replica will see it: the store's entries read
//! fresh, the change made to the entry as the store holds it now, the whole config compiled
//! with the file (the validation a reload does, so what the store accepts always loads), the
//! entry's secrets sealed, and the write committed with its audit row only if the store is still
//! at the version checked (else all of it again: two admins never combine into a config neither
//! checked); then this replica's snapshot is swapped at once (the others follow).

use serde_json::Value;

use super::{ControlError, mask};
use crate::config::{ConfigError, Overlay, ReloadError};
use crate::server::{ApiError, AppState};
use crate::store::Store;
use crate::store::objects::{Action, Idem, Kept, Write, WriteError};

/// Tries before a change that keeps meeting newer writes gives up.
const TRIES: usize = 5;

/// The change to one entry: its section, id and what it does.
pub struct Change<'a> {
    pub section: &'static str,
    pub id: &'a str,
    pub action: Action,
}

/// What a change makes of the entry as the store holds it (none: there is none).
pub enum Made {
    /// The new body (none: delete) and the audit's diff (masked).
    Write { body: Option<Value>, diff: Value },
    /// Nothing to do (a delete of what is already gone).
    Nothing,
}

/// What applying did.
pub enum Applied {
    /// Written: the entry's new body (none for a delete).
    Done(Option<Value>),
    Nothing,
    /// The Idempotency-Key was used before: its kept answer.
    Replayed(Kept),
}

/// A POST's Idempotency-Key, with its request's fingerprint.
pub struct IdemKey<'a> {
    pub key: &'a str,
    pub fingerprint: &'a str,
}

/// The store, or 409 read_only: without one, everything comes from the file.
pub fn store(state: &AppState) -> Result<&Store, ApiError> {
    state.store.as_deref().ok_or_else(|| {
        ControlError::ReadOnly(
            "no store is configured ([store] url): everything comes from the config file".into(),
        )
        .into()
    })
}

fn db_error(e: impl std::fmt::Display) -> ApiError {
    tracing::error!(error = %e, "admin API: the store failed");
    ControlError::Store(e.to_string()).into()
}

/// Validates and applies a change; `make` is asked again on each try, with the entry as the
/// store then holds it.
pub async fn apply(
    state: &AppState,
    admin: &str,
    change: Change<'_>,
    make: &(dyn Fn(Option<&Value>) -> Result<Made, ApiError> + Sync),
    idem: Option<IdemKey<'_>>,
    now_ms: i64,
) -> Result<Applied, ApiError> {
    let store = store(state)?;
    let field = crate::config::overlay::id_field(change.section).unwrap_or("name");
    for _ in 0..TRIES {
        if let Some(i) = &idem
            && let Some(kept) = store.db.replay(admin, i.key).await.map_err(db_error)?
        {
            return Ok(Applied::Replayed(kept));
        }
        let mut candidate = store.overlay_lenient().await.map_err(db_error)?;
        let current = candidate.entries.get(change.section).and_then(|list| {
            list.iter()
                .find(|e| e.get(field).and_then(Value::as_str) == Some(change.id))
        });
        let (body, diff) = match make(current)? {
            Made::Write { body, diff } => (body, diff),
            Made::Nothing => return Ok(Applied::Nothing),
        };
        let expected = candidate.version;
        let index = edit(
            &mut candidate,
            change.section,
            field,
            change.id,
            body.as_ref(),
        );
        check(state, candidate, &change, index, body.as_ref()).await?;
        let sealed = match &body {
            Some(b) => Some(
                store
                    .seal_body(change.section, change.id, b.clone())
                    .map_err(|e| match e {
                        crate::store::OverlayError::NoMasterKey => ControlError::NoMasterKey.into(),
                        other => db_error(other),
                    })?,
            ),
            None => None,
        };
        let answer = body.as_ref().map(|b| answer(change.section, b).to_string());
        let w = Write {
            action: change.action,
            kind: change.section,
            name: change.id,
            body: sealed.as_ref(),
            admin,
            diff: &diff,
            now_ms,
            idem: idem.as_ref().map(|i| Idem {
                key: i.key,
                fingerprint: i.fingerprint,
                status: 201,
                body: answer.as_deref().unwrap_or("{}"),
            }),
            expect_version: Some(expected),
        };
        match store.db.write(&w).await {
            Ok(_) => {
                refresh(state, store).await;
                admin_event(state, admin, &change, &diff);
                if change.section == "webhooks" {
                    // An operator's change brings a webhook a day of failures disabled back.
                    let _ = store.db.webhook_ok(change.id).await;
                }
                return Ok(Applied::Done(body));
            }
            // Someone wrote first: read, make and check again.
            Err(WriteError::Stale | WriteError::Replayed) => continue,
            Err(e) => return Err(write_error(e, &change)),
        }
    }
    Err(ControlError::Busy.into())
}

/// `key.created`, `key.revoked` (deleted), `channel.changed`: what an admin change is as an
/// event (the diff is the audit's, masked).
fn admin_event(state: &AppState, admin: &str, change: &Change<'_>, diff: &Value) {
    let (kind, data) = match (change.section, change.action) {
        ("keys", Action::Create) => ("key.created", serde_json::json!({"key": change.id})),
        ("keys", Action::Delete) => ("key.revoked", serde_json::json!({"key": change.id})),
        ("channels", action) => (
            "channel.changed",
            serde_json::json!({"channel": change.id, "action": action.as_str(), "diff": diff}),
        ),
        _ => return,
    };
    let mut data = data;
    data["admin"] = Value::from(admin);
    state.events.emitter.emit(kind, data);
}

/// An entry as the admin API answers it after a write: masked, `source` api.
pub fn answer(section: &str, body: &Value) -> Value {
    let mut a = mask::entry(section, body);
    a["source"] = Value::from("api");
    a
}

fn write_error(e: WriteError, change: &Change<'_>) -> ApiError {
    match e {
        WriteError::Exists { .. } => ControlError::Exists {
            section: change.section.into(),
            id: change.id.into(),
            where_: " in the store",
        }
        .into(),
        WriteError::Missing { .. } => ControlError::Missing {
            section: change.section.into(),
            id: change.id.into(),
        }
        .into(),
        other => db_error(other),
    }
}

/// The entries with the change made; the index the changed entry has among the section's
/// store entries (none for a delete).
fn edit(
    ov: &mut Overlay,
    section: &'static str,
    field: &str,
    id: &str,
    body: Option<&Value>,
) -> Option<usize> {
    let list = ov.entries.entry(section).or_default();
    let at = list
        .iter()
        .position(|e| e.get(field).and_then(Value::as_str) == Some(id));
    match (body, at) {
        (Some(b), Some(i)) => {
            list[i] = b.clone();
            Some(i)
        }
        (Some(b), None) => {
            list.push(b.clone());
            Some(list.len() - 1)
        }
        (None, Some(i)) => {
            list.remove(i);
            None
        }
        (None, None) => None,
    }
}

/// Every string under an entry's secret fields, whatever their shape: a wrong-typed value
/// is still a secret, and serde would quote it in its message.
fn secret_strings(body: Option<&Value>) -> Vec<String> {
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::String(s) if !s.is_empty() => out.push(s.clone()),
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            Value::Object(m) => m.values().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    if let Some(b) = body {
        for f in [
            "api_keys",
            "credentials",
            "key",
            "secret",
            "previous_secret",
        ] {
            if let Some(v) = b.get(f) {
                walk(v, &mut out);
            }
        }
    }
    out
}

/// Compiles the file with the changed entries, as a reload would; an error in the changed
/// entry names its field (`base_url`), any other names its whole path.
async fn check(
    state: &AppState,
    candidate: Overlay,
    change: &Change<'_>,
    index: Option<usize>,
    body: Option<&Value>,
) -> Result<(), ApiError> {
    let live = state.live.clone();
    let file_len = live
        .load()
        .view
        .file_len
        .get(change.section)
        .copied()
        .unwrap_or(0);
    let checked = tokio::task::spawn_blocking(move || live.check(&candidate))
        .await
        .map_err(db_error)?;
    let (field, mut message) = match checked {
        Ok(()) => return Ok(()),
        Err(ReloadError::Invalid(ConfigError::Field { field, message, .. })) => (field, message),
        Err(other) => return Err(ControlError::invalid("", other.to_string()).into()),
    };
    for s in secret_strings(body) {
        message = message.replace(&s, "***");
    }
    let Some(i) = index else {
        return Err(ControlError::InUse(format!(
            "{} is still referred to: {field}: {message}",
            change.id
        ))
        .into());
    };
    let own = format!("{}[{}]", change.section, file_len + i);
    let field = match field.strip_prefix(&own) {
        Some(rest) => rest.trim_start_matches('.').to_string(),
        None => field,
    };
    Err(ControlError::invalid(field, message).into())
}

/// Reloads this replica from the store now (the version watch does the same on every
/// replica); what it could not load is recorded in the store's `behind`.
pub async fn refresh(state: &AppState, store: &Store) {
    let _one = store.reloading.lock().await;
    let ov = match store.overlay().await {
        Ok(ov) => ov,
        Err(e) => {
            tracing::error!(error = %e, "reading the store failed; the running config stays");
            // A store that does not answer leaves the replica serving (not behind); an entry
            // that does not open here is a config this replica cannot load.
            if let crate::store::OverlayError::Open { .. } = e {
                store.served(0, false);
            }
            return;
        }
    };
    let version = ov.version;
    let before = state.live.load();
    let live = state.live.clone();
    match tokio::task::spawn_blocking(move || live.reload_with(Some(ov))).await {
        Ok(Ok(next)) => {
            // Refused credentials start afresh only when channels changed, not on every write.
            if before.view.raw.get("channels") != next.view.raw.get("channels") {
                state.health.pools.config_changed();
            }
            store.served(version, true);
        }
        Ok(Err(e)) => {
            tracing::error!(error = %e, version, "the store's config was refused; the running config stays");
            store.served(version, false);
        }
        Err(e) => {
            tracing::error!(error = %e, "the reload task failed");
        }
    }
}

/// A reload asked for (SIGHUP, `POST /admin/reload`): the file read again, with the store's
/// entries read again too when there is a store (a replica behind the store catches up here).
pub async fn reload(
    state: &AppState,
) -> Result<std::sync::Arc<crate::config::Snapshot>, ReloadError> {
    let _one = match state.store.as_deref() {
        Some(store) => Some(store.reloading.lock().await),
        None => None,
    };
    let overlay = match state.store.as_deref() {
        Some(store) => match store.overlay().await {
            Ok(ov) => Some(ov),
            Err(e) => {
                tracing::error!(error = %e, "reading the store failed; reloading the file with the entries held");
                None
            }
        },
        None => None,
    };
    let version = overlay.as_ref().map(|o| o.version);
    let live = state.live.clone();
    let result = tokio::task::spawn_blocking(move || live.reload_with(overlay))
        .await
        .unwrap_or(Err(ReloadError::NoFile));
    if let (Some(store), Some(v)) = (state.store.as_deref(), version) {
        store.served(v, result.is_ok());
    }
    if result.is_ok() {
        state.health.pools.config_changed();
    }
    result
}
