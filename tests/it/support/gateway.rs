//! The gateway under test: started from a TOML config on 127.0.0.1:0 with its request log in a
//! temp dir, the channel snippets its configs are made of, and the request and response helpers
//! every test drives it with.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard::clock::ManualClock;
use switchyard::config;
use switchyard::provider::mock::{MockServer, MockSpec};
use switchyard::provider::{HttpClients, install_crypto_provider};
use switchyard::server::Running;

use super::mock::mock;
use super::wait::until;

/// The gateway key every test config declares.
pub const KEY: &str = "sk-test-gateway-key";
/// The upstream key every test channel uses; must never reach a client or a log.
pub const UPSTREAM_KEY: &str = "sk-upstream-secret-key";
pub const ADMIN: &str = "admin-token-0123456789";

pub struct Gateway {
    pub running: Running,
    /// The clock channel health reads: tests move it to end windows and cooldowns.
    pub clock: std::sync::Arc<ManualClock>,
    /// One pooled client per gateway (building one per request costs milliseconds).
    http: reqwest::Client,
    pub url: String,
    pub config_path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Gateway {
    pub fn chat_url(&self) -> String {
        format!("{}/v1/chat/completions", self.url)
    }

    pub async fn chat(&self, body: Value) -> reqwest::Response {
        self.http
            .post(self.chat_url())
            .bearer_auth(KEY)
            .json(&body)
            .send()
            .await
            .expect("gateway reachable")
    }

    /// `POST {path}` with a JSON body as the given gateway key (and extra headers).
    pub async fn post_as(
        &self,
        path: &str,
        key: &str,
        headers: &[(&str, &str)],
        body: Value,
    ) -> reqwest::Response {
        let mut rb = self
            .http
            .post(format!("{}{path}", self.url))
            .bearer_auth(key)
            .json(&body);
        for (k, v) in headers {
            rb = rb.header(*k, *v);
        }
        rb.send().await.expect("gateway reachable")
    }

    /// Rewrites the config file (the same header as at start) with new channels.
    pub fn rewrite(&self, channels: &str) {
        let dir = self.config_path.parent().expect("config dir");
        std::fs::write(&self.config_path, config_text(dir, ("", ""), "", channels))
            .expect("write config");
    }

    /// `POST /admin/reload` with the admin token.
    pub async fn reload(&self) -> reqwest::Response {
        client()
            .post(format!("{}/admin/reload", self.url))
            .bearer_auth(ADMIN)
            .send()
            .await
            .expect("admin reachable")
    }

    /// Waits until every request-log row queued so far is written.
    pub async fn flush_log(&self) {
        self.running.state.log.flush().await;
    }

    pub async fn admin_health(&self) -> Vec<Value> {
        self.admin_list("/admin/health").await
    }

    pub async fn admin_requests(&self) -> Vec<Value> {
        self.flush_log().await;
        self.admin_list("/admin/requests?limit=100").await
    }

    /// `data` of an admin list, read with the admin token.
    async fn admin_list(&self, path: &str) -> Vec<Value> {
        let v = get_json(&format!("{}{path}", self.url), Some(ADMIN)).await;
        v["data"].as_array().cloned().unwrap_or_default()
    }
}

/// `GET {url}/metrics` as text (no token).
pub async fn metrics_text(url: &str) -> String {
    client()
        .get(format!("{url}/metrics"))
        .send()
        .await
        .expect("gateway reachable")
        .text()
        .await
        .expect("metrics text")
}

pub fn client() -> reqwest::Client {
    install_crypto_provider();
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("test client")
}

fn config_text(
    dir: &std::path::Path,
    (server_extra, log_extra): (&str, &str),
    key_extra: &str,
    channels: &str,
) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_token = \"{ADMIN}\"\n{server_extra}\n\
         [log]\nsqlite_path = \"{}\"\n{log_extra}\n\n\
         [[keys]]\nname = \"team-a\"\nkey = \"{KEY}\"\n{key_extra}\n\n{channels}",
        dir.join("log.db").display()
    )
}

/// Starts a gateway with `[server]` extras (e.g. `request_timeout_ms = 500`) and channels.
pub async fn gateway_with(server_extra: &str, channels: &str) -> Gateway {
    gateway_full(server_extra, "", channels).await
}

/// As [`gateway_with`], with `key_extra` lines added to the test key's table (`groups = [...]`,
/// `failover_defaults = {...}`); they may go on with more top-level tables (`[[keys]]`,
/// `[[redirects]]`).
pub async fn gateway_full(server_extra: &str, key_extra: &str, channels: &str) -> Gateway {
    gateway_logged(("", server_extra), key_extra, channels).await
}

/// As [`gateway_full`], with `[log]` extras too (`mcp_bodies = true`): `(log, server)`.
pub async fn gateway_logged(
    (log_extra, server_extra): (&str, &str),
    key_extra: &str,
    channels: &str,
) -> Gateway {
    install_crypto_provider();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("switchyard.toml");
    std::fs::write(
        &path,
        config_text(dir.path(), (server_extra, log_extra), key_extra, channels),
    )
    .expect("write config");
    let clients = HttpClients::default();
    let snap = config::load_file(&path, &clients).expect("test config is valid");
    let clock = ManualClock::new();
    let running = switchyard::app::start_with_clock(snap, clients, None, clock.clone())
        .await
        .expect("gateway starts");
    let url = format!("http://{}", running.addr);
    Gateway {
        running,
        clock,
        http: client(),
        url,
        config_path: path,
        _dir: dir,
    }
}

pub async fn gateway(channels: &str) -> Gateway {
    gateway_with("", channels).await
}

/// Two mock upstreams as tier 1 (`first`, with `first_extra` channel settings) and tier 2
/// (`second`) of a gateway: the shape of most failover tests.
pub async fn two_tiers(
    first: (&str, MockSpec, &str),
    second: (&str, MockSpec),
) -> (MockServer, MockServer, Gateway) {
    let a = mock(first.1).await;
    let b = mock(second.1).await;
    let gw = gateway(&format!(
        "{}{}",
        openai_channel(first.0, &a.base_url(), 1, first.2),
        openai_channel(second.0, &b.base_url(), 2, "")
    ))
    .await;
    (a, b, gw)
}

/// An `openai` channel in front of a mock server, serving model `m`.
pub fn openai_channel(name: &str, base_url: &str, priority: u32, extra: &str) -> String {
    format!(
        "[[channels]]\nname = \"{name}\"\nprovider = \"openai\"\nbase_url = \"{base_url}\"\n\
         api_keys = [\"{UPSTREAM_KEY}\"]\nmodels = [\"m\", \"e\"]\npriority = {priority}\n{extra}\n\n"
    )
}

/// An `openai` channel in front of a mock server, serving the given models.
pub fn models_channel(name: &str, base_url: &str, models: &[&str], extra: &str) -> String {
    let list: Vec<String> = models.iter().map(|m| format!("\"{m}\"")).collect();
    format!(
        "[[channels]]\nname = \"{name}\"\nprovider = \"openai\"\nbase_url = \"{base_url}\"\n\
         api_keys = [\"{UPSTREAM_KEY}\"]\nmodels = [{}]\n{extra}\n\n",
        list.join(", ")
    )
}

/// The status of a plain chat request to the gateway at `url` with `key` (0: no answer).
pub async fn chat_status(url: &str, key: &str) -> u16 {
    client()
        .post(format!("{url}/v1/chat/completions"))
        .bearer_auth(key)
        .json(&chat_body(false))
        .send()
        .await
        .map_or(0, |r| r.status().as_u16())
}

pub fn chat_body(stream: bool) -> Value {
    json!({"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
}

pub fn header<'a>(resp: &'a reqwest::Response, name: &str) -> &'a str {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// The `reason` of each attempt in a failover report's attempt list.
pub fn reasons(attempts: &Value) -> Vec<String> {
    attempts
        .as_array()
        .map(|a| {
            a.iter()
                .map(|x| x["reason"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Asserts the OpenAI error envelope and returns `error`.
pub async fn error_envelope(resp: reqwest::Response, status: u16) -> Value {
    assert_eq!(resp.status().as_u16(), status);
    let v: Value = resp.json().await.expect("error body is JSON");
    let e = v["error"].clone();
    assert!(e["message"].is_string(), "{v}");
    assert!(e["type"].is_string(), "{v}");
    assert!(e["code"].is_string(), "{v}");
    assert!(e.get("param").is_some(), "{v}");
    e
}

/// `GET url` (with a bearer token, if given) as JSON.
pub async fn get_json(url: &str, token: Option<&str>) -> Value {
    let mut rb = client().get(url);
    if let Some(t) = token {
        rb = rb.bearer_auth(t);
    }
    rb.send()
        .await
        .expect("reachable")
        .json()
        .await
        .expect("JSON body")
}

/// Waits until the gateway at `base` shows `channel`'s circuit in `state` (`open`, `closed`) in
/// `/admin/health`, failing the test past `within`; returns how long it took, for tests that
/// bound how soon a change shows (a replica honouring another's circuit opening).
pub async fn wait_circuit(base: &str, channel: &str, state: &str, within: Duration) -> Duration {
    let t0 = Instant::now();
    let url = format!("{base}/admin/health");
    until(
        &format!("{channel}'s circuit {state}"),
        within,
        async || {
            let v = get_json(&url, Some(ADMIN)).await;
            let shown = v["data"].as_array().is_some_and(|rows| {
                rows.iter()
                    .any(|r| r["channel"] == channel && r["circuit"] == state)
            });
            if shown { Ok(()) } else { Err(v) }
        },
    )
    .await;
    t0.elapsed()
}

/// A chat request in session `id`: (status, serving channel, `x-switchyard-affinity`).
pub async fn session_turn(gw: &Gateway, id: &str) -> (u16, String, String) {
    let resp = gw
        .post_as(
            "/v1/chat/completions",
            KEY,
            &[("x-session-id", id)],
            chat_body(false),
        )
        .await;
    let out = (
        resp.status().as_u16(),
        header(&resp, "x-switchyard-channel").to_string(),
        header(&resp, "x-switchyard-affinity").to_string(),
    );
    let _ = resp.bytes().await;
    out
}
