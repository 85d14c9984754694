//! The MCP side's parts: FastMCP servers (`tests/mcp/servers.py`) and the official MCP Python
//! SDK's client (`tests/mcp/client.py`), run by the Python of `SWITCHYARD_MCP_PY` (with
//! `tests/mcp/requirements.txt`). Without that Python a test says so and passes, except
//! under `CI`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use serde_json::Value;

use super::binary::Proc;

/// The Python with the MCP SDK, if there is one.
pub fn mcp_python() -> Option<String> {
    super::clouds::python_with(
        "SWITCHYARD_MCP_PY",
        "mcp.server.fastmcp, uvicorn",
        "tests/mcp/requirements.txt",
    )
}

fn script(name: &str) -> String {
    format!("{}/tests/mcp/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// A FastMCP server on 127.0.0.1, killed when dropped.
pub struct McpServer {
    pub url: String,
    pub port: u16,
    proc: Option<Proc>,
}

impl McpServer {
    /// `servers.py --name <name>` with `args`.
    pub async fn start(py: &str, name: &str, args: &[&str]) -> McpServer {
        let mut child = Command::new(py)
            .arg(script("servers.py"))
            .args(["--name", name])
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("the MCP server runs");
        let stdout = child.stdout.take().expect("stdout");
        let proc = Proc(child);
        let read = tokio::task::spawn_blocking(move || {
            let line = BufReader::new(stdout).lines().next()?.ok()?;
            line.strip_prefix("PORT ")?.trim().parse::<u16>().ok()
        });
        let port = tokio::time::timeout(std::time::Duration::from_secs(30), read)
            .await
            .expect("the MCP server starts within 30 s")
            .expect("its output")
            .expect("it prints its port");
        let path = if args.contains(&"sse") { "sse" } else { "mcp" };
        let url = format!("http://127.0.0.1:{port}/{path}");
        // It answers once uvicorn has started: wait for its socket to serve.
        super::wait::until(
            "the MCP server serves",
            std::time::Duration::from_secs(20),
            async || super::gateway::client().get(&url).send().await.is_ok(),
        )
        .await;
        McpServer {
            url,
            port,
            proc: Some(proc),
        }
    }

    /// Kills it (a replica dying).
    pub fn kill(&mut self) {
        self.proc.take();
    }
}

/// Runs `client.py <url> <key> <scenario>` and reads what it saw.
pub async fn mcp_client(py: &str, url: &str, key: &str, scenario: &str) -> Value {
    let (py, url, key, sc) = (
        py.to_string(),
        url.to_string(),
        key.to_string(),
        scenario.to_string(),
    );
    let out = tokio::task::spawn_blocking(move || {
        Command::new(py)
            .arg(script("client.py"))
            .args([&url, &key, &sc])
            .output()
            .expect("the MCP client runs")
    })
    .await
    .expect("joined");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "client.py {scenario} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// A session on `/mcp` driven by hand: one JSON-RPC request per POST, answers read as JSON.
pub struct RawSession {
    http: reqwest::Client,
    pub url: String,
    pub key: String,
    pub id: String,
    /// What the client says it reads (`application/json` alone: answers come whole).
    pub accept: &'static str,
    /// Sent with each call when set: the client's trace.
    pub traceparent: Option<String>,
    next: i64,
}

impl RawSession {
    /// The first request id of [`on`](Self::on)'s copy.
    pub const FIRST_OF_ANOTHER: i64 = 1001;

    /// The same session, driven from `url` (another replica), its ids apart from this one's.
    pub fn on(&self, url: &str) -> RawSession {
        RawSession {
            http: self.http.clone(),
            url: url.into(),
            key: self.key.clone(),
            id: self.id.clone(),
            accept: self.accept,
            traceparent: self.traceparent.clone(),
            next: Self::FIRST_OF_ANOTHER - 1,
        }
    }

    /// A session with an MCP server itself (no key), as a client of it would open one.
    pub async fn open_direct(url: &str) -> RawSession {
        RawSession::open(url, "").await
    }

    pub async fn open(url: &str, key: &str) -> RawSession {
        let http = super::gateway::client();
        let init = serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}});
        let r = http
            .post(url)
            .header("accept", "application/json, text/event-stream")
            .json(&init);
        let r = if key.is_empty() {
            r
        } else {
            r.bearer_auth(key)
        };
        let r = r.send().await.expect("initialize");
        assert_eq!(r.status(), 200);
        let id = r.headers()["mcp-session-id"]
            .to_str()
            .expect("ascii")
            .to_string();
        let s = RawSession {
            http,
            url: url.into(),
            key: key.into(),
            id,
            accept: "application/json, text/event-stream",
            traceparent: None,
            next: 1,
        };
        let note = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        s.post(&note).await;
        s
    }

    pub async fn post(&self, body: &Value) -> reqwest::Response {
        let r = self
            .http
            .post(&self.url)
            .header("accept", self.accept)
            .header("mcp-session-id", &self.id)
            .json(body);
        let r = match &self.traceparent {
            Some(t) => r.header("traceparent", t),
            None => r,
        };
        let r = if self.key.is_empty() {
            r
        } else {
            r.bearer_auth(&self.key)
        };
        r.send().await.expect("the endpoint answers")
    }

    /// Every message that answered one request (an event stream's, or the one JSON answer).
    pub async fn call_all(&mut self, method: &str, params: Value) -> Vec<Value> {
        self.next += 1;
        let body = serde_json::json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params});
        let text = self.post(&body).await.text().await.expect("a body");
        if text.trim_start().starts_with('{') {
            return vec![serde_json::from_str(&text).expect("JSON")];
        }
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str(d.trim()).ok())
            .collect()
    }

    /// The answer to one request (read out of an event stream when one comes).
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let body = serde_json::json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params});
        let r = self.post(&body).await;
        assert!(r.status().as_u16() < 500, "{}", r.status());
        let text = r.text().await.expect("a body");
        // An event stream's messages are its `data:` lines; the answer is the one with our id.
        let messages: Vec<Value> = if text.trim_start().starts_with('{') {
            vec![serde_json::from_str(&text).expect("JSON")]
        } else {
            text.lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .filter_map(|d| serde_json::from_str(d.trim()).ok())
                .collect()
        };
        messages
            .into_iter()
            .find(|m| m["id"] == self.next)
            .unwrap_or_else(|| panic!("no answer to {method} in {text}"))
    }

    /// A tool's text, or its error object.
    pub async fn tool(&mut self, name: &str, arguments: Value) -> Result<String, Value> {
        let v = self
            .call(
                "tools/call",
                serde_json::json!({"name": name, "arguments": arguments}),
            )
            .await;
        match v.get("error") {
            Some(e) => Err(e.clone()),
            None => Ok(v["result"]["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_string()),
        }
    }
}
