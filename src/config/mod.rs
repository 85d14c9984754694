//! Typed configuration: the file as written (`file`), `${VAR}` interpolation, validation with
//! errors that name the field, and compilation into the immutable [`Snapshot`] that request
//! handling reads through one `ArcSwap` load.

pub mod auth;
mod channels;
mod compile;
pub(crate) use compile::glob_regex;
#[cfg(test)]
pub(crate) use compile::keys::made as bare_key;
pub use compile::keys::short_key;
pub mod cache;
mod file;
pub mod mcp;
mod mcp_access;
pub mod overlay;
pub mod quota;
mod read;
#[cfg(test)]
mod read_tests;
mod role;
pub mod routers;
pub mod schema;
mod settings;
mod snapshot;
pub mod sso;
pub mod teams;
pub mod telemetry;
pub mod webhooks;

pub use file::{
    Balance, ChannelConfig, FileConfig, Implicit, KeyConfig, ModelEntry, RouterFailover,
};
pub use overlay::{Origin, Overlay, View};
pub use settings::{
    Admin, AffinitySettings, BreakerSettings, BudgetSettings, ConnLimits, HealthSettings, Limits,
    LogSettings, ProbeKind, ProbeSettings, Role, ServerSettings, StateSettings, StoreSettings,
    Strategy,
};
pub use snapshot::{
    Channel, DEFAULT_GROUP, EmbedderSpec, FailoverDefaults, GatewayKey, Instance, Level,
    ModelRoute, Redirect, SemanticRouter, Snapshot,
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
    /// The embedded demo (or text given whole). With its full text, the served demo's
    /// console and store: a store write recompiles that text with the store's entries.
    Demo(Option<Arc<str>>),
}

/// Reads, interpolates, validates and compiles a config file.
pub fn load_file(path: &Path, clients: &HttpClients) -> Result<Snapshot, ConfigError> {
    load_file_with(path, &Overlay::default(), clients)
}

/// [`load_file`] with the store's entries added to the file's.
pub fn load_file_with(
    path: &Path,
    overlay: &Overlay,
    clients: &HttpClients,
) -> Result<Snapshot, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let shown = path.display().to_string();
    let env = |name: &str| std::env::var(name).ok();
    let source = Source::File(path.to_path_buf());
    build(&text, &shown, &env, overlay, source, clients)
}

/// The embedded demo: two mock channels for model `demo` on tiers 1 and 2, the demo key.
pub fn demo(clients: &HttpClients) -> Result<Snapshot, ConfigError> {
    let none = |_: &str| None;
    build(
        file::DEMO_TOML,
        "<demo>",
        &none,
        &Overlay::default(),
        Source::Demo(None),
        clients,
    )
}

/// The served demo: the embedded demo with a store at `store_url` sealed by `master_key`
/// and an admin with `admin_token`, so that the console signs in and its writes work.
pub fn demo_with_console(
    clients: &HttpClients,
    store_url: &str,
    master_key: &str,
    admin_token: &str,
) -> Result<Snapshot, ConfigError> {
    // TOML basic strings: the values are generated (a path, base64, letters), but a temp dir's
    // path may hold anything a string must escape.
    let quote = |v: &str| toml::Value::String(v.to_string()).to_string();
    let text: Arc<str> = format!(
        "{}\n[store]\nurl = {}\nmaster_key = {}\n\n[[admins]]\nname = \"demo\"\ntoken = {}\nrole = \"admin\"\n",
        file::DEMO_TOML,
        quote(store_url),
        quote(master_key),
        quote(admin_token),
    )
    .into();
    demo_text_with(text, &Overlay::default(), clients)
}

fn demo_text_with(
    text: Arc<str>,
    overlay: &Overlay,
    clients: &HttpClients,
) -> Result<Snapshot, ConfigError> {
    let none = |_: &str| None;
    let source = Source::Demo(Some(text.clone()));
    build(&text, "<demo>", &none, overlay, source, clients)
}

/// Parses and compiles config text with a caller-supplied environment (tests, `check`).
pub fn load_str(
    text: &str,
    shown: &str,
    env: &dyn Fn(&str) -> Option<String>,
    clients: &HttpClients,
) -> Result<Snapshot, ConfigError> {
    build(
        text,
        shown,
        env,
        &Overlay::default(),
        Source::Demo(None),
        clients,
    )
}

fn build(
    text: &str,
    shown: &str,
    env: &dyn Fn(&str) -> Option<String>,
    overlay: &Overlay,
    source: Source,
    clients: &HttpClients,
) -> Result<Snapshot, ConfigError> {
    let raw = read::raw(text, shown, env)?;
    let view = overlay::merge(raw.value, overlay, shown)?;
    let parsed = read::typed(view.raw.clone(), shown, &raw.secrets)?;
    compile::compile(parsed, shown, source, clients, view, overlay.pepper.clone())
}

/// The live config: one atomic pointer swapped whole on reload. Requests load it once and keep
/// their `Arc` to the end, so a reload never changes a request in flight. The store's entries
/// of the last reload are kept, so a file reload (SIGHUP) keeps them.
pub struct Live {
    current: ArcSwap<Snapshot>,
    overlay: ArcSwap<Overlay>,
    clients: HttpClients,
    /// One compile-and-swap at a time (a store reload also holds the store's `reloading` from
    /// its read on).
    reloading: std::sync::Mutex<()>,
}

impl Live {
    pub fn new(snapshot: Snapshot, clients: HttpClients) -> Self {
        Live {
            current: ArcSwap::from_pointee(snapshot),
            overlay: ArcSwap::from_pointee(Overlay::default()),
            clients,
            reloading: std::sync::Mutex::new(()),
        }
    }

    pub fn load(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// The store version the running config holds.
    pub fn store_version(&self) -> i64 {
        self.overlay.load().version
    }

    /// The running config's source compiled again with `overlay`: the file read again, or
    /// the served demo's text.
    fn rebuild(&self, overlay: &Overlay) -> Result<Snapshot, ReloadError> {
        match &self.current.load().source {
            Source::File(p) => Ok(load_file_with(p, overlay, &self.clients)?),
            Source::Demo(Some(text)) => Ok(demo_text_with(text.clone(), overlay, &self.clients)?),
            Source::Demo(None) => Err(ReloadError::NoFile),
        }
    }

    /// Whether the file with these store entries compiles (what an admin write is checked by).
    pub fn check(&self, overlay: &Overlay) -> Result<(), ReloadError> {
        self.rebuild(overlay)?;
        Ok(())
    }

    /// Re-reads the file with the store's entries at a new version (blocking: a file read and
    /// a compile). On error the running config, and its entries, stay.
    pub fn reload_with(&self, overlay: Option<Overlay>) -> Result<Arc<Snapshot>, ReloadError> {
        let _one = self
            .reloading
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // The store is the truth, even at a lower version (a store restored from a backup).
        let overlay = match overlay {
            Some(o) => Arc::new(o),
            None => self.overlay.load_full(),
        };
        let next = Arc::new(self.rebuild(&overlay)?);
        self.current.store(next.clone());
        self.overlay.store(overlay);
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
