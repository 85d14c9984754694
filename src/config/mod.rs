//! Typed configuration: the file as written (`file`), `${VAR}` interpolation, validation with
//! errors that name the field, and compilation into the immutable [`Snapshot`] that request
//! handling reads through one `ArcSwap` load.

mod compile;
mod file;
mod read;
mod settings;
mod snapshot;

pub use file::{Balance, ChannelConfig, FileConfig, KeyConfig, ModelEntry, RouterFailover};
pub use settings::{
    AffinitySettings, BreakerSettings, BudgetSettings, HealthSettings, Limits, LogSettings,
    ProbeKind, ProbeSettings, ServerSettings, StateSettings, StoreSettings,
};
pub use snapshot::{
    Channel, DEFAULT_GROUP, EmbedderSpec, FailoverDefaults, GatewayKey, Instance, ModelRoute,
    Redirect, SemanticRouter, Snapshot,
};

pub use crate::secret::Secret;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::provider::HttpClients;

/// The demo key: only ever accepted in demo mode, which only listens on loopback.
pub const DEMO_KEY: &str = "sk-switchyard-demo";

/// Everything that can be wrong with a config. Each message names the file and the field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: TOML syntax: {message}")]
    Syntax { path: String, message: String },
    #[error("{path}: {field}: {message}")]
    Field {
        path: String,
        field: String,
        message: String,
    },
}

impl ConfigError {
    pub(crate) fn field(path: &str, field: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Field {
            path: path.to_string(),
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Where the running config came from: a file (reloadable) or the embedded demo.
#[derive(Debug, Clone)]
pub enum Source {
    File(PathBuf),
    Demo,
}

/// Reads, interpolates, validates and compiles a config file.
pub fn load_file(path: &Path, clients: &HttpClients) -> Result<Snapshot, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let shown = path.display().to_string();
    let parsed = read::parse(&text, &shown, &|name| std::env::var(name).ok())?;
    compile::compile(parsed, &shown, Source::File(path.to_path_buf()), clients)
}

/// The embedded demo: two mock channels for model `demo` on tiers 1 and 2, the demo key.
pub fn demo(clients: &HttpClients) -> Result<Snapshot, ConfigError> {
    let parsed = read::parse(file::DEMO_TOML, "<demo>", &|_| None)?;
    compile::compile(parsed, "<demo>", Source::Demo, clients)
}

/// Parses and compiles config text with a caller-supplied environment (tests, `check`).
pub fn load_str(
    text: &str,
    shown: &str,
    env: &dyn Fn(&str) -> Option<String>,
    clients: &HttpClients,
) -> Result<Snapshot, ConfigError> {
    let parsed = read::parse(text, shown, env)?;
    compile::compile(parsed, shown, Source::Demo, clients)
}

/// The live config: one atomic pointer swapped whole on reload. Requests load it once and keep
/// their `Arc` to the end, so a reload never changes a request in flight.
pub struct Live {
    current: ArcSwap<Snapshot>,
    clients: HttpClients,
}

impl Live {
    pub fn new(snapshot: Snapshot, clients: HttpClients) -> Self {
        Live {
            current: ArcSwap::from_pointee(snapshot),
            clients,
        }
    }

    pub fn load(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// Re-reads the file the running config came from. On error the running config stays.
    pub fn reload(&self) -> Result<Arc<Snapshot>, ReloadError> {
        let path = match &self.current.load().source {
            Source::File(p) => p.clone(),
            Source::Demo => return Err(ReloadError::NoFile),
        };
        let next = Arc::new(load_file(&path, &self.clients)?);
        self.current.store(next.clone());
        Ok(next)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("the gateway runs on the embedded demo config; there is no file to reload")]
    NoFile,
    #[error(transparent)]
    Invalid(#[from] ConfigError),
}
