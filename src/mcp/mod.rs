//! The MCP gateway (issue 37), being built: so far the access rules a gateway key's `mcp`
//! table will compile into (`access.rs`), the merged lists' names and cursors (`names.rs`),
//! and reading one JSON-RPC message of the Streamable HTTP transport (`jsonrpc.rs`). Nothing
//! here is reachable from a request yet.

pub mod access;
pub mod jsonrpc;
pub mod names;
