//! The control plane under test: a store on each backend (an SQLite file, a fresh PostgreSQL
//! database), replicas of one gateway sharing it, and admin calls that answer status and JSON.

use serde_json::Value;

use super::gateway::{ADMIN, Gateway, client, gateway_full};
use super::postgres::Postgres;

/// A master key for tests: 32 bytes, base64.
pub fn master_key(byte: u8) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode([byte; 32])
}

/// One store per backend for a test: where its SQLite file lives, and the PostgreSQL database.
pub struct Stores {
    pub dir: tempfile::TempDir,
    pub pg: Postgres,
}

impl Stores {
    pub async fn new(test: &str) -> Stores {
        Stores {
            dir: tempfile::tempdir().expect("temp dir"),
            pg: Postgres::fresh(test).await,
        }
    }

    pub fn sqlite_file(&self) -> std::path::PathBuf {
        self.dir.path().join("store.db")
    }

    /// The two URLs, SQLite first.
    pub fn urls(&self) -> [String; 2] {
        [
            format!("sqlite://{}", self.sqlite_file().display()),
            self.pg.url.clone(),
        ]
    }
}

/// A `[store]` table (after the test key's table, so it may follow `key_extra` lines).
pub fn store_section(url: &str, master: Option<&str>) -> String {
    let m = master.map_or(String::new(), |m| format!("master_key = \"{m}\"\n"));
    format!("\n[store]\nurl = \"{url}\"\n{m}\n")
}

/// A gateway on a store, the file holding the test key and `rest` (channels, admins).
pub async fn on_store(url: &str, master: Option<&str>, rest: &str) -> Gateway {
    gateway_full("", &store_section(url, master), rest).await
}

/// An admin call: its status and JSON body (`Value::Null` when the body is not JSON).
pub async fn admin(
    gw: &Gateway,
    method: &str,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    admin_with(gw, method, path, token, body, &[]).await
}

pub async fn admin_with(
    gw: &Gateway,
    method: &str,
    path: &str,
    token: &str,
    body: Option<Value>,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let mut rb = client()
        .request(method, format!("{}{path}", gw.url))
        .bearer_auth(token);
    if let Some(b) = body {
        rb = rb.json(&b);
    }
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    let resp = rb.send().await.expect("admin reachable");
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// As the built-in admin (`server.admin_token`).
pub async fn as_admin(gw: &Gateway, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    admin(gw, method, path, ADMIN, body).await
}

/// An admin answer's status and error code (`""` when it has none).
pub fn code(r: &(u16, Value)) -> (u16, &str) {
    (r.0, r.1["error"]["code"].as_str().unwrap_or(""))
}
