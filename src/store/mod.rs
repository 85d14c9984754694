//! Persistence: the request log (`log/`, written off the hot path to its own SQLite file, or to
//! the store's PostgreSQL, and pruned past the store's retention), the store's
//! database (`db.rs`: SQLite or PostgreSQL, migrated at start-up; `open.rs`: with its master
//! key and pepper, as the gateway opens it) and the sealing of secrets
//! kept at rest (`seal.rs`: AES-256-GCM under the master key, keyed hashes of gateway keys).

pub mod db;
pub mod events;
mod log;
pub mod objects;
mod open;
pub mod overlay;
mod rotate;
pub mod seal;

pub use db::{Db, DbError, MigrationState};
pub use log::{
    Charge, Cursor, GroupBy, LogQuery, LogRow, PRUNE_EVERY, RequestLog, Sample, StoreError, Window,
    ledger,
};
pub use open::{MasterEnv, OpenError, Store};
pub use overlay::OverlayError;
pub use rotate::{RotateError, Rotated};
