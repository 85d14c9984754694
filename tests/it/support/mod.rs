//! Shared test helpers, one room per kind; every test builds on these through
//! `use crate::support::*;`.
//!
//! - [`gateway`]: the gateway under test, its config snippets, request and response helpers;
//! - [`mock`]: upstreams for it to call (the mock server, canned and refusing upstreams);
//! - [`shared`]: counters replicas share, in Redis or in PostgreSQL;
//! - [`sse`]: reading streamed answers;
//! - [`logs`]: the gateway's own log lines, captured for one test;
//! - [`redis`]: replicas sharing state through the test Redis;
//! - [`postgres`]: a fresh PostgreSQL database per test;
//! - [`minilm`]: the local embedder's weights;
//! - [`binary`]: the binary started as a user runs it;
//! - [`clouds`]: the clouds' mocks (Bedrock, Vertex), Python, checking signatures and tokens;
//! - [`mcp`]: FastMCP servers and the official MCP SDK's client, in Python;
//! - [`collectors`]: a real Prometheus and a real OTLP receiver (Phoenix), queried over HTTP;
//! - [`control`]: stores on both backends, replicas on one store, admin calls;
//! - [`receiver`]: a webhook receiver that keeps what it got and answers from a script;
//! - [`scenario`]: failover scenarios as table rows (channels, requests, expected attempts);
//! - [`wait`]: waiting on a condition with a deadline, the one way tests wait.

mod binary;
mod clouds;
mod collectors;
mod control;
mod gateway;
mod logs;
mod mcp;
mod minilm;
mod mock;
mod netns;
mod postgres;
mod receiver;
mod redis;
mod scenario;
mod shared;
mod sse;
mod wait;

pub use self::binary::*;
pub use self::clouds::*;
pub use self::collectors::*;
pub use self::control::*;
pub use self::gateway::*;
pub use self::logs::*;
pub use self::mcp::*;
pub use self::minilm::*;
pub use self::mock::*;
pub use self::netns::*;
pub use self::postgres::*;
pub use self::receiver::*;
pub use self::redis::*;
pub use self::scenario::*;
pub use self::shared::*;
pub use self::sse::*;
pub use self::wait::*;
