//! Persistence: the request log (`log.rs`, SQLite, written off the hot path) and the sealing
//! of secrets kept at rest (`seal.rs`: AES-256-GCM under the master key, keyed hashes of
//! gateway keys).

mod log;
pub mod seal;

pub use log::{LogRow, RequestLog, StoreError};
