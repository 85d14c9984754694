//! The built-in mock provider: configurable text, latency, chunking and scripted faults, so that
//! demos, tests and benchmarks need no network and no upstream keys.
//!
//! The same spec drives two forms: [`MockUpstream`] answers in-process (`provider = "mock"`),
//! and [`MockServer`] is a real OpenAI-compatible HTTP server (`switchyard mock --port P`) that
//! also records what it received, for tests that must see what crossed the wire.
//!
//! `spec` says how to answer (text, timings, faults), `reply` builds the canonical answer and
//! its paced schedule, `upstream` and `server` are the two forms, `exchange` what every server
//! route shares (its state, the request as read), `cache` a provider's prompt cache, `wire` writes the server's answers in each
//! protocol it speaks, and `side` its calls beside chat (token counts, kept responses).

mod cache;
mod exchange;
mod mcp;
mod reply;
mod server;
mod side;
mod spec;
mod upstream;
mod wire;

pub use exchange::Received;
pub use server::MockServer;
pub use spec::{Fault, MockSpec, MockToolCall, Refuse};
pub use upstream::MockUpstream;
