//! Shared test helpers: a gateway started from a TOML config on 127.0.0.1:0 with its request log
//! in a temp dir, standalone mock upstreams, and request helpers. Every test builds on these.

use std::path::PathBuf;

use serde_json::{Value, json};
use switchyard::clock::ManualClock;
use switchyard::config;
use switchyard::provider::mock::{Fault, MockServer, MockSpec};
use switchyard::provider::{HttpClients, install_crypto_provider};
use switchyard::server::Running;

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
        std::fs::write(&self.config_path, config_text(dir, "", "", channels))
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
        let v: Value = client()
            .get(format!("{}/admin/health", self.url))
            .bearer_auth(ADMIN)
            .send()
            .await
            .expect("admin reachable")
            .json()
            .await
            .expect("json");
        v["data"].as_array().cloned().unwrap_or_default()
    }

    pub async fn admin_requests(&self) -> Vec<Value> {
        self.flush_log().await;
        let v: Value = client()
            .get(format!("{}/admin/requests?limit=100", self.url))
            .bearer_auth(ADMIN)
            .send()
            .await
            .expect("admin reachable")
            .json()
            .await
            .expect("json");
        v["data"].as_array().cloned().unwrap_or_default()
    }
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
    server_extra: &str,
    key_extra: &str,
    channels: &str,
) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_token = \"{ADMIN}\"\n{server_extra}\n\
         [log]\nsqlite_path = \"{}\"\n\n\
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
    install_crypto_provider();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("switchyard.toml");
    std::fs::write(
        &path,
        config_text(dir.path(), server_extra, key_extra, channels),
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

pub async fn mock(spec: MockSpec) -> MockServer {
    MockServer::start(spec).await.expect("mock starts")
}

pub fn text_spec(text: &str) -> MockSpec {
    MockSpec {
        text: text.into(),
        chunks: 3,
        ..MockSpec::default()
    }
}

pub fn faulty(text: &str, fault: Fault) -> MockSpec {
    MockSpec {
        fault: Some(fault),
        ..text_spec(text)
    }
}

pub fn status(code: u16) -> Fault {
    Fault {
        status: Some(code),
        ..Fault::default()
    }
}

/// An upstream of any protocol that answers every POST with fixed bytes, as a real provider
/// would send them: `stream` (SSE) when asked for a stream (`"stream": true`, or Gemini's
/// `:streamGenerateContent`), `body` otherwise.
pub async fn canned_upstream(stream: &'static str, body: Value) -> std::net::SocketAddr {
    use axum::{Json, Router, extract::State, http::Uri, http::header, response::IntoResponse};
    async fn answer(
        State((stream, body)): State<(&'static str, Value)>,
        uri: Uri,
        Json(req): Json<Value>,
    ) -> axum::response::Response {
        if req["stream"] == true || uri.path().ends_with(":streamGenerateContent") {
            ([(header::CONTENT_TYPE, "text/event-stream")], stream).into_response()
        } else {
            Json(body).into_response()
        }
    }
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr");
    let app = Router::new()
        .fallback(axum::routing::post(answer))
        .with_state((stream, body));
    tokio::spawn(async move { axum::serve(l, app).await });
    addr
}

/// An upstream that answers every request with this status and JSON body.
pub async fn answering(status: u16, body: Value) -> std::net::SocketAddr {
    use axum::{Json, Router, http::StatusCode, response::IntoResponse};
    let code = StatusCode::from_u16(status).expect("status");
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr");
    let app = Router::new().fallback(move || {
        let body = body.clone();
        async move { (code, Json(body)).into_response() }
    });
    tokio::spawn(async move { axum::serve(l, app).await });
    addr
}

/// A base URL where nothing listens: connection refused.
pub async fn refused_url() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr");
    drop(l);
    format!("http://{addr}/v1")
}

pub fn chat_body(stream: bool) -> Value {
    json!({"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
}

/// Waits for a mock to reach a state, failing the test (not hanging it) after 10 s.
pub async fn eventually(m: &MockServer, what: &str, pred: impl Fn(&MockServer) -> bool) {
    tokio::time::timeout(std::time::Duration::from_secs(10), m.wait_until(pred))
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for: {what}"));
}

pub fn header<'a>(resp: &'a reqwest::Response, name: &str) -> &'a str {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// An SSE body split into its `data:` payloads.
pub fn sse_data(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter_map(|ev| ev.strip_prefix("data: "))
        .map(str::to_string)
        .collect()
}

/// The concatenated content deltas of an SSE body.
pub fn sse_text(body: &str) -> String {
    sse_data(body)
        .iter()
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect()
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

/// The Redis every Redis test shares (`.ci/run` starts it); each test keeps to its own prefix.
pub const REDIS_URL: &str = "redis://127.0.0.1:6379";

/// A unique key prefix for one test, so tests share one Redis in parallel.
pub fn redis_prefix(test: &str) -> String {
    format!("sy-test-{test}-{:08x}", fastrand::u32(..))
}

/// A `[state]` table for the shared Redis under a fresh prefix.
pub fn redis_state(test: &str) -> String {
    format!(
        "[state]\nurl = \"{REDIS_URL}\"\nprefix = \"{}\"\n",
        redis_prefix(test)
    )
}

/// Waits (10 s at most) until the gateway's `/readyz` says Redis is (or is not) connected.
pub async fn wait_connected(gw: &Gateway, connected: bool) {
    let url = format!("{}/readyz", gw.url);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let v = get_json(&url, None).await;
        // Connected means subscribed to the other replicas' changes too.
        let subscribed = v["state"]["events_subscribed"] == true;
        if v["state"]["connected"] == connected && (!connected || subscribed) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "Redis connected never became {connected}: {v}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
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

/// Waits until the gateway at `base` shows `channel`'s circuit open in `/admin/health`, failing
/// the test past `within`; returns how long it took. A bound checked by waiting on the change.
pub async fn wait_circuit_open(
    base: &str,
    channel: &str,
    within: std::time::Duration,
) -> std::time::Duration {
    let t0 = std::time::Instant::now();
    loop {
        let v = get_json(&format!("{base}/admin/health"), Some(ADMIN)).await;
        let open = v["data"].as_array().is_some_and(|rows| {
            rows.iter()
                .any(|r| r["channel"] == channel && r["circuit"] == "open")
        });
        if open {
            return t0.elapsed();
        }
        assert!(t0.elapsed() < within, "{channel} never showed open: {v}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// Prompts labelled with the semantic-router instance that should serve them.
pub const LABELLED: &[(&str, &str)] = &[
    (
        "Write a Python function that reverses a linked list",
        "code",
    ),
    (
        "Why does this Rust code fail to compile with a borrow error?",
        "code",
    ),
    ("Fix the off-by-one bug in this loop", "code"),
    ("Refactor this JavaScript class to use async/await", "code"),
    ("Write a SQL query that finds duplicate emails", "code"),
    (
        "Explain this stack trace: NullPointerException at line 42",
        "code",
    ),
    (
        "Translate 'good morning, how are you?' into Spanish",
        "translate",
    ),
    (
        "How do you say 'thank you very much' in Japanese?",
        "translate",
    ),
    ("Translate this paragraph into German please", "translate"),
    ("What is the French word for library?", "translate"),
    (
        "Render this English sentence in Italian: the train is late",
        "translate",
    ),
    ("Give me a recipe for banana bread", "default"),
    (
        "What's the weather usually like in Lisbon in May?",
        "default",
    ),
    ("Recommend a good science fiction novel", "default"),
];

/// Channels for models `coder`, `translator`, `general` in front of `m`, and router `auto`
/// (instances `code`, `translate`, catchall `default`) with `embedder`; `extra` channels too.
pub fn labelled_config(m: &[MockServer; 3], threshold: f64, embedder: &str, extra: &str) -> String {
    format!(
        "{}{}{}{extra}\
         [[routers]]\nmodel = \"auto\"\nthreshold = {threshold}\nexpose_scores = true\n\
         embedder = {embedder}\n\
         [[routers.instances]]\nname = \"code\"\nmodel = \"coder\"\n\
         examples = [\"write a function in python\", \"debug this code\", \"fix the compiler error\", \"write a SQL query\", \"explain this exception\"]\n\
         [[routers.instances]]\nname = \"translate\"\nmodel = \"translator\"\n\
         examples = [\"translate this into French\", \"how do you say this in Spanish\", \"what is this word in German\"]\n\
         [[routers.instances]]\nname = \"default\"\nmodel = \"general\"\ncatchall = true\n",
        models_channel("c-coder", &m[0].base_url(), &["coder"], ""),
        models_channel("c-translator", &m[1].base_url(), &["translator"], ""),
        models_channel("c-general", &m[2].base_url(), &["general"], ""),
    )
}

/// Routes every [`LABELLED`] prompt through `auto`; prints and returns the share routed right.
pub async fn labelled_accuracy(gw: &Gateway, embedder: &str) -> f64 {
    let mut right = 0;
    for (prompt, want) in LABELLED {
        let resp = gw
            .chat(json!({"model": "auto", "messages": [{"role": "user", "content": prompt}]}))
            .await;
        assert_eq!(resp.status(), 200);
        let got = match header(&resp, "x-switchyard-semantic-route") {
            "fallback" => "default",
            other => other,
        }
        .to_string();
        if got == *want {
            right += 1;
        } else {
            eprintln!(
                "misrouted ({embedder}): {prompt:?} -> {got} (want {want}); scores {}",
                header(&resp, "x-switchyard-semantic-scores")
            );
        }
    }
    let accuracy = f64::from(right) / LABELLED.len() as f64;
    eprintln!(
        "semantic routing accuracy ({embedder}): {right}/{} = {accuracy:.2}",
        LABELLED.len()
    );
    accuracy
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
