//! The store's objects as the config takes them, and back: a channel's upstream keys are sealed
//! on the way in (each for its own slot: `channels/<name>/api_keys/<i>`) and opened on the way
//! out; gateway keys are only ever kept as their hash, so nothing is opened for them.

use serde_json::Value;

use super::db::DbError;
use super::open::Store;
use super::seal::SealError;
use crate::config::Overlay;
use crate::config::overlay::SECTIONS;

#[derive(Debug, thiserror::Error)]
pub enum OverlayError {
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(
        "{section} {name:?}: an upstream key is sealed and cannot be opened ({source}); configure the master key it was sealed under"
    )]
    Open {
        section: String,
        name: String,
        source: SealError,
    },
    #[error(
        "store.master_key (or SWITCHYARD_MASTER_KEY) is not set: upstream keys cannot be kept without it"
    )]
    NoMasterKey,
    #[error("sealing failed: {0}")]
    Seal(SealError),
}

/// Calls `f` with each secret slot of an entry (its associated data and its string).
pub fn each_secret<E>(
    section: &str,
    name: &str,
    body: &mut Value,
    mut f: impl FnMut(&str, &mut String) -> Result<(), E>,
) -> Result<(), E> {
    if section == "webhooks" {
        for field in ["secret", "previous_secret"] {
            if let Some(Value::String(s)) = body.get_mut(field) {
                f(&format!("webhooks/{name}/{field}"), s)?;
            }
        }
        return Ok(());
    }
    if section == "mcp_servers" {
        if let Some(Value::String(s)) = body.get_mut("bearer") {
            f(&format!("mcp_servers/{name}/bearer"), s)?;
        }
        for field in ["headers", "env"] {
            if let Some(Value::Object(h)) = body.get_mut(field) {
                for (k, v) in h.iter_mut() {
                    if let Value::String(s) = v {
                        f(&format!("mcp_servers/{name}/{field}/{k}"), s)?;
                    }
                }
            }
        }
        return Ok(());
    }
    if section != "channels" {
        return Ok(());
    }
    if let Some(Value::Array(keys)) = body.get_mut("api_keys") {
        for (i, k) in keys.iter_mut().enumerate() {
            if let Value::String(s) = k {
                f(&format!("channels/{name}/api_keys/{i}"), s)?;
            }
        }
    }
    if let Some(Value::Array(creds)) = body.get_mut("credentials") {
        for (i, c) in creds.iter_mut().enumerate() {
            if let Some(Value::String(s)) = c.get_mut("key") {
                f(&format!("channels/{name}/credentials/{i}/key"), s)?;
            }
        }
    }
    // Cloud credentials: AWS's secret key and session token, a service account's key file.
    if let Some(aws) = body.get_mut("aws") {
        for field in ["secret_access_key", "session_token"] {
            if let Some(Value::String(s)) = aws.get_mut(field) {
                f(&format!("channels/{name}/aws/{field}"), s)?;
            }
        }
    }
    if let Some(Value::String(s)) = body.get_mut("credentials_json") {
        f(&format!("channels/{name}/credentials_json"), s)?;
    }
    Ok(())
}

/// Whether an entry carries any upstream key.
pub fn has_secret(section: &str, body: &Value) -> bool {
    let mut found = false;
    let mut copy = body.clone();
    let _ = each_secret::<()>(section, "", &mut copy, |_, _| {
        found = true;
        Ok(())
    });
    found
}

impl Store {
    /// Every object, secrets opened, at the version read first (a write landing meanwhile
    /// moves the version again, and the next look reloads). An entry that does not open (sealed
    /// under a key not configured here) fails it: a replica keeps serving what it holds rather
    /// than drop a channel.
    pub async fn overlay(&self) -> Result<Overlay, OverlayError> {
        self.entries(false).await
    }

    /// As [`Store::overlay`], leaving out entries that do not open (logged): what an admin
    /// change is checked against, so one unopenable entry does not block every write, its own
    /// deletion included.
    pub async fn overlay_lenient(&self) -> Result<Overlay, OverlayError> {
        self.entries(true).await
    }

    async fn entries(&self, lenient: bool) -> Result<Overlay, OverlayError> {
        let version = self.db.version().await?;
        let mut out = Overlay {
            version,
            pepper: self.pepper().cloned(),
            ..Overlay::default()
        };
        for (section, _) in SECTIONS {
            let mut list = Vec::new();
            for o in self.db.objects(section).await? {
                match self.open_body(section, &o.name, o.body) {
                    Ok(b) => list.push(b),
                    Err(e) if lenient => tracing::error!(error = %e, "a store entry is left out"),
                    Err(e) => return Err(e),
                }
            }
            out.entries.insert(section, list);
        }
        Ok(out)
    }

    /// An entry with its secrets opened.
    pub fn open_body(
        &self,
        section: &str,
        name: &str,
        mut body: Value,
    ) -> Result<Value, OverlayError> {
        let keys = self.keys();
        each_secret::<OverlayError>(section, name, &mut body, |aad, s| {
            let fail = |source| OverlayError::Open {
                section: section.into(),
                name: name.into(),
                source,
            };
            let k = keys.ok_or_else(|| fail(SealError::UnknownKey("(none configured)".into())))?;
            *s = k.open(s, aad).map_err(fail)?.expose().to_string();
            Ok(())
        })?;
        Ok(body)
    }

    /// An entry with its secrets sealed, for the store.
    pub fn seal_body(
        &self,
        section: &str,
        name: &str,
        mut body: Value,
    ) -> Result<Value, OverlayError> {
        let keys = self.keys();
        each_secret::<OverlayError>(section, name, &mut body, |aad, s| {
            let k = keys.ok_or(OverlayError::NoMasterKey)?;
            *s = k.seal(s.as_bytes(), aad).map_err(OverlayError::Seal)?;
            Ok(())
        })?;
        Ok(body)
    }
}
