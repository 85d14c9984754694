//! Switchyard: an AI routing gateway. One OpenAI-compatible endpoint in front of many upstream
//! channels, failing over before the client sees a byte.
//!
//! The request path, one module per stage (see `docs/architecture.md`):
//! `server` (ingress, auth) → `protocol` (wire ↔ canonical) → `router` (plan, pure) →
//! `exec` (attempts, commit point) → `provider` (upstream calls) → `store` (request log).

pub mod admin;
pub mod auth;

pub mod cache;
pub mod clock;
pub mod config;
pub mod context;
pub mod events;
pub mod exec;
#[doc(hidden)]
pub mod fuzz;
pub mod health;
pub mod init;
pub mod mcp;
pub mod pricing;
#[cfg(test)]
mod props;
pub mod protocol;
pub mod provider;
pub mod router;
pub mod secret;
pub mod semantic;
pub mod server;
pub mod spend;
pub mod state;
pub mod store;
pub mod telemetry;
pub mod usage;
pub mod webhook;

pub mod app;
