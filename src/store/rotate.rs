//! `switchyard rotate-master-key`: every sealed value (each channel's upstream keys, the
//! pepper) opened with whichever key sealed it and sealed again
//! under the new one, one row at a time and only if the row is still what was read (a write
//! landing meanwhile is read again). Nothing else changes: the config version stays, so
//! replicas keep serving their snapshot, and the keyring opens either sealing meanwhile.

use serde_json::Value;

use super::db::DbError;
use super::objects::{Action, Write};
use super::open::{PEPPER, Store};
use super::overlay::{OverlayError, each_secret};
use super::seal::{SealError, sealed_with};

#[derive(Debug, thiserror::Error)]
pub enum RotateError {
    #[error("rotation needs the current master key and SWITCHYARD_NEW_MASTER_KEY")]
    Keys,
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Overlay(#[from] OverlayError),
    #[error("{0}")]
    Seal(SealError),
    #[error("{0} values are still sealed under another key after three passes")]
    Left(usize),
}

/// What a rotation re-sealed.
#[derive(Debug, Default)]
pub struct Rotated {
    pub objects: usize,
    pub pepper: bool,
}

impl Store {
    /// Re-seals everything under the keyring's sealing key; records the rotation in the audit.
    pub async fn rotate(&self, admin: &str, now_ms: i64) -> Result<Rotated, RotateError> {
        let keys = self.keys().ok_or(RotateError::Keys)?;
        let new = keys.sealing().id().to_string();
        let mut done = Rotated::default();
        for _ in 0..3 {
            let left = self.pass(&new, &mut done).await?;
            if left == 0 {
                let diff = serde_json::json!({"to": new});
                let w = Write {
                    action: Action::Rotate,
                    kind: "master_key",
                    name: &new,
                    body: None,
                    admin,
                    diff: &diff,
                    now_ms,
                    idem: None,
                    expect_version: None,
                };
                self.db.write(&w).await.map_err(|e| match e {
                    super::objects::WriteError::Db(d) => RotateError::Db(d),
                    other => RotateError::Db(DbError::Migrate(other.to_string())),
                })?;
                return Ok(done);
            }
        }
        Err(RotateError::Left(
            self.pass(&new, &mut Rotated::default()).await?,
        ))
    }

    /// One pass over every sealed value; returns how many are still under another key.
    async fn pass(&self, new: &str, done: &mut Rotated) -> Result<usize, RotateError> {
        let keys = self.keys().ok_or(RotateError::Keys)?;
        let mut left = 0;
        for o in self.db.objects("channels").await? {
            if !under_other(&o.body, new) {
                continue;
            }
            let opened = self.open_body(&o.kind, &o.name, o.body.clone())?;
            let sealed = self.seal_body(&o.kind, &o.name, opened)?;
            let sql = "UPDATE objects SET body = $1 WHERE kind = $2 AND name = $3 AND body = $4";
            let (b, old) = (sealed.to_string(), o.body.to_string());
            if self.db.exec(sql, &[&b, &o.kind, &o.name, &old]).await? == 1 {
                done.objects += 1;
            } else {
                left += 1;
            }
        }
        if let Some(p) = self.db.meta(PEPPER).await?
            && sealed_with(&p).map_err(RotateError::Seal)? != new
        {
            let opened = keys.open(&p, "meta:pepper").map_err(RotateError::Seal)?;
            let sealed = keys
                .seal(opened.expose().as_bytes(), "meta:pepper")
                .map_err(RotateError::Seal)?;
            let sql = "UPDATE meta SET v = $1 WHERE k = $2 AND v = $3";
            if self.db.exec(sql, &[&sealed, PEPPER, &p]).await? == 1 {
                done.pepper = true;
            } else {
                left += 1;
            }
        }
        Ok(left)
    }
}

/// Whether any secret of a channel's stored body is sealed under a key other than `new`.
fn under_other(body: &Value, new: &str) -> bool {
    let mut other = false;
    let mut b = body.clone();
    let _ = each_secret::<()>("channels", "", &mut b, |_, s| {
        other |= sealed_with(s) != Ok(new);
        Ok(())
    });
    other
}
