//! One admin change, applied the way every replica will see it: the store's entries read
//! fresh, the change made to them, the whole config compiled with the file (the validation a
//! reload does, so what the store accepts always loads), the entry's secrets sealed, the write
//! committed with its audit row, and this replica's snapshot swapped at once (the others follow
//! within the watch interval).

use serde_json::Value;

use super::ControlError;
use crate::config::{ConfigError, Overlay, ReloadError};
use crate::server::{ApiError, AppState};
use crate::store::Store;
use crate::store::objects::{Action, Idem, Write, WriteError};

/// A change to one entry: its section, id, what it does and its new body (plaintext).
pub struct Change<'a> {
    pub section: &'static str,
    pub id: &'a str,
    pub action: Action,
    pub body: Option<Value>,
    /// What the audit records (masked).
    pub diff: Value,
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

/// Validates and applies `change`; returns the store's new config version.
pub async fn apply(
    state: &AppState,
    admin: &str,
    change: Change<'_>,
    idem: Option<Idem<'_>>,
    now_ms: i64,
) -> Result<i64, ApiError> {
    let store = store(state)?;
    let mut candidate = store.overlay().await.map_err(db_error)?;
    let index = edit(&mut candidate, &change);
    check(state, candidate, &change, index).await?;
    let sealed = match &change.body {
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
    let w = Write {
        action: change.action,
        kind: change.section,
        name: change.id,
        body: sealed.as_ref(),
        admin,
        diff: &change.diff,
        now_ms,
        idem,
    };
    let version = store.db.write(&w).await.map_err(|e| match e {
        WriteError::Exists { .. } => ControlError::Exists {
            section: change.section.into(),
            id: change.id.into(),
            where_: " in the store",
        }
        .into(),
        WriteError::Missing { .. } => ApiError::from(ControlError::Missing {
            section: change.section.into(),
            id: change.id.into(),
        }),
        WriteError::Replayed => {
            ControlError::InUse("this Idempotency-Key was just used".into()).into()
        }
        WriteError::Db(e) => db_error(e),
    })?;
    refresh(state, store).await;
    Ok(version)
}

/// The entries with the change made; the index the changed entry has among the section's
/// store entries (none for a delete).
fn edit(ov: &mut Overlay, change: &Change<'_>) -> Option<usize> {
    let field = crate::config::overlay::id_field(change.section).unwrap_or("name");
    let list = ov.entries.entry(change.section).or_default();
    let at = list
        .iter()
        .position(|e| e.get(field).and_then(Value::as_str) == Some(change.id));
    match (&change.body, at) {
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

/// Compiles the file with the changed entries, as a reload would; an error in the changed
/// entry names its field (`base_url`), any other names its whole path.
async fn check(
    state: &AppState,
    candidate: Overlay,
    change: &Change<'_>,
    index: Option<usize>,
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
    let err = match checked {
        Ok(()) => return Ok(()),
        Err(ReloadError::Invalid(ConfigError::Field { field, message, .. })) => (field, message),
        Err(other) => return Err(ControlError::invalid("", other.to_string()).into()),
    };
    let (field, message) = err;
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
/// replica). Returns the store version tried, and whether it now serves it.
pub async fn refresh(state: &AppState, store: &Store) -> (i64, bool) {
    let ov = match store.overlay().await {
        Ok(ov) => ov,
        Err(e) => {
            tracing::error!(error = %e, "reading the store failed; the running config stays");
            return (-1, false);
        }
    };
    let version = ov.version;
    let live = state.live.clone();
    match tokio::task::spawn_blocking(move || live.reload_with(Some(ov))).await {
        Ok(Ok(_)) => {
            state.health.pools.config_changed();
            (version, true)
        }
        Ok(Err(e)) => {
            tracing::error!(error = %e, version, "the store's config was refused; the running config stays");
            (version, false)
        }
        Err(e) => {
            tracing::error!(error = %e, "the reload task failed");
            (version, false)
        }
    }
}
