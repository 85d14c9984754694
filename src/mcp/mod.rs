//! The MCP gateway (issue 37), being built: so far the access rules a gateway key's `mcp`
//! table will compile into (`access.rs`), and the merged lists' names and cursors
//! (`names.rs`). Nothing here is reachable from a request yet.

pub mod access;
pub mod names;
