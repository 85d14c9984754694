//! The store as the gateway opens it at start: the database migrated, the master key read (the
//! config's `[store] master_key`, else `SWITCHYARD_MASTER_KEY`), and the pepper gateway keys are
//! hashed under: made once at the store's first start, kept sealed, read back by every replica.

use serde_json::{Value, json};

use super::db::{Db, DbError};
use super::seal::{Keyring, MasterKey, Pepper, SealError, hex};
use crate::config::StoreSettings;

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Db(#[from] DbError),
    #[error("store.master_key (or SWITCHYARD_MASTER_KEY): {0}")]
    MasterKey(SealError),
    #[error("SWITCHYARD_NEW_MASTER_KEY: {0}")]
    NewMasterKey(SealError),
    #[error(
        "the store's secrets are sealed under master key {0}, which is not the one configured: configure that key (store.master_key or SWITCHYARD_MASTER_KEY)"
    )]
    WrongMasterKey(String),
    #[error("the store's pepper does not open: {0}")]
    Pepper(SealError),
}

/// The open store.
pub struct Store {
    pub db: Db,
    keys: Option<Keyring>,
    pepper: Option<Pepper>,
    /// The store version this replica could not compile, if it is behind (0: it is not).
    refused: std::sync::atomic::AtomicI64,
    /// Held from reading the store's entries to swapping the snapshot: a slower reload of an
    /// older read never lands after a newer one (the versions a replica serves only move on,
    /// unless the store itself went back).
    pub reloading: tokio::sync::Mutex<()>,
}

/// The master keys from the environment: `SWITCHYARD_MASTER_KEY` (unless the config gives
/// `store.master_key`) and, while a rotation runs, `SWITCHYARD_NEW_MASTER_KEY`.
#[derive(Default)]
pub struct MasterEnv {
    pub current: Option<String>,
    pub next: Option<String>,
}

impl MasterEnv {
    pub fn from_env() -> MasterEnv {
        MasterEnv {
            current: std::env::var("SWITCHYARD_MASTER_KEY").ok(),
            next: std::env::var("SWITCHYARD_NEW_MASTER_KEY").ok(),
        }
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("backend", &self.db.backend())
            .field("master_keys", &self.keys)
            .finish()
    }
}

/// The pepper's row, and the associated data it is sealed for.
pub(crate) const PEPPER: &str = "pepper";

impl Store {
    /// Opens and migrates the store; `env_master` is `SWITCHYARD_MASTER_KEY`, read by the caller.
    pub async fn open(s: &StoreSettings, env: MasterEnv) -> Result<Store, OpenError> {
        let db = Db::open(s.url.expose()).await?;
        let text = s
            .master_key
            .as_ref()
            .map(|k| k.expose().to_string())
            .or(env.current)
            .filter(|k| !k.trim().is_empty());
        let next = match env.next.filter(|k| !k.trim().is_empty()) {
            Some(t) => Some(MasterKey::from_base64(&t).map_err(OpenError::NewMasterKey)?),
            None => None,
        };
        let keys = match (text, next) {
            (Some(t), next) => {
                let current = MasterKey::from_base64(&t).map_err(OpenError::MasterKey)?;
                Some(match next {
                    Some(n) => Keyring::new(n, Some(current)),
                    None => Keyring::new(current, None),
                })
            }
            (None, Some(n)) => Some(Keyring::new(n, None)),
            (None, None) => None,
        };
        let pepper = match &keys {
            Some(m) => Some(pepper(&db, m).await?),
            None => {
                tracing::warn!(
                    "the store has no master key (store.master_key or SWITCHYARD_MASTER_KEY): secrets cannot be written through the admin API"
                );
                None
            }
        };
        Ok(Store {
            db,
            keys,
            pepper,
            refused: std::sync::atomic::AtomicI64::new(0),
            reloading: tokio::sync::Mutex::new(()),
        })
    }

    /// The master keys, when configured.
    pub fn keys(&self) -> Option<&Keyring> {
        self.keys.as_ref()
    }

    pub fn pepper(&self) -> Option<&Pepper> {
        self.pepper.as_ref()
    }

    /// Whether this replica serves the store's `version` (or could not compile it).
    pub fn served(&self, version: i64, ok: bool) {
        let refused = if ok { 0 } else { version.max(1) };
        self.refused
            .store(refused, std::sync::atomic::Ordering::Relaxed);
    }

    /// The store version this replica could not load: it serves an older one, which may hold
    /// revoked keys, so it is not ready until it loads one.
    pub fn behind(&self) -> Option<i64> {
        let v = self.refused.load(std::sync::atomic::Ordering::Relaxed);
        (v != 0).then_some(v)
    }

    /// For `/readyz` and the admin API: the backend and the master key's id (never the key).
    pub fn describe(&self) -> Value {
        json!({
            "backend": self.db.backend(),
            "master_key": self.keys.as_ref().map(|k| k.sealing().id()),
            "refused_version": self.behind(),
        })
    }
}

/// The store's pepper: the one already kept, or a new one kept now. Replicas starting together
/// race to insert theirs; every one reads back the winner's.
async fn pepper(db: &Db, master: &Keyring) -> Result<Pepper, OpenError> {
    if db.meta(PEPPER).await?.is_none() {
        let (_, bytes) = Pepper::generate().map_err(OpenError::Pepper)?;
        let sealed = master
            .seal(hex(&bytes).as_bytes(), "meta:pepper")
            .map_err(OpenError::Pepper)?;
        insert_meta(db, PEPPER, &sealed).await?;
    }
    let sealed = db
        .meta(PEPPER)
        .await?
        .ok_or(OpenError::Pepper(SealError::Malformed))?;
    let opened = master.open(&sealed, "meta:pepper").map_err(|e| match e {
        SealError::UnknownKey(id) => OpenError::WrongMasterKey(id),
        other => OpenError::Pepper(other),
    })?;
    let bytes = unhex(opened.expose()).ok_or(OpenError::Pepper(SealError::Malformed))?;
    Ok(Pepper::from_bytes(&bytes))
}

/// Inserts unless another replica got there first.
async fn insert_meta(db: &Db, k: &str, v: &str) -> Result<(), DbError> {
    let sql = "INSERT INTO meta (k, v) VALUES ($1, $2) ON CONFLICT (k) DO NOTHING";
    db.exec(sql, &[k, v]).await.map(|_| ())
}

pub(crate) fn unhex(s: &str) -> Option<[u8; 32]> {
    crate::secret::unhex(s)?.try_into().ok()
}
