//! The MCP gateway's config: `[mcp]` (how the merged lists are named and paged, how long a
//! session lives), `[[mcp_servers]]` (the servers behind `/mcp`) and a key's `mcp = { servers,
//! tools }`, as written and compiled. Each server's replicas are health keys of their own
//! (`mcp:<server>#<i>`), with a circuit like a channel's, closed again by `ping` probes.

use std::collections::{BTreeMap, HashSet};
use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::channels::{CircuitBreakerConfig, nz64, nzusize};
use super::settings::{BreakerSettings, ProbeKind, ProbeSettings};
pub use crate::config::mcp_access::Access;
use crate::secret::Secret;

type FieldError = (String, String);

/// `[mcp]`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct McpSection {
    /// Between a server's name and its item's in the merged lists: `github__create_issue`.
    pub separator: String,
    /// A session unused this long is forgotten (the client starts a new one on 404).
    pub session_ttl_seconds: NonZeroU64,
    /// Items per page of a merged list.
    pub page_size: NonZeroUsize,
    /// A client's message larger than this is refused.
    pub max_message_bytes: NonZeroUsize,
}

impl Default for McpSection {
    fn default() -> Self {
        McpSection {
            separator: "__".into(),
            session_ttl_seconds: nz64(3600),
            page_size: nzusize(100),
            max_message_bytes: nzusize(4 << 20),
        }
    }
}

/// How the gateway speaks to a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    /// MCP's Streamable HTTP (2025-03-26 and later).
    #[default]
    StreamableHttp,
    /// The older HTTP+SSE transport (2024-11-05): a GET stream, messages POSTed beside it.
    Sse,
    /// A process the gateway runs, speaking on its standard input and output.
    Stdio,
}

/// `[[mcp_servers]]`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    pub name: String,
    /// The server's endpoint; or `urls`, replicas of the same server.
    pub url: Option<String>,
    #[serde(default)]
    pub urls: Vec<String>,
    /// `streamable_http` (the default) or `sse` for a URL; a `command` is always stdio.
    pub transport: Option<Transport>,
    /// A stdio server: the program the gateway runs (and runs again when it exits).
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    /// The stdio server's environment (secrets: never echoed or logged).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// A stdio server's processes, each a replica (default 1).
    pub pool: Option<std::num::NonZeroU32>,
    /// Sent with every call (secrets: never echoed or logged).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Sent as `Authorization: Bearer`.
    pub bearer: Option<String>,
    /// The longest one call may take (default 60 s).
    pub timeout_ms: Option<NonZeroU32>,
    /// Admins scoped to groups see only their servers.
    #[serde(default)]
    pub groups: Vec<String>,
    /// A server's lists are kept this long (and refreshed when it says they changed).
    pub list_ttl_seconds: Option<NonZeroU32>,
    #[serde(default)]
    pub circuit_breaker: CircuitBreakerConfig,
}

/// A key's `mcp = { servers = [...], tools = [...] }`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KeyMcpConfig {
    #[serde(default)]
    pub servers: Vec<String>,
    #[serde(default)]
    pub tools: Vec<String>,
}

/// One server, ready to call.
#[derive(Debug)]
pub struct McpServer {
    pub name: Arc<str>,
    pub transport: Transport,
    /// For `stdio`: what to run.
    pub stdio: Option<StdioCommand>,
    pub replicas: Vec<Replica>,
    /// `headers` and `bearer` as sent, made once: values marked sensitive (never shown by
    /// `Debug`, kept out of HPACK tables).
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
    pub timeout: Duration,
    pub groups: Vec<Arc<str>>,
    pub list_ttl: Duration,
    pub breaker: BreakerSettings,
}

/// A stdio server's program, arguments and environment.
#[derive(Debug)]
pub struct StdioCommand {
    pub command: String,
    pub args: Vec<String>,
    pub env: Vec<(String, Secret)>,
}

/// One replica of a server: its endpoint (`stdio://<server>/<i>` for a stdio server's process)
/// and its health key's name.
#[derive(Debug)]
pub struct Replica {
    pub url: reqwest::Url,
    /// `mcp:<server>#<i>`: the name health keeps its circuit under.
    pub health: Arc<str>,
}

/// `[mcp]` and `[[mcp_servers]]`, compiled.
#[derive(Debug)]
pub struct McpSettings {
    pub separator: Arc<str>,
    pub session_ttl: Duration,
    pub page_size: usize,
    pub max_message_bytes: usize,
    pub servers: Vec<McpServer>,
}

impl McpSettings {
    pub fn server(&self, name: &str) -> Option<&McpServer> {
        self.servers.iter().find(|s| &*s.name == name)
    }
}

pub fn compile(section: &McpSection, list: &[McpServerConfig]) -> Result<McpSettings, FieldError> {
    if section.separator.is_empty() {
        return Err(("mcp.separator".into(), "must not be empty".into()));
    }
    let mut names = HashSet::new();
    let mut servers = Vec::with_capacity(list.len());
    for (i, s) in list.iter().enumerate() {
        let at = |f: &str| format!("mcp_servers[{i}].{f}");
        if s.name.is_empty() || s.name.chars().any(|c| c.is_whitespace() || c == '#') {
            return Err((at("name"), "a name without spaces or '#'".into()));
        }
        if !names.insert(s.name.as_str()) {
            return Err((at("name"), format!("duplicate server name {:?}", s.name)));
        }
        servers.push(server(s, &at)?);
    }
    Ok(McpSettings {
        separator: section.separator.as_str().into(),
        session_ttl: Duration::from_secs(section.session_ttl_seconds.get()),
        page_size: section.page_size.get(),
        max_message_bytes: section.max_message_bytes.get(),
        servers,
    })
}

fn server(s: &McpServerConfig, at: &dyn Fn(&str) -> String) -> Result<McpServer, FieldError> {
    if let Some(command) = &s.command {
        return stdio(s, command, at);
    }
    if s.transport == Some(Transport::Stdio) {
        return Err((at("command"), "a stdio server needs command".into()));
    }
    if s.pool.is_some() {
        return Err((
            at("pool"),
            "only a stdio server (command) has a pool".into(),
        ));
    }
    let urls: Vec<(String, &String)> = match (&s.url, s.urls.is_empty()) {
        (Some(u), true) => vec![(at("url"), u)],
        (None, false) => s
            .urls
            .iter()
            .enumerate()
            .map(|(j, u)| (at(&format!("urls[{j}]")), u))
            .collect(),
        _ => {
            return Err((
                at("url"),
                "give url, or urls for replicas (not both)".into(),
            ));
        }
    };
    let mut replicas = Vec::with_capacity(urls.len());
    for (j, (field, u)) in urls.into_iter().enumerate() {
        let url = reqwest::Url::parse(u).map_err(|e| (field.clone(), e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err((field, "expected an http:// or https:// URL".into()));
        }
        replicas.push(Replica {
            url,
            health: format!("mcp:{}#{j}", s.name).into(),
        });
    }
    let mut server = common(s, at)?;
    server.transport = s.transport.unwrap_or_default();
    server.replicas = replicas;
    Ok(server)
}

/// A stdio server: `pool` processes of `command`, each a replica.
fn stdio(
    s: &McpServerConfig,
    command: &str,
    at: &dyn Fn(&str) -> String,
) -> Result<McpServer, FieldError> {
    if s.url.is_some() || !s.urls.is_empty() {
        return Err((at("command"), "give command or url, not both".into()));
    }
    if !matches!(s.transport, None | Some(Transport::Stdio)) {
        return Err((at("transport"), "a command is a stdio server".into()));
    }
    if command.is_empty() {
        return Err((at("command"), "must not be empty".into()));
    }
    let mut server = common(s, at)?;
    server.transport = Transport::Stdio;
    server.stdio = Some(StdioCommand {
        command: command.to_string(),
        args: s.args.clone(),
        env: s
            .env
            .iter()
            .map(|(k, v)| (k.clone(), Secret::new(v.as_str())))
            .collect(),
    });
    let pool = s.pool.map_or(1, |p| p.get());
    for i in 0..pool {
        let url = reqwest::Url::parse(&format!("stdio://{}/{i}", s.name))
            .map_err(|e| (at("name"), e.to_string()))?;
        server.replicas.push(Replica {
            url,
            health: format!("mcp:{}#{i}", s.name).into(),
        });
    }
    Ok(server)
}

/// A header value that carries a secret.
fn sensitive(value: &str, field: &str) -> Result<http::HeaderValue, FieldError> {
    let mut v = http::HeaderValue::from_str(value)
        .map_err(|_| (field.to_string(), "not a header value".into()))?;
    v.set_sensitive(true);
    Ok(v)
}

/// A server's headers and bearer token, as every call to it is sent.
pub type Headers = [(http::HeaderName, http::HeaderValue)];

/// `req` with a server's `headers`: the one place they are added.
pub fn authorize(headers: &Headers, mut req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    for (name, value) in headers {
        req = req.header(name.clone(), value.clone());
    }
    req
}

impl McpServer {
    pub fn authorize(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        authorize(&self.headers, req)
    }
}

/// What every kind of server has: its headers, timeout, groups, list TTL and breaker.
fn common(s: &McpServerConfig, at: &dyn Fn(&str) -> String) -> Result<McpServer, FieldError> {
    if let Some(j) = s.groups.iter().position(|g| g.is_empty()) {
        return Err((at(&format!("groups[{j}]")), "must not be empty".into()));
    }
    let mut headers = Vec::new();
    for (name, value) in &s.headers {
        // Letters, digits and '-' in a name, printable ASCII in a value: what every proxy
        // between here and the server passes unchanged.
        let plain_name =
            !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        let h = http::HeaderName::from_bytes(name.as_bytes())
            .ok()
            .filter(|_| plain_name)
            .ok_or_else(|| (at("headers"), format!("{name:?} is not a header name")))?;
        if !value.bytes().all(|b| (b' '..=b'~').contains(&b)) {
            return Err((
                at("headers"),
                format!("the value of {name} is not printable ASCII"),
            ));
        }
        headers.push((h, sensitive(value, &at("headers"))?));
    }
    if let Some(b) = &s.bearer {
        if b.is_empty() || !b.bytes().all(|c| (b'!'..=b'~').contains(&c)) {
            return Err((at("bearer"), "printable ASCII without spaces".into()));
        }
        headers.push((
            http::header::AUTHORIZATION,
            sensitive(&format!("Bearer {b}"), &at("bearer"))?,
        ));
    }
    let mut breaker = s.circuit_breaker.settings();
    // A server's open circuit is closed by pings, never by a client's call.
    let p = breaker.probe.get_or_insert(ProbeSettings {
        kind: ProbeKind::Models,
        interval: Duration::from_secs(5),
        success_threshold: 1,
        unhealthy_below: 50.0,
    });
    p.kind = ProbeKind::Models;
    Ok(McpServer {
        name: s.name.as_str().into(),
        transport: Transport::StreamableHttp,
        stdio: None,
        replicas: Vec::new(),
        headers,
        timeout: Duration::from_millis(s.timeout_ms.map_or(60_000, |t| u64::from(t.get()))),
        groups: s.groups.iter().map(|g| g.as_str().into()).collect(),
        list_ttl: Duration::from_secs(s.list_ttl_seconds.map_or(300, |t| u64::from(t.get()))),
        breaker,
    })
}

/// A key's `mcp`, compiled; a server named without a glob must exist.
pub fn access(
    written: Option<&KeyMcpConfig>,
    settings: &McpSettings,
    field: &str,
) -> Result<Access, FieldError> {
    let Some(m) = written else {
        return Ok(Access::default());
    };
    for (j, s) in m.servers.iter().enumerate() {
        let name = s.strip_prefix('!').unwrap_or(s);
        if !name.contains(['*', '?']) && settings.server(name).is_none() {
            return Err((
                format!("{field}.servers[{j}]"),
                format!("no [[mcp_servers]] entry is named {name:?}"),
            ));
        }
    }
    Access::compile(&m.servers, &m.tools, field)
}
